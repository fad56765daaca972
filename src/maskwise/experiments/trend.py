"""The verdict along compute: whether a predicted family's lead grows, shrinks or stays flat as pretraining compute
doubles, and where a family's curve crosses the classic method's line. Rules fixed before any number is seen.

A task's curve is measured at compute points c_1 < ... < c_K (seconds, FLOPs: any positive unit), each family at each
point once per seed, all points scored on one test set. The gap d_k is the predicted family's metric minus its
rival's at point k (mean over seeds; rival minus predicted for a lower-is-better metric, so that positive always means
the predicted family ahead), and the trend is the least-squares slope of d_k against log2(c_k): the change in the lead
per doubling of compute.

Its interval comes from one bootstrap over all points at once (``intervals``' own draws): each replicate draws the
seeds and the test units once, and the same draw scores every point and both families, each metric recomputed on the
draw (``Items.metric``: balanced accuracy, pooled F1 and grouped units stay what they are). A test item that is easy
at one point is easy at the next, and drawing it at one point and not the other would count that as noise.

The reading (``trend``): ``grows`` when the slope's 95% interval lies wholly above 0, ``shrinks`` wholly below,
``flat`` when it lies within ±``DELTA`` per doubling, ``undetermined`` otherwise, with the seeds (or, at one seed,
the test items) that would decide it. A claim's trend (``claim_trend``) comes from its tasks' by one rule that drops
none. Crossing the classic line (``crossing``) is read within the measured points only; a bounded metric is never
extended by a straight line in log compute, and a forecast fits the error rate as a power law instead, only near the
measured range (``FORECAST_FACTOR``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from maskwise.experiments.intervals import Interval, joint_replicates, percentile_interval, same_items
from maskwise.experiments.verdict import MIXED, NOT_MEASURED, Z80
from maskwise.tasks.items import Items

RESAMPLES = 2000  # bootstrap replicates of the joint draw: the slope's percentiles settle to about 0.001 by then
SEED = 0  # the draws' RNG seed: one curve always reads the same
# The band a slope must lie within to read ``flat``: 0.01 metric units per doubling of compute (a point of accuracy),
# so that across the two doublings from 1/4 to all of a budget a flat lead moves by under two points.
DELTA = 0.01
# A forecast of where a curve reaches the classic line is given only within this factor of the largest compute
# measured: a power law fitted to a few points says little about compute twice as far off again.
FORECAST_FACTOR = 4.0
MIN_FORECAST_POINTS = 3  # a power law through two points fits them exactly and carries no check of its shape

GROWS, SHRINKS, FLAT, UNDETERMINED = "grows", "shrinks", "flat", "undetermined"
# A claim's trend over several tasks: some tasks grow (or shrink) and none go the other way.
GROWS_ON_SOME, SHRINKS_ON_SOME = "grows on some tasks", "shrinks on some tasks"

# A true slope decides in 80% of repeats when the 95% half-width is this factor below its distance to the boundary.
POWER = (1.960 + Z80) / 1.960


@dataclass(frozen=True)
class Curve:
    """One task measured along pretraining compute: each family's runs per point, per seed, on one test set."""

    task: str
    compute: Sequence[float]  # c_1 < ... < c_K, any positive unit
    predicted: Sequence[Sequence[Items]]  # [point][seed]: the family the claim predicts to win
    rival: Sequence[Sequence[Items]]  # [point][seed]: the family it is judged against
    higher_is_better: bool = True  # False for a loss (nats per character): the gap is then rival minus predicted
    bounded: bool = False  # the metric lies in [0, 1] (accuracy, F1, recall@k): its error rate may be forecast
    predicted_name: str = "predicted family"
    rival_name: str = "rival"

    def __post_init__(self) -> None:
        points = len(self.compute)
        if (
            points < 2
            or any(c <= 0 for c in self.compute)
            or any(a >= b for a, b in zip(self.compute, self.compute[1:]))
        ):
            raise ValueError(f"a curve needs at least two positive, increasing compute points; got {self.compute}")
        if len(self.predicted) != points or len(self.rival) != points:
            raise ValueError(f"{points} compute points, {len(self.predicted)} and {len(self.rival)} measured")
        reference = self.predicted[0]
        if not reference:
            raise ValueError("a curve needs at least one seed")
        for runs in (*self.predicted, *self.rival):
            if not same_items(reference, runs) or any(
                _listed(a.groups) != _listed(b.groups) or _listed(a.labels) != _listed(b.labels)
                for a, b in zip(reference, runs)
            ):
                raise ValueError("every point and both families must score the same seeds and test items")

    @property
    def seeds(self) -> int:
        """Runs per family per point: at one, an interval is over test items only."""
        return len(self.predicted[0])

    @property
    def items(self) -> int:
        """The test items (not the groups a draw takes): what "would need about N test items" counts."""
        return min(items.size for items in self.predicted[0])


def _listed(per_item: Sequence[int] | None) -> list[int] | None:
    """Groups or labels as a list, so that a tuple and a list of the same ones compare equal."""
    return None if per_item is None else list(per_item)


def _joint(curve: Curve, resamples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each family's observed metric per point, (2, K), and its replicates, (2, K, R): one draw of seeds and units
    per replicate, shared by every point and both families."""
    points = len(curve.compute)
    observed, replicates = joint_replicates([*curve.predicted, *curve.rival], resamples, seed)
    return torch.tensor(observed, dtype=torch.float64).view(2, points), torch.stack(replicates).view(2, points, -1)


def _slope_weights(x: Sequence[float]) -> torch.Tensor:
    """w with w @ y the least-squares slope of y against x."""
    centred = torch.tensor(x, dtype=torch.float64) - sum(x) / len(x)
    return centred / (centred**2).sum()


# ---- the trend of one task ----------------------------------------------------------------------


@dataclass(frozen=True)
class Trend:
    """One task's reading along compute, the slope it was read from and the gap at each point."""

    task: str
    reading: str
    slope: Interval  # change in the predicted family's lead per doubling of compute, with its 95% interval
    gaps: tuple[Interval, ...]  # the lead at each point, with its interval from the same draws
    compute: tuple[float, ...]
    seeds: int
    items: int
    delta: float
    names: tuple[str, str]  # (predicted, rival)
    needed: int | None = None  # undetermined: the seeds (or, at one seed, test items) that would decide it
    aim: str = ""  # what those would do: "exclude 0" or "fit within ±DELTA per doubling"

    def text(self, digits: int = 3) -> str:
        predicted, rival = self.names
        band = f" (within ±{self.delta:.{digits}f} per doubling)" if self.reading == FLAT else ""
        said = (
            f"{self.task}: {self.reading}{band}: the {predicted}'s lead over the {rival} changes by "
            f"{self.slope.text(digits)} per doubling of compute, over {len(self.compute)} points from "
            f"{self.compute[0]:.3g} to {self.compute[-1]:.3g}, "
            + (f"{self.seeds} seeds" if self.seeds > 1 else "1 seed: over test items only")
        )
        if self.reading == UNDETERMINED:
            counted, have = ("seeds", self.seeds) if self.seeds > 1 else ("test items", self.items)
            said += (
                f"; a slope of this size would need about {self.needed:,} {counted} to {self.aim} (has {have:,})"
                if self.needed is not None
                else f"; no number of {counted} would decide a slope of this size"
            )
        return said

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "reading": self.reading,
            "slope_per_doubling": self.slope.to_dict(),
            "gaps": [gap.to_dict() for gap in self.gaps],
            "compute": list(self.compute),
            "seeds": self.seeds,
            "items": self.items,
            "delta": self.delta,
            "predicted": self.names[0],
            "rival": self.names[1],
            "needed": self.needed,
            "aim": self.aim,
            "text": self.text(),
        }


def reading(slope: Interval, delta: float = DELTA) -> str:
    """The rule, in order: wholly above 0 ``grows``, wholly below ``shrinks``, within ±delta ``flat``, else
    ``undetermined``."""
    if slope.low > 0:
        return GROWS
    if slope.high < 0:
        return SHRINKS
    if -delta <= slope.low and slope.high <= delta:
        return FLAT
    return UNDETERMINED


def to_decide(slope: Interval, delta: float, have: int) -> tuple[int | None, str]:
    """How many seeds (or items) of the ``have`` measured would decide an undetermined slope, and how: its half-width
    shrinks as one over their square root, and must fall below the observed slope's distance to 0 (exclude 0) or to
    the band's edge (fit within ±delta) with 80% power, whichever needs fewer. More points in the same range are not
    counted: they score the same test items, so they do not shrink the interval that way."""
    half = (slope.high - slope.low) / 2
    to_zero, to_edge = abs(slope.mean), delta - abs(slope.mean)
    aim, nearest = ("exclude 0", to_zero) if to_zero >= to_edge else (f"fit within ±{delta:g} per doubling", to_edge)
    if nearest <= 0 or half <= 0:
        return None, ""
    return max(have + 1, math.ceil(have * (POWER * half / nearest) ** 2)), aim


def trend(curve: Curve, delta: float = DELTA, resamples: int = RESAMPLES, seed: int = SEED) -> Trend:
    """The task's reading along compute (``reading``) from the slope of the lead against log2 compute, its interval
    from one joint bootstrap."""
    observed, replicates = _joint(curve, resamples, seed)
    sign = 1.0 if curve.higher_is_better else -1.0
    gap, gap_draws = sign * (observed[0] - observed[1]), sign * (replicates[0] - replicates[1])  # (K,), (K, R)
    weights = _slope_weights([math.log2(c) for c in curve.compute])
    slope = percentile_interval(float(weights @ gap), weights @ gap_draws)
    gaps = tuple(percentile_interval(float(g), draws) for g, draws in zip(gap, gap_draws))
    read = reading(slope, delta)
    needed, aim = (
        to_decide(slope, delta, curve.seeds if curve.seeds > 1 else curve.items) if read == UNDETERMINED else (None, "")
    )
    return Trend(
        curve.task,
        read,
        slope,
        gaps,
        tuple(curve.compute),
        curve.seeds,
        curve.items,
        delta,
        (curve.predicted_name, curve.rival_name),
        needed,
        aim,
    )


# ---- a claim's trend from its tasks' -------------------------------------------------------------


@dataclass(frozen=True)
class ClaimTrend:
    """A claim's reading along compute, the line that names each task's, and the tasks it was read from."""

    reading: str
    said: str
    tasks: tuple[Trend, ...]

    def text(self) -> str:
        return f"{self.reading}: {self.said}"

    def to_json(self) -> dict[str, Any]:
        return {"reading": self.reading, "said": self.said, "tasks": [t.to_json() for t in self.tasks]}


def claim_trend(trends: Sequence[Trend]) -> ClaimTrend:
    """A claim's trend from all of its tasks', none dropped: every task the same clear reading (``grows``,
    ``shrinks``, ``flat``) gives that reading; some grow and some shrink: ``mixed``; some grow and none shrink:
    ``grows on some tasks`` (likewise ``shrinks on some tasks``); only flat and undetermined: ``undetermined``;
    no task: ``not measured``."""
    if not trends:
        return ClaimTrend(NOT_MEASURED, "not measured: no task of this claim was measured along compute", ())
    by = {r: [t.task for t in trends if t.reading == r] for r in (GROWS, SHRINKS, FLAT, UNDETERMINED)}
    said = "; ".join(f"{r} on {', '.join(tasks)}" for r, tasks in by.items() if tasks)
    whole = next((r for r in (GROWS, SHRINKS, FLAT) if len(by[r]) == len(trends)), None)
    if whole is not None:
        verdict = whole
    elif by[GROWS] and by[SHRINKS]:
        verdict = MIXED
    elif by[GROWS]:
        verdict = GROWS_ON_SOME
    elif by[SHRINKS]:
        verdict = SHRINKS_ON_SOME
    else:
        verdict = UNDETERMINED
    return ClaimTrend(verdict, said, tuple(trends))


# ---- crossing the classic method's line ---------------------------------------------------------


@dataclass(frozen=True)
class Cross:
    """Where a curve's mean passes the line between two measured points."""

    low: float  # c_k: the mean on one side of the line
    high: float  # c_{k+1}: the mean on the other
    rising: bool  # behind the line at c_k and ahead at c_{k+1}
    separated: bool  # both points' intervals clear the line, each on its side

    def text(self) -> str:
        verb = "rises past" if self.rising else "falls behind"
        clear = "separated from it at both ends" if self.separated else "not separated from it at both ends"
        return f"{verb} it between {self.low:.3g} and {self.high:.3g} ({clear})"

    def to_json(self) -> dict[str, Any]:
        return {"between": [self.low, self.high], "rising": self.rising, "separated": self.separated}


@dataclass(frozen=True)
class Crossing:
    """One family's curve against the classic method's line: where it crosses within the measured points, and a
    forecast past them where one is allowed (else why not)."""

    family: str
    classic: float
    compute: tuple[float, ...]
    points: tuple[Interval, ...]  # the family's metric at each point, with its interval
    crosses: tuple[Cross, ...]
    ahead_at_end: bool
    forecast: Interval | None  # the compute at which the fitted error rate reaches the line's (high inf: never)
    not_forecast: str  # why there is no forecast ("" when there is one)

    def text(self) -> str:
        line = f"{self.family} against the classic line {self.classic:.3f}: "
        if self.crosses:
            line += "; ".join(cross.text() for cross in self.crosses)
        else:
            side = "ahead of" if self.ahead_at_end else "behind"
            line += f"stays {side} it from {self.compute[0]:.3g} to {self.compute[-1]:.3g}"
        if self.forecast is not None:
            high = f"{self.forecast.high:.3g}" if math.isfinite(self.forecast.high) else "never"
            line += (
                f"; forecast to reach it at {self.forecast.mean:.3g} [{self.forecast.low:.3g}, {high}] "
                f"({self.forecast.mean / self.compute[-1]:.1f}x the largest point)"
            )
        else:
            line += f"; not forecast: {self.not_forecast}"
        return line

    def to_json(self) -> dict[str, Any]:
        forecast = (
            None
            if self.forecast is None
            else {k: (v if math.isfinite(v) else None) for k, v in self.forecast.to_dict().items()}
        )
        return {
            "family": self.family,
            "classic": self.classic,
            "compute": list(self.compute),
            "points": [p.to_dict() for p in self.points],
            "crosses": [c.to_json() for c in self.crosses],
            "ahead_at_end": self.ahead_at_end,
            "forecast": forecast,
            "not_forecast": self.not_forecast,
            "text": self.text(),
        }


def _ahead(value: float, classic: float, higher_is_better: bool) -> bool:
    """Whether ``value`` is better than the line (equal is not: a crossing must pass it)."""
    return value > classic if higher_is_better else value < classic


def _clears(point: Interval, classic: float, ahead: bool, higher_is_better: bool) -> bool:
    """Whether the point's interval lies wholly on its side of the line (ahead of it, or behind it)."""
    return point.above(classic) if ahead == higher_is_better else point.below(classic)


def _log_reach(errors: torch.Tensor, log_compute: torch.Tensor, target: float) -> torch.Tensor:
    """The log of the compute at which the power law e = a c^b fitted to ``errors`` (K, ...) reaches ``target``, in
    log space so that a far crossing compares with the factor without overflowing; inf where the error does not fall
    (b >= 0)."""
    centred = log_compute - log_compute.mean()
    log_errors = errors.log()
    mean = log_errors.mean(0)
    b = torch.tensordot(centred / (centred**2).sum(), log_errors - mean, dims=1)
    falling = b < 0
    log_c = log_compute.mean() + (math.log(target) - mean) / torch.where(falling, b, torch.ones_like(b))
    return torch.where(falling, log_c, torch.full_like(b, math.inf))


def _why_not(curve: Curve, errors: torch.Tensor, classic: float, ahead_at_end: bool) -> str:
    """Why a curve's meeting with the line is not forecast, or "" when it may be fitted."""
    if not curve.higher_is_better:
        return "a lower-is-better metric has no error rate in [0, 1] to fit"
    if not curve.bounded:
        return "the metric is not stated to lie in [0, 1], so it has no error rate to fit"
    if ahead_at_end:
        return "already ahead of the line at the largest point"
    if len(curve.compute) < MIN_FORECAST_POINTS:
        return f"{len(curve.compute)} points, fewer than the {MIN_FORECAST_POINTS} a power-law fit needs"
    if classic >= 1 or bool((errors <= 0).any()):
        return "the line or a point is at the metric's ceiling of 1"
    return ""


def crossing(
    curve: Curve,
    classic: float,
    which: Literal["predicted", "rival"] = "predicted",
    factor: float = FORECAST_FACTOR,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Crossing:
    """Where ``which`` family's curve crosses the classic method's line ``classic`` (same metric) between measured
    points, and a forecast past them: for a metric in [0, 1] where higher is better, the error rate 1 - m fitted as a
    power law in compute (least squares in log-log), forecast only within ``factor`` of the largest point, its 95%
    interval from the trend's joint draws (each replicate refitted; one whose error does not fall never reaches it)."""
    observed, replicates = _joint(curve, resamples, seed)
    side = 0 if which == "predicted" else 1
    name = curve.predicted_name if side == 0 else curve.rival_name
    higher = curve.higher_is_better
    points = tuple(percentile_interval(float(m), draws) for m, draws in zip(observed[side], replicates[side]))
    ahead = [_ahead(p.mean, classic, higher) for p in points]
    crosses = tuple(
        Cross(
            curve.compute[k],
            curve.compute[k + 1],
            ahead[k + 1],
            _clears(points[k], classic, ahead[k], higher) and _clears(points[k + 1], classic, ahead[k + 1], higher),
        )
        for k in range(len(points) - 1)
        if ahead[k] != ahead[k + 1]
    )
    errors = 1 - observed[side]
    why = _why_not(curve, errors, classic, ahead[-1])
    forecast = None
    if not why:
        log_compute = torch.tensor([math.log(c) for c in curve.compute], dtype=torch.float64)
        target = 1 - classic
        reach = _log_reach(errors, log_compute, target)
        log_reached = float(reach)
        if not math.isfinite(log_reached):
            why = "the fitted error rate does not fall with compute"
        elif log_reached > math.log(factor * curve.compute[-1]):
            why = f"the fitted power law reaches it only beyond {factor:g}x the largest point"
        else:
            # A replicate at the ceiling somewhere has no log error: floor it, and its fit falls steeply there.
            drawn = _log_reach((1 - replicates[side]).clamp_min(1e-12), log_compute, target).exp()
            low = float(torch.quantile(drawn, 0.025, interpolation="lower"))
            high = float(torch.quantile(drawn, 0.975, interpolation="higher"))
            forecast = Interval(float(reach.exp()), low, high)
    return Crossing(name, classic, tuple(curve.compute), points, crosses, ahead[-1], forecast, why)
