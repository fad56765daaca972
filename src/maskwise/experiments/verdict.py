"""Verdicts by rule, never by hand: ``held``, ``falsified`` or ``inconclusive``.

A comparison between two arms pairs their per-seed values (seed i of arm A was trained and
evaluated like seed i of arm B, on the same data order and the same test items), and asks whether
the 95% t-interval of the per-seed differences excludes zero. Pairing removes what the seeds share
(an easy draw of test items helps both arms), which overlapping mean ± sd intervals cannot. When the
interval includes zero the comparison is "within noise", and it says how many seeds would resolve
the observed gap at the observed spread (80% power), so that "inconclusive" comes with what it
would take. Each ablation's rule is a small function of these comparisons.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

HELD, FALSIFIED, INCONCLUSIVE = "held", "falsified", "inconclusive"
# A claim judged over several tasks: some held and some falsified; or no task of its kind was given.
MIXED, NOT_MEASURED = "mixed", "not measured"
# A task whose test split is too small to separate any difference (``claims.MIN_TEST_ITEMS``): never held or falsified.
TOO_FEW = "too few test items"

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; above 30 the normal's 1.960
# is within 4% of them.
T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
Z80 = 0.8416  # one-sided 80% quantile of the normal: the power the seed count is sized for
MAX_SEEDS = 10_000


def mean_and_spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    finite = [v for v in values if v is not None]
    if not finite:
        return float("nan"), float("nan")
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0


def t975(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else 1.960


def seeds_to_resolve(gap: float, spread: float, have: int) -> int | None:
    """The fewest seeds at which a true paired gap ``gap`` with per-seed spread ``spread`` gives a 95%
    interval excluding zero in 80% of experiments; None when there is no gap to resolve or it would
    take more than ``MAX_SEEDS``."""
    if gap == 0:
        return None
    if spread == 0:
        return max(2, have)
    for n in range(max(2, have), MAX_SEEDS + 1):
        if (t975(n - 1) + Z80) * spread / math.sqrt(n) < abs(gap):
            return n
    return None


@dataclass(frozen=True)
class Comparison:
    """``winner``: "a", "b" or "tie" (the paired interval includes zero); the numbers for the report."""

    winner: str
    mean_a: float
    spread_a: float
    mean_b: float
    spread_b: float
    difference: float = 0.0  # mean of a - b over the paired seeds
    low: float = 0.0  # its 95% interval
    high: float = 0.0
    seeds: int = 0
    seeds_needed: int | None = None  # to resolve a tie at the observed gap and spread

    def describe(self, name_a: str, name_b: str, digits: int = 3) -> str:
        verb = {"a": f"{name_a} ahead", "b": f"{name_b} ahead", "tie": "within noise"}[self.winner]
        if self.winner == "tie":
            if self.seeds_needed is not None:
                verb += (
                    f"; inconclusive at {self.seeds} seeds, the observed gap of {abs(self.difference):.{digits}f} "
                    f"would need about {self.seeds_needed} seeds"
                )
            elif self.difference:  # nan (too few pairs) is truthy too: no estimate either way
                verb += f"; inconclusive at {self.seeds} seeds, and more than {MAX_SEEDS} would not resolve it"
            else:
                verb += f"; no gap at {self.seeds} seeds"
        return (
            f"{name_a} {self.mean_a:.{digits}f} ± {self.spread_a:.{digits}f} vs {name_b} "
            f"{self.mean_b:.{digits}f} ± {self.spread_b:.{digits}f}, paired difference "
            f"{self.difference:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] ({verb})"
        )


def compare(a: list[float], b: list[float], higher_is_better: bool = True) -> Comparison:
    """Arm A against arm B, seed by seed (``a[i]`` and ``b[i]`` share seed i; a seed without a value
    on either side, None, is left out of the pairing). Fewer than two pairs: a tie."""
    if len(a) != len(b):
        raise ValueError(f"a paired comparison needs the same seeds on both sides; got {len(a)} and {len(b)}")
    mean_a, spread_a = mean_and_spread(a)
    mean_b, spread_b = mean_and_spread(b)
    differences = [x - y for x, y in zip(a, b) if x is not None and y is not None]
    if len(differences) < 2:
        nan = float("nan")
        return Comparison("tie", mean_a, spread_a, mean_b, spread_b, nan, nan, nan, len(differences), None)
    gap, spread = mean_and_spread(differences)
    half = t975(len(differences) - 1) * spread / math.sqrt(len(differences))
    low, high = gap - half, gap + half
    sign = 1.0 if higher_is_better else -1.0
    if (low > 0 and sign > 0) or (high < 0 and sign < 0):
        winner = "a"
    elif (high < 0 and sign > 0) or (low > 0 and sign < 0):
        winner = "b"
    else:
        winner = "tie"
    needed = seeds_to_resolve(gap, spread, len(differences)) if winner == "tie" else None
    return Comparison(winner, mean_a, spread_a, mean_b, spread_b, gap, low, high, len(differences), needed)
