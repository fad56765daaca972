"""What ``compare`` and every ablation share: seeds, measuring, tables, verdicts, results (arms and
their axes: ``arms``).

A study (``compare``, ``compare --model``, or an ablation module) is a subclass of ``Study``: its arms, what
one run is measured on (and, optionally, what the arms of one seed are measured on together), the metrics and
rows it reads from those measures, its coded rules, its summary sentence and notes. ``conduct`` runs
the pipeline they all share: pretrain every arm on the study's axes for every seed (or open the models
given), measure each run once (cached), tabulate, judge each rule, and assemble the results; ``write``
adds the machine, the time and the settings, and renders the report. One run naming (``<arm>-seed<N>``), one
results schema.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from maskwise.experiments.arms import (
    AXES,
    Arm,
    Runs,
    Setup,
    StudyOptions,
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
from maskwise.recipes import Tuning
from maskwise.tasks.run import run_task

SHARED = "equal tokens and wall-clock"  # the axis name when every arm reads the same pretrained model
MIN_BUCKET = 10  # a length bucket needs this many test items before a rule reads it
RECALL = "recall@10"  # ICT retrieval over the test plays' speeches
TAG_F1 = "tagging F1"  # micro F1 over the test words: the right tag on the right word (the plays: the mark after it)


@dataclass(frozen=True)
class Measured:
    """A study's runs (pretrained, or the models given) and each run's measures, handed to its methods."""

    setup: Setup
    arms: tuple[Arm, ...]
    runs: Runs
    measured: Runs
    parameters: dict  # arm label -> parameter breakdown
    per_seed: dict[int, dict] = dataclasses.field(default_factory=dict)  # seed -> the arms' joint measures
    # compare's ladder: fraction of the budget -> (the shorter runs, their measures), as ``runs`` and ``measured``
    points: dict[float, tuple[Runs, Runs]] = dataclasses.field(default_factory=dict)

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


class Measures(ABC):
    """What a study's ``tabulate`` hands its rules and its summary: a typed value per study, so that a rule reads
    fields mypy checks rather than string keys; its JSON is the results' ``metrics``."""

    @abstractmethod
    def to_json(self) -> dict[str, dict[str, list[float]]]:
        """The results' ``metrics``: ``"<measure> at <axis>"`` (``key``) -> group -> per-seed values."""


M = TypeVar("M", bound=Measures)


@dataclass(frozen=True)
class Table(Generic[M]):
    """A study's tabulated runs: the measures its rules read, and the report table's rows."""

    measures: M
    rows: list[list[str]]


@dataclass(frozen=True)
class Rule:
    """One coded verdict, in words: the study judges it (``Study.judge``) -> (held / falsified / inconclusive, why)."""

    prediction: str
    rule: str  # the falsification rule, in words
    claim: str = ""  # a short name, where a study judges several claims


class Study(ABC, Generic[M]):
    """``compare`` or one ablation: its plain data as class attributes, what it measures, tabulates and says as
    methods (the abstract ones every study declares, the others with the default most take); ``conduct`` runs it."""

    about: str  # one line for the CLI's list
    title: str
    rules: tuple[Rule, ...]
    step: str  # prefix of the cached measurement steps
    options: tuple[str, ...] = ()  # the fields of ``StudyOptions`` it reads
    # The axes every arm pretrains on: both, or equal tokens only (one model per seed, or a question about
    # inference), or equal wall-clock only (compare: every arm for the scale's own seconds).
    axes: tuple[str, ...] = AXES
    extra_rows: bool = True  # append the pretraining throughput rows
    # Pretraining tokens per arm as a multiple of the ablation scale's: a skill that emerges later (copying)
    # needs more of them for the baseline arm to learn at all.
    tokens_factor: float = 1.0
    # The task kinds whose fine-tuned jobs a user's ``--task`` of that kind may replace the plays' slice in.
    reads: tuple[str, ...] = ()
    # Optimizer steps per pretraining token as a multiple of the recipe's (its batch divided by this): a
    # sparser learning signal (replaced-token detection's one bit a token) needs more updates to start.
    steps_factor: int = 1
    # Its fine-tunes' settings at every scale, task name -> fields (pooling classifies word order, which mean
    # pooling learns on every seed; on line order it stayed at one class): the scale sets how long, the study what.
    tasks: ClassVar[Tuning] = {}
    # Where the arms of one seed are also measured together (``measure_seed``): the step's name, cached as
    # ``<name>-seed<N>`` (compare's time to first token); None: they are not.
    per_seed_step: str | None = None

    @abstractmethod
    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        """The arms (columns) for the study's ``options`` (the fields it names in ``options``), refused in one line
        where an option is wrong."""

    @abstractmethod
    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """Run ``name``'s measures (``arm``'s model for ``seed``), as JSON."""

    @abstractmethod
    def tabulate(self, m: Measured) -> Table[M]:
        """The measures the rules read, and the table's rows."""

    @abstractmethod
    def judge(self, rule: Rule, measures: M, m: Measured) -> tuple[str, str | list[str]]:
        """``rule`` (one of ``rules``) judged on the measures: (held / falsified / inconclusive, why)."""

    @abstractmethod
    def summary(self, m: Measured, measures: M) -> str:
        """The report's summary sentence."""

    @abstractmethod
    def notes(self, m: Measured) -> list[str]:
        """The report's notes: what was measured and how to read it."""

    def runs(self, setup: Setup, arms: Sequence[Arm]) -> Runs:
        """The models the arms are measured on: each pretrained on the study's axes for every seed, each group of
        ``clock_groups`` on its own equal-wall-clock budget."""
        return pretrain_arms(setup, arms, self.axes, self.clock_groups(arms))

    def points(self, setup: Setup, runs: Runs, arms: Sequence[Arm]) -> dict[float, Runs]:
        """Shorter runs of the same arms, by fraction of their budget, each measured as the runs are (compare's
        compute ladder); none by default."""
        return {}

    def clock_groups(self, arms: Sequence[Arm]) -> Sequence[Sequence[Arm]] | None:
        """The arms the rules compare with one another, each group on its own clock (so that one arm's speed does
        not set the clock of arms it is never compared with); None: all of them together."""
        return None

    def measure_seed(self, setup: Setup, names: dict[str, str], seed: int) -> dict:
        """What the arms of ``seed`` (arm key -> run name) are measured on together, where ``per_seed_step``
        names a step: nothing unless a study says what."""
        return {}

    def columns(self, arms: Sequence[Arm]) -> list[str]:
        """The table's groups: the arms' labels."""
        return [a.label for a in arms]

    def header(self, groups: Sequence[str]) -> list[str]:
        """The table's columns from its groups."""
        return header(groups)

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """What the plotted measures mean, for their plots: measure name (a metrics key before " at ", or its start)
        -> (higher is better, None for a cost; the trivial baseline's (name, value) or None)."""
        return {}

    def meta(self, m: Measured, measures: M) -> dict:
        """The report's metric_meta: each metric's direction and baseline, from ``meaning``."""
        return metric_meta(measures.to_json(), self.meaning(m))

    def warning(self, m: Measured) -> str:
        """A line above everything (too few pretraining steps, models of very different sizes); empty: none."""
        return ""

    def samples(self, m: Measured) -> dict[str, str] | None:
        """Texts the models wrote, by name; None: the study shows none."""
        return None

    def sections(self, m: Measured, measures: M) -> dict:
        """Results keys beyond the shared ones, each rendered by the report (compare --model: its cost table; compare:
        its ladder)."""
        return {}


def measure(
    setup: Setup, runs: Runs, arms: Sequence[Arm], task: str, fn: Callable[[Setup, Arm, str, int], dict]
) -> Runs:
    """``fn(setup, arm, run name, seed)`` for every run, cached as step ``task-<run>`` (a run that serves
    both axes is measured once)."""
    return {
        axis: {
            arm.key: [
                setup.exp.step(
                    f"{task}-{run_name(run)}", partial(fn, setup, arm, run_name(run), run["settings"]["seed"])
                )
                for run in by_arm[arm.key]
            ]
            for arm in arms
        }
        for axis, by_arm in runs.items()
    }


def curve_entries(runs: Runs, arms: Sequence[Arm]) -> list[dict]:
    """Every distinct pretraining run, for the two loss plots (a model given, not pretrained, has no curve)."""
    entries, seen = [], set()
    for axis in runs:
        for arm in arms:
            for run in runs[axis][arm.key]:
                if "curve" not in run or run_name(run) in seen:
                    continue
                seen.add(run_name(run))
                seed, budget = run["settings"]["seed"], run["budget"]
                suffix = f", {float(budget.split('=')[1]):.0f} s budget" if budget.startswith("seconds") else ""
                phases = [(run["before"], ", phase 1"), (run, ", phase 2")] if "before" in run else [(run, "")]
                entries += [
                    {
                        "label": f"{arm.label}, seed {seed}{suffix}{phase}",
                        "group": arm.label,
                        "seed": seed,
                        "curve": part["curve"],
                    }
                    for part, phase in phases
                ]
    return entries


def parameters(setup: Setup, runs: Runs, arms: Sequence[Arm]) -> dict:
    return {
        arm.label: parameter_breakdown(setup.exp.load(run_name(next(iter(runs.values()))[arm.key][0])).model)
        for arm in arms
    }


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


def fine_tuned_body(
    setup: Setup, task: str, model, tokenizer, seed: int, label: str, pooling: str | None = None
) -> dict:
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
    meta: dict[str, dict[str, Any]] = {}
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


def table_row(name: str, axis: str, groups: dict[str, list[float]], higher: bool | None, digits: int = 3) -> list[str]:
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
    """ "rose from 0.412 to 0.455" / "fell from ..." / "stayed at ...", by the means."""
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


def judged(study: Study[M], measures: M, m: Measured) -> list[dict]:
    """Each of the study's rules judged on ``measures``: the results' ``verdicts``."""
    verdicts = []
    for rule in study.rules:
        verdict, why = study.judge(rule, measures, m)
        verdicts.append(
            {
                "claim": rule.claim,
                "prediction": rule.prediction,
                "rule": rule.rule,
                "verdict": verdict,
                "details": [why] if isinstance(why, str) else list(why),
            }
        )
    return verdicts


def conduct(study: Study[M], setup: Setup) -> dict:
    """Pretrain (or open), measure (and the shorter runs of ``Study.points``), tabulate, judge: the results of
    ``study`` (``write`` adds the shared keys)."""
    arms = study.arms(setup.options)
    runs = study.runs(setup, arms)
    measured = measure(setup, runs, arms, study.step, study.measure)
    per_seed = {}
    if study.per_seed_step is not None:
        for i, seed in enumerate(setup.seeds):
            names = {arm.key: run_name(runs[study.axes[0]][arm.key][i]) for arm in arms}
            per_seed[seed] = setup.exp.step(
                f"{study.per_seed_step}-seed{seed}", partial(study.measure_seed, setup, names, seed)
            )
    points = {
        fraction: (shorter, measure(setup, shorter, arms, study.step, study.measure))
        for fraction, shorter in study.points(setup, runs, arms).items()
    }
    m = Measured(setup, arms, runs, measured, parameters(setup, runs, arms), per_seed, points)
    table = study.tabulate(m)
    results = {
        "title": study.title,
        "warning": study.warning(m),
        "verdicts": judged(study, table.measures, m),
        "summary": study.summary(m, table.measures),
        "metrics": table.measures.to_json(),
        "metric_meta": study.meta(m, table.measures),
        "table": {
            "columns": study.header(study.columns(arms)),
            "rows": table.rows + (throughput_rows(runs, arms) if study.extra_rows else []),
        },
        "runs": curve_entries(runs, arms),
        "parameters": m.parameters,
        "notes": study.notes(m),
    }
    samples = study.samples(m)
    if samples is not None:
        results["samples"] = samples
    results.update(study.sections(m, table.measures))
    return results


def write(exp: Experiment, results: dict, kind: str, settings: dict) -> Path:
    """``results`` with what every study's carry (its kind, the machine, the time, the settings), written
    to the folder's results.json and rendered as its report; returns the folder."""
    results.update(
        kind=kind,
        machine={**machine_info(exp.runtime), "load_at_start": exp.load_at_start},
        wall_s=exp.elapsed(),
        settings=settings,
    )
    write_results(exp.out, results)
    render(exp.out)
    return exp.out
