"""Task metrics on cases small enough to compute by hand."""

import itertools
import math

import pytest
import torch

from maskwise.tasks.metrics import (
    accuracy,
    bucket_label,
    bucketed,
    exact_match,
    latency_ms,
    macro_f1,
    majority_label,
    mrr,
    ndcg_at_k,
    paired_bootstrap,
    percentile,
    recall_at_k,
    set_f1,
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
