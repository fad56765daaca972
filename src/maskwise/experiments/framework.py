"""What ``compare`` and every ablation share: seeds, measuring, tables, verdicts, results (arms and
their axes: ``arms``).

A study (``compare``, or an ablation module) only declares a ``Study``: its arms, what one run is
measured on (and, optionally, what the arms of one seed are measured on together), the metrics and
rows it reads from those measures, its coded rules, its summary sentence and notes. ``conduct`` runs
the pipeline they all share: pretrain every arm on the study's axes for every seed, measure each run
once (cached), tabulate, judge each rule, and assemble the results; ``write`` adds the machine, the
time and the settings, and renders the report. One run naming (``<arm>-seed<N>``), one results schema.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from maskwise.experiments.arms import (
    AXES,
    Arm,
    Runs,
    Setup,
    matmul_peak_shares,
    pretrain_arms,
    run_name,
    tokens_per_second,
    tokens_seen,
    train_seconds,
)
from maskwise.experiments.report import fmt_stat, render, write_results
from maskwise.experiments.runner import Experiment, machine_info
from maskwise.experiments.verdict import (
    FALSIFIED,
    HELD,
    INCONCLUSIVE,
    Comparison,
    compare,
    mean_and_spread,
)
from maskwise.model.accounting import parameter_breakdown
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.run import run_task

SHARED = "equal tokens and wall-clock"  # the axis name when every arm reads the same pretrained model
MIN_BUCKET = 10  # a length bucket needs this many test items before a rule reads it
RECALL = "recall@10"  # ICT retrieval over the test plays' speeches
TAG_F1 = "tagging F1"  # micro F1 over the test words: the right tag on the right word (the plays: the mark after it)


@dataclass(frozen=True)
class Measured:
    """A study's pretraining runs and each run's measures, handed to its declaration."""

    setup: Setup
    arms: tuple[Arm, ...]
    runs: Runs
    measured: Runs
    parameters: dict  # arm label -> parameter breakdown
    per_seed: dict[int, dict] = dataclasses.field(default_factory=dict)  # seed -> the arms' joint measures

    def per_arm(self, axis: str, get: Callable[[dict], float]) -> dict[str, list[float]]:
        """``get`` of every run's measures on ``axis``, by arm label."""
        return {arm.label: [get(m) for m in self.measured[axis][arm.key]] for arm in self.arms}

    def final(self, axis: str, get: Callable[[dict], float]) -> dict[str, list[float]]:
        """``get`` of every run's last curve point on ``axis``, by arm label."""
        return {arm.label: [get(r["curve"][-1]) for r in self.runs[axis][arm.key]] for arm in self.arms}

    def first(self, arm: Arm) -> dict:
        """The first seed's measures of ``arm`` on the first axis (for baselines and samples)."""
        return self.measured[next(iter(self.measured))][arm.key][0]


def header(labels: Sequence[str]) -> list[str]:
    """An ablation table's columns: the measure, its axis, each group, and the first group vs the last."""
    return ["measure", "axis", *labels, f"{labels[0]} vs {labels[-1]}" if len(labels) > 1 else ""]


@dataclass(frozen=True)
class Rule:
    """One coded verdict: ``judge(evidence, arms)`` -> (held / falsified / inconclusive, why)."""

    prediction: str
    rule: str  # the falsification rule, in words
    judge: Callable[[Any, Sequence[Arm]], tuple[str, str | list[str]]]
    claim: str = ""  # a short name, where a study judges several claims


@dataclass(frozen=True)
class Study:
    """``compare`` or one ablation, declared; ``conduct`` runs it."""

    about: str  # one line for the CLI's list
    title: str
    rules: tuple[Rule, ...]
    step: str  # prefix of the cached measurement steps
    arms: Callable[..., tuple[Arm, ...]]  # (**options) -> the arms
    measure: Callable[[Setup, Arm, str, int], dict]  # (setup, arm, run name, seed) -> that run's measures
    tabulate: Callable[[Measured], tuple[dict, list]]  # -> (metrics the rules read, table rows)
    summary: Callable[[Measured, dict], str]  # (measured, metrics) -> the summary sentence
    notes: Callable[[Measured], list[str]]
    options: tuple[str, ...] = ()  # keyword options ``arms`` accepts
    # The axes every arm pretrains on: both, or equal tokens only (one model per seed, or a question about
    # inference), or equal wall-clock only (compare: every arm for the scale's own seconds).
    axes: tuple[str, ...] = AXES
    columns: Callable[[Sequence[Arm]], list[str]] = lambda arms: [a.label for a in arms]  # the table's groups
    header: Callable[[Sequence[str]], list[str]] = header  # the groups -> the table's columns
    samples: Callable[[Measured], dict] | None = None
    extra_rows: bool = True  # append the pretraining throughput rows
    # What the plotted measures mean, for their plots: measure name (a metrics key before " at ", or
    # its start) -> (higher is better, None for a cost; the trivial baseline's (name, value) or None).
    meaning: Callable[[Measured], dict[str, tuple[bool | None, tuple[str, float] | None]]] = lambda m: {}
    # Optional: what the arms of one seed are measured on together, ``(step name, (setup, {arm key: run
    # name}, seed) -> measures)``, cached as ``<step name>-seed<N>`` (compare's time to first token).
    per_seed: tuple[str, Callable[[Setup, dict[str, str], int], dict]] | None = None
    # What the rules read: the metrics, unless this makes something else of them (compare: per-item scores).
    evidence: Callable[[Measured, dict], Any] | None = None
    # The report's metric_meta, where ``meaning`` cannot say it (compare: per-family baselines, intervals).
    meta: Callable[[Measured, dict], dict] | None = None
    warning: Callable[[Measured], str] | None = None  # a line above everything (too few pretraining steps)
    # Pretraining tokens per arm as a multiple of the ablation scale's: a skill that emerges later (copying)
    # needs more of them for the baseline arm to learn at all.
    tokens_factor: float = 1.0
    # The task kinds whose fine-tuned jobs a user's ``--task`` of that kind may replace the plays' slice in.
    reads: tuple[str, ...] = ()
    # Optimizer steps per pretraining token as a multiple of the recipe's (its batch divided by this): a
    # sparser learning signal (replaced-token detection's one bit a token) needs more updates to start.
    steps_factor: int = 1
    # Its fine-tunes' settings at every scale, its kind's config type -> fields (pooling classifies word order, which mean
    # pooling learns on every seed; on line order it stayed at one class): the scale sets how long, the study what.
    tasks: dict[type[FinetuneConfig], dict[str, Any]] = dataclasses.field(default_factory=dict)
    # Optional: the arms the rules compare with one another, each group on its own equal-wall-clock budget
    # (``arms.pretrain_arms``), so that one arm's speed does not set the clock of arms it is never compared with.
    clock_groups: Callable[[Sequence[Arm]], Sequence[Sequence[Arm]]] | None = None
    # Optional: results keys beyond the shared ones, each rendered by the report (compare --model: its cost table).
    sections: Callable[[Measured], dict] | None = None


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
                seed, budget = run["settings"]["seed"], run["budget"]
                suffix = f", {float(budget.split('=')[1]):.0f} s budget" if budget.startswith("seconds") else ""
                phases = [(run["before"], ", phase 1"), (run, ", phase 2")] if "before" in run else [(run, "")]
                entries += [{"label": f"{arm.label}, seed {seed}{suffix}{phase}", "group": arm.label, "seed": seed,
                             "curve": part["curve"]} for part, phase in phases]
    return entries


def parameters(setup: Setup, runs: Runs, arms: Sequence[Arm]) -> dict:
    return {arm.label: parameter_breakdown(setup.exp.load(run_name(next(iter(runs.values()))[arm.key][0])).model)
            for arm in arms}


# ---- measuring ------------------------------------------------------------------------------------


def fine_tuned(setup: Setup, task: str, name: str, seed: int, pooling: str | None = None) -> dict:
    """The record of ``task`` (``tasks.run.run_task``) fine-tuned on run ``name`` at the setup's scale, as JSON (what
    an experiment caches; its task's ``Record.from_json`` reads it back)."""
    run = setup.exp.load(name)
    return fine_tuned_body(setup, task, run.model, run.tokenizer, seed, name, pooling)


def task_setting(setup: Setup, task: str, seed: int) -> tuple[Any, Any]:
    """(config, the rows ``run_task`` is given) of fine-tune ``task`` for ``seed`` at the setup's scale: the user's
    task of that kind where the setup's plan holds one (``ablate --task``), else the plays' slice (rows None)."""
    if setup.plan is None:
        return setup.recipe.task(task, seed, setup.progress), None
    user = setup.plan.task_of(task)
    return setup.plan.fine_tune(user.spec.name if user else task, task, user, setup.recipe, seed, setup.progress)


def fine_tuned_body(setup: Setup, task: str, model, tokenizer, seed: int, label: str,
                    pooling: str | None = None) -> dict:
    """The record of ``task`` fine-tuned on ``model`` (``run_task`` moves it to the experiment's device) at the
    setup's scale (``task_setting``), as JSON."""
    cfg, data = task_setting(setup, task, seed)
    if pooling is not None:
        cfg = replace(cfg, pooling=pooling)
    return run_task(cfg, model, tokenizer, setup.exp.runtime, data=data, label=label).record.to_json()


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


def throughput_rows(runs: Runs, arms: Sequence[Arm]) -> list[list[str]]:
    rows = []
    for axis in runs:
        groups = {arm.label: [tokens_per_second(r) for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining tokens/s", axis, groups, None, 0))
        groups = {arm.label: [tokens_seen(r) / 1000 for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining tokens seen (thousands)", axis, groups, None, 1))
        groups = {arm.label: [train_seconds(r) for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining seconds", axis, groups, None, 1))
        if shares := matmul_peak_shares(runs[axis], arms):
            groups = {arm.label: [100 * share for share in shares[arm.key]] for arm in arms}
            rows.append(table_row("pretraining % of the matmul peak", axis, groups, None, 0))
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


def judged(rules: Sequence[Rule], evidence: Any, arms: Sequence[Arm]) -> list[dict]:
    """Each rule's verdict on ``evidence``: the results' ``verdicts``."""
    verdicts = []
    for rule in rules:
        verdict, why = rule.judge(evidence, arms)
        verdicts.append({"claim": rule.claim, "prediction": rule.prediction, "rule": rule.rule, "verdict": verdict,
                         "details": [why] if isinstance(why, str) else list(why)})
    return verdicts


def conduct(study: Study, setup: Setup, **options) -> dict:
    """Pretrain, measure, tabulate, judge: the results of ``study`` (``write`` adds the shared keys)."""
    arms = study.arms(**options)
    groups = None if study.clock_groups is None else study.clock_groups(arms)
    runs = pretrain_arms(setup, arms, study.axes, groups)
    measured = measure(setup, runs, arms, study.step, lambda arm, name, seed: study.measure(setup, arm, name, seed))
    per_seed = {}
    if study.per_seed is not None:
        step, joint = study.per_seed
        for i, seed in enumerate(setup.seeds):
            names = {arm.key: run_name(runs[study.axes[0]][arm.key][i]) for arm in arms}
            per_seed[seed] = setup.exp.step(f"{step}-seed{seed}", lambda n=names, s=seed: joint(setup, n, s))
    m = Measured(setup, arms, runs, measured, parameters(setup, runs, arms), per_seed)
    metrics, rows = study.tabulate(m)
    evidence = metrics if study.evidence is None else study.evidence(m, metrics)
    results = {
        "title": study.title, "warning": study.warning(m) if study.warning else "",
        "verdicts": judged(study.rules, evidence, arms), "summary": study.summary(m, metrics), "metrics": metrics,
        "metric_meta": study.meta(m, metrics) if study.meta else metric_meta(metrics, study.meaning(m)),
        "table": {"columns": study.header(study.columns(arms)),
                  "rows": rows + (throughput_rows(runs, arms) if study.extra_rows else [])},
        "runs": curve_entries(runs, arms), "parameters": m.parameters, "notes": study.notes(m),
    }
    if study.samples is not None:
        results["samples"] = study.samples(m)
    if study.sections is not None:
        results.update(study.sections(m))
    return results


def write(exp: Experiment, results: dict, kind: str, settings: dict) -> Path:
    """``results`` with what every study's carry (its kind, the machine, the time, the settings), written
    to the folder's results.json and rendered as its report; returns the folder."""
    results.update(kind=kind, machine={**machine_info(exp.runtime), "load_at_start": exp.load_at_start},
                   wall_s=exp.elapsed(), settings=settings)
    write_results(exp.out, results)
    render(exp.out)
    return exp.out
