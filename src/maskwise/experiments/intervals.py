"""95% intervals over test items and seeds, and the cells a report may write from them.

A measurement here is a list per seed of per-item scores (one test window's 0/1 correctness, one
query's recall@10, one passage's speakers F1, one block of held-out text's nats per character).
The interval of the mean is a two-level bootstrap: draw seeds with replacement, then items within
each drawn seed, and average. With one seed it is the ordinary bootstrap over items; with several
it also carries the spread between seeds. A paired difference draws the same items (and seeds) for
both sides, which is what makes "A beats B on the same test set" sharper than two overlapping
intervals. Why not mean ± sd: with 300 test items one seed already says how much a different draw
of items would move the number, and three seeds give no useful standard deviation on their own.

An item may also be a pair ``(numerator, denominator)``: the score is then pooled over the items drawn, the sum of
numerators over the sum of denominators. That is how a field pools a metric over a test set (CoNLL's entity F1 is
2 x true positives over predicted plus gold entities), and a bootstrap that redraws texts and pools again gives its
interval; a plain number is the pair ``(x, 1)``, whose pooled score is the mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from maskwise.tasks.items import Items, as_items

# [seed] -> that run's items: ``Items`` (grouped or labelled), or per-item scores or (numerator, denominator) pairs
PerSeed = Sequence[Items | Sequence[float] | Sequence[Sequence[float]]]

RESAMPLES = 4000


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def above(self, value: float) -> bool:
        return self.low > value

    def below(self, value: float) -> bool:
        return self.high < value

    def text(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def to_dict(self) -> dict:
        return {"mean": self.mean, "ci95_low": self.low, "ci95_high": self.high}


def _check(per_seed: PerSeed) -> list[tuple[Items, torch.Tensor]]:
    """Each seed's items and their units' (numerator, denominator) sums (``Items.units``)."""
    seeds = [(items, items.units()) for items in map(as_items, per_seed)]
    if not seeds or any(len(units) == 0 for _, units in seeds):
        raise ValueError("an interval needs at least one seed with at least one item")
    return seeds


def score(per_seed: PerSeed) -> float:
    """The observed score: each seed's metric on its items, averaged over seeds."""
    return float(torch.stack([items.metric(units) for items, units in _check(per_seed)]).mean())


def joint_replicates(sides: Sequence[PerSeed], resamples: int, seed: int) -> tuple[list[float], list[torch.Tensor]]:
    """Per side, its observed score and ``resamples`` two-level bootstrap replicates, every side drawn at the same
    seeds and items (a paired comparison)."""
    checked = [_check(side) for side in sides]
    generator = torch.Generator().manual_seed(seed)
    n_seeds = len(checked[0])
    chosen = torch.randint(n_seeds, (resamples, n_seeds), generator=generator)  # (R, S)
    drawn = [torch.randint(len(u), (resamples, len(u)), generator=generator) for _, u in checked[0]]  # per seed (R, n)
    replicates = [
        torch.stack([items.metric(u[d]) for (items, u), d in zip(side, drawn)]).gather(0, chosen.T).mean(dim=0)  # (R,)
        for side in checked
    ]
    observed = [float(torch.stack([items.metric(u) for items, u in side]).mean()) for side in checked]
    return observed, replicates


def bootstrap_means(per_seed: PerSeed, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, torch.Tensor]:
    """The observed score (mean of the per-seed pooled scores) and ``resamples`` two-level bootstrap replicates."""
    observed, replicates = joint_replicates([per_seed], resamples, seed)
    return observed[0], replicates[0]


def percentile_interval(observed: float, replicates: torch.Tensor) -> Interval:
    """The 95% percentile interval of ``replicates`` around the ``observed`` score."""
    low, high = torch.quantile(replicates, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return Interval(observed, low, high)


def interval(per_seed: PerSeed, resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The 95% interval of the score (percentile bootstrap)."""
    return percentile_interval(*bootstrap_means(per_seed, resamples, seed))


def same_items(a: PerSeed, b: PerSeed) -> bool:
    """Whether ``a`` and ``b`` score the same seeds and units (as far as their shapes can say)."""
    return [len(as_items(x)) for x in a] == [len(as_items(x)) for x in b]


def paired_difference(a: PerSeed, b: PerSeed, resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The 95% interval of score(a) - score(b), items paired: ``a[s][i]`` and ``b[s][i]`` score one item, and
    every replicate draws the same items for both."""
    if not same_items(a, b):
        raise ValueError("a paired difference needs the same seeds and items on both sides")
    (score_a, score_b), (draws_a, draws_b) = joint_replicates([a, b], resamples, seed)
    return percentile_interval(score_a - score_b, draws_a - draws_b)


# ---- what a report may say ----------------------------------------------------------------------

AT_CHANCE, WITHIN_NOISE = "at chance", "within noise"


def separation(a: PerSeed, b: PerSeed, higher_is_better: bool = True) -> tuple[int, Interval | None]:
    """+1 if ``a`` is better than ``b`` beyond noise, -1 if worse, 0 within noise; and the paired
    difference ``a - b`` it was read from (None when ``b`` scores other items, and the two
    intervals are compared instead)."""
    if same_items(a, b):
        gap = paired_difference(a, b)
        ahead, behind = (gap.low > 0, gap.high < 0) if higher_is_better else (gap.high < 0, gap.low > 0)
    else:
        gap, ia, ib = None, interval(a), interval(b)
        ahead, behind = (
            (ia.low > ib.high, ia.high < ib.low) if higher_is_better else (ia.high < ib.low, ia.low > ib.high)
        )
    return (1 if ahead else -1 if behind else 0), gap


def beats(a: PerSeed, b: PerSeed | float, higher_is_better: bool = True) -> bool:
    """Whether ``a``'s scores are better than ``b`` beyond noise: paired when ``b`` scores the same
    items, interval against interval when it does not, interval against a constant ``b``."""
    if isinstance(b, (int, float)):
        spread = interval(a)
        return spread.above(b) if higher_is_better else spread.below(b)
    return separation(a, b, higher_is_better)[0] > 0


def best_of(
    scores: Mapping[str, PerSeed], baselines: Mapping[str, PerSeed | float], higher_is_better: bool = True
) -> str:
    """The one group whose score beats every other group's and its trivial baseline, or why there
    is none: "at chance" when no group's interval clears its baseline, "within noise" when some do
    but none separates from every other.

    ``baselines[g]``: the baseline's per-item scores on ``g``'s test items (a paired comparison),
    or a constant (random ranking's expected recall, a loss to beat); a group without one is
    judged against the others only."""
    above_chance = [g for g in scores if g not in baselines or beats(scores[g], baselines[g], higher_is_better)]
    if not above_chance:
        return AT_CHANCE
    for group in above_chance:
        if all(beats(scores[group], scores[other], higher_is_better) for other in scores if other != group):
            return group
    return WITHIN_NOISE
