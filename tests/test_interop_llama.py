"""Llama interop: the "modern" decoder is ``LlamaForCausalLM``, both ways, logits and greedy text unchanged.

Tier 3 (oracles). Tiny random configs (d 32, 2 layers, 4 heads, vocab 64) with every parameter
drawn at random (norm gains and biases too), right-padded batches. HF Llama's RoPE rotates the two
halves of each head (``rotate_half``), as maskwise's does, so no q/k permutation is involved: a wrong
convention, gate/up order or norm would move these logits by far more than the 1e-4 allowed.
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

V, D, IDS, MASK, SMALL, LLAMA_SIZES = (
    DECODER_VOCAB,
    DECODER_WIDTH,
    DECODER_IDS,
    DECODER_MASK,
    DECODER_SIZES,
    HF_DECODER_SIZES,
)


@pytest.fixture(scope="module")
def word_tokenizer():
    return word_level_tokenizer(V)


HF_LLAMAS = {  # name: LlamaConfig options
    "untied": {"rope_theta": 500.0, "rms_norm_eps": 1e-5},
    "tied": {"tie_word_embeddings": True},
    "biases-and-wide-heads": {"attention_bias": True, "mlp_bias": True, "head_dim": 16},
    # grouped-query attention: 2 key/value heads for 4 query heads; multi-query: 1 for all 4
    "grouped-query": {"num_key_value_heads": 2},
    "multi-query-biases-and-wide-heads": {
        "num_key_value_heads": 1,
        "attention_bias": True,
        "mlp_bias": True,
        "head_dim": 16,
    },
}


@pytest.mark.parametrize("name", HF_LLAMAS)
def test_llama_import_matches_hf_logits_with_padding(name):
    hf = randomized(tf.LlamaForCausalLM(tf.LlamaConfig(**LLAMA_SIZES, **HF_LLAMAS[name])))
    ours = import_hf(hf)
    with torch.no_grad():
        expected, got = hf(input_ids=IDS, attention_mask=MASK).logits, ours(IDS, MASK).logits
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    options = HF_LLAMAS[name]
    assert ours.cfg.tie_embeddings == (name == "tied") and ours.cfg.bias == options.get("attention_bias", False)
    assert ours.cfg.n_kv_heads == options.get("num_key_value_heads") and not ours.cfg.qkv_bias
    if name == "untied":
        assert ours.cfg.rope_theta == 500.0 and ours.cfg.norm_eps == 1e-5
    if "head_dim" in options:
        assert ours.cfg.head_dim == 16 and ours.cfg.d_head == 16


def test_llama_base_model_hidden_states_match(tmp_path):
    hf = randomized(tf.LlamaModel(tf.LlamaConfig(**LLAMA_SIZES)))
    hf.save_pretrained(tmp_path)  # a base folder: its keys have no "model." prefix
    ours, tokenizer = load(tmp_path)
    assert tokenizer is None
    with torch.no_grad():
        expected = hf(input_ids=IDS, attention_mask=MASK).last_hidden_state
        got = ours.hidden_states(IDS, MASK)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


MODERN = {  # name: maskwise settings on top of the modern preset
    "untied": {},
    "tied": {"tie_embeddings": True, "rope_theta": 1000.0},
    "biases-and-wide-heads": {"bias": True, "d_head": 16, "activation": "gelu"},
    "grouped-query": {"n_kv_heads": 2},
    "multi-query-wide-heads": {"n_kv_heads": 1, "d_head": 16, "tie_embeddings": True},
}


@pytest.mark.parametrize("name", MODERN)
def test_modern_decoder_exports_as_llama_and_round_trips(name, tmp_path, word_tokenizer):
    ours = randomized(build_model(preset("modern", **SMALL, **MODERN[name])))
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_key_value_heads"] == MODERN[name].get("n_kv_heads", 4)
    assert config["rms_norm_eps"] == ours.cfg.norm_eps
    assert config["rope_theta"] == ours.cfg.rope_theta and config["max_position_embeddings"] == 32
    assert config["tie_word_embeddings"] == ours.cfg.tie_embeddings
    assert (config["bos_token_id"], config["eos_token_id"]) == (word_tokenizer.bos_id, word_tokenizer.eos_id)

    check_export(out, ours, tf.AutoModelForCausalLM, "LlamaForCausalLM", word_tokenizer, IDS, MASK, ATOL)


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_text_generation_pipeline_greedy_matches_maskwise(kv_heads, tmp_path, word_tokenizer):
    ours = randomized(build_model(preset("modern", **SMALL, n_kv_heads=kv_heads)), seed=4)
    out = export_hf(ours, tmp_path / "hf", tokenizer=word_tokenizer)
    prompt = "w3 w9 w12 w40"
    pipe = tf.pipeline("text-generation", model=str(out))
    hf_ids = pipe(prompt, max_new_tokens=8, do_sample=False, return_tensors=True)[0]["generated_token_ids"]

    prompt_ids = word_tokenizer.encode(prompt)
    expected = generate(
        ours, [prompt_ids], GenerationConfig(max_new_tokens=8), word_tokenizer.eos_id, word_tokenizer.pad_id
    ).tokens[0]
    assert hf_ids[: len(prompt_ids)] == prompt_ids
    assert hf_ids[len(prompt_ids) :] == expected and len(expected) >= 2
    text = pipe(prompt, max_new_tokens=8, do_sample=False, return_full_text=False)[0]["generated_text"]
    assert text.lstrip() == word_tokenizer.decode(
        expected
    )  # transformers 4.46 keeps the separating space (5.x does not)


def test_older_config_with_top_level_rope_theta(tmp_path):
    ours = randomized(build_model(preset("modern", **SMALL, rope_theta=250.0)))
    out = export_hf(ours, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    del config["rope_parameters"]  # what transformers 4 wrote: rope_theta and rope_scaling only
    (out / "config.json").write_text(json.dumps({**config, "rope_scaling": None}))
    back = import_hf(out)
    assert back.cfg.rope_theta == 250.0 and state_dicts_equal(back.state_dict(), ours.state_dict())


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"num_key_value_heads": 3}, "n_kv_heads 3 does not divide n_heads 4"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type 'linear'"),
        ({"attention_bias": True}, "one bias setting"),
        ({"hidden_act": "gelu_fast"}, "gelu_fast"),
    ],
)
def test_llama_import_rejects_what_maskwise_cannot_compute(options, problem):
    with pytest.raises(UserError, match=problem) as error:
        import_hf(tf.LlamaForCausalLM(tf.LlamaConfig(**LLAMA_SIZES, **options)))
    assert "\n" not in str(error.value)


@pytest.mark.e2e
def test_cli_exports_a_modern_decoder_run_as_llama_and_refuses_a_modern_encoder(tmp_path, word_tokenizer, capsys):
    model = randomized(build_model(preset("modern", **SMALL)))
    run = make_run(tmp_path / "run", model, word_tokenizer, "modern")
    assert main(["export", str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert "(Hugging Face format, LlamaForCausalLM)" in capsys.readouterr().out

    encoder = build_model(preset("modern", **SMALL, family="encoder"))
    run = make_run(tmp_path / "encoder-run", encoder, word_tokenizer, "modern")
    assert main(["export", str(run), "--to", "hf", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "LlamaForCausalLM is causal-only" in err and err.count("\n") == 1
    assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize(
    "settings, problem",
    [
        ({"position": "learned"}, "position='learned'"),
        ({"norm": "layernorm"}, "norm='layernorm'"),
        ({"embedding_size": 16}, "embedding_size=16"),
    ],
)
def test_inexact_modern_decoder_names_the_setting_against_llama(settings, problem, tmp_path):
    with pytest.raises(UserError, match="closest is LlamaForCausalLM") as error:
        export_hf(build_model(preset("modern", **SMALL, **settings)), tmp_path / "out")
    assert problem in str(error.value) and "\n" not in str(error.value)
