"""The verdict along compute on synthetic curves: the slope's reading, a claim's trend and crossing the classic line."""

import json
import math
import random
from dataclasses import replace
from functools import cache

import pytest

from maskwise.experiments.intervals import Interval
from maskwise.experiments.trend import (
    FLAT,
    GROWS,
    GROWS_ON_SOME,
    POWER,
    SHRINKS,
    SHRINKS_ON_SOME,
    UNDETERMINED,
    Curve,
    Trend,
    claim_trend,
    crossing,
    reading,
    to_decide,
    trend,
)
from maskwise.experiments.verdict import MIXED, NOT_MEASURED
from maskwise.tasks.items import Items

pytestmark = pytest.mark.unit

N = 2000
COMPUTE = (1.0, 2.0, 4.0, 8.0)
R = 200  # replicates: enough for the readings here, fast


@cache
def difficulty(n: int) -> tuple[float, ...]:
    """Each test item's difficulty, shared by every run: an item one model gets right, the next tends to as well."""
    rng = random.Random(12345)
    return tuple(rng.random() for _ in range(n))


def correct(p: float, seed: int, n: int = N) -> Items:
    """0/1 correctness at accuracy about ``p``: item i right when its difficulty plus this run's jitter is below p."""
    rng = random.Random(seed)
    return Items([int(u + rng.uniform(-0.05, 0.05) < p) for u in difficulty(n)])


def coin(p: float, seed: int, n: int) -> list[int]:
    """0/1 correctness at accuracy about ``p``, independent of every other run."""
    rng = random.Random(seed)
    return [int(rng.random() < p) for _ in range(n)]


def curve(predicted: list[float], rival: list[float], compute=COMPUTE, **kwargs) -> Curve:
    """A one-seed curve of correlated 0/1 correctness at the given accuracies per point."""
    return Curve(
        kwargs.pop("task", "task"),
        compute,
        [[correct(p, seed=k)] for k, p in enumerate(predicted)],
        [[correct(p, seed=100 + k)] for k, p in enumerate(rival)],
        **kwargs,
    )


@cache
def readings() -> dict[str, Trend]:
    """One trend of each reading, from curves built to read that way."""
    return {
        GROWS: trend(curve([0.70, 0.74, 0.78, 0.82], [0.70] * 4), resamples=R),
        SHRINKS: trend(curve([0.70] * 4, [0.70, 0.74, 0.78, 0.82]), resamples=R),
        FLAT: trend(curve([0.75] * 4, [0.75] * 4), resamples=R),
        UNDETERMINED: trend(small_curve(), resamples=R),
    }


def small_curve() -> Curve:
    """150 independent items per run, the lead growing by 0.02 per doubling: too few to read."""
    return Curve(
        "small",
        (1.0, 2.0, 4.0),
        [[Items(coin(p, k, 150))] for k, p in enumerate([0.70, 0.72, 0.74])],
        [[Items(coin(0.70, 10 + k, 150))] for k in range(3)],
    )


# ---- one task's reading -------------------------------------------------------------------------


def test_a_lead_that_widens_grows_and_one_that_narrows_shrinks():
    grows, shrinks = readings()[GROWS], readings()[SHRINKS]
    assert grows.reading == GROWS and shrinks.reading == SHRINKS
    assert grows.slope.low > 0 and abs(grows.slope.mean - 0.04) < 0.01
    assert shrinks.slope.high < 0 and abs(shrinks.slope.mean + 0.04) < 0.01
    assert [round(g.mean, 2) for g in grows.gaps] == pytest.approx([0.0, 0.04, 0.08, 0.12], abs=0.011)
    assert grows.text().startswith("task: grows: the predicted family's lead over the rival changes by 0.0")
    assert "over 4 points from 1 to 8, 1 seed: over test items only" in grows.text()


def test_equal_families_at_every_point_read_flat():
    """Flat only because one draw of items serves every point: drawn apart per point, the same curve's interval
    spreads past ±0.01 (about [-0.014, 0.010]) and would read undetermined."""
    flat = readings()[FLAT]
    assert flat.reading == FLAT
    assert -0.01 <= flat.slope.low < 0 < flat.slope.high <= 0.01
    assert flat.text().startswith("task: flat (within ±0.010 per doubling): the predicted family's lead")
    assert flat.needed is None


def test_few_items_read_undetermined_and_say_how_many_would_decide():
    small = readings()[UNDETERMINED]
    assert small.reading == UNDETERMINED
    assert small.slope.low < -0.01 and small.slope.high > 0.01
    assert small.items == 150 and small.needed is not None and small.needed > 150
    assert f"would need about {small.needed:,} test items to" in small.text()
    assert "(has 150)" in small.text() and "over test items only" in small.text()


def test_the_reading_rule_in_order_and_its_band_per_call():
    assert reading(Interval(0.002, 0.001, 0.003)) == GROWS  # wholly above 0 comes first, however small
    assert reading(Interval(-0.02, -0.03, -0.01)) == SHRINKS
    assert reading(Interval(0.0, -0.01, 0.01)) == FLAT
    assert reading(Interval(0.0, -0.02, 0.02)) == UNDETERMINED
    assert reading(Interval(0.0, -0.02, 0.02), delta=0.05) == FLAT
    slope = readings()[UNDETERMINED].slope
    wide = max(-slope.low, slope.high) + 0.001
    assert trend(small_curve(), delta=wide, resamples=R).reading == FLAT


def test_to_decide_takes_the_nearer_of_excluding_zero_and_fitting_the_band():
    # centred on 0: only the band can be reached, at half-width 0.01 / POWER
    assert to_decide(Interval(0.0, -0.02, 0.02), 0.01, 100) == (
        pytest.approx(100 * (POWER * 0.02 / 0.01) ** 2, abs=1),
        "fit within ±0.01 per doubling",
    )
    # a slope of 0.03 is outside the band: only excluding 0 is left
    needed, aim = to_decide(Interval(0.03, -0.01, 0.07), 0.01, 3)
    assert aim == "exclude 0" and needed == pytest.approx(3 * (POWER * 0.04 / 0.03) ** 2, abs=1)
    assert to_decide(Interval(0.0, -0.02, 0.02), 0.0, 3) == (None, "")


def test_the_same_curve_reads_the_same_every_time():
    again = trend(curve([0.70, 0.74, 0.78, 0.82], [0.70] * 4), resamples=R)
    assert again == readings()[GROWS]


def test_balanced_accuracy_is_recomputed_on_every_draw():
    """A rival that always says the majority label has accuracy 0.9 but balanced accuracy 0.5: the gap read is the
    balanced one, at the point and in every replicate, so its interval lies above 0 where plain accuracy's would
    lie below."""
    labels = [0] * 1800 + [1] * 200

    def run(recall_0: float, recall_1: float, seed: int) -> Items:
        rng = random.Random(seed)
        return Items([int(rng.random() < (recall_1 if y else recall_0)) for y in labels], labels=labels)

    predicted = [[run(0.8, r, k)] for k, r in enumerate([0.4, 0.6, 0.8])]
    rival = [[run(1.0, 0.0, 10 + k)] for k in range(3)]
    read = trend(Curve("ba", (1.0, 2.0, 4.0), predicted, rival), resamples=R)
    for gap, p, r in zip(read.gaps, predicted, rival):
        assert gap.mean == pytest.approx(p[0].score() - r[0].score())
        assert gap.mean != pytest.approx(sum(p[0].values) / N - sum(r[0].values) / N, abs=0.05)
        assert 0 < gap.low < gap.mean < gap.high
    assert read.reading == GROWS and abs(read.slope.mean - 0.1) < 0.04  # recall of 1 rises 0.2, half of it

    # every draw within [-1, 1], where a draw that misses the rare label swings the gap from 0.05 to about -0.9
    rare = [0] * 38 + [1] * 2
    few = [[Items([1] * 4 + [0] * 34 + [1] * 2, labels=rare)] for _ in range(3)]  # recalls 4/38 and 1
    majority = [[Items([1] * 38 + [0] * 2, labels=rare)] for _ in range(3)]  # recalls 1 and 0
    extreme = trend(Curve("rare", (1.0, 2.0, 4.0), few, majority), resamples=R)
    for gap in extreme.gaps:
        assert gap.mean == pytest.approx((4 / 38 + 1) / 2 - 0.5)
        assert -1 <= gap.low < -0.5 and gap.mean <= gap.high <= 1


def test_grouped_units_are_drawn_whole():
    """400 groups of 5 items that share their correctness: drawn whole, the slope's interval is about sqrt(5) wider
    than if the 2,000 items were independent."""

    def runs(accuracies: list[float], offset: int, grouped: bool) -> list[list[Items]]:
        out = []
        for k, p in enumerate(accuracies):
            values = [v for v in coin(p, offset + k, 400) for _ in range(5)]
            out.append([Items(values, groups=[i // 5 for i in range(N)] if grouped else None)])
        return out

    def read(grouped: bool) -> Trend:
        return trend(
            Curve("g", (1.0, 2.0, 4.0), runs([0.6, 0.7, 0.8], 0, grouped), runs([0.6] * 3, 10, grouped)), resamples=R
        )

    grouped, loose = read(True), read(False)
    assert grouped.slope.mean == pytest.approx(loose.slope.mean)
    width = grouped.slope.high - grouped.slope.low
    assert width > 1.6 * (loose.slope.high - loose.slope.low)
    assert grouped.items == N  # "would need about N test items" counts items, not groups


def test_several_seeds_carry_their_spread_and_count_seeds():
    def seeds(slopes: list[float], offset: int) -> list[list[Items]]:
        return [[correct(0.7 + s * k, seed=offset + 10 * k + j) for j, s in enumerate(slopes)] for k in range(4)]

    rival = [[correct(0.7, seed=500 + 10 * k + j) for j in range(3)] for k in range(4)]
    agree = trend(Curve("agree", COMPUTE, seeds([0.04, 0.04, 0.04], 0), rival), resamples=R)
    assert agree.reading == GROWS and agree.seeds == 3
    assert "3 seeds" in agree.text() and "over test items only" not in agree.text()

    disagree = trend(Curve("disagree", COMPUTE, seeds([0.06, 0.0, -0.04], 0), rival), resamples=R)
    assert disagree.reading == UNDETERMINED
    assert disagree.slope.high - disagree.slope.low > 3 * (agree.slope.high - agree.slope.low)
    assert disagree.needed is not None and disagree.needed > 3
    assert f"would need about {disagree.needed:,} seeds to" in disagree.text() and "(has 3)" in disagree.text()


def test_a_lower_is_better_metric_is_oriented_so_that_positive_means_the_predicted_family_ahead():
    rng = random.Random(7)
    base = [rng.uniform(0.5, 1.5) for _ in range(500)]

    def losses(offset: float, seed: int) -> Items:
        noise = random.Random(seed)
        return Items([b + offset + noise.gauss(0, 0.05) for b in base])

    predicted = [[losses(-0.05 * k, k)] for k in range(4)]
    rival = [[losses(0.0, 10 + k)] for k in range(4)]
    loss = trend(Curve("nats", COMPUTE, predicted, rival, higher_is_better=False), resamples=R)
    assert loss.reading == GROWS and loss.slope.mean == pytest.approx(0.05, abs=0.01)
    assert loss.gaps[-1].mean == pytest.approx(0.15, abs=0.02)
    as_if_higher = trend(Curve("nats", COMPUTE, predicted, rival), resamples=R)
    assert as_if_higher.reading == SHRINKS and as_if_higher.slope.mean == pytest.approx(-loss.slope.mean)


def test_a_curve_must_score_the_same_items_everywhere():
    one = [[correct(0.7, 0)]] * 3
    with pytest.raises(ValueError, match="increasing"):
        Curve("t", (1.0, 1.0, 2.0), one, one)
    with pytest.raises(ValueError, match="increasing"):
        Curve("t", (1.0,), one[:1], one[:1])
    with pytest.raises(ValueError, match="same seeds and test items"):
        Curve("t", (1.0, 2.0, 4.0), one, [*one[:2], [correct(0.7, 0, n=N - 1)]])
    labelled = Items([1, 0, 1, 0], labels=[0, 1, 0, 1])
    relabelled = Items([1, 0, 1, 0], labels=[1, 1, 0, 1])
    with pytest.raises(ValueError, match="same seeds and test items"):
        Curve("t", (1.0, 2.0), [[labelled], [labelled]], [[labelled], [relabelled]])
    with pytest.raises(ValueError, match="2 compute points"):
        Curve("t", (1.0, 2.0), one, one)


def test_results_are_json():
    for read in readings().values():
        assert json.loads(json.dumps(read.to_json(), allow_nan=False))["reading"] == read.reading


# ---- a claim's trend ----------------------------------------------------------------------------


def named(reading_: str, task: str) -> Trend:
    return replace(readings()[reading_], task=task)


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ([(GROWS, "a"), (GROWS, "b")], GROWS),
        ([(SHRINKS, "a"), (SHRINKS, "b")], SHRINKS),
        ([(FLAT, "a"), (FLAT, "b")], FLAT),
        ([(GROWS, "a"), (SHRINKS, "b"), (FLAT, "c")], MIXED),
        ([(GROWS, "a"), (FLAT, "b"), (UNDETERMINED, "c")], GROWS_ON_SOME),
        ([(SHRINKS, "a"), (UNDETERMINED, "b")], SHRINKS_ON_SOME),
        ([(FLAT, "a"), (UNDETERMINED, "b")], UNDETERMINED),
        ([(UNDETERMINED, "a")], UNDETERMINED),
    ],
)
def test_a_claims_trend_by_rule(tasks, expected):
    claimed = claim_trend([named(r, t) for r, t in tasks])
    assert claimed.reading == expected
    for r, t in tasks:
        assert f"{r} on " in claimed.said and t in claimed.said
    assert claimed.text() == f"{expected}: {claimed.said}"
    assert json.loads(json.dumps(claimed.to_json(), allow_nan=False))["reading"] == expected


def test_a_claims_trend_names_tasks_by_reading_and_says_when_none_was_measured():
    claimed = claim_trend([named(GROWS, "tag"), named(FLAT, "order"), named(GROWS, "rerank")])
    assert claimed.said == "grows on tag, rerank; flat on order"
    assert claim_trend([]).reading == NOT_MEASURED


# ---- crossing the classic line ------------------------------------------------------------------


def test_a_curve_that_passes_the_line_inside_the_range_reads_as_a_crossing():
    rising = crossing(curve([0.6, 0.7, 0.8, 0.9], [0.6] * 4, bounded=True), 0.75, resamples=R)
    assert [(c.low, c.high, c.rising, c.separated) for c in rising.crosses] == [(2.0, 4.0, True, True)]
    assert rising.ahead_at_end and rising.forecast is None
    assert "rises past it between 2 and 4 (separated from it at both ends)" in rising.text()
    assert rising.text().endswith("not forecast: already ahead of the line at the largest point")

    close = crossing(curve([0.6, 0.7, 0.8, 0.9], [0.6] * 4, bounded=True), 0.705, resamples=R)
    assert [(c.low, c.high, c.separated) for c in close.crosses] == [(1.0, 2.0, False)]  # 0.71 is not clear of it
    assert "not separated from it at both ends" in close.text()

    falling = crossing(curve([0.6] * 4, [0.9, 0.8, 0.7, 0.6], bounded=True), 0.75, which="rival", resamples=R)
    assert falling.family == "rival" and [(c.low, c.high, c.rising) for c in falling.crosses] == [(2.0, 4.0, False)]


def test_a_curve_that_would_cross_only_past_the_factor_is_not_forecast():
    slow = crossing(curve([0.50, 0.52, 0.54], [0.5] * 3, compute=(1.0, 2.0, 4.0), bounded=True), 0.9, resamples=R)
    assert slow.crosses == () and slow.forecast is None
    assert "stays behind it from 1 to 4" in slow.text()
    assert slow.text().endswith("not forecast: the fitted power law reaches it only beyond 4x the largest point")
    wider = crossing(
        curve([0.50, 0.52, 0.54], [0.5] * 3, compute=(1.0, 2.0, 4.0), bounded=True), 0.9, factor=math.inf, resamples=R
    )
    assert wider.forecast is not None  # the same curve within a wider factor: the factor alone ruled it out


def test_a_curve_that_would_cross_within_the_factor_gets_a_forecast_with_an_interval():
    """The error rate halves with each doubling (about 0.4, 0.2, 0.1 at 1, 2, 4): it reaches 0.04 near compute 10."""
    near = crossing(curve([0.6, 0.8, 0.9], [0.6] * 3, compute=(1.0, 2.0, 4.0), bounded=True), 0.96, resamples=R)
    assert near.forecast is not None and near.not_forecast == ""
    assert near.forecast.mean == pytest.approx(10.0, rel=0.15)
    assert near.forecast.low < near.forecast.mean < near.forecast.high < 4 * 4
    ratio = f"({near.forecast.mean / 4:.1f}x the largest point)"
    assert f"forecast to reach it at {near.forecast.mean:.3g} [{near.forecast.low:.3g}, " in near.text()
    assert near.text().endswith(ratio)
    assert json.loads(json.dumps(near.to_json(), allow_nan=False))["forecast"]["mean"] == near.forecast.mean


@pytest.mark.parametrize(
    ("accuracies", "kwargs", "why"),
    [
        ([0.6, 0.7], {"bounded": True}, "2 points, fewer than the 3"),
        ([0.6, 0.58, 0.55], {"bounded": True}, "the fitted error rate does not fall with compute"),
        ([0.6, 0.7, 0.8], {}, "not stated to lie in [0, 1]"),
        ([0.6, 0.7, 0.8], {"bounded": True, "higher_is_better": False}, "lower-is-better"),
    ],
)
def test_not_forecast_says_why(accuracies, kwargs, why):
    compute = (1.0, 2.0, 4.0)[: len(accuracies)]
    measured = crossing(curve(accuracies, [0.6] * len(accuracies), compute=compute, **kwargs), 0.85, resamples=R)
    assert measured.forecast is None and why in measured.not_forecast
    assert measured.text().endswith(f"not forecast: {measured.not_forecast}")
