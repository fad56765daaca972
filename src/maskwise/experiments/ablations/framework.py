"""What every ablation shares: arms, both axes, seeds, measuring, tables and the verdict plumbing.

An ablation module only declares an ``Ablation`` (its arms, what one run is measured on, the
metrics and rows it reads from those measures, its rule, its summary sentence and notes);
``conduct`` runs the pipeline they all share: pretrain every arm on both axes for every seed,
measure each run once (cached), tabulate, judge, and assemble the results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from maskwise.experiments.report import fmt_stat, mean_and_spread
from maskwise.experiments.runner import Experiment
from maskwise.experiments.verdict import (
    FALSIFIED,
    HELD,
    INCONCLUSIVE,
    Comparison,
    compare,
)
from maskwise.recipes import Scale, pretrain_settings, run_task

TOKENS, WALL = "equal tokens", "equal wall-clock"
AXES = (TOKENS, WALL)
SHARED = "equal tokens and wall-clock"  # the axis name when every arm reads the same pretrained model
MIN_BUCKET = 10  # a length bucket needs this many test items before a rule reads it
GENRE_ACC = "genre accuracy"
RECALL = "recall@10"  # ICT retrieval over the test plays' speeches
TAG_F1 = "punctuation F1 (tagging)"  # micro F1 over the test words: the right mark after the right word
# Equal wall-clock: an arm whose equal-tokens run took at most this much longer than its seed's
# fastest keeps that run on both axes. Arms of equal cost per token differ by the machine's
# run-to-run noise (5-10% on 2 shared cores), and rerunning them would measure that noise twice.
WALL_TOLERANCE = 0.05


@dataclass(frozen=True)
class Arm:
    key: str  # names its runs and cached steps
    label: str  # names it in tables, plots and metrics
    settings: dict  # pretraining settings beyond the scale's block (family, and what the arm changes)
    # Spends more per token than the other arms by design (ELECTRA's generator): it pretrains only on
    # their clock, and the equal-tokens axis is at the tokens it read there (``pretrain_arms``).
    costlier: bool = False


@dataclass(frozen=True)
class Setup:
    """What every measurement receives: the experiment folder, the scale, the seeds."""

    exp: Experiment
    scale: Scale
    seeds: tuple[int, ...]
    progress: bool


Runs = dict[str, dict[str, list[dict]]]  # {axis: {arm key: [one entry per seed]}}


@dataclass(frozen=True)
class Measured:
    """An ablation's pretraining runs and each run's measures, handed to its declaration."""

    setup: Setup
    arms: tuple[Arm, ...]
    runs: Runs
    measured: Runs
    parameters: dict  # arm label -> parameter breakdown

    def per_arm(self, axis: str, get: Callable[[dict], float]) -> dict[str, list[float]]:
        """``get`` of every run's measures on ``axis``, by arm label."""
        return {arm.label: [get(m) for m in self.measured[axis][arm.key]] for arm in self.arms}

    def final(self, axis: str, get: Callable[[dict], float]) -> dict[str, list[float]]:
        """``get`` of every run's last curve point on ``axis``, by arm label."""
        return {arm.label: [get(r["curve"][-1]) for r in self.runs[axis][arm.key]] for arm in self.arms}

    def first(self, arm: Arm) -> dict:
        """The first seed's measures of ``arm`` at equal tokens (for baselines and samples)."""
        return self.measured[TOKENS][arm.key][0]


@dataclass(frozen=True)
class Ablation:
    """One ablation, declared; ``conduct`` runs it."""

    about: str  # one line for the CLI's list
    title: str
    prediction: str
    rule: str
    step: str  # prefix of the cached measurement steps
    arms: Callable[..., tuple[Arm, ...]]  # (**options) -> the arms
    measure: Callable[[Setup, Arm, str, int], dict]  # (setup, arm, run name, seed) -> that run's measures
    tabulate: Callable[[Measured], tuple[dict, list]]  # -> (metrics the rule reads, table rows)
    judge: Callable[[dict, Sequence[Arm]], tuple[str, str]]  # (metrics, arms) -> (verdict, detail)
    summary: Callable[[Measured, dict], str]  # (measured, metrics) -> the summary sentence
    notes: Callable[[Measured], list[str]]
    options: tuple[str, ...] = ()  # keyword options ``arms`` accepts
    # Pretrained and measured at equal tokens only (one model per seed, or a question about inference).
    shared: bool = False
    columns: Callable[[Sequence[Arm]], list[str]] = lambda arms: [a.label for a in arms]
    samples: Callable[[Measured], dict] | None = None
    extra_rows: bool = True  # append the pretraining throughput rows
    # What the plotted measures mean, for their plots: measure name (a metrics key before " at ", or
    # its start) -> (higher is better, None for a cost; the trivial baseline's (name, value) or None).
    meaning: Callable[[Measured], dict[str, tuple[bool | None, tuple[str, float] | None]]] = lambda m: {}


# ---- pretraining on both axes ---------------------------------------------------------------------


def train_seconds(run: dict) -> float:
    return run["curve"][-1]["wall_s"]


def tokens_per_second(run: dict) -> float:
    last = run["curve"][-1]
    return last["tokens_seen"] / max(last["wall_s"], 1e-9)


def run_name(run: dict) -> str:
    return Path(run["run_dir"]).name


def tokens_seen(run: dict) -> int:
    return run["curve"][-1]["tokens_seen"]


def pretrain_arms(setup: Setup, arms: Sequence[Arm], axes: Sequence[str] = AXES) -> Runs:
    """``{axis: {arm key: [pretraining run per seed]}}`` (see the package docstring for the axes);
    ``axes`` without the wall-clock one skips its extra runs (an ablation that reads one model per seed).

    A costlier arm never pretrains at the scale's tokens: it runs on the other arms' clock, and the
    equal-tokens axis is at what it read there (the other arms run again to that count). Two arms
    still make three runs a seed, but the extra one is the cheap arm's shorter run rather than the
    costly arm's longer one. Seeds run one after another, all arms of a seed together, so the arms
    of one seed share the machine's conditions and an interrupted ablation keeps whole seeds."""
    runs: Runs = {axis: {arm.key: [] for arm in arms} for axis in axes}
    by_key = {arm.key: arm for arm in arms}
    costlier = [arm for arm in arms if arm.costlier] if WALL in axes and not all(a.costlier for a in arms) else []

    def pretrain(arm: Arm, seed: int, suffix: str = "", budget: str = "") -> dict:
        return setup.exp.pretrain(f"{arm.key}-seed{seed}{suffix}", progress=setup.progress,
                                  **pretrain_settings(setup.scale, arm.settings, seed, budget))

    for seed in setup.seeds:
        by_tokens = {arm.key: pretrain(arm, seed) for arm in arms if arm not in costlier}
        seconds = min(train_seconds(run) for run in by_tokens.values())
        if WALL in axes:
            on_clock = {arm.key: pretrain(arm, seed, "-wall", f"seconds={seconds}") for arm in costlier}
            for arm in arms:
                run = on_clock.get(arm.key) or by_tokens[arm.key]
                if arm not in costlier and train_seconds(run) > seconds * (1 + WALL_TOLERANCE):
                    run = pretrain(arm, seed, "-wall", f"seconds={seconds}")
                runs[WALL][arm.key].append(run)
            if costlier:
                first = {**by_tokens, **on_clock}  # every arm's run before the equal-tokens reruns
                tokens = min(tokens_seen(run) for run in first.values())
                by_tokens = {key: run if tokens_seen(run) == tokens else
                             pretrain(by_key[key], seed, f"-tokens{tokens}", f"tokens={tokens}")
                             for key, run in first.items()}
        for arm in arms:
            runs[TOKENS][arm.key].append(by_tokens[arm.key])
    return runs


def measure(setup: Setup, runs: Runs, arms: Sequence[Arm], task: str, fn: Callable[[Arm, str, int], dict]) -> Runs:
    """``fn(arm, run name, seed)`` for every run, cached as step ``task-<run>`` (a run that serves
    both axes is measured once)."""
    return {axis: {arm.key: [setup.exp.step(f"{task}-{run_name(run)}",
                                            lambda arm=arm, run=run: fn(arm, run_name(run), run["settings"]["seed"]))
                             for run in by_arm[arm.key]]
                   for arm in arms}
            for axis, by_arm in runs.items()}


def curve_entries(runs: Runs, arms: Sequence[Arm]) -> list[dict]:
    """Every distinct pretraining run, for the two loss plots."""
    entries, seen = [], set()
    for axis in runs:
        for arm in arms:
            for run in runs[axis][arm.key]:
                if run_name(run) in seen:
                    continue
                seen.add(run_name(run))
                seed = run["settings"]["seed"]
                budget = run["settings"]["budget"]
                suffix = f", {float(budget.split('=')[1]):.0f} s budget" if budget.startswith("seconds") else ""
                entries.append({"label": f"{arm.label}, seed {seed}{suffix}", "group": arm.label, "seed": seed,
                                "curve": run["curve"]})
    return entries


def parameters(setup: Setup, runs: Runs, arms: Sequence[Arm]) -> dict:
    from maskwise.model.accounting import parameter_breakdown

    return {arm.label: parameter_breakdown(setup.exp.load(run_name(runs[TOKENS][arm.key][0])).model)
            for arm in arms}


# ---- measuring ------------------------------------------------------------------------------------


def fine_tuned(setup: Setup, task: str, name: str, seed: int, pooling: str | None = None) -> dict:
    """The record of ``task`` (``recipes.run_task``) fine-tuned on run ``name`` at the setup's scale."""
    run = setup.exp.load(name)
    settings = setup.scale.task(task, run.model.cfg.family, seed, pooling, setup.progress)
    return run_task(task, run.model, run.tokenizer, settings, setup.exp.runtime, label=name).record


# ---- tables, verdicts and sentences -----------------------------------------------------------------


def key(name: str, axis: str) -> str:
    """The metrics key of measure ``name`` on ``axis``."""
    return f"{name} at {axis}"


def metric_meta(metrics: dict, meaning: dict[str, tuple[bool | None, tuple[str, float] | None]]) -> dict:
    """The report's ``metric_meta`` of ``metrics``: each key's direction and baseline, from the declared
    measure its name starts with (the longest such, so a bucketed measure can be declared apart)."""
    meta = {}
    for name, groups in metrics.items():
        measure = name.rsplit(" at ", 1)[0]
        declared = max((m for m in meaning if measure.startswith(m)), key=len, default=None)
        if declared is None:
            continue
        higher, baseline = meaning[declared]
        meta[name] = {"higher": higher}
        if baseline is not None:
            meta[name].update(baseline_name=baseline[0], baseline=dict.fromkeys(groups, baseline[1]))
    return meta


def winner_text(c: Comparison, first: str, last: str) -> str:
    return {"a": f"{first} ahead", "b": f"{last} ahead", "tie": "within noise"}[c.winner]


def table_row(name: str, axis: str, groups: dict[str, list[float]], higher: bool | None,
              digits: int = 3) -> list[str]:
    """``[measure, axis, mean ± sd per group..., first vs last group]``; ``higher`` None = no
    better direction (a cost that is reported, not judged)."""
    labels = list(groups)
    cells = [fmt_stat(groups[label], digits) for label in labels]
    if higher is None or len(labels) < 2:
        return [name, axis, *cells, ""]
    c = compare(groups[labels[0]], groups[labels[-1]], higher)
    return [name, axis, *cells, winner_text(c, labels[0], labels[-1])]


def table(labels: Sequence[str], rows: list[list[str]]) -> dict:
    first_vs_last = f"{labels[0]} vs {labels[-1]}" if len(labels) > 1 else ""
    return {"columns": ["measure", "axis", *labels, first_vs_last], "rows": rows}


def throughput_rows(runs: Runs, arms: Sequence[Arm]) -> list[list[str]]:
    rows = []
    for axis in runs:
        groups = {arm.label: [tokens_per_second(r) for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining tokens/s", axis, groups, None, 0))
        groups = {arm.label: [r["curve"][-1]["tokens_seen"] / 1000 for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining tokens seen (thousands)", axis, groups, None, 1))
        groups = {arm.label: [train_seconds(r) for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining seconds", axis, groups, None, 1))
    return rows


def on_both_axes(judge_axis: Callable[[str], tuple[str, str]], axes: Sequence[str] = AXES) -> tuple[str, str]:
    """Apply a one-axis rule on every axis: their common verdict, or inconclusive if they differ."""
    outcomes = {axis: judge_axis(axis) for axis in axes}
    found = {verdict for verdict, _ in outcomes.values()}
    detail = " ".join(f"At {axis}: {verdict}, {why}." for axis, (verdict, why) in outcomes.items())
    if len(found) == 1:
        return found.pop(), detail
    return INCONCLUSIVE, "The axes disagree. " + detail


def claims_verdict(claims: Sequence[tuple[str, bool | None]]) -> tuple[str, str]:
    """Claims that are supported (True), contradicted (False) or within noise (None): falsified if
    any is contradicted, held if all are supported, inconclusive otherwise."""
    outcome = {True: "supported", False: "contradicted", None: "within noise"}
    detail = "; ".join(f"{text}: {outcome[ok]}" for text, ok in claims)
    if any(ok is False for _, ok in claims):
        return FALSIFIED, detail
    if all(ok is True for _, ok in claims):
        return HELD, detail
    return INCONCLUSIVE, detail


def ahead(c: Comparison) -> bool | None:
    """The claim "a is ahead of b" under comparison ``c``."""
    return {"a": True, "b": False, "tie": None}[c.winner]


def moved(before: list[float], after: list[float], digits: int = 3) -> str:
    """"rose from 0.412 to 0.455" / "fell from ..." / "stayed at ...", by the means."""
    a, b = mean_and_spread(before)[0], mean_and_spread(after)[0]
    if round(a, digits) == round(b, digits):
        return f"stayed at {a:.{digits}f}"
    return f"{'rose' if b > a else 'fell'} from {a:.{digits}f} to {b:.{digits}f}"


def buckets_of(metrics: dict, prefix: str, axis: str) -> list[str]:
    """Keys of ``metrics`` that start with ``prefix`` on ``axis``, in their (length) order."""
    return [k for k in metrics if k.startswith(prefix) and k.endswith(f" at {axis}")]


def common_buckets(m: Measured, field_name: str) -> list[str]:
    """Length buckets that every run has with at least ``MIN_BUCKET`` items, in length order."""
    results = [r for by_arm in m.measured.values() for arm in m.arms for r in by_arm[arm.key]]
    first = list(results[0][field_name])
    return [b for b in first if all(b in r[field_name] and r[field_name][b]["n"] >= MIN_BUCKET for r in results)]


# ---- the pipeline -----------------------------------------------------------------------------------


def conduct(ablation: Ablation, setup: Setup, **options) -> dict:
    """Pretrain, measure, tabulate, judge: the results of ``ablation`` without the shared keys."""
    arms = ablation.arms(**options)
    runs = pretrain_arms(setup, arms, (TOKENS,) if ablation.shared else AXES)
    measured = measure(setup, runs, arms, ablation.step,
                       lambda arm, name, seed: ablation.measure(setup, arm, name, seed))
    m = Measured(setup, arms, runs, measured, parameters(setup, runs, arms))
    metrics, rows = ablation.tabulate(m)
    verdict, detail = ablation.judge(metrics, arms)
    results = {
        "title": ablation.title, "prediction": ablation.prediction, "rule": ablation.rule, "verdict": verdict,
        "verdict_detail": detail, "summary": ablation.summary(m, metrics), "metrics": metrics,
        "metric_meta": metric_meta(metrics, ablation.meaning(m)),
        "table": table(ablation.columns(arms), rows + (throughput_rows(runs, arms) if ablation.extra_rows else [])),
        "runs": curve_entries(runs, arms), "parameters": m.parameters, "notes": ablation.notes(m),
    }
    if ablation.samples is not None:
        results["samples"] = ablation.samples(m)
    return results
