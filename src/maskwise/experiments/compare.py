"""``maskwise compare``: the main job. Three families, one budget, every task each can do.

An encoder (MLM), a decoder (CLM) and an encoder-decoder (BART denoising) are pretrained for the
same wall-clock on the same data with the same block (the scale's preset: only the mask and the loss
differ) at equal parameters: ``layers`` bidirectional layers, ``layers`` causal ones, or half and
half with the FFN narrowed to pay for the decoder's cross-attention (``recipes.matched_ffn_width``).
Then each is measured, per seed, on every task it can do:

- next-token loss on held-out text (nats per character, in blocks an interval resamples), a sample;
- filling a blank (one hidden token, both sides visible to whoever can see them);
- punctuation restoration as tagging, line order as sequence classification, and retrieval (fine-tuned,
  the same steps for every family);
- verse from prose (a few lines of a verse speech printed as prose, written back in their lines; fine-tuned,
  by generation, judged on F1 over the line breaks) and the time to the first token of the answer on the
  longest test verse, a block of characters read whole; passage -> speakers extraction beside them, reported,
  not judged: the lines after a blank line name every speaker.

``--families`` may add the hybrid (``COLUMNS``): a decoder pretrained by GPT-BERT's masked next-token
prediction, measured on the same rows as its model reads (bidirectionally to fill, tag and retrieve,
causally for the next-token loss and to write), as a column beside the three that the rules do not read.

``compare_report`` turns the measurements into the table, the intervals, the three verdicts of the
rule of thumb and the summary.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from maskwise.errors import UserError
from maskwise.experiments.arms import WALL, Arm, Runs, Setup, StudyOptions, run_name
from maskwise.experiments.claims import Evidence, judge_claim
from maskwise.experiments.compare_plan import (
    BRANCH_OVERHEAD_S,
    MIN_PRETRAIN_SHARE,
    PRETRAIN_OVERHEAD_S,
    ComparePlan,
    Reader,
)
from maskwise.experiments.compare_report import (
    CLASSIC_COLUMN,
    CompareMeasures,
    by_seed,
    cannot,
    data_notes,
    evidence,
    kinds,
    objective_of,
    peak_share_row,
    result_rows,
    too_few_steps,
    verdicts_said,
    warning_text,
)
from maskwise.experiments.compare_study import CompareStudy, Measure, task_measures
from maskwise.experiments.eta import Expected
from maskwise.experiments.framework import Measured, Rule, Table
from maskwise.experiments.ladder import FINAL_ONLY, Along, along
from maskwise.experiments.runner import Experiment
from maskwise.families import FAMILIES, family_of
from maskwise.interop.hf_export import hf_config
from maskwise.recipes import CompareSettings
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FINE_TUNING
from maskwise.tasks.unit import Speeds


def hf_export_class(setup: Setup, name: str, seed: int) -> dict:
    """The HF class ``maskwise export RUN --to hf`` writes this run as, or why there is none."""
    try:
        hf, _ = hf_config(setup.exp.load(name).model)
    except UserError as error:
        return {"hf_class": None, "why": str(error)}
    return {"hf_class": hf["architectures"][0]}


# compare's columns, what ``--families`` may name: each family pretrained by the scale's objective for it, and
# the hybrid (GPT-BERT: a decoder pretrained by masked next-token prediction, which reads bidirectionally).
COLUMNS: dict[str, dict] = {
    **{f: {"family": f} for f in FAMILIES},
    "hybrid": {"family": "decoder", "objective": "hybrid"},
}


def columns_of(names: Sequence[str]) -> tuple[str, ...]:
    """``--families`` as compare's columns, in ``COLUMNS``' order: known names, none twice, and the three
    families among them (the rules compare them); refused in one line otherwise."""
    unknown = [name for name in names if name not in COLUMNS]
    if unknown:
        raise UserError(f"--families: unknown {', '.join(map(repr, unknown))}; known: {', '.join(COLUMNS)}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UserError(f"--families names {', '.join(twice)} more than once")
    missing = [f for f in FAMILIES if f not in names]
    if missing:
        raise UserError(
            f"--families must include {', '.join(FAMILIES)} (the verdicts compare them); missing {', '.join(missing)}"
        )
    return tuple(column for column in COLUMNS if column in names)


def _last_points(m: Measured, family: str) -> list[dict]:
    """The last curve point of each of ``family``'s pretraining runs."""
    return [run["curve"][-1] for run in m.runs[WALL][family]]


def export_cell(export: dict) -> str:
    """The HF class a family's run exports as, or why it has none (the export's own error, less its subject)."""
    if export["hf_class"]:
        return f"`{export['hf_class']}`"
    return "no HF class: " + export["why"].split(": ", 1)[-1]


class Compare(CompareStudy):
    """The families (``--families``' columns) pretrained here for one clock on one corpus, then measured."""

    about = "encoder vs decoder vs encoder-decoder at one wall-clock budget, every task each can do"
    title = "maskwise compare: encoder vs decoder vs encoder-decoder at one budget"
    options = ("data", "families")
    kept_as = "compare"
    columns_are = "families"

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return tuple(Arm(f, f, {**COLUMNS[f], "data": options.data}) for f in options.families)

    def recorded(self, options: StudyOptions) -> dict:
        return {"families": list(options.families)}

    def experiment(self, out: str | Path, overwrite: bool, runtime: Runtime | None, plan: ComparePlan) -> Experiment:
        return Experiment(out, overwrite, runtime)

    def measures(self, setup: Setup, name: str, seed: int) -> dict[str, Measure]:
        """Every measure the run's model can take (``compare_study.task_measures``, and its HF export class), less
        what ``cannot`` refuses its family."""
        kind = setup.exp.kind(name)
        every = {**task_measures(setup.plan, setup.recipe), "export": ("export", hf_export_class)}
        return {what: fn for what, (task_kind, fn) in every.items() if cannot(kind, task_kind) is None}

    def points(self, setup: Setup, runs: Runs, arms: Sequence[Arm]) -> dict[float, Runs]:
        """The ladder's shorter points: each run's kept point at each fraction below 1, cooled down as a run of that
        fraction of the clock (``Experiment.branch``), named ``<run>-at<fraction>``."""
        return {
            fraction: {
                WALL: {
                    arm.key: [
                        {
                            **setup.exp.branch(
                                f"{run_name(run)}-at{fraction:g}", run_name(run), fraction, setup.progress
                            ),
                            "budget": f"seconds={fraction * setup.recipe.seconds:g}",
                        }
                        for run in runs[WALL][arm.key]
                    ]
                    for arm in arms
                }
            }
            for fraction in setup.recipe.shorter_points
        }

    def points_of(self, s: CompareSettings) -> int:
        return len(s.ladder)

    def readers(
        self, plan: ComparePlan, s: CompareSettings, arms: Sequence[Arm], body: Speeds, runtime: Runtime
    ) -> dict[str, Reader]:
        """Every family at the scale's body's speeds, in the scale tokenizer's tokens a character."""
        tokens_per_char = 1.0 if s.tokenizer == "char" else 0.25
        return {a.key: Reader(a.key, family_of(a.settings["family"]), body, tokens_per_char) for a in arms}

    def own_steps(self, plan: ComparePlan, readers: dict[str, Reader], seeds: int) -> list[Expected]:
        """Each run's HF export class (a config read, no time)."""
        return [Expected("export", len(readers) * seeds, 0.0)]

    def pretraining(
        self, plan: ComparePlan, s: CompareSettings, runs: int, rest: float, fit: bool
    ) -> tuple[CompareSettings, float | None, list[Expected]]:
        """Every run on the scale's clock; with the user's tasks and ``fit``, shortened (to no less than
        ``MIN_PRETRAIN_SHARE`` of it) where the estimate would pass ``s.minutes``."""
        fitted, seconds = None, s.seconds
        if fit and plan.tasks and runs * (s.seconds + PRETRAIN_OVERHEAD_S) + rest > 60 * s.minutes:
            fitted = s.seconds
            seconds = max(MIN_PRETRAIN_SHARE * s.seconds, (60 * s.minutes - rest) / runs - PRETRAIN_OVERHEAD_S)
        settings = replace(s, seconds=round(seconds))
        shorter = settings.shorter_points
        cooldowns = [settings.cooldown * f * settings.seconds + BRANCH_OVERHEAD_S for f in shorter]
        return (
            settings,
            fitted,
            [
                Expected("pretrain", runs, settings.seconds + PRETRAIN_OVERHEAD_S),
                *([Expected("cooldown", runs * len(shorter), sum(cooldowns) / len(shorter))] if shorter else []),
            ],
        )

    def tabulate(self, m: Measured) -> Table[CompareMeasures]:
        """Every row's per-item scores and per-seed means by column; the table: pretraining, every row with its
        intervals and baseline, the time to first token."""
        e, kind_of, arms = evidence(m), kinds(m), m.arms
        seeds, measured = m.setup.seeds, by_seed(m)

        def mean_of(family: str, key: str) -> float:
            points = _last_points(m, family)
            return sum(p[key] for p in points) / len(points)

        seeds_note = f"mean of {len(seeds)} seeds" if len(seeds) > 1 else "one seed"
        rows = [
            ["pretraining objective", *[objective_of(m, a) for a in arms], "", ""],
            ["parameters", *[f"{m.parameters[a.label]['total']:,}" for a in arms], "", ""],
            [
                "exports to (`maskwise export RUN --to hf OUT`)",
                *[export_cell(measured[seeds[0]][a.key]["export"]) for a in arms],
                "",
                "",
            ],
            [
                f"optimizer steps in pretraining ({seeds_note})",
                *[f"{mean_of(a.key, 'step'):,.0f}" for a in arms],
                "",
                "",
            ],
            [
                f"tokens seen in pretraining ({seeds_note})",
                *[f"{mean_of(a.key, 'tokens_seen'):,.0f}" for a in arms],
                "",
                "",
            ],
            ["pretraining wall-clock (s)", *[f"{mean_of(a.key, 'wall_s'):.0f}" for a in arms], "", ""],
            *filter(None, [peak_share_row(m)]),
            ["final validation loss (own objective)", *[f"{mean_of(a.key, 'val_loss'):.3f}" for a in arms], "", ""],
        ]

        def why_not(column: str, what: str) -> str | None:
            """Why ``column``'s family cannot take a row of kind ``what``, or None."""
            return cannot(kind_of[column], what)

        metrics, measured_rows = result_rows(m, e, why_not)
        ladder = self.along(m, e)
        trend_cells = [ladder.cell(row) for row in e.rows] if ladder is not None else ["one point"] * len(e.rows)
        final_only = [FINAL_ONLY] * (len(measured_rows) - len(e.rows))  # the first-token rows
        table = [*[[*r, ""] for r in rows], *[[*r, c] for r, c in zip(measured_rows, [*trend_cells, *final_only])]]
        return Table(CompareMeasures(e, metrics, ladder), table)

    def along(self, m: Measured, final: Evidence) -> Along | None:
        """Every row at each point of the ladder, read by the trend's rules; None with one point."""
        if not m.points:
            return None
        fractions = sorted(m.points)
        points = [evidence(dataclasses.replace(m, runs=m.points[f][0], measured=m.points[f][1])) for f in fractions]
        s = m.setup.recipe
        return along([f * s.seconds for f in [*fractions, 1.0]], [*points, final])

    def header(self, groups: Sequence[str]) -> list[str]:
        return ["task", *groups, CLASSIC_COLUMN, "best", "trend along compute (per doubling)"]

    def judge(self, rule: Rule, measures: CompareMeasures, m: Measured) -> tuple[str, list[str]]:
        """The rule's claim at the final point (``CompareStudy.judge``), and its trend along the ladder beside it."""
        verdict, details = judge_claim(rule.claim, measures.evidence)
        said = measures.along.said(rule.claim) if measures.along is not None else None
        return verdict, [*details, said] if said else details

    def sections(self, m: Measured, measures: CompareMeasures) -> dict:
        """The ladder: each point's compute (seconds, FLOPs) and validation loss per family, and the rows along it."""
        if measures.along is None:
            return {}
        fractions = sorted(m.points)
        at = [*[m.points[f][0] for f in fractions], m.runs]
        compute = [
            {
                "fraction": fraction,
                "seconds": fraction * m.setup.recipe.seconds,
                "families": {
                    a.key: {
                        key: statistics.fmean(run["curve"][-1][key] for run in runs[WALL][a.key])
                        for key in ("wall_s", "flops", "tokens_seen", "val_loss")
                    }
                    for a in m.arms
                },
            }
            for fraction, runs in zip([*fractions, 1.0], at)
        ]
        return {"ladder": {"compute": compute, **measures.along.to_json([a.key for a in m.arms])}}

    def warning(self, m: Measured) -> str:
        """The warning above everything when a run got fewer optimizer steps than the recipe needs."""
        s, exp = m.setup.recipe, m.setup.exp
        pre = {run_name(run): run for by_arm in m.runs.values() for runs in by_arm.values() for run in runs}
        short = too_few_steps(pre, s.min_steps)
        return warning_text(short, s.min_steps, exp.runtime, exp.load_at_start, os.cpu_count()) if short else ""

    def summary(self, m: Measured, measures: CompareMeasures) -> str:
        """The clock, then the verdicts and each row's best (``compare_report.verdicts_said``)."""
        said = verdicts_said(m, measures.evidence)
        return (
            f"{'Not evidence (too few pretraining steps, see the warning). ' if self.warning(m) else ''}"
            f"At {m.setup.recipe.seconds:.0f} s of pretraining per family on this machine, {said}"
        )

    def notes(self, m: Measured) -> list[str]:
        """The data, what compares across objectives, the intervals, what is held equal, and any hybrid column."""
        return [
            *data_notes(m.setup.plan.described),
            (
                "Validation losses of different objectives are not comparable to each other (MLM: per masked "
                "token; CLM: per token; span corruption and denoising: per target token); the held-out nats/char "
                "row is."
            ),
            (
                "Intervals: 95% percentile bootstrap over test items (and over seeds when there are several); "
                "'best' needs paired intervals that separate one family from each other and from the baseline, "
                "otherwise the cell says 'at chance' (no family clears the baseline) or 'within noise'."
            ),
            (
                "Every family uses the same block; only the attention mask and the loss differ. Fine-tuning, one rule "
                f"for every family and task: {FINE_TUNING.described()}. Where a task's rows are more than the scale's "
                "budget of steps affords at those epochs, fewer rows are drawn (the data notes say so), never fewer "
                "epochs."
            ),
            *[
                f"The {a.label} column ({objective_of(m, a)} pretraining on the {a.settings['family']} family): every "
                "row its model can do, read as it reads (bidirectionally to fill a blank, its [MASK] answered from the "
                "position before it, to tag and to retrieve; causally for the next-token loss and to write); the "
                "verdicts and the 'best' column compare the three families only, and the summary says where the "
                "intervals separate it from them."
                for a in m.arms
                if a.key not in FAMILIES
            ],
        ]


COMPARE = Compare()
