"""compare's answer along compute: every row measured at each point of the ladder (``CompareSettings.ladder``), read
as each task's trend, each claim's, and each family's crossing of the classic method's line (``trend``'s rules).

A point is the families' runs at a fraction of the clock, fine-tuned and scored exactly as the final point (the same
rule, seeds, rows and test items), so a row's scores at every point pair item by item and one joint bootstrap reads
the slope. The first-token time is the architecture's, not training's: it is read at the final point only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maskwise.experiments.claims import CompareRow, Evidence
from maskwise.experiments.intervals import PerSeed, interval, score
from maskwise.experiments.trend import ClaimTrend, Crossing, Curve, Trend, claim_trend, crossing, trend
from maskwise.tasks.items import Items
from maskwise.tasks.unit import CLAIMS

FINAL_ONLY = "final point only: set by the architecture, not by training"


@dataclass(frozen=True)
class Along:
    """The ladder's reading: each judged row's trend (row key ->), each claim's (claim ->), each crossing of a
    classic line (row key -> the claim's two families'), and every row's evidence at every point."""

    seconds: tuple[float, ...]  # each point's pretraining clock
    points: tuple[Evidence, ...]  # every row's scores at each point, the last the final point's
    trends: Mapping[str, Trend]
    claims: Mapping[str, ClaimTrend]
    crossings: Mapping[str, tuple[Crossing, ...]]

    def cell(self, row: CompareRow) -> str:
        """The results table's trend cell for ``row``: its reading and slope per doubling, or why there is none."""
        found = self.trends.get(row.key)
        if found is not None:
            return f"{found.reading}: {found.slope.text()} per doubling"
        return "" if row.claim is None else "not read: a family cannot take the row"

    def said(self, claim: str) -> str | None:
        """The line a claim's verdict adds: its trend along compute, None without a ladder."""
        found = self.claims.get(claim)
        if found is None or len(self.seconds) < 2:
            return None
        return (
            f"Along compute ({len(self.seconds)} points, {self.seconds[0]:g} to {self.seconds[-1]:g} s of "
            f"pretraining): {found.text()}"
        )

    def curves(self, columns: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Each row's curve for its plot: every column's interval at each point, its trivial baseline and the
        classic method's lines at the final point, the families its claim compares."""
        final = self.points[-1]
        out = {}
        for row in final.rows:
            at = [point.gathered[row.key][0] for point in self.points]
            measured = [c for c in columns if all(c in scores for scores in at)]
            if not measured:
                continue
            baselines = final.gathered[row.key][1]
            classic = final.classic.get(row.key)
            first = classic.reference(final.contenders) if classic is not None else None
            out[row.label] = {
                "seconds": list(self.seconds),
                "higher": row.higher,
                "columns": {c: [_cell(scores[c]) for scores in at] for c in measured},
                "baseline": {
                    "name": row.baseline_name,
                    "value": next((_mean(baselines[c]) for c in measured if c in baselines), None),
                },
                "classic": None
                if classic is None or first is None
                else {
                    "name": classic.name,
                    "same": score(classic.same[first]),
                    "whole": score(classic.whole[first]) if first in classic.whole else None,
                },
                "judged": [final.judged.get(f) for f in CLAIMS[row.claim]] if row.claim else [],
            }
        return out

    def to_json(self, columns: Sequence[str]) -> dict[str, Any]:
        return {
            "seconds": list(self.seconds),
            "trends": {key: t.to_json() for key, t in self.trends.items()},
            "claims": {claim: t.to_json() for claim, t in self.claims.items()},
            "crossings": {key: [c.to_json() for c in found] for key, found in self.crossings.items()},
            "curves": self.curves(columns),
        }


def _cell(per_seed: PerSeed) -> list[float]:
    found = interval(per_seed)
    return [found.mean, found.low, found.high]


def _mean(baseline: PerSeed | float) -> float:
    return float(baseline) if isinstance(baseline, int | float) else score(baseline)


def _items(per_seed: PerSeed) -> list[Items] | None:
    """A column's per-seed scores where they are ``Items`` (what a curve resamples), else None."""
    found = [s for s in per_seed if isinstance(s, Items)]
    return found if len(found) == len(per_seed) else None


def curve_of(row: CompareRow, seconds: Sequence[float], points: Sequence[Evidence]) -> Curve | None:
    """``row``'s curve between the two families its claim compares, or None where it has no claim or a family has no
    scores at some point."""
    if row.claim is None:
        return None
    final = points[-1]
    names = CLAIMS[row.claim]
    columns = [final.judged.get(f) for f in names]
    per_point: list[list[list[Items]]] = [[], []]
    for point in points:
        scores = point.gathered[row.key][0]
        for side, column in enumerate(columns):
            found = _items(scores[column]) if column is not None and column in scores else None
            if found is None:
                return None
            per_point[side].append(found)
    return Curve(
        row.label,
        tuple(seconds),
        per_point[0],
        per_point[1],
        higher_is_better=row.higher,
        bounded=row.bounded,
        predicted_name=names[0],
        rival_name=names[1],
    )


def along(seconds: Sequence[float], points: Sequence[Evidence]) -> Along:
    """The ladder read by ``trend``'s fixed rules: each judged row's trend and its crossings of the classic line (on
    the characters the families read), each claim's trend from all of its rows'."""
    final = points[-1]
    trends: dict[str, Trend] = {}
    crossings: dict[str, tuple[Crossing, ...]] = {}
    for row in final.rows:
        curve = curve_of(row, seconds, points) if len(points) > 1 else None
        if curve is None:
            continue
        trends[row.key] = trend(curve)
        classic = final.classic.get(row.key)
        first = classic.reference(final.contenders) if classic is not None else None
        if classic is not None and first is not None:
            line = score(classic.same[first])
            crossings[row.key] = (crossing(curve, line, "predicted"), crossing(curve, line, "rival"))
    claims = {
        claim: claim_trend([trends[row.key] for row in final.rows if row.claim == claim and row.key in trends])
        for claim in CLAIMS
    }
    return Along(tuple(seconds), tuple(points), trends, claims, crossings)
