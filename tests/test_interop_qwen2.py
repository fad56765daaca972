"""Qwen2 interop: ``Qwen2ForCausalLM`` folders import with logits and greedy tokens unchanged, and a "modern"
decoder with grouped-query attention and q/k/v-only biases exports back as one. Decoders whose block maskwise
does not have (Qwen3's q/k norms, Gemma's norms, mixtures of experts) are refused in one line.

Tier 3 (oracles). Tiny random configs (d 32, 2 layers, 4 query heads, vocab 64) with every parameter drawn at
random (the q/k/v biases too), written by ``save_pretrained`` (safetensors) and read back from the folder,
right-padded batches. No pretrained Qwen2 weights exist on this machine: these are the only checkpoints checked.
"""

import json
import os

import pytest
import torch
from weights import (
    ATOL,
    DECODER_IDS,
    DECODER_MASK,
    DECODER_SIZES,
    DECODER_VOCAB,
    DECODER_WIDTH,
    HF_DECODER_SIZES,
    check_export,
    make_run,
    randomized,
    state_dicts_equal,
    word_level_tokenizer,
)

from maskwise.cli import main
from maskwise.config import preset
from maskwise.errors import UserError
from maskwise.interop.folders import load
from maskwise.interop.hf_export import export_hf
from maskwise.interop.hf_import import import_hf
from maskwise.model.transformer import build_model
from maskwise.tasks.generate import GenerationConfig, generate

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tf = pytest.importorskip("transformers")

pytestmark = pytest.mark.integration

V, D, IDS, MASK, SMALL, QWEN2_SIZES = (
    DECODER_VOCAB,
    DECODER_WIDTH,
    DECODER_IDS,
    DECODER_MASK,
    DECODER_SIZES,
    HF_DECODER_SIZES,
)

# Qwen2's attention reads a head_dim other than hidden_size / heads from transformers 4.48 on (4.46 has none).
WIDE_HEADS = pytest.mark.skipif(
    tuple(int(part) for part in tf.__version__.split(".")[:2]) < (4, 48),
    reason="Qwen2 has no head_dim before transformers 4.48",
)
HF_QWEN2S = {  # name: Qwen2Config options
    "grouped-query": {"num_key_value_heads": 2, "rope_theta": 500.0, "rms_norm_eps": 1e-5},
    "multi-head-tied": {"num_key_value_heads": 4, "tie_word_embeddings": True},
    "multi-query-wide-heads": {"num_key_value_heads": 1, "head_dim": 16},
    "sliding-window-beyond-the-context": {
        "num_key_value_heads": 2,
        "use_sliding_window": True,
        "sliding_window": 32,
        "max_window_layers": 1,
    },
}


@pytest.fixture(scope="module")
def word_tokenizer():
    return word_level_tokenizer(V)


def qwen2_folder(folder, seed=0, **options):
    """A tiny random ``Qwen2ForCausalLM`` saved by ``save_pretrained`` (safetensors), and the HF model."""
    hf = randomized(tf.Qwen2ForCausalLM(tf.Qwen2Config(**QWEN2_SIZES, **options)), seed=seed)
    hf.save_pretrained(folder)
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.bin"))
    return hf


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=WIDE_HEADS) if "head_dim" in options else name for name, options in HF_QWEN2S.items()],
)
def test_qwen2_folder_imports_with_hf_logits_under_padding(name, tmp_path):
    options = HF_QWEN2S[name]
    hf = qwen2_folder(tmp_path, **options)
    ours, tokenizer = load(tmp_path)
    assert tokenizer is None
    with torch.no_grad():
        expected, got = hf(input_ids=IDS, attention_mask=MASK).logits, ours(IDS, MASK).logits
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    cfg = ours.cfg
    assert cfg.kv_heads == options["num_key_value_heads"] and cfg.qkv_bias and not cfg.bias
    assert cfg.n_kv_heads == (None if options["num_key_value_heads"] == 4 else options["num_key_value_heads"])
    assert cfg.tie_embeddings == options.get("tie_word_embeddings", False)
    assert cfg.head_dim == options.get("head_dim", D // 4)
    if name == "grouped-query":
        assert cfg.rope_theta == 500.0 and cfg.norm_eps == 1e-5


def test_qwen2_base_model_hidden_states_match(tmp_path):
    hf = randomized(tf.Qwen2Model(tf.Qwen2Config(**QWEN2_SIZES, num_key_value_heads=2)))
    hf.save_pretrained(tmp_path)  # a base folder: its keys have no "model." prefix
    ours, _ = load(tmp_path)
    with torch.no_grad():
        expected = hf(input_ids=IDS, attention_mask=MASK).last_hidden_state
        got = ours.hidden_states(IDS, MASK)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_qwen2_greedy_generation_equals_hf_generate(kv_heads, tmp_path):
    """maskwise's cached decoding (the cache holding the key/value heads alone) writes HF's greedy tokens."""
    hf = qwen2_folder(tmp_path, seed=4, num_key_value_heads=kv_heads)
    ours, _ = load(tmp_path)
    prompts = [[9, 12, 40], [7, 3, 30, 41, 22, 15]]
    config = GenerationConfig(max_new_tokens=8)
    ours_tokens = generate(ours, prompts, config, eos_id=None, pad_id=0).tokens
    for prompt, tokens in zip(prompts, ours_tokens):
        with torch.no_grad():
            hf_ids = hf.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=0,
            )[0].tolist()
        assert hf_ids[: len(prompt)] == prompt and hf_ids[len(prompt) :] == tokens
    assert len({token for row in ours_tokens for token in row}) >= 3  # not one token repeated


MODERN_QWEN2S = {  # name: maskwise settings on top of the modern preset, Qwen2's q/k/v biases
    "grouped-query": {"n_kv_heads": 2, "rope_theta": 1000.0},
    "multi-head-tied": {"tie_embeddings": True},
    "multi-query-wide-heads": {"n_kv_heads": 1, "d_head": 16},
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=WIDE_HEADS) if "d_head" in settings else name
        for name, settings in MODERN_QWEN2S.items()
    ],
)
def test_modern_decoder_with_qkv_bias_exports_as_qwen2_and_round_trips(name, tmp_path, word_tokenizer):
    ours = randomized(build_model(preset("modern", **SMALL, qkv_bias=True, **MODERN_QWEN2S[name])))
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["num_key_value_heads"] == ours.cfg.kv_heads and config["head_dim"] == ours.cfg.head_dim
    assert config["rope_parameters"]["rope_theta"] == ours.cfg.rope_theta and config["use_sliding_window"] is False
    assert config["tie_word_embeddings"] == ours.cfg.tie_embeddings
    assert "attention_bias" not in config  # Qwen2's biases are fixed: on q/k/v, nowhere else

    check_export(out, ours, tf.AutoModelForCausalLM, "Qwen2ForCausalLM", word_tokenizer, IDS, MASK, ATOL)


def test_qwen2_folder_round_trips_through_maskwise_identically(tmp_path):
    hf = qwen2_folder(tmp_path / "hf", num_key_value_heads=2)
    ours = import_hf(tmp_path / "hf")
    out = export_hf(ours, tmp_path / "back")
    again = tf.Qwen2ForCausalLM.from_pretrained(out)
    assert state_dicts_equal(again.state_dict(), hf.state_dict())
    assert state_dicts_equal(import_hf(out).state_dict(), ours.state_dict())


@pytest.mark.parametrize(
    "options, problem",
    [
        (
            {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
            "use_sliding_window with sliding_window 4 < max_position_embeddings 32 "
            "\\(in 1 layer\\(s\\) from layer 1\\)",
        ),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type 'yarn'"),
        ({"hidden_act": "gelu_fast"}, "gelu_fast"),
    ],
)
def test_qwen2_import_refuses_what_maskwise_cannot_compute(options, problem):
    with pytest.raises(UserError, match=problem) as error:
        import_hf(tf.Qwen2ForCausalLM(tf.Qwen2Config(**QWEN2_SIZES, num_key_value_heads=2, **options)))
    assert "\n" not in str(error.value)


REFUSED = {  # HF class: (its config's class, what the refusal names)
    "Qwen3ForCausalLM": ("Qwen3Config", "q_norm, k_norm"),
    "GemmaForCausalLM": ("GemmaConfig", "1 \\+ weight"),
    "Gemma2ForCausalLM": ("Gemma2Config", "soft-capping"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("class_name", REFUSED)
def test_decoders_maskwise_cannot_compute_are_refused_in_one_line_with_exit_code_2(class_name, tmp_path, capsys):
    config_class, problem = REFUSED[class_name]
    config = getattr(tf, config_class)(**QWEN2_SIZES, num_key_value_heads=2, head_dim=8)
    getattr(tf, class_name)(config).save_pretrained(tmp_path / "hf")
    with pytest.raises(UserError, match=f"{class_name} is not supported: it has .*{problem}") as error:
        import_hf(tmp_path / "hf")
    assert "\n" not in str(error.value)
    capsys.readouterr()  # transformers' progress bars while saving
    assert main(["generate", str(tmp_path / "hf"), "--prompt", "w1"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("device ")]
    assert errors == [f"maskwise: error: {error.value}"]  # the one line, no traceback


@pytest.mark.e2e
def test_cli_exports_a_grouped_run_with_qkv_biases_as_qwen2(tmp_path, word_tokenizer, capsys):
    model = randomized(build_model(preset("modern", **SMALL, n_kv_heads=2, qkv_bias=True)))
    run = make_run(tmp_path / "run", model, word_tokenizer, "modern")
    assert main(["export", str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert "(Hugging Face format, Qwen2ForCausalLM)" in capsys.readouterr().out
    assert main(["generate", str(tmp_path / "hf"), "--prompt", "w3 w9", "--max-new-tokens", "3"]) == 0


def test_inexact_qwen2_layouts_name_what_has_no_hf_equivalent(tmp_path):
    with pytest.raises(UserError, match="closest is Qwen2ForCausalLM") as error:
        export_hf(build_model(preset("modern", **SMALL, qkv_bias=True, position="learned")), tmp_path / "out")
    assert "position='learned'" in str(error.value) and "\n" not in str(error.value)
    encoder = build_model(preset("modern", **SMALL, qkv_bias=True, n_kv_heads=2, family="encoder"))
    with pytest.raises(UserError, match="Qwen2's layout but no HF equivalent: Qwen2ForCausalLM is causal-only"):
        export_hf(encoder, tmp_path / "out")
