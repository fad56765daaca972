"""Paired per-seed comparisons and the seed count that would resolve a tie (synthetic numbers)."""

import pytest

from maskwise.experiments.verdict import compare, seeds_to_resolve

pytestmark = pytest.mark.unit


def test_a_consistent_paired_gain_wins_even_when_the_seeds_spread_widely():
    base = [0.20, 0.30, 0.40]  # seeds differ a lot; the arm is better by ~0.02 on every one
    better = [0.22, 0.32, 0.415]
    c = compare(better, base)
    assert c.winner == "a" and c.low > 0 and c.seeds_needed is None
    assert compare(base, better).winner == "b"  # reversed: the other arm ahead
    assert compare(better, base, higher_is_better=False).winner == "b"  # a loss: higher is worse


def test_noise_is_a_tie_with_a_seed_count_that_grows_as_the_gap_shrinks():
    a = [0.30, 0.25, 0.33]
    b = [0.28, 0.27, 0.30]  # differences 0.02, -0.02, 0.03: mean 0.01, sd ~0.026
    c = compare(a, b)
    assert c.winner == "tie" and c.low < 0 < c.high
    assert c.seeds_needed is not None and c.seeds_needed > 3
    assert "inconclusive at 3 seeds" in c.describe("A", "B") and f"about {c.seeds_needed} seeds" in c.describe("A", "B")
    needed = [seeds_to_resolve(gap, 0.026, 3) for gap in (0.04, 0.02, 0.01, 0.005)]
    assert needed == sorted(needed) and needed[0] < needed[-1]
    # roughly (2.8 sd / gap)^2 seeds once many are needed
    assert seeds_to_resolve(0.005, 0.026, 3) == pytest.approx((2.8 * 0.026 / 0.005) ** 2, rel=0.15)


def test_equal_arms_need_no_seeds_and_bad_inputs_are_refused():
    c = compare([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    assert c.winner == "tie" and c.seeds_needed is None and "no gap" in c.describe("A", "B")
    with pytest.raises(ValueError):
        compare([0.1, 0.2], [0.1, 0.2, 0.3])
    assert compare([0.1, None, 0.3], [0.0, 0.2, None]).winner == "tie"  # one pair left: nothing to pair
