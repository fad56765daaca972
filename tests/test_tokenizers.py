import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maskwise.data import tokenizers as tokenizers_module
from maskwise.data.corpus import make_corpus
from maskwise.data.plays import render_play, split_plays
from maskwise.data.tokenizers import (
    N_SENTINELS,
    SPECIAL_TOKENS,
    Tokenizer,
    build_tokenizer,
    sentinel_token,
)
from maskwise.errors import UserError

pytestmark = pytest.mark.unit

SMALL_VOCAB = 512
KINDS = ("char", "wordpiece", "bpe")


@pytest.fixture(scope="module")
def corpus():
    """Three training plays and one validation play: enough text to train on in a blink."""
    splits = split_plays()
    return make_corpus("small", [render_play(p) for p in splits["train"][:3]], [render_play(splits["val"][0])])


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def trained(corpus, cache_dir):
    return {kind: build_tokenizer(kind, corpus, SMALL_VOCAB, cache_dir) for kind in KINDS}


@pytest.fixture(scope="module")
def sample(corpus):
    return corpus.val[0][:3000]


@pytest.mark.parametrize("kind", KINDS)
def test_specials_then_sentinels_take_the_first_ids(trained, kind):
    tokenizer = trained[kind]
    assert [tokenizer.id_to_token(i) for i in range(len(SPECIAL_TOKENS))] == list(SPECIAL_TOKENS)
    ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id)
    ids += (tokenizer.mask_id, tokenizer.bos_id, tokenizer.eos_id)
    assert ids == tuple(range(7))
    assert tokenizer.sentinel_ids == tuple(range(7, 7 + N_SENTINELS))
    assert tokenizer.id_to_token(7) == sentinel_token(0) == "<extra_id_0>"
    assert tokenizer.special_ids == frozenset(range(7 + N_SENTINELS))
    assert tokenizer.kind == kind


@pytest.mark.parametrize("kind", KINDS)
def test_encode_adds_no_special_tokens_even_for_text_that_spells_one(trained, kind):
    tokenizer = trained[kind]
    ids = tokenizer.encode("Who's there? [MASK] <extra_id_0> [CLS]")
    assert ids and not set(ids) & (tokenizer.special_ids - {tokenizer.unk_id})
    texts = ["Who's there?", "Nay, answer me"]
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(text) for text in texts]


def test_char_vocabulary_is_every_character_of_train_and_val(trained, corpus):
    tokenizer = trained["char"]
    characters = set(corpus.train_text()) | set(corpus.val_text())
    assert tokenizer.vocab_size == len(SPECIAL_TOKENS) + N_SENTINELS + len(characters)
    assert tokenizer.encode("\u00e9") == [tokenizer.unk_id]  # "é" is not in these plays


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_char_round_trip_is_exact(trained, corpus, data):
    alphabet = sorted(set(corpus.train_text()) | set(corpus.val_text()))
    text = data.draw(st.text(alphabet=alphabet, max_size=200))
    tokenizer = trained["char"]
    assert len(tokenizer.encode(text)) == len(text)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_bpe_round_trip_is_exact_even_off_corpus(trained, sample):
    tokenizer = trained["bpe"]
    for text in (sample, "  leading spaces,\ttabs\n\n\nand caf\u00e9 \U0001f600 [brackets]"):
        ids = tokenizer.encode(text)
        assert tokenizer.unk_id not in ids
        assert tokenizer.decode(ids) == text
    assert len(tokenizer.encode(sample)) < 0.7 * len(sample)  # merges were learned, even with 512 ids


def test_wordpiece_trains_and_encodes_into_subwords(trained, sample):
    tokenizer = trained["wordpiece"]
    assert len(SPECIAL_TOKENS) + N_SENTINELS < tokenizer.vocab_size <= SMALL_VOCAB
    ids = tokenizer.encode(sample)
    assert tokenizer.unk_id not in ids
    assert any(tokenizer.id_to_token(i).startswith("##") for i in ids)
    assert tokenizer.decode(tokenizer.encode("Good morrow, my lord.")) == "Good morrow, my lord."


@pytest.mark.parametrize("kind", KINDS)
def test_save_then_load_encodes_identically(trained, sample, tmp_path, kind):
    path = tmp_path / "tokenizer.json"
    trained[kind].save(path)
    for loaded in (Tokenizer.load(path), Tokenizer.load(tmp_path)):
        assert loaded.kind == "file"
        assert loaded.encode(sample) == trained[kind].encode(sample)
        assert loaded.special_ids == trained[kind].special_ids
    assert build_tokenizer(str(path), corpus=None).encode(sample) == trained[kind].encode(sample)


@pytest.mark.parametrize("kind", KINDS)
def test_second_build_comes_from_the_cache(trained, corpus, cache_dir, sample, monkeypatch, kind):
    def no_training(*args):
        raise AssertionError("trained again despite the cache")

    monkeypatch.setattr(tokenizers_module, "_train_char", no_training)
    monkeypatch.setattr(tokenizers_module, "_train_subword", no_training)
    again = build_tokenizer(kind, corpus, SMALL_VOCAB, cache_dir)
    assert again.kind == kind
    assert again.encode(sample) == trained[kind].encode(sample)
    size = "all" if kind == "char" else SMALL_VOCAB
    assert (cache_dir / "tokenizers" / f"{kind}-{size}-{corpus.fingerprint[:16]}.json").is_file()
    assert not [p for p in (cache_dir / "tokenizers").iterdir() if p.suffix != ".json"]  # no temp files left


def test_cache_defaults_to_maskwise_cache(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKWISE_CACHE", str(tmp_path))
    build_tokenizer("char", corpus)
    assert (tmp_path / "tokenizers" / f"char-all-{corpus.fingerprint[:16]}.json").is_file()


@pytest.mark.parametrize("kind", KINDS)
def test_transformers_loads_the_file_and_agrees(trained, sample, tmp_path, kind):
    transformers = pytest.importorskip("transformers")
    path = tmp_path / "tokenizer.json"
    trained[kind].save(path)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    assert fast(sample, add_special_tokens=True)["input_ids"] == trained[kind].encode(sample)


def test_a_foreign_tokenizer_finds_its_roles_under_their_usual_spellings(tmp_path):
    import tokenizers

    vocabulary = {"<pad>": 0, "</s>": 1, "<unk>": 2, "hello": 3, "<extra_id_0>": 5, "<extra_id_1>": 4}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocabulary, unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.add_special_tokens(["<pad>", "</s>", "<unk>", "<extra_id_0>", "<extra_id_1>"])
    backend.save(str(tmp_path / "tokenizer.json"))
    tokenizer = Tokenizer.load(tmp_path)
    assert (tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.sep_id) == (0, 1, 2, 1)
    assert (tokenizer.mask_id, tokenizer.bos_id) == (None, None)
    assert tokenizer.sentinel_ids == (5, 4)  # in sentinel order, not id order
    assert tokenizer.special_ids == {0, 1, 2, 4, 5}
    assert tokenizer.encode("hello hello") == [3, 3]


def test_bad_requests_are_user_errors(corpus, tmp_path):
    with pytest.raises(UserError, match="tokenizer: no such file .*nowhere.json"):
        build_tokenizer(str(tmp_path / "nowhere.json"), corpus)
    with pytest.raises(UserError, match="no such file wordpeice"):
        build_tokenizer("wordpeice", corpus)
    (tmp_path / "broken.json").write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(UserError, match="cannot load"):
        Tokenizer.load(tmp_path / "broken.json")
    with pytest.raises(UserError, match="vocab_size 300 is too small"):
        build_tokenizer("bpe", corpus, vocab_size=300, cache_dir=tmp_path)
