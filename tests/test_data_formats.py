"""Corpora in the formats researchers keep them in (Parquet, HF datasets), the memory-mapped token
file, and the bad inputs of each: the same texts in every format give the same token stream."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from maskwise.cli import main
from maskwise.data import token_file
from maskwise.data.corpus import load_corpus
from maskwise.data.stream import TokenStream
from maskwise.data.token_file import cached_tokens, read_token_file, token_dtype
from maskwise.data.tokenizers import build_tokenizer
from maskwise.errors import UserError

TEXTS = [f"Speech {i}: {'to be or not to be, ' * (i % 5 + 1)}that is question {i}." for i in range(30)]
TINY = [
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--batch-size",
    "4",
    "--block-size",
    "32",
    "--eval-batches",
    "2",
    "--no-progress",
    "--steps",
    "1",
]


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: text, "id": i}) + "\n" for i, text in enumerate(texts)))
    return path


def write_parquet(path, texts, field="text", row_group_size=4):
    table = pa.table({"id": list(range(len(texts))), field: texts})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The JSONL corpus every other format must reproduce, and a character tokenizer for it."""
    folder = tmp_path_factory.mktemp("reference")
    corpus = load_corpus(str(write_jsonl(folder / "texts.jsonl", TEXTS)))
    return corpus, build_tokenizer("char", corpus, cache_dir=folder)


def stream_ids(corpus, tokenizer, part):
    documents = corpus.train_part if part == "train" else corpus.val_part
    stream = TokenStream.from_texts(documents, tokenizer, cache_key=f"{corpus.fingerprint}/{part}")
    return np.asarray(stream.ids)


def assert_same_as_reference(corpus, reference):
    expected, tokenizer = reference
    assert (corpus.train, corpus.val) == (expected.train, expected.val)
    assert corpus.fingerprint == expected.fingerprint  # the text and the split, not the format
    for part in ("train", "val"):
        np.testing.assert_array_equal(stream_ids(corpus, tokenizer, part), stream_ids(expected, tokenizer, part))


# --- every format against the JSONL ------------------------------------------------------------


@pytest.mark.unit
def test_parquet_file_with_a_named_text_field(tmp_path, reference):
    path = write_parquet(tmp_path / "texts.parquet", TEXTS, field="body")
    assert_same_as_reference(load_corpus(str(path), text_field="body"), reference)


@pytest.mark.unit
def test_parquet_folder_and_glob_read_shards_in_name_order(tmp_path, reference):
    shards = tmp_path / "shards"
    (shards / "later").mkdir(parents=True)
    write_parquet(shards / "a-part.parquet", TEXTS[:11])
    write_parquet(shards / "later" / "part-02.parquet", TEXTS[20:])  # "later/" sorts after "part-01"
    write_parquet(shards / "b-part.parquet", TEXTS[11:20] + ["   ", None])  # blank and null rows are skipped
    assert_same_as_reference(load_corpus(str(shards)), reference)
    assert_same_as_reference(load_corpus(str(shards / "**" / "*.parquet")), reference)
    top_level = load_corpus(str(shards / "[ab]-part.parquet"))
    assert top_level.train + top_level.val == tuple(TEXTS[:20])


@pytest.mark.unit
def test_datasets_folder_of_one_dataset_splits_like_jsonl(tmp_path, reference):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": TEXTS, "id": list(range(30))}).save_to_disk(str(tmp_path / "saved"))
    assert_same_as_reference(load_corpus(str(tmp_path / "saved")), reference)


@pytest.mark.unit
def test_datasets_dict_trains_on_train_and_validates_on_validation(tmp_path):
    datasets = pytest.importorskip("datasets")
    splits = {"train": TEXTS[:20], "test": TEXTS[25:], "validation": TEXTS[20:25]}
    datasets.DatasetDict(
        {name: datasets.Dataset.from_dict({"text": texts}) for name, texts in splits.items()}
    ).save_to_disk(str(tmp_path / "saved"))
    corpus = load_corpus(str(tmp_path / "saved"))
    assert corpus.train == tuple(TEXTS[:20]) and corpus.val == tuple(TEXTS[20:25])
    override = load_corpus(str(tmp_path / "saved"), val_data=str(write_jsonl(tmp_path / "v.jsonl", ["held out"])))
    assert override.train == tuple(TEXTS[:20]) and override.val == ("held out",)


@pytest.mark.unit
def test_dataset_name_goes_through_load_dataset(monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(name, config=None):
        calls.append((name, config))
        return datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_dict({"text": TEXTS[:27]}),
                "test": datasets.Dataset.from_dict({"text": TEXTS[27:]}),
            }
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    corpus = load_corpus("someone/plays:cased")
    assert calls == [("someone/plays", "cased")]
    assert corpus.train == tuple(TEXTS[:27]) and corpus.val == tuple(TEXTS[27:])  # "test" validates


@pytest.mark.unit
def test_unknown_dataset_name_offline_is_a_user_error(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(UserError, match="datasets cannot load a dataset of that name") as caught:
        load_corpus("no-such-owner/no-such-corpus")
    assert "\n" not in str(caught.value)


# --- the token file ----------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("vocab_size", "dtype"),
    [(2, np.uint8), (256, np.uint8), (257, np.uint16), (65536, np.uint16), (65537, np.uint32), (2**32, np.uint32)],
)
def test_token_dtype_is_the_smallest_that_holds_the_vocabulary(vocab_size, dtype):
    assert token_dtype(vocab_size) == np.dtype(dtype)


@pytest.mark.unit
def test_token_dtype_refuses_a_vocabulary_beyond_32_bits():
    with pytest.raises(UserError, match="32 bits"):
        token_dtype(2**32 + 1)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_memory_mapped_stream_equals_the_in_memory_one(reference, tmp_path, monkeypatch, kind):
    corpus, tokenizer = reference
    if kind == "bpe":
        tokenizer = build_tokenizer("bpe", corpus, vocab_size=400, cache_dir=tmp_path)  # 400 ids: uint16
    monkeypatch.setattr(token_file, "CHUNK_DOCUMENTS", 7)  # many chunks, none aligned with the split
    in_memory = TokenStream.from_texts(corpus.train_part, tokenizer)
    mapped = TokenStream.from_texts(corpus.train_part, tokenizer, cache_key=f"{corpus.fingerprint}/{kind}")
    assert isinstance(mapped.ids, np.memmap) and mapped.ids.dtype == token_dtype(tokenizer.vocab_size)
    assert mapped.ids.dtype == (np.uint8 if kind == "char" else np.uint16)
    assert in_memory.ids.dtype == torch.int64 and len(mapped) == len(in_memory)
    np.testing.assert_array_equal(np.asarray(mapped.ids), in_memory.ids.numpy())
    for rank in (0, 1):
        a, b = (
            stream.windows(3, 16, torch.Generator().manual_seed(5), rank=rank, world=2)
            for stream in (in_memory, mapped)
        )
        assert b.dtype == torch.int64 and torch.equal(a, b)


@pytest.mark.unit
def test_second_preparation_reuses_the_file_without_tokenizing(reference, tmp_path):
    corpus, tokenizer = reference
    first = cached_tokens("key", corpus.train_part, tokenizer, tmp_path)
    [path] = (tmp_path / "streams").glob("*.bin")
    stamp = path.stat().st_mtime_ns

    class Untouchable:
        def __iter__(self):
            raise AssertionError("tokenized again despite the cache")

    again = cached_tokens("key", Untouchable(), tokenizer, tmp_path)
    np.testing.assert_array_equal(again, first)
    assert path.stat().st_mtime_ns == stamp
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["dtype"] == "uint8" and sidecar["length"] == len(first) and sidecar["fingerprint"] == "key"
    assert sorted(p.name for p in (tmp_path / "streams").iterdir()) == sorted([path.name, f"{path.stem}.json"])


@pytest.mark.unit
def test_interrupted_or_damaged_files_are_never_trusted(reference, tmp_path):
    corpus, tokenizer = reference

    def dies_halfway():
        yield from TEXTS[:5]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached_tokens("key", dies_halfway(), tokenizer, tmp_path)
    assert list((tmp_path / "streams").iterdir()) == []  # no temp file, no half file, no sidecar
    good = np.array(cached_tokens("key", corpus.train_part, tokenizer, tmp_path))  # a copy, not the mapping
    [path] = (tmp_path / "streams").glob("*.bin")
    header = {"format": token_file.FORMAT, "fingerprint": "key", "tokenizer": token_file.tokenizer_hash(tokenizer)}
    path.write_bytes(path.read_bytes()[:-1])  # truncated: the sidecar's length no longer agrees
    assert read_token_file(path, header) is None
    np.testing.assert_array_equal(cached_tokens("key", corpus.train_part, tokenizer, tmp_path), good)
    assert read_token_file(path, {**header, "fingerprint": "other"}) is None


# --- reading without holding ---------------------------------------------------------------------


@pytest.mark.unit
def test_tokenizer_sample_is_spread_over_the_corpus_and_bounded(reference):
    corpus, _ = reference
    everything = corpus.train
    assert tuple(corpus.sample_train(10**9)) == everything  # within the budget: all of it
    total = sum(len(text) for text in TEXTS)  # train and val: what the source holds
    budget = total // 4
    stride = -(-total // budget)
    sample = list(corpus.sample_train(budget))
    assert sum(map(len, sample)) <= budget and len(sample) > 1 and stride > 1
    assert sample == list(everything[::stride][: len(sample)])  # every k-th document, in order


# --- bad input through the CLI -------------------------------------------------------------------


def bad_inputs(tmp_path):
    write_parquet(tmp_path / "no-text.parquet", TEXTS, field="body")
    pq.write_table(pa.table({"text": list(range(5))}), tmp_path / "numbers.parquet")
    (tmp_path / "empty.parquet").write_bytes(b"")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "no-rows.parquet")
    (tmp_path / "mixed").mkdir()
    write_parquet(tmp_path / "mixed" / "a.parquet", TEXTS)
    (tmp_path / "mixed" / "b.txt").write_text("words")
    return [
        ("no-text.parquet", "no column 'text'"),
        ("numbers.parquet", "column 'text' holds int64, not strings"),
        ("empty.parquet", "not a Parquet file"),
        ("no-rows.parquet", "has no documents"),
        ("missing.parquet", "no such file or folder"),
        ("mixed", "both .txt and .parquet"),
        ("nothing-*.parquet", "matches no files"),
    ]


@pytest.mark.e2e
def test_bad_corpora_exit_2_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cases = [(str(tmp_path / name), needle) for name, needle in bad_inputs(tmp_path)]
    cases.append(("no-such-owner/no-such-corpus", "datasets cannot load"))
    for number, (data, needle) in enumerate(cases):
        code = main(["pretrain", "--data", data, "--out", str(tmp_path / f"run-{number}"), *TINY])
        err = capsys.readouterr().err
        assert code == 2, (data, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (data, err)
        assert needle in err, (data, err)


@pytest.mark.e2e
def test_pretrain_on_parquet_shards_through_the_cli(tmp_path, capsys):
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(3):
        write_parquet(shards / f"part-{i}.parquet", TEXTS[i * 10 : (i + 1) * 10] * 4)
    code = main(["pretrain", "--data", str(shards / "*.parquet"), "--out", str(tmp_path / "run"), *TINY])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["corpus"]["name"] == str(shards / "*.parquet")
    assert any(name.endswith(".bin") for name in os.listdir(os.environ["MASKWISE_CACHE"] + "/streams"))
