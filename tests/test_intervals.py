"""Intervals, "best" cells and the compare verdicts on synthetic per-item numbers."""

import random

import pytest

from maskwise.experiments.claims import judge
from maskwise.experiments.compare_report import too_few_steps, warning_text
from maskwise.experiments.intervals import (
    AT_CHANCE,
    WITHIN_NOISE,
    best_of,
    interval,
    paired_difference,
)
from maskwise.tasks.items import Items

pytestmark = pytest.mark.unit


def coin(p: float, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [int(rng.random() < p) for _ in range(n)]


def test_interval_brackets_the_mean_and_shrinks_with_items():
    small, large = interval([coin(0.3, 100, 0)]), interval([coin(0.3, 2000, 0)])
    for spread in (small, large):
        assert spread.low < spread.mean < spread.high
    assert (large.high - large.low) < (small.high - small.low) / 2
    assert interval([[0.5] * 10]).low == interval([[0.5] * 10]).high == 0.5


def test_interval_over_seeds_carries_the_spread_between_seeds():
    """Three seeds that disagree widely give a wider interval than one seed of the same items."""
    items = 400
    one = interval([coin(0.5, items, 0)])
    disagreeing = interval([coin(0.3, items, 1), coin(0.5, items, 2), coin(0.7, items, 3)])
    assert disagreeing.high - disagreeing.low > 1.5 * (one.high - one.low)


def test_pairing_separates_a_consistent_gain_that_overlapping_intervals_hide():
    rng = random.Random(0)
    base = [rng.random() for _ in range(200)]
    better = [b + 0.02 for b in base]
    assert interval([better]).low < interval([base]).high  # the unpaired intervals overlap
    assert paired_difference([better], [base]).low > 0  # the paired one does not


def test_best_of_everyone_at_chance_names_nobody():
    scores = {f: [coin(0.17, 500, i)] for i, f in enumerate(("encoder", "decoder", "encoder-decoder"))}
    majority = {f: [coin(0.17, 500, 99)] for f in scores}
    assert best_of(scores, majority) == AT_CHANCE


def test_best_of_one_clear_winner_and_a_tie():
    baseline = {f: 0.1 for f in ("a", "b", "c")}
    clear = {"a": [coin(0.6, 500, 1)], "b": [coin(0.3, 500, 2)], "c": [coin(0.3, 500, 3)]}
    assert best_of(clear, baseline) == "a"
    tied = {"a": [coin(0.6, 500, 1)], "b": [coin(0.6, 500, 2)], "c": [coin(0.3, 500, 3)]}
    assert best_of(tied, baseline) == WITHIN_NOISE


def test_best_of_respects_lower_is_better():
    rng = random.Random(0)
    loss = {
        "decoder": [[2.0 + 0.1 * rng.random() for _ in range(30)]],
        "encoder": [[3.0 + 0.1 * rng.random() for _ in range(30)]],
    }
    unigram = {f: [[3.3] * 30] for f in loss}
    assert best_of(loss, unigram, higher_is_better=False) == "decoder"
    assert best_of(loss, unigram, higher_is_better=True) == AT_CHANCE  # read the wrong way, nobody clears it


def test_judge_held_falsified_inconclusive():
    rng = random.Random(0)
    base = [[rng.random() for _ in range(300)]]
    ahead = [[x + 0.05 for x in base[0]]]
    noisy = [[x + rng.gauss(0, 0.3) for x in base[0]]]
    assert judge([("a", ahead, base, True, None)])[0] == "held"
    assert judge([("a", base, ahead, True, None)])[0] == "falsified"
    assert judge([("a", noisy, base, True, None)])[0] == "inconclusive"
    # every part must hold; an undecided part leaves the claim inconclusive, a reversed one makes it mixed
    assert judge([("a", ahead, base, True, None), ("b", noisy, base, True, None)])[0] == "inconclusive"
    assert judge([("a", ahead, base, True, None), ("b", base, ahead, True, None)])[0] == "mixed"
    assert judge([("a", base, ahead, True, None), ("b", noisy, base, True, None)])[0] == "falsified"
    # lower is better: the smaller loss wins
    assert judge([("loss", base, ahead, False, None)])[0] == "held"
    # winning while below one's trivial baseline decides nothing
    chance = (2.0, 2.0)  # a baseline neither side reaches
    verdict, details = judge([("a", ahead, base, True, chance)])
    assert verdict == "inconclusive" and "neither clears" in details[1]


def test_too_few_steps_warns_with_the_numbers_and_the_cause():
    pre = {"encoder-seed0": {"curve": [{"step": 12}]}, "decoder-seed0": {"curve": [{"step": 400}]}}
    short = too_few_steps(pre, 300)
    assert short == ["encoder-seed0: 12 steps"]
    text = warning_text(short, 300, None, load_at_start=3.5, cores=2)
    assert "300" in text and "12 steps" in text and "load average 3.5" in text


def test_items_with_labels_score_the_mean_of_per_label_recalls_and_stay_in_range_on_every_resample():
    # 10 rare items (3 right) and 90 common ones (all right): balanced accuracy (0.3 + 1.0) / 2, accuracy 0.93
    correct, labels = [1] * 3 + [0] * 7 + [1] * 90, [0] * 10 + [1] * 90
    items = Items(correct, labels=labels)
    assert items.score() == pytest.approx(0.65) and Items(correct).score() == pytest.approx(0.93)
    spread = interval([items])
    assert 0.0 <= spread.low <= spread.mean <= spread.high <= 1.0 and spread.mean == pytest.approx(0.65)


def test_grouped_items_are_redrawn_whole_and_counted_as_groups():
    # 5 sentences of 4 windows each: one window of each sentence right; pooled, every redraw scores 0.25
    values = [1.0, 0.0, 0.0, 0.0] * 5
    grouped = Items(values, groups=[i // 4 for i in range(20)])
    assert len(grouped) == 5 and len(Items(values)) == 20
    same = interval([grouped])
    assert same.low == same.high == pytest.approx(0.25)  # windows drawn alone would spread around 0.25
    assert interval([Items(values)]).high > 0.25
    with pytest.raises(ValueError, match="3 groups for 20 items"):
        Items(values, groups=[0, 1, 2])


def test_plain_lists_and_ungrouped_items_give_the_same_interval():
    scores = [[0.1, 0.9, 0.4, 0.7, 0.3], [0.2, 0.8, 0.5, 0.6, 0.4]]
    assert interval(scores) == interval([Items(s) for s in scores])


def test_a_labelled_resample_recomputes_sklearn_balanced_accuracy_on_the_same_indices():
    from sklearn.metrics import balanced_accuracy_score

    rng = random.Random(3)
    gold = [rng.choice("aaaaaaaabbc") for _ in range(200)]  # imbalanced: about 73% a, 18% b, 9% c
    predicted = [g if rng.random() < 0.7 else rng.choice("abc") for g in gold]
    index = {label: i for i, label in enumerate("abc")}
    items = Items([int(p == g) for p, g in zip(predicted, gold)], labels=[index[g] for g in gold])
    units = items.units()
    for _ in range(20):
        drawn = [rng.randrange(len(gold)) for _ in gold]
        expected = balanced_accuracy_score([gold[i] for i in drawn], [predicted[i] for i in drawn])
        assert float(items.metric(units[drawn])) == pytest.approx(expected)
