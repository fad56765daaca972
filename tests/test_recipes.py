"""The named scales (compare's and the ablations'): valid settings, and three families of equal size
at every scale."""

import pytest

from maskwise.model.transformer import build_model
from maskwise.recipes import (
    COMPARE_SCALES,
    SCALES,
    matched_ffn_width,
    pretrain_settings,
)
from maskwise.tasks.registry import TASKS
from maskwise.tasks.tag import TagConfig
from maskwise.train.pretrain import PretrainConfig, model_config

pytestmark = pytest.mark.unit

FAMILIES = ("encoder", "decoder", "encoder-decoder")


@pytest.mark.parametrize(
    "scale", [f"compare {n}" for n in sorted(COMPARE_SCALES)] + [f"ablate {n}" for n in sorted(SCALES)]
)
def test_every_scale_gives_the_three_families_equal_parameters(scale):
    kind, name = scale.split()
    s = COMPARE_SCALES[name] if kind == "compare" else SCALES[name]
    recipe = s if kind == "compare" else s.recipe
    counts = {}
    for family in FAMILIES:
        arm = recipe.family_arm(family, "shakespeare") if kind == "compare" else {"family": family}
        cfg = PretrainConfig.from_flat(pretrain_settings(s, arm, seed=0))
        assert cfg.objective == recipe.objective(family)  # an ablation arm without one takes the recipe's
        model = build_model(model_config(cfg, vocab_size=recipe.vocab_size if recipe.tokenizer != "char" else 100))
        counts[family] = sum(p.numel() for p in model.parameters())
    assert max(counts.values()) / min(counts.values()) < 1.01, counts


def test_matched_ffn_width_pays_for_cross_attention_exactly():
    # plain FFN: 4 layers of 4d^2 + 8d^2 = 48 d^2 = 2 x (4d^2 + 6d^2) + 2 x (8d^2 + 6d^2) at width 3d
    assert matched_ffn_width("gpt2", 128, 4) == 3 * 128
    # gated (3 matrices): 2 x 2 layers at width w match 4 layers at 8d/3 (rounded up to 384) when
    # 12 d w = 12 d 384 - 8 d^2
    assert matched_ffn_width("modern", 128, 4) == round(384 - 2 * 128 / 3)


def test_compare_fine_tunes_with_the_shared_recipe():
    s = COMPARE_SCALES["default"]
    expected = {
        "classify": {"batch_size": 32, "lr": 1e-3, "head_lr": 3e-3, "steps": 375, "plays_task": "line-order"},
        "embed": {"batch_size": 32, "lr": 1e-3, "train_pairs": 2000},
        "seq2seq": {"max_target_len": 64, "rename_speakers": 0.5, "max_chars": 120, "mid_speech": True},
        "verse": {"plays_task": "verse", "steps": 600, "max_chars": 120, "max_target_len": 120, "rename_speakers": 0.0},
    }
    for task, values in expected.items():  # the recipe's numbers, written out: what compare and every ablation use
        cfg = s.task(task, seed=1, progress=False)
        assert isinstance(cfg, TASKS["seq2seq" if task == "verse" else task].config)
        assert {key: getattr(cfg, key) for key in values} == values
        assert cfg.seed == cfg.data_seed == cfg.test_seed == 1 and not cfg.progress


def test_a_retuned_scale_changes_only_what_it_names():
    s = COMPARE_SCALES["default"]
    quick = s.retuned("q", seconds=5.0, tasks={TagConfig: {"steps": 7}})
    assert quick.name == "q" and quick.seconds == 5.0 and quick.d_model == s.d_model
    assert quick.tasks["tag"].steps == 7 and quick.tasks["tag"].train_windows == s.tasks["tag"].train_windows
    assert quick.tasks["embed"] == s.tasks["embed"] and s.tasks["tag"].steps == 300  # the original is untouched
    assert set(s.tasks) == {*TASKS, "verse"}  # every task has its recipe, by the CLI's names, and the plays' verse
    verse = s.retuned("v", tasks={"verse": {"steps": 9}}).tasks  # a fine-tune named, not a kind
    assert verse["verse"].steps == 9 and verse["seq2seq"] == s.tasks["seq2seq"]


def test_the_encoder_decoder_reads_the_block_split_between_its_stacks():
    s = COMPARE_SCALES["default"]
    values = pretrain_settings(s, s.family_arm("encoder-decoder", "shakespeare"), seed=0)
    decoder = pretrain_settings(s, s.family_arm("decoder", "shakespeare"), seed=0)
    assert (values["block_size"], values["batch_size"]) == (s.block_size // 2, 2 * s.batch_size)
    assert values["block_size"] * values["batch_size"] == decoder["block_size"] * decoder["batch_size"]
    assert values["permute_sentences"] == 0.0 and "permute_sentences" not in decoder
    whole = pretrain_settings(s.retuned("whole", split_context=False), {"family": "encoder-decoder"}, seed=0)
    assert whole["block_size"] == s.block_size
