"""Verdicts by rule, never by hand: ``held``, ``falsified`` or ``inconclusive``.

A comparison between two arms uses their per-seed values: an arm is ahead only when its interval
(mean ± one sample standard deviation) lies entirely beyond the other's. Overlapping intervals are
"within noise", which is what makes a verdict ``inconclusive`` rather than a coin flip read as a
finding. Each ablation's rule is a small function of these comparisons (see ``ablations.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from maskwise.experiments.report import mean_and_spread

HELD, FALSIFIED, INCONCLUSIVE = "held", "falsified", "inconclusive"


@dataclass(frozen=True)
class Comparison:
    """``winner``: "a", "b" or "tie" (intervals overlap); means and spreads for the report."""

    winner: str
    mean_a: float
    spread_a: float
    mean_b: float
    spread_b: float

    def describe(self, name_a: str, name_b: str, digits: int = 3) -> str:
        verb = {"a": f"{name_a} ahead", "b": f"{name_b} ahead", "tie": "within noise"}[self.winner]
        return (f"{name_a} {self.mean_a:.{digits}f} ± {self.spread_a:.{digits}f} vs {name_b} "
                f"{self.mean_b:.{digits}f} ± {self.spread_b:.{digits}f} ({verb})")


def compare(a: list[float], b: list[float], higher_is_better: bool = True) -> Comparison:
    mean_a, spread_a = mean_and_spread(a)
    mean_b, spread_b = mean_and_spread(b)
    sign = 1.0 if higher_is_better else -1.0
    if sign * (mean_a - mean_b) > spread_a + spread_b:
        winner = "a"
    elif sign * (mean_b - mean_a) > spread_a + spread_b:
        winner = "b"
    else:
        winner = "tie"
    return Comparison(winner, mean_a, spread_a, mean_b, spread_b)
