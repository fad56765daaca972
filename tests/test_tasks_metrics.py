"""Task metrics on cases small enough to compute by hand."""

import ast
import itertools
import math
import random
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from maskwise.tasks.metrics import (
    Scheme,
    accuracy,
    bucket_label,
    bucketed,
    entities,
    entity_counts,
    exact_match,
    latency_ms,
    macro_f1,
    majority_label,
    mrr,
    ndcg_at_k,
    paired_bootstrap,
    percentile,
    pooled_entity_f1,
    recall_at_k,
    rouge,
    set_f1,
    span_scheme,
    split_list,
    token_f1,
)
from maskwise.tasks.rerank_eval import random_order_per_query
from maskwise.tasks.retrieve import per_query_metrics

pytestmark = pytest.mark.unit


def test_accuracy_and_macro_f1():
    gold = ["a", "a", "a", "b", "c"]
    pred = ["a", "a", "b", "b", "b"]
    assert accuracy(pred, gold) == 3 / 5
    # a: tp 2, fp 0, fn 1 -> 4/5; b: tp 1, fp 2, fn 0 -> 2/4; c: tp 0 -> 0
    assert macro_f1(pred, gold) == pytest.approx((0.8 + 0.5 + 0.0) / 3)
    # a label listed but absent from both lists scores 0 and still counts in the mean
    assert macro_f1(pred, gold, ["a", "b", "c", "d"]) == pytest.approx((0.8 + 0.5) / 4)
    with pytest.raises(ValueError):
        accuracy(["a"], ["a", "b"])


def test_majority_label_breaks_ties_by_sorted_order():
    assert majority_label(["b", "a", "b", "a", "c"]) == "a"
    assert majority_label(["c", "c", "a"]) == "c"


def test_ranking_metrics_by_hand():
    ranked = [[3, 1, 2], [5, 6, 7], [9, 8, 4]]
    relevant = [{1}, {4}, {9, 4}]
    # recall@1: 0, 0, 1/2 ; recall@3: 1, 0, 1
    assert recall_at_k(ranked, relevant, 1) == pytest.approx(0.5 / 3)
    assert recall_at_k(ranked, relevant, 3) == pytest.approx(2 / 3)
    # reciprocal ranks: 1/2, 0 (never ranked), 1
    assert mrr(ranked, relevant) == pytest.approx(1.5 / 3)
    # nDCG@10: q1 = (1/log2 3) / 1; q2 = 0; q3 = (1 + 1/log2 4) / (1 + 1/log2 3)
    q1 = 1 / math.log2(3)
    q3 = (1 + 0.5) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(ranked, relevant, 10) == pytest.approx((q1 + 0 + q3) / 3)
    assert ndcg_at_k([[1, 2]], [{1}], 10) == 1.0
    assert ndcg_at_k([[2, 1]], [{1}], 1) == 0.0


def test_random_order_of_candidates_by_hand():
    # two candidates, the relevant one first or second with probability 1/2: reciprocal rank
    # (1 + 1/2) / 2, recall@1 1/2; a query whose relevant document is not among its candidates
    # scores 0 in any order
    expected = random_order_per_query([[5, 7], [1, 2]], [7, 3], (1, 2))
    assert expected["mrr"] == [0.75, 0.0]
    assert expected["recall@1"] == [0.5, 0.0] and expected["recall@2"] == [1.0, 0.0]
    assert expected["ndcg@10"] == [pytest.approx((1 + 1 / math.log2(3)) / 2), 0.0]


def test_random_order_is_the_mean_over_every_order():
    candidates = [3, 1, 4, 0, 2]  # the relevant document 0 among five: every one of 120 orders
    orders = [list(p) for p in itertools.permutations(candidates)]
    brute = per_query_metrics(orders, [{0}] * len(orders))
    expected = random_order_per_query([candidates], [0], (10,))
    for metric in ("recall@10", "mrr", "ndcg@10"):
        assert expected[metric][0] == pytest.approx(sum(brute[metric]) / len(orders))
    twelve = list(range(12))  # deeper than nDCG's cut-off: ranks 11 and 12 add nothing
    brute = per_query_metrics([twelve[-i:] + twelve[:-i] for i in range(12)], [{5}] * 12)  # 5 at every rank once
    assert random_order_per_query([twelve], [5], (10,))["ndcg@10"][0] == pytest.approx(sum(brute["ndcg@10"]) / 12)


def test_paired_bootstrap():
    # a constant gain has no spread: every resample shows it
    same = paired_bootstrap([0.5, 0.25, 1.0], [0.25, 0.0, 0.75])
    assert same == {"difference": 0.25, "ci95_low": 0.25, "ci95_high": 0.25, "p_not_better": 0.0}
    # one big win among many ties: the mean is positive, but a resample often misses the win
    lucky = paired_bootstrap([1.0] + [0.0] * 19, [0.0] * 20, seed=1)
    assert lucky["difference"] == 0.05 and lucky["ci95_low"] == 0.0 and 0.2 < lucky["p_not_better"] < 0.5
    # many small wins over noise: the interval excludes 0; the draw is seeded
    generator = torch.Generator().manual_seed(0)
    b = torch.rand(300, generator=generator).tolist()
    a = [x + 0.05 + 0.1 * (torch.rand(1, generator=generator).item() - 0.5) for x in b]
    clear = paired_bootstrap(a, b, seed=2)
    assert 0.04 < clear["ci95_low"] < clear["difference"] < clear["ci95_high"] < 0.06
    assert clear["p_not_better"] == 0.0 and clear == paired_bootstrap(a, b, seed=2)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired_bootstrap([], [])


def test_generation_metrics_by_hand():
    assert exact_match("HAMLET,  HORATIO\n", "HAMLET, HORATIO") == 1.0
    assert exact_match("HAMLET", "HORATIO") == 0.0
    # tokens: p = [a, b, b], g = [b, b, c]: overlap 2, P = R = 2/3
    assert token_f1("a b b", "b b c") == pytest.approx(2 / 3)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0
    assert split_list(" A, B ,, C ") == ["A", "B", "C"]
    # sets: {A, B} vs {B, C, D}: overlap 1, P = 1/2, R = 1/3 -> F1 = 2/5
    assert set_f1("A, B, A", "B, C, D") == pytest.approx(0.4)
    assert set_f1("B, A", "A, B") == 1.0  # order and repeats do not matter


def test_bucketing_and_percentiles():
    assert bucket_label([0, 100, 200], 99) == "0-99"
    assert bucket_label([0, 100, 200], 100) == "100-199"
    assert bucket_label([0, 100, 200], 5000) == "200+"
    result = bucketed([10, 150, 120, 300], {"em": [1, 0, 1, 1]}, [0, 100, 200])
    assert result == {"0-99": {"n": 1, "em": 1.0}, "100-199": {"n": 2, "em": 0.5}, "200+": {"n": 1, "em": 1.0}}
    assert list(result) == ["0-99", "100-199", "200+"]
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5], 99) == pytest.approx(4.96)
    assert latency_ms([0.001, 0.003]) == {"p50_ms": pytest.approx(2.0), "p99_ms": pytest.approx(2.98)}


# ---- span labelling -------------------------------------------------------------------------------


@pytest.mark.unit
def test_span_scheme_tells_chunk_tags_from_other_tags():
    assert span_scheme(["O", "B-PER", "I-PER", "B-LOC"]) == "IOB"
    assert span_scheme(["O", "I-PER"]) == "IOB"  # IOB1: an I after O opens a chunk
    assert span_scheme(iter(["B-PER", "E-PER", "S-LOC", "O"])) == "IOBES"
    assert span_scheme(["B-PER", "I-PER", "E-PER", "O"]) == span_scheme(["S-PER"]) == "IOBES"  # BIOES: same letters
    assert span_scheme(["B-PER", "L-PER", "U-LOC", "O"]) == "BILOU"
    assert span_scheme(["U-PER"]) == "BILOU"
    assert span_scheme(["NN", "VBZ", ".", "PRP$", "DT"]) is None  # Penn POS tags
    assert span_scheme(["O", ",", "O", "."]) is None  # punctuation marks to restore
    assert span_scheme(["O", "O"]) is None and span_scheme([]) is None  # no chunk tag at all
    assert span_scheme(["B-", "O"]) is None and span_scheme(["X-PER"]) is None  # empty type, unknown prefix


@pytest.mark.unit
@pytest.mark.parametrize(
    "tags, needle",
    [
        (["B-PER", "E-PER", "B-LOC", "L-LOC"], "fit no one span scheme"),  # IOBES and BILOU mixed
        (["B-PER", "I-PER", "S-LOC"], "fit no one span scheme"),  # IOBES with no E-: no B- ever closes
        (["I-PER", "E-PER"], "fit no one span scheme"),  # IOE, which strict IOBES would read as nothing
        (["B-PER", "M-PER", "E-PER"], "'M-PER' is neither O nor a span tag"),  # BMES: a prefix from none of them
        (["B-PER", "I-PER", "NN"], "'NN' is neither O nor a span tag"),  # one foreign tag is enough
    ],
)
def test_span_scheme_refuses_tags_no_one_schemes_rules_can_check(tags, needle):
    with pytest.raises(ValueError, match=needle) as refused:
        span_scheme(tags)
    assert "\n" not in str(refused.value)


@pytest.mark.unit
def test_entities_by_hand():
    # IOB: seqeval's default (conlleval) chunks
    assert entities(["B-PER", "I-PER", "O", "B-LOC"], "IOB") == {("PER", 0, 1), ("LOC", 3, 3)}
    assert entities(["B-PER", "I-PER", "B-PER"], "IOB") == {("PER", 0, 1), ("PER", 2, 2)}  # B always opens
    assert entities(["O", "I-PER", "I-PER"], "IOB") == {("PER", 1, 2)}  # an I after O opens a chunk
    assert entities(["B-PER", "I-LOC", "I-LOC"], "IOB") == {("PER", 0, 0), ("LOC", 1, 2)}  # so does a type change
    assert entities(["O", "O"], "IOB") == set() and entities([], "IOB") == set()
    # IOBES and BILOU: their own strict rules, where conlleval, knowing no L or U, loses the first of two names
    assert entities(["B-PER", "L-PER", "B-PER", "L-PER"], "IOB") == {("PER", 2, 3)}
    assert entities(["B-PER", "L-PER", "B-PER", "L-PER"], "BILOU") == {("PER", 0, 1), ("PER", 2, 3)}
    assert entities(["U-PER", "U-PER", "O"], "BILOU") == {("PER", 0, 0), ("PER", 1, 1)}  # conlleval: one
    assert entities(["B-PER", "E-PER", "S-LOC", "B-PER", "I-PER", "E-PER"], "IOBES") == {
        ("PER", 0, 1),
        ("LOC", 2, 2),
        ("PER", 3, 5),
    }
    # ill-formed chunks are none: an E or I with no B, a B left open, a type change before the end
    assert entities(["E-PER", "E-PER", "I-PER"], "IOBES") == set()  # conlleval: three
    assert entities(["B-PER", "I-PER", "O", "B-LOC", "E-PER"], "IOBES") == set()
    assert entities(["B-PER", "I-PER", "U-PER", "I-PER", "L-PER"], "BILOU") == {("PER", 2, 2)}
    assert entities(["O", "O"], "BILOU") == set() and entities([], "IOBES") == set()
    with pytest.raises(ValueError, match="'E-PER' is not of the BILU scheme"):
        entities(["B-PER", "E-PER"], "BILOU")  # as seqeval's strict mode refuses a foreign prefix


@pytest.mark.unit
def test_entity_counts_and_pooled_f1_by_hand():
    # gold PER 0-1, LOC 3; predicted PER 0-1 (right), LOC 2-3 (wrong span)
    assert entity_counts(["B-PER", "I-PER", "B-LOC", "I-LOC"], ["B-PER", "I-PER", "O", "B-LOC"], "IOB") == (1, 2, 2)
    assert entity_counts(["B-PER", "O"], ["B-LOC", "O"], "IOB") == (0, 1, 1)  # same span, other type
    # BILOU: an unclosed predicted chunk is no entity, so not a right one either
    assert entity_counts(["B-PER", "I-PER", "U-LOC"], ["B-PER", "L-PER", "U-LOC"], "BILOU") == (1, 1, 2)
    with pytest.raises(ValueError):
        entity_counts(["O"], ["O", "O"], "IOB")
    # pooled: tp 1 + 2, predicted 2 + 2, gold 2 + 4 -> P 3/4, R 3/6, F1 6/10
    scores = pooled_entity_f1([(1, 2, 2), (2, 2, 4)])
    assert scores == {"precision": 0.75, "recall": 0.5, "f1": pytest.approx(0.6)}
    assert pooled_entity_f1([]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


@pytest.mark.unit
@pytest.mark.filterwarnings("ignore")  # seqeval warns where it divides by zero
def test_always_outside_scores_zero_even_when_most_texts_have_no_entities():
    seqeval = pytest.importorskip("seqeval.metrics")
    gold = [["O", "O", "O"]] * 9 + [["O", "B-PER", "I-PER"]]
    predicted = [["O"] * 3 for _ in gold]
    scores = pooled_entity_f1([entity_counts(p, g, "IOB") for p, g in zip(predicted, gold)])
    assert scores == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert seqeval.f1_score(gold, predicted) == 0.0
    # nothing to find and nothing found is 0 too, not 1 (seqeval's zero division)
    assert pooled_entity_f1([entity_counts(p, p, "IOB") for p in predicted])["f1"] == 0.0
    assert seqeval.f1_score(predicted, predicted) == 0.0


def _seqeval_entities(sequence: list[str], scheme: Scheme) -> list[tuple[str, int, int]]:
    """seqeval's chunks of one sequence as (type, first, last): its default mode for IOB, else its strict mode."""
    if scheme == "IOB":
        from seqeval.metrics.sequence_labeling import get_entities

        return get_entities(sequence)
    from seqeval import scheme as schemes

    return [(e.tag, e.start, e.end - 1) for e in schemes.Tokens(sequence, getattr(schemes, scheme)).entities]


def _seqeval_mode(scheme: Scheme) -> dict:
    """seqeval's scoring keywords for ``scheme``: its default mode for IOB, its strict mode with the scheme else."""
    from seqeval import scheme as schemes

    return {} if scheme == "IOB" else {"mode": "strict", "scheme": getattr(schemes, scheme)}


def _texts(tags: list[str]):
    """Several texts, each a list of (predicted, gold) tag pairs."""
    pair = st.tuples(st.sampled_from(tags), st.sampled_from(tags))
    return st.lists(st.lists(pair, max_size=8), min_size=1, max_size=5)


def _agrees_with_seqeval(texts: list[list[tuple[str, str]]], scheme: Scheme) -> None:
    seqeval = pytest.importorskip("seqeval.metrics")
    predicted = [[p for p, _ in text] for text in texts]
    gold = [[g for _, g in text] for text in texts]
    for sequence in (*predicted, *gold):
        found = _seqeval_entities(sequence, scheme)
        assert entities(sequence, scheme) == set(found) and len(found) == len(set(found))
    scores = pooled_entity_f1([entity_counts(p, g, scheme) for p, g in zip(predicted, gold)])
    mode = _seqeval_mode(scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division warnings where nothing is predicted or gold
        assert scores["f1"] == pytest.approx(seqeval.f1_score(gold, predicted, **mode), abs=1e-12)
        assert scores["precision"] == pytest.approx(seqeval.precision_score(gold, predicted, **mode), abs=1e-12)
        assert scores["recall"] == pytest.approx(seqeval.recall_score(gold, predicted, **mode), abs=1e-12)


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(_texts(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-PER", "S-LOC"]))
def test_entities_and_pooled_f1_match_seqeval_default_mode_on_any_tags(texts):
    _agrees_with_seqeval(texts, "IOB")  # conlleval's chunks, which read any prefix


@pytest.mark.unit
@settings(max_examples=100, deadline=None)
@given(_texts(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))
def test_entities_and_pooled_f1_match_seqeval_on_bio(texts):
    _agrees_with_seqeval(texts, "IOB")


_STRICT_TAGS: dict[Scheme, list[str]] = {
    "IOBES": ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC", "S-LOC"],
    "BILOU": ["O", "B-PER", "I-PER", "L-PER", "U-PER", "B-LOC", "L-LOC", "U-LOC"],
}


@pytest.mark.unit
@pytest.mark.parametrize("scheme", ["IOBES", "BILOU"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_entities_and_pooled_f1_match_seqeval_strict_mode(scheme, data):
    _agrees_with_seqeval(data.draw(_texts(_STRICT_TAGS[scheme])), scheme)


@pytest.mark.unit
@pytest.mark.parametrize("scheme", ["IOBES", "BILOU"])
def test_entities_match_seqeval_strict_mode_on_every_short_sequence(scheme):
    # every sequence of up to 4 tags (4,681 of them), well-formed or not, and 2,000 seeded ones of up to 12
    pytest.importorskip("seqeval")
    tags = _STRICT_TAGS[scheme]
    rng = random.Random(0)
    every = [list(s) for n in range(5) for s in itertools.product(tags, repeat=n)]
    drawn = [rng.choices(tags, k=rng.randint(5, 12)) for _ in range(2000)]
    for sequence in every + drawn:
        assert entities(sequence, scheme) == set(_seqeval_entities(sequence, scheme)), sequence


# ---- summaries ------------------------------------------------------------------------------------


@pytest.mark.unit
def test_rouge_by_hand():
    pytest.importorskip("rouge_score")
    assert rouge("The cat sat on the mat.", "The cat sat on the mat.") == (1.0, 1.0, 1.0)
    assert rouge("dogs bark loudly", "the cat sat") == (0.0, 0.0, 0.0)
    # the cat lay on a mat / the cat sat on the mat: LCS the-cat-on-mat = 4 of 6 words each -> 2/3; unigrams in
    # common the, cat, on, mat -> 4 of 6 -> 2/3; bigrams in common "the cat" alone, 1 of 5 each -> 1/5
    assert rouge("the cat lay on a mat", "the cat sat on the mat") == pytest.approx((2 / 3, 1 / 5, 2 / 3))
    # LCS 4; P = 4/4, R = 4/6 -> F = 2 * 1 * (2/3) / (5/3) = 0.8
    assert rouge("the cat on mat", "the cat sat on the mat")[2] == pytest.approx(0.8)
    assert rouge("Cats running", "cat run") == (1.0, 1.0, 1.0)  # lower-cased and stemmed


@pytest.mark.unit
def test_rouge_keeps_every_letter_where_the_text_is_not_english():
    pytest.importorskip("rouge_score")
    # rouge-score's own tokenizer keeps a-z0-9 only: "élection" and "année" lose their accented letters, "ß" splits
    assert rouge("élection année", "élection straße", english=False) == pytest.approx((0.5, 0.0, 0.5))
    assert rouge("Élection", "élection", english=False)[0] == 1.0  # lower-cased
    assert rouge("élection année", "élection straße", english=True) != rouge(
        "élection année", "élection straße", english=False
    )


@pytest.mark.unit
def test_rouge_scorer_is_not_imported_with_the_module():
    import maskwise.tasks.metrics as metrics

    tree = ast.parse(Path(metrics.__file__).read_text())
    top_level = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = {alias.name for node in top_level if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in top_level if isinstance(node, ast.ImportFrom)}
    assert not any(name and name.startswith("rouge_score") for name in names)
