"""Tests that kill the mutants mutmut left alive in metrics, retrieve and claims (issue 78, item 8).

Each test names the mutants it kills (mutmut's names, ``x_<function>__mutmut_<n>``); docs/results.md lists the
survivors before and after, and why each one left does not matter."""

import math
import random
import types
import warnings
from dataclasses import dataclass, replace

import pytest
import torch

from maskwise.data.beir import GradedRetrievalSet
from maskwise.data.tasks import RetrievalSet
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.experiments.claims import (
    HELD_OUT_ROWS,
    Classic,
    CompareRow,
    Evidence,
    Part,
    claim_verdict,
    gather,
    gather_classic,
    items_to_separate,
    judge,
    judge_claim,
    judge_part,
    rows_of,
    share_read,
    task_row,
    ttft_milliseconds,
)
from maskwise.experiments.intervals import Interval, interval, paired_difference
from maskwise.tasks import retrieve
from maskwise.tasks.items import Items
from maskwise.tasks.metrics import (
    LetterTokens,
    accuracy,
    entities,
    gains,
    line_breaks,
    macro_f1,
    majority_label,
    mrr,
    ndcg_at_k,
    paired_bootstrap,
    percentile,
    recall_at_k,
    set_f1,
    span_scheme,
    tag_scores,
)
from maskwise.tasks.registry import ENCODER_JOBS, GENERATE, READ_THEN_WRITE, TASKS, Row
from maskwise.tasks.unit import Scored

pytestmark = pytest.mark.unit


# ---- metrics ------------------------------------------------------------------------------------


def test_accuracy_and_macro_f1_of_nothing_are_zero():
    """Kills x_accuracy 6, 14 (empty lists divide by zero or score 1) and x_macro_f1 18 (no labels score 1)."""
    assert accuracy([], []) == 0.0
    assert macro_f1([], []) == 0.0


def test_macro_f1_counts_a_class_whose_misses_equal_its_hits():
    """Kills x_macro_f1 57, 58: "a" has tp 1, fn 1 (tp + fp - fn = 0), "b" tp 1, fp 1 (tp - fp + fn = 0); both
    score 2/3, not 0."""
    assert macro_f1(["a", "b", "b"], ["a", "a", "b"]) == pytest.approx(2 / 3)


def test_labels_of_mixed_types_sort_as_text():
    """Kills x_macro_f1 9, 11, x_tag_scores 31, 33, x_majority_label 6, 8 (sorted/min without ``key=str``: ints and
    strings do not compare, and 10 sorts after 9)."""
    assert macro_f1([1, "a"], [1, "a"]) == 1.0
    assert list(tag_scores([10, 9, 0], [10, 9, 0], outside=0)["per_tag"]) == ["10", "9"]
    assert majority_label([9, 10]) == 10  # a tie: "10" < "9" as text
    assert majority_label([1, "a"]) == 1


def test_tag_scores_of_a_tag_never_predicted_or_never_gold_are_zero():
    """Kills x_tag_scores 9, 14 (precision or recall of no predictions or no gold scores 1) and 101 (macro F1 with
    no gold tag scores 1)."""
    scores = tag_scores(["A", "O", "O"], ["O", "B", "O"], outside="O")
    assert scores["per_tag"]["B"]["precision"] == 0.0  # never predicted
    assert scores["per_tag"]["A"]["recall"] == 0.0  # never gold
    assert tag_scores(["A", "O"], ["O", "O"], outside="O")["macro_f1"] == 0.0  # no gold tag at all


def test_relevance_gains_and_the_means_of_no_query():
    """Kills x_gains 8 (a set's gain 2), x_recall_at_k 19, x_mrr 33, x_ndcg_at_k 56 (no query with a relevant
    document, or none at all, scores 1), x_ndcg_at_k 16 (a query without one stops the mean) and 1 (default k 11)."""
    assert gains({3, 1}) == {1: 1.0, 3: 1.0} and gains({1: 2, 2: 0}) == {1: 2.0}
    assert recall_at_k([[1]], [set()], 1) == 0.0
    assert mrr([], []) == 0.0
    assert ndcg_at_k([], []) == 0.0
    assert ndcg_at_k([[0], [0]], [set(), {0}]) == 1.0
    assert ndcg_at_k([list(range(20))], [{10}]) == 0.0  # rank 11: outside the default top 10


def test_paired_bootstrap_defaults_and_precision():
    """Kills x_paired_bootstrap 1, 2 (default resamples 10,001, seed 1) and 14, 16, 18, 20 (a side read as
    float32: the difference off by a rounding)."""
    a, b = [0.1, 0.7, 0.3, 0.9], [0.2, 0.4, 0.3, 0.5]
    assert paired_bootstrap(a, b) == paired_bootstrap(a, b, resamples=10_000, seed=0)
    assert paired_bootstrap([0.1], [0.0])["difference"] == 0.1
    assert paired_bootstrap([0.0], [0.1])["difference"] == -0.1


def test_set_f1_splits_both_lists_at_the_separator_given():
    """Kills x_set_f1 7, 12 (one side split at the default comma)."""
    assert set_f1("A; B", "B; A", separator=";") == 1.0
    assert set_f1("A, B", "A; B", separator=";") == 0.0


def test_a_line_after_a_miss_is_looked_for_from_the_last_break_up_to_the_end():
    """Kills x_line_breaks 15 (looked for from the start, finding the earlier "x y") and 17 (the last place a line
    can start left out)."""
    words = "x y z x y w".split()
    assert line_breaks("x y z\nQ\nx y\nw", words) == ({3, 5}, 3)
    assert line_breaks("a\nQ\nd\nz", "a b c d".split()) == ({1, 4}, 3)


def test_the_100th_percentile_is_the_largest_value():
    """Kills x_percentile 22 (the upper order statistic past the end)."""
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0


def test_a_closed_scheme_with_all_four_prefixes_is_recognised():
    """Kills x__closed_fits 3 (``<`` for ``<=``: every prefix of IOBES present refused)."""
    assert span_scheme(["B-X", "I-X", "E-X", "S-Y", "O"]) == "IOBES"
    assert span_scheme(["B-X", "I-X", "L-X", "U-Y"]) == "BILOU"


def test_a_type_with_a_dash_in_it_keeps_its_prefix():
    """Kills x_span_scheme 9 (``rpartition``: "B-LOC-CITY" read as prefix "B-LOC", so not a span tag)."""
    assert span_scheme(["B-LOC-CITY", "I-LOC-CITY", "O"]) == "IOB"


def test_conll_chunks_at_the_edges_match_seqeval():
    """Kills x__split_tag 2, 9, 10, 12, 18, x__chunk_ends 19, 20, 25, x__chunk_starts 14, 15, 23, 24, 25 and
    x__conll_entities 6, 8, 9: each expected set is seqeval's ``get_entities`` on the same tags (its default mode)."""
    cases = {
        ("B-X-Y", "I-X-Y"): {("X-Y", 0, 1)},  # the type is all after the first dash
        ("BPER", "IPER"): {("PER", 0, 1)},  # no dash: the type is all after the prefix letter
        ("B", "O"): {("_", 0, 0)},  # a bare B ends at O, its type the placeholder "_"
        ("B",): {("_", 0, 0)},  # ... and at the end of the text
        ("O", "I"): {("_", 1, 1)},  # a bare I after O opens a chunk
        (".-X", "B-Y"): {("Y", 1, 1)},  # a "." tag neither ends nor opens one
        ("B-X", "O", "L", "B-Y"): {("X", 0, 0), ("_", 0, 2), ("Y", 3, 3)},  # an O opens nothing
        ("B-X", ".-Y", "L-Y", "B-Z"): {("X", 0, 0), ("Y", 0, 2), ("Z", 3, 3)},  # nor a "." of a new type
        (".-X", "L-X", "B-Y"): {("X", 0, 1), ("Y", 2, 2)},  # a chunk never opened starts at 0
        ("B-X", "L"): {("X", 0, 0)},  # a bare L (type "_") is not closed by the end's O (type "_")
    }
    for tags, expected in cases.items():
        assert entities(list(tags), "IOB") == expected, tags


def test_strict_chunks_read_the_type_as_seqeval_strict_mode_does():
    """Kills x__strict_entities 8, 9, 10: the type is all after the prefix letter, dashes stripped, "_" if none."""
    assert entities(["SPER"], "IOBES") == {("PER", 0, 0)}
    assert entities(["S-TAX"], "IOBES") == {("TAX", 0, 0)}  # an X at its end is kept
    assert entities(["S"], "IOBES") == {("_", 0, 0)}
    assert entities(["U-XRAY", "O"], "BILOU") == {("XRAY", 0, 0)}


def test_letter_tokens_are_lower_cased():
    """Kills xǁLetterTokensǁtokenize 1 (upper-cased)."""
    assert LetterTokens().tokenize("Été, 2016_Rome") == ["été", "2016", "rome"]


# ---- retrieve -----------------------------------------------------------------------------------


def lookup(vectors: dict[str, list[float]]):
    """An embedder that looks each text's vector up."""
    return lambda texts: torch.tensor([vectors[t] for t in texts], dtype=torch.float32)


def test_search_covers_every_query_in_chunks_and_shapes_no_query():
    """Kills x_search 16 (chunks counted over the vector size, not the queries) and 29 to 40 (the empty result's
    shapes and dtypes)."""
    queries, docs = torch.randn(5, 2, generator=torch.Generator().manual_seed(0)), torch.eye(3, 2)
    scores, indices = retrieve.search(queries, docs, 2, chunk=2)
    expected = (queries @ docs.T).topk(2, dim=-1)
    assert torch.equal(indices, expected.indices) and torch.equal(scores, expected.values)
    scores, indices = retrieve.search(torch.zeros(0, 2), docs, 5)
    assert scores.shape == (0, 3) and scores.dtype == torch.float32
    assert indices.shape == (0, 3) and indices.dtype == torch.long


def test_ranking_metrics_cut_each_at_its_own_rank():
    """Kills x_ranking_metrics 4, 8, 20, 24 and x_per_query_metrics 5, 9: the relevant document at rank 11 counts
    for recall@100 and MRR only."""
    ranked, relevant = [list(range(20))], [{10}]
    assert retrieve.ranking_metrics(ranked, relevant) == {
        "recall@1": 0.0,
        "recall@5": 0.0,
        "recall@10": 0.0,
        "recall@100": 1.0,
        "mrr": pytest.approx(1 / 11),
        "ndcg@10": 0.0,
    }
    assert retrieve.per_query_metrics(ranked, relevant) == {
        "recall@10": [0.0],
        "mrr": [pytest.approx(1 / 11)],
        "ndcg@10": [0.0],
    }


def test_benchmark_metrics_cut_at_10_and_100():
    """Kills x_benchmark_metrics 5, 9, 14, 18, 23, 26, 27, 32, 36: one query's relevant document at rank 11, the
    other's at rank 101."""
    ranked, qrels = [list(range(200))] * 2, [{10: 1}, {100: 1}]
    assert retrieve.benchmark_metrics(ranked, qrels) == {
        "ndcg@10": 0.0,
        "recall@100": 0.5,
        "mrr@10": 0.0,
        "recall@10": 0.0,
    }


def test_expected_random_of_twenty_documents():
    """Kills x_expected_random 6, 9, 12, 14, 15, 18: the top 10 of 20, one relevant document."""
    expected = retrieve.expected_random(20)
    assert expected["recall@10"] == 0.5
    assert expected["ndcg@10"] == pytest.approx(sum(1 / math.log2(rank + 1) for rank in range(1, 11)) / 20)


def test_random_ranking_is_seeded_with_0_by_default():
    """Kills x_random_ranking 1 (default seed 1)."""
    assert retrieve.random_ranking(3, 10, 4) == retrieve.random_ranking(3, 10, 4, seed=0)
    assert retrieve.random_ranking(3, 10, 4) != retrieve.random_ranking(3, 10, 4, seed=1)


def test_english_share_samples_evenly_and_of_counts_the_threshold_as_english():
    """Kills x_english_share 1, 6, 8 (the sample's step), 13 (the share's division) and xǁBm25Analysisǁof 3 (a share
    of exactly ``ENGLISH_SHARE`` read as not English)."""
    assert retrieve.english_share(["le la les", "the of and"]) == 0.5
    # 2,000 documents: every other one is sampled, all of them English
    assert retrieve.english_share(["the of and", "le la les"] * 1000) == 1.0
    assert retrieve.english_share(["the " + "x " * 19]) == 0.05 == retrieve.ENGLISH_SHARE
    assert retrieve.Bm25Analysis.of(["the " + "x " * 19]).english


def test_a_possessive_with_a_curly_apostrophe_is_dropped():
    """Kills xǁBm25Analysisǁterms 12, 13 (the right single quotation mark's "’s" kept)."""
    assert retrieve.Bm25Analysis(english=True).terms("the king’s crown") == ["king", "crown"]


def test_bm25_search_of_nothing_found_and_of_one_document():
    """Kills x__top 9 to 13 (no document asked for), x_bm25_search 49 (one document: its postings split by 2), 22
    (an empty collection averages no lengths) and 1 (default k 101); a query with no known word scores 0 everywhere."""
    assert retrieve.bm25_search(["apple"], ["apple pear", "pear"], k=0) == ([[]], [[]])
    ranked, scores = retrieve.bm25_search(["zebra"], ["apple pear", "pear"])
    assert ranked == [[0, 1]] and scores == [[0.0, 0.0]]
    ranked, scores = retrieve.bm25_search(["pear"], ["apple pear"])
    assert ranked == [[0]] and scores[0][0] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of empty slice"
        assert retrieve.bm25_search(["apple"], []) == ([[]], [[]])
    docs = [f"word{i} apple" for i in range(150)]
    assert len(retrieve.bm25_search(["apple"], docs)[0][0]) == 100


N_DOCS = 102
# Every query ranks the documents in index order (document j's one coordinate is N_DOCS - j); query i's relevant
# document is i, the last query's is 100 (rank 101). Odd documents are long (a second length bucket).
DOCS = tuple(f"doc {j} " + "x" * (250 if j % 2 else 10) for j in range(N_DOCS))
QUERIES = tuple(f"query {i}" for i in range(30))
ROWS = RetrievalSet(QUERIES, DOCS, (*range(29), 100))
VECTORS = {**{d: [float(N_DOCS - j)] for j, d in enumerate(DOCS)}, **dict.fromkeys(QUERIES, [1.0])}


def test_rank_and_bm25_ranking_keep_the_top_100_by_default_and_round_their_times(monkeypatch):
    """Kills x_rank 1, x_bm25_ranking 1 (default k 101), x_rank 21 to 25 and 29 to 33 (the times' rounding and
    differences)."""
    clock = iter([1.0, 1.1234567, 1.5])
    monkeypatch.setattr(retrieve, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    ranked, timing = retrieve.rank(lookup(VECTORS), ROWS)
    assert [len(r) for r in ranked] == [100] * len(QUERIES) and ranked[0] == list(range(100))
    assert timing == {"embed_s": 0.123, "search_s": 0.3765}
    assert all(type(t) is float for t in timing.values())
    assert [len(r) for r in retrieve.bm25_ranking(ROWS)] == [100] * len(QUERIES)


def test_evaluate_retrieval_reads_the_top_k_and_seeds_its_random_ranking():
    """Kills x_evaluate_retrieval 1 to 4, 11, 18, 20 to 22 (k, name, seed and the random ranking's arguments), 41,
    42 (the length buckets' key), 53, 54, 59, 60 (the random ranking's name and expectation)."""
    record = retrieve.evaluate_retrieval(lookup(VECTORS), ROWS)
    assert record.embedder == "embedder"
    assert record.per_query.mrr == pytest.approx([1 / (i + 1) for i in range(29)] + [0.0])  # rank 101: not kept
    relevant = [{d} for d in ROWS.relevant]
    lengths = [len(DOCS[d]) for d in ROWS.relevant]
    assert record.by_passage_chars == {
        label: retrieve.LengthBucket.from_json(bucket)
        for label, bucket in retrieve.bucketed(lengths, record.per_query.to_json(), retrieve.LENGTH_EDGES).items()
    }
    assert set(record.by_passage_chars) == {"0-199", "200-399"}
    assert record.baseline.name == "random ranking"
    assert record.baseline.expected == retrieve.ExpectedRandom(10 / N_DOCS, retrieve.expected_random(N_DOCS)["ndcg@10"])
    for k, seed in ((100, 0), (10, 3)):
        kwargs = {"k": k, "seed": seed} if seed else {}  # seed 0: the defaults, k 100 and seed 0
        record = retrieve.evaluate_retrieval(lookup(VECTORS), ROWS, **kwargs)
        baseline = retrieve.ranking_metrics(retrieve.random_ranking(len(QUERIES), N_DOCS, k, seed), relevant)
        other = retrieve.ranking_metrics(retrieve.random_ranking(len(QUERIES), N_DOCS, k, 3 - seed), relevant)
        assert baseline != other  # so a baseline drawn at the other seed, or of other documents, would show
        assert {name: v for name, v in record.baseline.to_json().items() if name in baseline} == baseline
    assert record.per_query.mrr[:11] == pytest.approx([1 / rank for rank in range(1, 11)] + [0])  # k 10


GRADED_DOCS = tuple(f"d{j}" for j in range(20))
GRADED = GradedRetrievalSet(
    query_ids=("d0", "q1", "q2"),  # the first query's id is the first document's, which every query ranks first
    queries=("one", "two", "three"),
    doc_ids=GRADED_DOCS,
    docs=GRADED_DOCS,
    qrels=({5: 1}, {1: 2, 3: 1}, {12: 1}),
    without_relevant=2,
)
GRADED_VECTORS = {**{d: [100.0 - j] for j, d in enumerate(GRADED_DOCS)}, **dict.fromkeys(GRADED.queries, [1.0])}


def test_evaluate_graded_retrieval_reads_one_more_when_it_drops_the_querys_own_id():
    """Kills x_evaluate_graded_retrieval 2, 3, 5, 12 to 15, 36, 38 to 40, 48 to 51, 58, 59, 69, 70."""
    embedder = lookup(GRADED_VECTORS)
    record = retrieve.evaluate_graded_retrieval(embedder, GRADED)
    assert record.embedder == "embedder" and record.queries_without_relevant == 2
    assert record.ignore_identical_ids is False and record.per_query.query_id == ["d0", "q1", "q2"]
    assert record.baseline.name == "random ranking"
    # k 5: the first query's relevant document (rank 6) is not kept, and is once its own id (rank 1) is dropped
    assert retrieve.evaluate_graded_retrieval(embedder, GRADED, k=5).per_query.recall_at_100 == [0.0, 1.0, 0.0]
    dropped = retrieve.evaluate_graded_retrieval(embedder, GRADED, k=5, ignore_identical_ids=True)
    assert dropped.ignore_identical_ids is True
    assert dropped.per_query.recall_at_100 == [1.0, 1.0, 0.0] and dropped.per_query.mrr_at_10[0] == 0.2
    for k, seed in ((100, None), (10, 3)):
        if seed is None:
            record = retrieve.evaluate_graded_retrieval(embedder, GRADED)
        else:
            record = retrieve.evaluate_graded_retrieval(embedder, GRADED, k=k, seed=seed)
        baseline = retrieve.benchmark_metrics(retrieve.random_ranking(3, 20, k, seed or 0), GRADED.qrels)
        other = retrieve.benchmark_metrics(retrieve.random_ranking(3, 20, k, (seed or 0) + 1), GRADED.qrels)
        assert baseline != other
        assert record.baseline.to_json() == {"name": "random ranking", **baseline}


def test_with_bm25_analyses_the_cut_documents_as_the_whole_ones_pick():
    """Kills x_with_bm25 6, 9 (the cut documents analysed as they alone pick: not English, so "running" misses
    "runs") and 13 (the whole documents ranked in place of the cut ones)."""
    docs = (
        "alpha the of and that with this from",
        "runs the of and that with this from",
        "beta gamma the of and that with runs",
    )
    rows = RetrievalSet(("running", "running"), docs, (1, 2))
    record = retrieve.with_bm25(
        retrieve.evaluate_retrieval(lookup(dict.fromkeys((*docs, "running"), [1.0])), rows), rows, [5, 4, 10]
    )
    assert record.classic.mrr == [1.0, pytest.approx(1 / 3)]  # the cut third document has no "runs"
    assert record.classic_whole.mrr == [1.0, 0.5]


def test_with_bm25_ranks_101_documents():
    """Kills x_with_bm25 8 (100 ranked: rank 101 missed) and 14 (102 ranked: rank 102 counted)."""
    docs = ("apple apple",) * 100 + ("apple pear", "pear pear")
    rows = RetrievalSet(("apple", "apple"), docs, (100, 101))
    embedder = lookup({**dict.fromkeys(docs, [1.0]), "apple": [1.0]})
    record = retrieve.with_bm25(retrieve.evaluate_retrieval(embedder, rows), rows, [len(d) for d in docs])
    assert record.classic_whole.mrr == [pytest.approx(1 / 101), 0.0]


def test_with_bm25_on_graded_judgements_drops_the_querys_own_id_as_the_embedder_did():
    """Kills x_with_bm25 15 to 20 (the query's own document kept alone, or the rankings lost)."""
    data = GradedRetrievalSet(
        ("d0",), ("apple pie",), ("d0", "d1", "d2"), ("apple pie", "apple tart", "pear"), ({1: 1},)
    )
    embedder = lookup(dict.fromkeys(("apple pie", "apple tart", "pear"), [1.0]))
    read = [len(d) for d in data.docs]
    record = retrieve.with_bm25(
        retrieve.evaluate_graded_retrieval(embedder, data, ignore_identical_ids=True), data, read
    )
    assert record.classic_whole.ndcg_at_10 == [1.0]  # its own document, first, dropped
    record = retrieve.with_bm25(retrieve.evaluate_graded_retrieval(embedder, data), data, read)
    assert record.classic_whole.ndcg_at_10 == [pytest.approx(1 / math.log2(3))]


# ---- claims -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRow(Row):
    """A row whose stored measure holds its ``Scored`` fields as they are."""

    def scored(self, stored: dict) -> Scored:
        fields = ("scores", "baseline", "classic", "classic_whole", "read")
        return Scored(*(stored.get(name) for name in fields))


def spread(mean: float, n: int = 40, seed: int = 0) -> list[list[float]]:
    """One seed of ``n`` per-item scores around ``mean`` (within 0.05 of it)."""
    rng = random.Random(seed)
    return [[mean + rng.uniform(-0.05, 0.05) for _ in range(n)]]


def test_share_read_says_the_mean_and_90th_percentile_read():
    """Kills x_share_read 8, 10, 11 (the 90th percentile's index) and 22 (a mean under 2 characters given)."""
    assert share_read((list(range(1, 21)), [40] * 20)) == (
        "10 of 40 characters a text on average (26%); 90th percentile 19 of 40"
    )
    assert share_read(([10, 20], [30, 40])) == "15 of 35 characters a text on average (43%); 90th percentile 20 of 40"
    assert share_read(([1], [1])) == "1 of 1 characters a text on average (100%); 90th percentile 1 of 1"


def test_items_to_separate_scales_with_the_squared_ratio_of_half_width_to_gap():
    """Kills x_items_to_separate 2, 4, 12, 14, 16, 18 (the formula) and 5, 7, 8 (no gap, or no width: None)."""
    # 100 * (2.8016 * 0.1 / 1.96 / 0.1) ** 2 = 204.3
    assert items_to_separate(Interval(0.1, 0.0, 0.2), 100) == 205
    assert items_to_separate(Interval(-0.1, -0.2, 0.0), 100) == 205
    assert items_to_separate(Interval(0.0, -0.1, 0.1), 100) is None
    assert items_to_separate(Interval(0.1, 0.1, 0.1), 100) is None


def said(what: str, predicted, other, tail: str) -> str:
    """``judge_part``'s sentence: the two intervals, the paired difference, then ``tail``."""
    gap = paired_difference(predicted, other)
    return f"{what}: {interval(predicted).text()} vs {interval(other).text()}, paired difference {gap.text()}{tail}"


def test_judge_part_says_which_side_clears_its_baseline():
    """Kills x_judge_part 52, 53, 56, 57, 59, 61 to 67 (the sentence's parts and when each is said)."""
    high, low = spread(0.9), spread(0.5, seed=1)
    cases = {  # (predicted's baseline, other's) -> the verdict's sentence after the paired difference
        (0.1, 0.1): " (held)",
        (0.1, 0.95): " (held)",  # the other at chance: not said
        (0.95, 0.95): "; neither clears its trivial baseline (inconclusive)",
        (0.95, 0.1): "; the predicted winner does not clear its trivial baseline (inconclusive)",
    }
    for baselines, tail in cases.items():
        outcome, sentence = judge_part(Part("tag: accuracy", high, low, True, baselines))
        assert sentence == said("tag: accuracy", high, low, tail)
        assert outcome == tail.split("(")[-1].rstrip(")")


def test_judge_part_on_a_loss_reads_lower_as_better_for_both_baselines():
    """Kills x_judge_part 33 (the other side's baseline read higher-is-better: a falsified loss inconclusive)."""
    predicted, other = spread(2.0), spread(1.0, seed=1)
    assert judge_part(Part("loss", predicted, other, False, (3.0, 3.0)))[0] == "falsified"


def test_judge_part_says_what_an_undecided_difference_would_need():
    """Kills x_judge_part 77 (the items needed said in place of the sentence) and 81, 82 (no difference at all)."""
    a = spread(0.5)
    b = [[x + 0.005 + (0.2 if i % 2 else -0.2) for i, x in enumerate(a[0])]]  # 0.005 ahead, within noise
    gap = paired_difference(a, b)
    needed = items_to_separate(gap, 40)
    tail = f"; a difference of this size would need about {needed:,} test items to separate (has 40) (inconclusive)"
    assert judge_part(Part("tag", a, b, True, None)) == ("inconclusive", said("tag", a, b, tail))
    tail = "; no difference to separate (inconclusive)"
    assert judge_part(Part("tag", a, a, True, None)) == ("inconclusive", said("tag", a, a, tail))


def test_judge_part_of_different_items_states_no_paired_difference():
    """Kills x_judge_part 52 (a paired difference asked of sides that score different items)."""
    a, b = spread(0.9), spread(0.1, n=45)
    assert judge_part(Part("tag", a, b, True, None)) == (
        "held",
        f"tag: {interval(a).text()} vs {interval(b).text()} (held)",
    )


def test_a_claim_without_tasks_and_a_falsified_one_say_so():
    """Kills x_claim_verdict 2 (the not-measured line), x_judge 1, 2 (the default name of the other side) and 12
    (a task named by its label up to the colon)."""
    assert claim_verdict([], "decoder") == ("not measured", "not measured: no task of this job was given")
    verdict, lines = judge([Part("tag: accuracy", spread(0.1), spread(0.9, seed=1), True, None)])
    assert (verdict, lines[0]) == ("falsified", "falsified: falsified on tag (the other family ahead)")


def test_held_out_rows_read_their_blocks_and_blanks():
    """Kills every mutant of xǁNextTokenRowǁscored, xǁFillRowǁscored and xǁCompareRowǁscored (no unit test read
    them): the run's measure "lm", its blocks, the unigram's, each blank's 0/1 and the baseline's."""
    next_token, fill = HELD_OUT_ROWS
    lm = {"nats_blocks": [1.5, 1.25], "unigram_blocks": [3.0, 2.5], "blank_filling": {"correct": [1, 0]}}
    lm["blank_filling"]["baseline"] = {"correct": [0, 0]}
    assert next_token.scored({"lm": lm}) == Scored(Items([1.5, 1.25]), Items([3.0, 2.5]))
    assert next_token.scored({"lm": {"unigram_blocks": [3.0]}}) == Scored(None, Items([3.0]))
    assert fill.scored({"lm": lm}) == Scored(Items([1, 0]), Items([0, 0]))
    own = CompareRow("fill", "fill", fill.row, None)  # no measure named: its key
    assert own.scored({"fill": lm}) == Scored(Items([1, 0]), Items([0, 0]))


def test_gather_keeps_the_columns_measured_on_every_seed_with_their_baselines():
    """Kills every mutant of x_gather (no unit test read it): a column without the row, or not measured on a seed,
    left out (the next still read); a constant baseline averaged over seeds, a per-item one kept per seed."""
    row = CompareRow("tag", "tag", StoredRow("tag", True, "majority"), ENCODER_JOBS)
    measured = {
        seed: {
            "encoder-decoder": {},  # cannot take the row
            "decoder": {"tag": {"scores": None if seed else Items([0.5]), "baseline": 0.2}},  # seed 1 not measured
            "encoder": {"tag": {"scores": Items([0.8 + seed]), "baseline": 0.2 + 0.2 * seed}},
            "hybrid": {"tag": {"scores": Items([0.6]), "baseline": Items([0.1 * seed])}},
        }
        for seed in (0, 1)
    }
    scores, baselines = gather(measured, row)
    assert scores == {"encoder": [Items([0.8]), Items([1.8])], "hybrid": [Items([0.6])] * 2}
    assert baselines == {"encoder": pytest.approx(0.3), "hybrid": [Items([0.0]), Items([0.1])]}


def test_gather_classic_keeps_each_columns_classic_scores_and_the_first_characters_read():
    """Kills every mutant of x_gather_classic (no unit test read it): no classic name, no classic; each column's
    scores on the characters read and on whole texts where every seed has them; the first column's first read."""
    plain = CompareRow("tag", "tag", StoredRow("tag", True, "majority"), ENCODER_JOBS)
    assert gather_classic({0: {"encoder": {"tag": {}}}}, plain) is None
    row = CompareRow("tag", "tag", StoredRow("tag", True, "majority", "BM25"), ENCODER_JOBS)
    assert gather_classic({0: {"encoder": {}}}, row) == Classic("BM25", {}, {}, None)  # no column takes the row
    read = ([3, 4], [5, 6])
    measured = {
        0: {
            "encoder-decoder": {},  # cannot take the row
            "encoder": {"tag": {"classic": Items([0.4]), "classic_whole": Items([0.5]), "read": read}},
            "decoder": {"tag": {"classic": Items([0.3]), "read": ([1], [2])}},  # no whole-text scores
        }
    }
    assert gather_classic(measured, row) == Classic(
        "BM25", {"encoder": [Items([0.4])], "decoder": [Items([0.3])]}, {"encoder": [Items([0.5])]}, read
    )
    measured[1] = {"encoder": {"tag": {"classic": None, "classic_whole": Items([0.5])}}, "decoder": {}}
    assert gather_classic(measured, row) == Classic("BM25", {}, {"encoder": [Items([0.5])] * 2}, read)


def test_ttft_milliseconds_per_bucket_column_and_seed():
    """Kills every mutant of x_ttft_milliseconds (no unit test read it): seconds to milliseconds, per bucket (in
    order), column and seed; none timed, or no buckets, none."""
    ttft = {
        seed: {
            "buckets": [
                {"name": "short", "seconds": {"decoder": [0.001 * (1 + seed)], "encoder-decoder": [0.002]}},
                {"name": "long", "seconds": {"decoder": [0.004, 0.008]}},
            ]
        }
        for seed in (0, 1)
    }
    assert ttft_milliseconds(ttft) == {
        "short": {"decoder": [[1.0], [2.0]], "encoder-decoder": [[2.0], [2.0]]},
        "long": {"decoder": [[4.0, 8.0], [4.0, 8.0]]},
    }
    assert ttft_milliseconds({}) == {} and ttft_milliseconds({0: {}}) == {}


def test_the_classic_reference_column_is_the_first_contender_measured():
    """Kills every mutant of xǁClassicǁreference (no unit test read it)."""
    classic = Classic("BM25", {"decoder": [[0.1]], "encoder": [[0.2]]}, {})
    assert classic.reference(("encoder-decoder", "encoder", "decoder")) == "encoder"
    assert classic.reference(("encoder-decoder",)) == "decoder"  # none of them: the first measured
    assert Classic("BM25", {}, {}).reference(("encoder",)) is None


TAG = CompareRow("tag", "tag", StoredRow("tag accuracy", True, "majority label", "BM25"), ENCODER_JOBS)
LOSS = CompareRow("loss", "next_token", StoredRow("held-out loss", False, "unigram", "BM25"), GENERATE)


def against(row: CompareRow, scores: dict, classic: Classic, baselines: dict | None = None) -> str | None:
    """``Evidence.against_classic`` of ``row`` with these scores and classic method (and baselines)."""
    e = Evidence((row,), {row.key: (scores, baselines or {})}, {}, classic={row.key: classic})
    return e.against_classic(row)


def test_against_classic_names_who_clears_it_and_what_it_scores():
    """Kills xǁEvidenceǁagainst_classic 1 to 69: every sentence it says, in full."""
    read = ([5, 5], [10, 10])
    high, mid, low = spread(0.9), spread(0.5, seed=1), spread(0.1, seed=2)
    reads = f"; they read {share_read(read)}"
    assert against(TAG, {}, Classic("majority label", {}, {}, read)) == (
        "tag accuracy: its trivial baseline, majority label, is the classic method a practitioner would try first"
        + reads
    )
    assert (
        against(TAG, {}, Classic("BM25", {}, {})) == "tag accuracy: the classic method (BM25) is its trivial baseline"
    )
    assert against(TAG, {"encoder": high}, Classic("BM25", {"hybrid": mid}, {})) is None  # no column has both
    assert Evidence((TAG,), {"tag": ({}, {})}, {}).against_classic(TAG) is None  # no classic method
    whole = interval(spread(0.6, seed=3)).text()
    same = f"{interval(mid).text()} on the characters the families read"
    scores = {"encoder": high, "decoder": low, "encoder-decoder": high}
    classic = Classic("BM25", {"encoder": mid, "decoder": mid}, {"encoder": spread(0.6, seed=3)}, read)
    assert against(TAG, scores, classic, {"encoder": low}) == (
        f"tag accuracy: encoder clears BM25 (paired) ({same}, {whole} on whole texts{reads})"
    )
    every = dict.fromkeys(("encoder", "decoder", "encoder-decoder"), mid)
    assert against(TAG, dict.fromkeys(every, high), Classic("BM25", every, {})) == (
        f"tag accuracy: encoder, decoder and encoder-decoder clear BM25 (paired) "
        f"({same}; nothing is cut: they read every word)"
    )
    two = {"decoder": mid, "encoder-decoder": mid}
    assert against(TAG, {"encoder": low, "decoder": high, "encoder-decoder": high}, Classic("BM25", two, {})) == (
        f"tag accuracy: decoder and encoder-decoder clear BM25 (paired) ({same}; nothing is cut: they read every word)"
    )
    assert against(TAG, {"encoder": low, "decoder": low}, Classic("BM25", two | {"encoder": mid}, {})) == (
        "tag accuracy: no family reaches BM25: at this budget the answer is the classic method "
        f"({same}; nothing is cut: they read every word)"
    )
    assert against(TAG, {"encoder": low, "decoder": mid}, Classic("BM25", two | {"encoder": mid}, {})) == (
        f"tag accuracy: no family separates from BM25, and none clears it ({same}; nothing is cut: "
        "they read every word)"
    )
    # lower is better: the encoder's loss under BM25's clears it
    assert against(LOSS, {"encoder": low}, Classic("BM25", {"encoder": mid}, {})) == (
        f"held-out loss: encoder clears BM25 (paired) ({same}; nothing is cut: they read every word)"
    )
    assert against(LOSS, {"encoder": high}, Classic("BM25", {"encoder": mid}, {})).startswith(
        "held-out loss: no family reaches BM25"
    )


def test_parts_pair_the_claims_families_with_their_baselines_and_first_token_times():
    """Kills xǁEvidenceǁparts 19, 20, 25, 26 (the part's baselines and too-few reason), 42, 51 (the first-token
    part: lower is better, one repeat enough) and x_judge_claim 12 (only the claim's own rows set beside it)."""
    tag = replace(TAG, too_few="one label only")
    seq = CompareRow("seq", "seq2seq", StoredRow("summary rouge", True, "lead", "BM25"), READ_THEN_WRITE)
    scores = {"encoder": spread(0.9), "decoder": spread(0.5, seed=1), "encoder-decoder": spread(0.7, seed=2)}
    baselines = {"encoder": 0.1, "decoder": 0.2, "encoder-decoder": 0.3}
    times = {"decoder": [[5.0, 6.0]], "encoder-decoder": [[2.0, 3.0]]}
    classic = Classic("BM25", {"encoder": spread(0.2, seed=4)}, {})
    e = Evidence(
        (tag, seq), {"tag": (scores, baselines), "seq": (scores, baselines)}, {"long": times}, classic={"tag": classic}
    )
    assert e.parts(ENCODER_JOBS) == [
        Part("tag accuracy", scores["encoder"], scores["decoder"], True, (0.1, 0.2), "one label only")
    ]
    assert e.parts(READ_THEN_WRITE) == [
        Part("summary rouge", scores["encoder-decoder"], scores["decoder"], True, (0.3, 0.2)),
        Part("time to first token (ms), long", times["encoder-decoder"], times["decoder"], False, None, None, 1),
    ]
    assert [line for line in judge_claim(ENCODER_JOBS, e)[1] if "classic" in line] == [
        f"against the classic method: {e.against_classic(tag)}"
    ]
    assert not [line for line in judge_claim(READ_THEN_WRITE, e)[1] if "classic" in line]


def test_unmeasured_names_every_family_missing_or_unable():
    """Kills xǁEvidenceǁunmeasured 9, 10, 18 to 21: two families missing, two unable, or each able on some row but
    never both on one ("a side")."""
    scores = {"gpt": spread(0.5)}
    e = Evidence((TAG,), {"tag": (scores, {})}, {}, judged={"hybrid": "x"})
    assert e.unmeasured(ENCODER_JOBS) == "not measured: no encoder and no decoder model was given"
    e = Evidence((TAG,), {"tag": (scores, {})}, {}, judged={"encoder": "minilm", "decoder": "bert"})
    assert e.unmeasured(ENCODER_JOBS) == (
        "not measured: the encoder (minilm) and the decoder (bert) cannot take its rows (its cells say why)"
    )
    other = replace(TAG, key="other")
    e = Evidence((TAG, other), {"tag": ({"encoder": scores["gpt"]}, {}), "other": ({"decoder": scores["gpt"]}, {})}, {})
    assert e.unmeasured(ENCODER_JOBS) == "not measured: a side cannot take its rows (its cells say why)"


class FakeKind:
    """A task kind with two rows a task and two variants, each row named by the task and config it was read at."""

    claim = ENCODER_JOBS
    variants = {"first": {}, "mean": {}}

    def user_rows(self, task: UserTask, cfg: str) -> tuple[StoredRow, ...]:
        return tuple(StoredRow(f"{task.spec.name} at {cfg}, row {i}", True, "majority") for i in range(2))


def test_rows_of_users_tasks_judge_each_first_row_and_report_the_rest(monkeypatch):
    """Kills x_rows_of 20, 23, 25, 27, 28, 32 to 43, 45 to 65 and x_task_row 1, 7, 8, 13, 14: each task's first row
    judged under its kind's claim (its too-few reason kept), its other rows and its variants' first rows reported,
    each read from its own measure."""
    monkeypatch.setitem(TASKS, "fake", FakeKind())
    tasks = [
        UserTask(TaskSpec("genre", "fake", "genre.jsonl"), None, None, 10, 40, too_few="one label"),
        UserTask(TaskSpec("mood", "fake", "mood.jsonl"), None, None, 10, 40),
    ]
    configs = {f"{t}{v}": f"{t}{v} config" for t in ("genre", "mood") for v in ("", ".first", ".mean")}

    def row(task: str, config: str, i: int = 0) -> StoredRow:
        return StoredRow(f"{task} at {config} config, row {i}", True, "majority")

    expected = []
    for name, too_few in (("genre", "one label"), ("mood", None)):
        expected += [
            CompareRow(name, "fake", row(name, name), ENCODER_JOBS, name, too_few),
            CompareRow(f"{name}/0", "fake", row(name, name, 1), None, name),
            *[
                CompareRow(f"{name}.{v}", "fake", row(name, f"{name}.{v}"), None, f"{name}.{v}")
                for v in FakeKind.variants
            ],
        ]
    assert rows_of(tasks, configs) == HELD_OUT_ROWS + tuple(expected)
    judged = row("genre", "genre")
    assert task_row("genre", "fake", judged) == CompareRow("genre", "fake", judged, ENCODER_JOBS, "genre")
    assert task_row("genre", "fake", judged, too_few="one label") == expected[0]
