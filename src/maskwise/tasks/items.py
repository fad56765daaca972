"""What a row's score is resampled over: one run's test items, the units an interval redraws, and the metric
recomputed on a redraw.

An item's score is a number (the metric is their mean) or a pair (numerator, denominator), pooled over the items drawn
(CoNLL's entity F1 is 2 x right over predicted plus gold entities). Items may belong to groups that a redraw takes
whole (a sentence's windows, a document's sentences): two windows of one sentence are not independent texts. Items
may carry their gold label, where the metric is a mean over labels of a pooled score (balanced accuracy: the mean of
per-label recalls, which no sum over a sum can give).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Items:
    """One run's scores on a row's test items, as an interval redraws them (``experiments.intervals``)."""

    values: Sequence[float] | Sequence[Sequence[float]]  # per item: a score, or (numerator, denominator)
    groups: Sequence[int] | None = None  # per item: the group a redraw takes whole; None: each item alone
    labels: Sequence[int] | None = None  # per item: its gold label, for a mean over labels; None: one pool

    def __post_init__(self) -> None:
        for name, per_item in (("groups", self.groups), ("labels", self.labels)):
            if per_item is not None and len(per_item) != len(self.values):
                raise ValueError(f"{len(per_item)} {name} for {len(self.values)} items")

    def __len__(self) -> int:
        """The units a redraw draws: groups where items are grouped, else items."""
        return len(set(self.groups)) if self.groups is not None else len(self.values)

    @property
    def size(self) -> int:
        """The test items themselves (a user's sentences, not the windows they were read in): what a verdict's floor
        counts, whatever groups a redraw takes."""
        return len(self.values)

    def units(self) -> torch.Tensor:
        """Each unit's (numerator, denominator) sums: (units, 2), or (units, labels, 2) where items carry labels."""
        values = torch.tensor([list(v) if isinstance(v, Sequence) else v for v in self.values], dtype=torch.float64)
        pairs = values if values.dim() == 2 else torch.stack([values, torch.ones_like(values)], dim=1)  # (n, 2)
        if self.labels is None and self.groups is None:
            return pairs
        labels = torch.tensor(list(self.labels) if self.labels is not None else [0] * len(pairs))
        group_ids = sorted(set(self.groups)) if self.groups is not None else range(len(pairs))
        index = {g: i for i, g in enumerate(group_ids)}
        unit = torch.tensor([index[g] for g in self.groups] if self.groups is not None else range(len(pairs)))
        n_labels = int(labels.max()) + 1 if len(labels) else 1
        sums = torch.zeros(len(group_ids), n_labels, 2, dtype=torch.float64)  # (units, labels, 2)
        sums.index_put_((unit, labels), pairs, accumulate=True)
        return sums if self.labels is not None else sums[:, 0]  # (units, labels, 2) or (units, 2)

    def metric(self, drawn: torch.Tensor) -> torch.Tensor:
        """The metric on draws of units: (..., n, 2) or (..., n, labels, 2) -> (...): the pooled score (the
        numerators' sum over the denominators', 0 where that is 0), averaged over the labels present in a draw."""
        if self.labels is None:
            return pooled(drawn[..., 0].sum(-1), drawn[..., 1].sum(-1))
        totals = drawn.sum(-3)  # (..., labels, 2)
        present = totals[..., 1] > 0
        recalls = pooled(totals[..., 0], totals[..., 1])  # (..., labels)
        return (recalls * present).sum(-1) / present.sum(-1).clamp_min(1)

    def score(self) -> float:
        """The metric on the items as they are."""
        return float(self.metric(self.units()))


def pooled(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """Numerator over denominator, 0 where the denominator is 0."""
    return torch.where(denominator > 0, numerator / denominator.clamp_min(1e-300), torch.zeros_like(numerator))


def as_items(scores: Items | Sequence[float] | Sequence[Sequence[float]]) -> Items:
    """``scores`` as items: a plain list of per-item scores (or pairs) is items that are neither grouped nor
    labelled."""
    return scores if isinstance(scores, Items) else Items(scores)
