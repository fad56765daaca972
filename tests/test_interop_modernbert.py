"""ModernBERT interop: the "modernbert" preset is ``ModernBertForMaskedLM`` as an encoder and
``ModernBertDecoderForCausalLM`` as a decoder, both ways; classify and tag fine-tunes go with their heads.

Tier 3 (oracles). Tiny random configs (d 32, 3 layers, 4 heads, vocab 64) with every parameter drawn
at random (norm gains and biases too), right-padded batches, global attention in every layer. A
swapped GeGLU half, a norm on layer 0's attention, a wrong RoPE theta or a head without its norm
would move these logits by far more than the 1e-4 allowed. Sliding-window layers (HF's default
pattern, every third layer global) run at local_attention 8 on 20-token padded batches.
"""

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from weights import (
    check_export,
    make_run,
    randomized,
    state_dicts_equal,
    word_level_tokenizer,
)

from maskwise import runs
from maskwise.cli import main
from maskwise.config import preset
from maskwise.data.tokenizers import SPECIAL_TOKENS
from maskwise.errors import UserError
from maskwise.interop.folders import load, load_fine_tuned
from maskwise.interop.hf_export import encoder_half, export_hf
from maskwise.interop.hf_import import import_hf
from maskwise.interop.pretrained import embed_texts
from maskwise.interop.sentence_transformers import export_sentence_transformers
from maskwise.model.transformer import build_model
from maskwise.runs import HEAD_FILE
from maskwise.tasks.classify import SequenceClassifier
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.tag import TokenTagger

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tf = pytest.importorskip("transformers")

pytestmark = [pytest.mark.integration, pytest.mark.precision("fp32")]

V, D = 64, 32
ATOL = 1e-4
IDS = torch.randint(7, V, (3, 7), generator=torch.Generator().manual_seed(3))
IDS[:, 0] = SPECIAL_TOKENS.index("[CLS]")  # as maskwise frames an encoder's text
MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
SMALL = {"vocab_size": V, "d_model": D, "n_heads": 4, "n_layers": 3, "max_seq_len": 32}
HF_SIZES = {
    "vocab_size": V,
    "hidden_size": D,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 32,
    "global_attn_every_n_layers": 1,
    "pad_token_id": 0,
    "bos_token_id": 5,
    "eos_token_id": 6,
    "cls_token_id": 2,
    "sep_token_id": 3,
}
HF_CLASSES = {
    "encoder": ("ModernBertForMaskedLM", "ModernBertConfig"),
    "decoder": ("ModernBertDecoderForCausalLM", "ModernBertDecoderConfig"),
}


@pytest.fixture(scope="module")
def word_tokenizer():
    return word_level_tokenizer(V)


def hf_model(family, **options):
    class_name, config_name = HF_CLASSES[family]
    return randomized(getattr(tf, class_name)(getattr(tf, config_name)(**HF_SIZES, **options)))


HF_OPTIONS = {  # name: ModernBertConfig / ModernBertDecoderConfig options
    "default": {},
    "biases-untied-theta": {
        "attention_bias": True,
        "mlp_bias": True,
        "norm_bias": True,
        "classifier_bias": True,
        "decoder_bias": False,
        "tie_word_embeddings": False,
        "norm_eps": 1e-6,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 500.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
        },
    },
    "tanh-gelu": {"hidden_activation": "gelu_pytorch_tanh", "classifier_activation": "gelu_pytorch_tanh"},
}


@pytest.mark.parametrize("family", HF_CLASSES)
@pytest.mark.parametrize("name", HF_OPTIONS)
def test_import_matches_hf_logits_with_padding(family, name):
    hf = hf_model(family, **HF_OPTIONS[name])
    ours = import_hf(hf)
    assert ours.cfg.family == family
    with torch.no_grad():
        expected, got = hf(input_ids=IDS, attention_mask=MASK).logits, ours(IDS, MASK).logits
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    if name == "biases-untied-theta":
        assert ours.cfg.bias and not ours.cfg.tie_embeddings and not ours.cfg.lm_head_bias
        assert ours.cfg.rope_theta == 500.0 and ours.cfg.norm_eps == 1e-6
    else:
        assert ours.cfg == preset(
            "modernbert",
            family=family,
            **SMALL,
            d_ff=48,
            **({"activation": "gelu_tanh"} if name == "tanh-gelu" else {}),
        )


@pytest.mark.parametrize("family", HF_CLASSES)
def test_folders_and_base_models_load(family, tmp_path):
    hf = hf_model(family)
    hf.save_pretrained(tmp_path / "task")
    ours, tokenizer = load(tmp_path / "task")
    assert tokenizer is None
    with torch.no_grad():
        torch.testing.assert_close(
            ours(IDS, MASK).logits, hf(input_ids=IDS, attention_mask=MASK).logits, atol=ATOL, rtol=0
        )
    hf.model.save_pretrained(tmp_path / "base")  # ModernBertModel / ModernBertDecoderModel: no "model." prefix
    base, _ = load(tmp_path / "base")
    with torch.no_grad():
        torch.testing.assert_close(
            base.hidden_states(IDS, MASK),
            hf.model(input_ids=IDS, attention_mask=MASK).last_hidden_state,
            atol=ATOL,
            rtol=0,
        )


MASKWISE_OPTIONS = {  # name: maskwise settings on top of the modernbert preset
    "preset": {},
    "biases-untied": {
        "bias": True,
        "lm_head_transform_bias": True,
        "lm_head_bias": False,
        "tie_embeddings": False,
        "rope_theta": 1000.0,
        "activation": "silu",
    },
}


@pytest.mark.parametrize("family", HF_CLASSES)
@pytest.mark.parametrize("name", MASKWISE_OPTIONS)
def test_export_loads_in_hf_with_the_same_logits_and_round_trips(family, name, tmp_path, word_tokenizer):
    ours = randomized(build_model(preset("modernbert", family=family, **SMALL, **MASKWISE_OPTIONS[name])))
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [HF_CLASSES[family][0]]
    assert config["layer_types"] == ["full_attention"] * 3 and config["pad_token_id"] == word_tokenizer.pad_id

    auto = tf.AutoModelForMaskedLM if family == "encoder" else tf.AutoModelForCausalLM
    check_export(out, ours, auto, HF_CLASSES[family][0], word_tokenizer, IDS, MASK, ATOL)


def test_fill_mask_pipeline_returns_maskwise_top_token(tmp_path, word_tokenizer):
    ours = randomized(build_model(preset("modernbert", **SMALL)), seed=2)
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    pipe = tf.pipeline("fill-mask", model=str(out))
    for text in ("w3 w9 [MASK] w12", "[MASK] w1", "w40 w41 w42 w43 [MASK]"):
        ids = torch.tensor([[word_tokenizer.cls_id, *word_tokenizer.encode(text)]])
        position = ids[0].tolist().index(word_tokenizer.mask_id)
        with torch.no_grad():
            expected = int(ours(ids).logits[0, position].argmax())
        assert pipe(text, top_k=1)[0]["token"] == expected


def test_greedy_generate_matches_maskwise(tmp_path, word_tokenizer):
    ours = randomized(build_model(preset("modernbert", family="decoder", **SMALL)), seed=4)
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    hf = tf.AutoModelForCausalLM.from_pretrained(out).eval()
    for prompt in ("w3 w9 w12 w40", "w1", "w7 w7 w7 w20 w33 w2"):
        theirs, expected = greedy_both(hf, ours, word_tokenizer, prompt, 8)
        assert theirs == expected and len(expected) >= 2


def greedy_both(hf, ours, tokenizer, prompt, new_tokens):
    """(HF's greedy continuation of ``prompt``, maskwise's), the prompt itself left off."""
    prompt_ids = tokenizer.encode(prompt)
    ids = torch.tensor([prompt_ids])
    theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False)[0]
    assert theirs[: len(prompt_ids)].tolist() == prompt_ids
    expected = generate(
        ours, [prompt_ids], GenerationConfig(max_new_tokens=new_tokens), tokenizer.eos_id, tokenizer.pad_id
    ).tokens[0]
    return theirs[len(prompt_ids) :].tolist(), expected


def task_run(folder, body, tokenizer, task, head=None):
    """A run folder laid out as ``maskwise finetune`` writes one (body, task record, the head it trained)."""
    folder.mkdir()
    runs.write_json(folder / runs.CONFIG_FILE, {"model": body.cfg.to_dict(), "task": task})
    runs.save_weights(body, folder / runs.MODEL_FILE)
    if head is not None:
        runs.save_weights(head, folder / HEAD_FILE)
    tokenizer.save(folder / runs.TOKENIZER_FILE)
    return folder


@pytest.mark.slow  # importing sentence-transformers takes seconds
def test_sentence_transformers_export_encodes_as_maskwise_embeds(tmp_path, word_tokenizer):
    st = pytest.importorskip("sentence_transformers")
    model = randomized(build_model(preset("modernbert", **SMALL)))
    texts = ["w1 w2 w3", "w9", "w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 w20 w21 w22 w23 w24 w25 w26", "w4 w4"]
    for pooling in ("cls", "mean"):
        run = task_run(
            tmp_path / pooling,
            model,
            word_tokenizer,
            {"kind": "embed", "pooling": pooling, "normalize": True, "max_len": 16},
        )
        out = export_sentence_transformers(run, tmp_path / f"st-{pooling}")
        theirs = st.SentenceTransformer(str(out), device="cpu").encode(texts)
        ours = embed_texts(run, texts)
        cosines = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        assert cosines.min() >= 0.99999, pooling


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_classifier_run_exports_as_sequence_classification(pooling, tmp_path, word_tokenizer):
    body = build_model(preset("modernbert", **SMALL))
    classifier = randomized(SequenceClassifier(body, ["comedy", "history", "tragedy"], pooling))
    assert classifier.head.transform is not None  # ModernBERT's head: dense + act + norm first
    task = {"kind": "classify", "labels": classifier.labels, "pooling": pooling, "freeze": False}
    out = export_hf(task_run(tmp_path / "run", body, word_tokenizer, task, classifier.head), tmp_path / "hf")
    hf, info = tf.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "ModernBertForSequenceClassification" and hf.config.classifier_pooling == pooling
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf.config.id2label == {0: "comedy", 1: "history", 2: "tragedy"}
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=IDS, attention_mask=MASK).logits, classifier(IDS, MASK), atol=ATOL, rtol=0
        )


@pytest.mark.parametrize("name", ["modernbert", "bert"])
def test_tagger_run_exports_as_token_classification(name, tmp_path, word_tokenizer):
    body = build_model(preset(name, **SMALL))
    tagger = randomized(TokenTagger(body, ["O", ",", "."]))
    task = {"kind": "tag", "tags": tagger.tags}
    out = export_hf(task_run(tmp_path / "run", body, word_tokenizer, task, tagger.head), tmp_path / "hf")
    hf, info = tf.AutoModelForTokenClassification.from_pretrained(out, output_loading_info=True)
    expected_class = "ModernBertForTokenClassification" if name == "modernbert" else "BertForTokenClassification"
    assert type(hf).__name__ == expected_class
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=IDS, attention_mask=MASK).logits, tagger(IDS, MASK), atol=ATOL, rtol=0
        )


def test_heads_hf_computes_differently_are_refused_naming_the_part(tmp_path, word_tokenizer):
    bert = build_model(preset("bert", **SMALL))
    classifier = SequenceClassifier(bert, ["a", "b"])
    run = task_run(
        tmp_path / "bert",
        bert,
        word_tokenizer,
        {"kind": "classify", "labels": ["a", "b"], "pooling": "cls"},
        classifier.head,
    )
    with pytest.raises(UserError, match="pooler") as error:
        export_hf(run, tmp_path / "out")
    assert "\n" not in str(error.value)
    plain = build_model(preset("modernbert", **SMALL, classifier_transform=False))
    tagger = TokenTagger(plain, ["O", ","])
    run = task_run(tmp_path / "plain", plain, word_tokenizer, {"kind": "tag", "tags": tagger.tags}, tagger.head)
    with pytest.raises(UserError, match="dense \\+ act \\+ norm before its classifier and this tag head has none"):
        export_hf(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- sliding-window (local) layers ----------------------------------------------------------------

# HF's default pattern over 5 layers (0 and 3 global; 1, 2 and 4 local), local_attention 8, and 20-token
# rows (20, 14 and 6 real tokens): longer than any window, with padding inside and beyond it.
LOCAL_SIZES = {
    **HF_SIZES,
    "num_hidden_layers": 5,
    "max_position_embeddings": 64,
    "global_attn_every_n_layers": 3,
    "local_attention": 8,
}
LONG_IDS = torch.randint(7, V, (3, 20), generator=torch.Generator().manual_seed(5))
LONG_IDS[:, 0] = SPECIAL_TOKENS.index("[CLS]")
LONG_MASK = (torch.arange(20)[None, :] < torch.tensor([[20], [14], [6]])).long()
THETAS = {
    "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 500.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
    }
}
REACH = {"encoder": 4, "decoder": 3}  # local_attention 8: |i - j| <= 4 (encoder), 0 <= i - j < 4 (decoder)


def window_holds_a_real_key(family: str, reach: int) -> torch.Tensor:
    """(B, T): the queries whose sliding window holds a real key (every real token, and padding next to
    one). The others see only padding: HF's SDPA gives them no attention at all, maskwise opens them over
    every key (masks.build_mask); neither output is ever read."""
    i = torch.arange(LONG_MASK.shape[1])
    near = (i[:, None] - i[None, :]).abs() <= reach
    if family == "decoder":
        near &= i[None, :] <= i[:, None]
    return (near[None] & LONG_MASK.bool()[:, None, :]).any(-1)


@pytest.mark.parametrize("family", HF_CLASSES)
@pytest.mark.parametrize("name", ["default", "thetas"])
def test_import_with_local_layers_matches_hf_logits(family, name):
    class_name, config_name = HF_CLASSES[family]
    hf = randomized(
        getattr(tf, class_name)(getattr(tf, config_name)(**LOCAL_SIZES, **(THETAS if name == "thetas" else {})))
    )
    ours = import_hf(hf)
    assert (ours.cfg.global_every, ours.cfg.local_window) == (3, REACH[family])
    assert (ours.cfg.rope_theta, ours.cfg.local_rope_theta) == ((500.0, 10.0) if name == "thetas" else (160000.0, 1e4))
    rows = window_holds_a_real_key(family, REACH[family])
    with torch.no_grad():
        expected, got = hf(input_ids=LONG_IDS, attention_mask=LONG_MASK).logits, ours(LONG_IDS, LONG_MASK).logits
        global_only = build_model(dataclasses.replace(ours.cfg, global_every=1, local_window=None))
        global_only.load_state_dict(ours.state_dict())
        unwindowed = global_only.eval()(LONG_IDS, LONG_MASK).logits
    torch.testing.assert_close(got[rows], expected[rows], atol=ATOL, rtol=0)
    assert (unwindowed[rows] - expected[rows]).abs().max() > 1e-2  # the windows really matter here


def test_transformers_4_config_keys_load(tmp_path):
    """A config.json as transformers 4 wrote ModernBERT-base's: global_attn_every_n_layers and the two
    RoPE bases at the top level, no layer_types or rope_parameters."""
    hf = randomized(tf.ModernBertForMaskedLM(tf.ModernBertConfig(**LOCAL_SIZES, **THETAS)))
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("layer_types", "rope_parameters"):
        del config[key]
    config.update(global_attn_every_n_layers=3, global_rope_theta=500.0, local_rope_theta=10.0)
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours, _ = load(tmp_path)
    assert (ours.cfg.global_every, ours.cfg.local_window, ours.cfg.rope_theta, ours.cfg.local_rope_theta) == (
        3,
        4,
        500.0,
        10.0,
    )
    rows = window_holds_a_real_key("encoder", 4)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(LONG_IDS, LONG_MASK).logits[rows],
            hf(input_ids=LONG_IDS, attention_mask=LONG_MASK).logits[rows],
            atol=ATOL,
            rtol=0,
        )


def local_model(family: str, seed: int = 0):
    """A maskwise modernbert with ModernBERT-base's pattern at a small window (5 local reach, odd on purpose)."""
    return randomized(
        build_model(
            preset(
                "modernbert",
                family=family,
                **{**SMALL, "n_layers": 5, "max_seq_len": 64},
                global_every=3,
                local_window=5,
                local_rope_theta=10.0,
            )
        ),
        seed=seed,
    )


@pytest.mark.parametrize("family", HF_CLASSES)
def test_export_with_local_layers_loads_in_hf_and_round_trips(family, tmp_path, word_tokenizer):
    ours = local_model(family)
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    config = json.loads((out / "config.json").read_text())
    assert config["layer_types"] == [
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
    ]
    assert config["local_attention"] == (10 if family == "encoder" else 12)
    auto = tf.AutoModelForMaskedLM if family == "encoder" else tf.AutoModelForCausalLM
    hf, info = auto.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    rows = window_holds_a_real_key(family, 5)
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=LONG_IDS, attention_mask=LONG_MASK).logits[rows],
            ours(LONG_IDS, LONG_MASK).logits[rows],
            atol=ATOL,
            rtol=0,
        )
    back, _ = load(out)
    assert back.cfg == ours.cfg and state_dicts_equal(back.state_dict(), ours.state_dict())


def test_greedy_generate_with_local_layers_matches_hf(tmp_path, word_tokenizer):
    """Prompts longer than the window of 5: HF's generate (its sliding-window cache) and maskwise's
    (every key cached, the far ones masked) decode the same tokens."""
    ours = local_model("decoder", seed=4)
    hf = tf.AutoModelForCausalLM.from_pretrained(export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)).eval()
    for prompt in ("w3 w9 w12 w40 w2 w2 w17 w30 w8", "w1 w5", "w7 w7 w7 w20 w33 w2 w11 w12 w13 w14 w15 w16"):
        theirs, expected = greedy_both(hf, ours, word_tokenizer, prompt, 12)
        assert theirs == expected and len(expected) >= 2


@pytest.mark.parametrize(
    "name, family", [("gpt2", "decoder"), ("modern", "decoder"), ("bert", "encoder"), ("t5", "encoder-decoder")]
)
def test_other_architectures_refuse_local_layers_naming_them(name, family, tmp_path):
    model = build_model(preset(name, family=family, **SMALL, global_every=2, local_window=2))
    with pytest.raises(UserError, match="global_every=2 \\(needs 1\\); local_window=2 \\(needs None\\)") as error:
        export_hf(model, tmp_path / "out")
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()


def test_import_refuses_a_decoder_window_with_no_key():
    with pytest.raises(UserError, match="local_attention=1 leaves a sliding-window layer no key") as error:
        import_hf(tf.ModernBertDecoderForCausalLM(tf.ModernBertDecoderConfig(**{**LOCAL_SIZES, "local_attention": 1})))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"layer_types": ["sliding_attention", "full_attention", "full_attention"]}, "global layers \\[1, 2\\] of 3"),
        ({"layer_types": ["full_attention", "full_attention", "sliding_attention"]}, "global layers \\[0, 1\\] of 3"),
        (
            {
                "global_attn_every_n_layers": 2,
                "rope_parameters": {
                    "full_attention": {"rope_type": "default", "rope_theta": 500.0},
                    "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10.0},
                },
            },
            "sliding_attention rope_type 'linear'",
        ),
        ({"attention_bias": True}, "one bias setting"),
        ({"classifier_activation": "silu"}, "classifier_activation='silu'"),
        ({"hidden_activation": "gelu_fast", "classifier_activation": "gelu_fast"}, "gelu_fast"),
    ],
)
def test_import_rejects_what_maskwise_cannot_compute(options, problem):
    sizes = {**HF_SIZES, **options}
    with pytest.raises(UserError, match=problem) as error:
        import_hf(tf.ModernBertForMaskedLM(tf.ModernBertConfig(**sizes)))
    assert "\n" not in str(error.value)


@pytest.mark.e2e
def test_cli_exports_both_families_and_refuses_what_hf_cannot_represent(tmp_path, word_tokenizer, capsys):
    for family, class_name in (("encoder", "ModernBertForMaskedLM"), ("decoder", "ModernBertDecoderForCausalLM")):
        run = make_run(
            tmp_path / family, build_model(preset("modernbert", family=family, **SMALL)), word_tokenizer, "modernbert"
        )
        assert main(["export", str(run), "--to", "hf", str(tmp_path / f"hf-{family}")]) == 0
        assert f"(Hugging Face format, {class_name})" in capsys.readouterr().out

    for settings, problem in [
        ({"norm": "rmsnorm"}, "closest is ModernBertForMaskedLM, but: norm='rmsnorm'"),
        ({"first_attn_norm": True}, "first_attn_norm=True (needs False)"),
        ({"family": "encoder-decoder"}, "ModernBERT's layout but no HF equivalent"),
    ]:
        model = build_model(preset("modernbert", **{**SMALL, **settings}))
        run = make_run(tmp_path / f"run-{len(list(tmp_path.iterdir()))}", model, word_tokenizer, "modernbert")
        assert main(["export", str(run), "--to", "hf", str(tmp_path / "refused")]) == 2
        err = capsys.readouterr().err
        assert problem in err and err.count("\n") == 1, err
        assert not (tmp_path / "refused").exists()


# ---- the encoder-decoder's encoder half -------------------------------------------------------------


def encoder_decoder(seed=0, **settings):
    """compare's encoder-decoder in small: the modernbert block, its own decoder depth, cross-attention RoPE."""
    return randomized(
        build_model(
            preset("modernbert", family="encoder-decoder", **SMALL, n_decoder_layers=2, cross_rope=True, **settings)
        ),
        seed=seed,
    )


def test_encoder_half_exports_as_modernbert_model_with_the_encoders_hidden_states(tmp_path, word_tokenizer):
    model = encoder_decoder()
    out = export_hf(make_run(tmp_path / "run", model, word_tokenizer, "modernbert"), tmp_path / "hf", part="encoder")
    hf, info = tf.AutoModel.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "ModernBertModel"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=IDS, attention_mask=MASK).last_hidden_state, model.encode(IDS, MASK), atol=ATOL, rtol=0
        )
    # its texts are read as the encoder-decoder reads them: bare ids, no [CLS]
    assert tf.AutoTokenizer.from_pretrained(out)("w1 w2")["input_ids"] == word_tokenizer.encode("w1 w2")
    back, _ = load(out)
    half = encoder_half(model)
    assert back.cfg == half.cfg and state_dicts_equal(back.state_dict(), half.state_dict())


def test_encoder_decoder_classifier_exports_its_encoder_half_with_the_head(tmp_path, word_tokenizer):
    body = encoder_decoder()
    classifier = randomized(SequenceClassifier(body, ["comedy", "history", "tragedy"]), seed=1)
    assert classifier.pooling == "mean"  # an encoder-decoder classifies from its encoder's mean
    task = {"kind": "classify", "labels": classifier.labels, "pooling": "mean", "freeze": False}
    run = task_run(tmp_path / "run", body, word_tokenizer, task, classifier.head)
    hf, info = tf.AutoModelForSequenceClassification.from_pretrained(
        export_hf(run, tmp_path / "hf", part="encoder"), output_loading_info=True
    )
    assert type(hf).__name__ == "ModernBertForSequenceClassification" and hf.config.classifier_pooling == "mean"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=IDS, attention_mask=MASK).logits, classifier(IDS, MASK), atol=ATOL, rtol=0
        )


@pytest.mark.slow  # importing sentence-transformers takes seconds
def test_encoder_half_as_sentence_transformers_encodes_as_maskwise_embeds(tmp_path, word_tokenizer):
    st = pytest.importorskip("sentence_transformers")
    run = make_run(tmp_path / "run", encoder_decoder(seed=1), word_tokenizer, "modernbert")
    out = export_sentence_transformers(run, tmp_path / "st", part="encoder")
    texts = ["w1 w2 w3", "w9", "w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 w20 w21 w22 w23 w24 w25 w26", "w4 w4"]
    theirs = st.SentenceTransformer(str(out), device="cpu").encode(texts)
    ours = embed_texts(run, texts)  # the encoder-decoder run itself: mean of its encoder's states, normalised
    cosines = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosines.min() >= 0.99999


@pytest.mark.e2e
def test_cli_exports_the_encoder_half_and_refuses_where_it_does_not_map(tmp_path, word_tokenizer, capsys):
    run = make_run(tmp_path / "ed", encoder_decoder(), word_tokenizer, "modernbert")
    assert main(["export", str(run), "--to", "hf", str(tmp_path / "whole")]) == 2
    assert "its encoder half exports alone as ModernBertModel (--part encoder)" in capsys.readouterr().err
    assert main(["export", str(run), "--to", "hf", str(tmp_path / "half"), "--part", "encoder"]) == 0
    assert f"exported the encoder half of {run} -> " in capsys.readouterr().out

    t5 = make_run(tmp_path / "t5", build_model(preset("t5", **SMALL)), word_tokenizer, "t5")
    encoder = make_run(tmp_path / "enc", build_model(preset("modernbert", **SMALL)), word_tokenizer, "modernbert")
    for source, to, problem in [
        (
            t5,
            "hf",
            "encoder-decoder's encoder half config has no HF equivalent; closest is ModernBertModel, but: "
            "embedding_norm=False (needs True)",
        ),
        (encoder, "hf", "this encoder has no encoder half to export alone"),
        (encoder, "sentence-transformers", "this encoder has no encoder half to export alone"),
    ]:
        assert main(["export", str(source), "--to", to, str(tmp_path / "refused"), "--part", "encoder"]) == 2
        err = capsys.readouterr().err
        assert problem in err and err.count("\n") == 1, err
        assert not (tmp_path / "refused").exists()


# ---- HF-fine-tuned heads, back into maskwise -------------------------------------------------------

BERT_SIZES = {
    "vocab_size": V,
    "hidden_size": D,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 32,
}
TAGS = ["O", ",", "."]


def hf_task_folder(folder, class_name, tokenizer=None, **options):
    """A random-weight HF task model saved as a folder (with ``tokenizer``'s tokenizer.json), and the model."""
    sizes, config_name = (BERT_SIZES, "BertConfig") if class_name.startswith("Bert") else (HF_SIZES, "ModernBertConfig")
    hf = randomized(getattr(tf, class_name)(getattr(tf, config_name)(**{**sizes, **options})))
    hf.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save(folder / "tokenizer.json")
    return folder, hf


@pytest.mark.parametrize(
    "class_name, options",
    [
        ("ModernBertForSequenceClassification", {"classifier_pooling": "cls"}),
        (
            "ModernBertForSequenceClassification",
            {"classifier_pooling": "mean", "classifier_bias": True, **HF_OPTIONS["biases-untied-theta"]},
        ),
        ("ModernBertForTokenClassification", HF_OPTIONS["tanh-gelu"]),
        ("ModernBertForTokenClassification", {**LOCAL_SIZES, "num_hidden_layers": 3}),  # a sliding-window layer
        ("BertForTokenClassification", {}),
    ],
)
def test_hf_fine_tuned_heads_load_as_maskwise_classifier_and_tagger(class_name, options, tmp_path, word_tokenizer):
    folder, hf = hf_task_folder(tmp_path / "hf", class_name, word_tokenizer, id2label=dict(enumerate(TAGS)), **options)
    ours, tokenizer = load_fine_tuned(folder)
    classify = "Sequence" in class_name
    assert type(ours) is (SequenceClassifier if classify else TokenTagger)
    assert (ours.labels if classify else ours.tags) == TAGS and tokenizer.encode("w1 w2") == word_tokenizer.encode(
        "w1 w2"
    )
    if classify:
        assert ours.pooling == options["classifier_pooling"]
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS, MASK), hf(input_ids=IDS, attention_mask=MASK).logits, atol=ATOL, rtol=0)
    body, _ = load(folder)  # maskwise.load gives the body, which a fine-tune starts from
    assert state_dicts_equal(body.state_dict(), ours.body.state_dict())


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_classifier_run_comes_back_whole_from_its_hf_folder(pooling, tmp_path, word_tokenizer):
    body = build_model(preset("modernbert", **SMALL))
    classifier = randomized(SequenceClassifier(body, ["comedy", "tragedy"], pooling))
    task = {
        "kind": "classify",
        "labels": classifier.labels,
        "pooling": pooling,
        "freeze": False,
        "train_labels": ["comedy", "tragedy"],
    }
    run = task_run(tmp_path / "run", body, word_tokenizer, task, classifier.head)
    for folder in (run, export_hf(run, tmp_path / "hf")):  # the run itself, and its HF folder
        back, _ = load_fine_tuned(folder)
        assert back.labels == classifier.labels and back.pooling == pooling
        assert state_dicts_equal(back.head.state_dict(), classifier.head.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(back(IDS, MASK), classifier(IDS, MASK), atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "class_name, options, problem",
    [
        (
            "ModernBertForSequenceClassification",
            {"problem_type": "multi_label_classification"},
            "problem_type='multi_label_classification' with 2 label",
        ),
        ("ModernBertForSequenceClassification", {"num_labels": 1}, "problem_type=None with 1 label"),
        ("ModernBertForTokenClassification", {"classifier_activation": "silu"}, "classifier_activation='silu'"),
        ("ModernBertForMaskedLM", {}, "not a fine-tuned classify or tag model"),
    ],
)
def test_hf_heads_maskwise_cannot_compute_are_refused_naming_the_option(class_name, options, problem, tmp_path):
    folder, _ = hf_task_folder(tmp_path / "hf", class_name, **options)
    with pytest.raises(UserError, match=problem) as error:
        load_fine_tuned(folder)
    assert "\n" not in str(error.value)


def test_a_pooling_maskwise_cannot_compute_is_refused(tmp_path):
    folder, _ = hf_task_folder(tmp_path / "hf", "ModernBertForSequenceClassification")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "classifier_pooling": "max"}))
    with pytest.raises(UserError, match="classifier_pooling='max' is not supported \\(only cls or mean\\)"):
        load_fine_tuned(folder)


@pytest.mark.e2e
def test_cli_evaluates_an_hf_fine_tuned_tagger_as_hf_tags(tmp_path, word_tokenizer, capsys):
    folder, hf = hf_task_folder(
        tmp_path / "hf", "ModernBertForTokenClassification", word_tokenizer, id2label=dict(enumerate(TAGS))
    )
    sentences = [["w1", "w2", "w3"], ["w4", "w5"], ["w6", "w7", "w8", "w9"]]
    gold = [["O", ",", "."], ["O", "."], [",", "O", "O", "."]]
    data = tmp_path / "punct.conll"
    data.write_text(
        "\n\n".join("\n".join(f"{w} {t}" for w, t in zip(*pair)) for pair in zip(sentences, gold)) + "\n",
        encoding="utf-8",
    )
    assert (
        main(["evaluate", str(folder), "--data", str(data), "--results", str(tmp_path / "r.json"), "--no-progress"])
        == 0
    ), capsys.readouterr().err
    results = json.loads((tmp_path / "r.json").read_text())
    expected = []  # HF's own tags: [CLS] and one id per word, each read at its word's token
    for words, tags in zip(sentences, gold):
        ids = torch.tensor([[word_tokenizer.cls_id, *word_tokenizer.encode(" ".join(words))]])
        with torch.no_grad():
            best = hf(input_ids=ids).logits[0, 1:].argmax(-1).tolist()
        expected += [int(TAGS[b] == t) for b, t in zip(best, tags)]
    assert results["tags"] == TAGS and results["n_words"] == 9 and results["correct"] == expected
