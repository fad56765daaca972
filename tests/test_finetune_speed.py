"""What compare's fine-tune-and-evaluate phase reuses across families and points gives what computing it afresh gives:
the plays' rows (``plays.drawn_once``), each text's encoding (``reading.encoded``), the classic methods' fits
(TF-IDF, BM25, the verse rule), each handed out so that no caller's change reaches another
(benchmarks/bench_finetune_phase.py times the phase)."""

import string

import pytest

from maskwise.data.corpus import make_corpus
from maskwise.data.plays import split_plays
from maskwise.data.tagging import punctuation_examples
from maskwise.data.tasks import line_order_examples, verse_examples
from maskwise.data.tokenizers import build_tokenizer
from maskwise.tasks import reading
from maskwise.tasks.classic import best_verse_rule, chars_read, tfidf_logistic_regression
from maskwise.tasks.reading import encoded, token_ids
from maskwise.tasks.retrieve import bm25_search

pytestmark = pytest.mark.unit

TEXTS = ["Friends, Romans, countrymen", "lend me your ears;", "", "  I come to bury Caesar  "]


def test_plays_rows_are_drawn_once_and_handed_out_as_copies():
    first = punctuation_examples("test", 80, limit=50, seed=3)
    first.clear()  # a caller's change to its copy
    again = punctuation_examples("test", 80, limit=50, seed=3)
    assert len(again) == 50
    assert punctuation_examples.__wrapped__("test", 80, limit=50, seed=3) == again  # as computed afresh
    # positional and keyword arguments are one draw; other plays are read every call
    assert line_order_examples("test", 20, seed=1) == line_order_examples("test", per_order=20, seed=1)
    plays = split_plays()["test"][:1]
    assert verse_examples("test", limit=5, plays=plays) == verse_examples.__wrapped__("test", limit=5, plays=plays)


def test_each_text_is_encoded_once_as_the_tokenizer_encodes_it():
    tokenizer = build_tokenizer("char", make_corpus("printable", [string.printable], [string.printable]))
    found = encoded(tokenizer, TEXTS)
    for text, e in zip(TEXTS, found):
        ids, offsets = tokenizer.encode_offsets(text)
        assert list(e.ids) == ids and list(e.ends) == [end for _, end in offsets] and e.chars == len(text)
    assert encoded(tokenizer, TEXTS)[0] is found[0]  # kept
    same = build_tokenizer("char", make_corpus("printable", [string.printable], [string.printable]))
    assert same.fingerprint == tokenizer.fingerprint and token_ids(same, TEXTS[:1])[0] is found[0].ids
    # what a model reads of each text at a few budgets, as the offsets say
    for max_len in (1, 5, 30):
        expected = []
        for text in TEXTS:
            offsets = tokenizer.encode_offsets(text)[1]
            room = max_len - 1  # an encoder frames [CLS]
            kept = offsets[:room]
            expected.append(len(text) if len(offsets) <= room else (kept[-1][1] if kept else 0))
        assert chars_read(tokenizer, TEXTS, max_len, "encoder") == expected


def test_the_oldest_encodings_are_let_go(monkeypatch):
    tokenizer = build_tokenizer("char", make_corpus("printable", [string.printable], [string.printable]))
    monkeypatch.setattr(reading, "ENCODINGS", reading.Encodings(tokens_kept=len(TEXTS[-1]) + 1))
    assert [list(ids) for ids in token_ids(tokenizer, TEXTS)] == [tokenizer.encode(t) for t in TEXTS]
    assert list(reading.ENCODINGS.kept) == [(tokenizer.fingerprint, t) for t in TEXTS[-2:]]
    assert reading.ENCODINGS.tokens == len(TEXTS[-1])  # the empty text holds none


def test_classic_fits_are_reused_and_handed_out_as_copies():
    train = ["the king is dead", "long live the king", "a horse a horse", "my kingdom for a horse"] * 3
    labels = ["king", "king", "horse", "horse"] * 3
    first = tfidf_logistic_regression(train, labels, ["the king", "a horse"])
    first.append("changed")
    assert tfidf_logistic_regression(train, labels, ["the king", "a horse"]) == ["king", "horse"]

    docs = ("the king is dead", "a horse a horse", "my kingdom for a horse")
    ranked, scores = bm25_search(["horse"], docs, k=2)
    ranked[0].clear()
    assert bm25_search(["horse"], docs, k=2) == ([[1, 2]], scores)

    rows = verse_examples("train", limit=40, seed=0)
    chosen, means = best_verse_rule(rows)
    means.clear()
    assert best_verse_rule(rows)[0] == chosen and len(best_verse_rule(rows)[1]) == 2
