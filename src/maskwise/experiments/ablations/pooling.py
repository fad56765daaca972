"""Ablation pooling: [CLS] vs mean pooling on one pretrained encoder, for classification (word order: is a line
printed as written or with its words after the first shuffled) and retrieval."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean as mean
from typing import ClassVar

from maskwise.experiments.ablations.jobs import (
    MLM_ENCODER,
    RETRIEVAL,
    UNTRAINED,
    Job,
    JobScores,
    RecordJob,
    with_control,
)
from maskwise.experiments.arms import TOKENS, Arm, Setup, StudyOptions
from maskwise.experiments.framework import (
    RECALL,
    SHARED,
    Measured,
    Measures,
    Rule,
    Study,
    Table,
    ahead,
    claims_verdict,
    fine_tuned,
    key,
    moved,
    table_row,
)
from maskwise.experiments.report import fmt_stat
from maskwise.recipes import Tuning
from maskwise.tasks.classify import ClassifyConfig, ClassifyRecord
from maskwise.tasks.record import Record

POOLINGS = ("cls", "mean")
CLOSE = 0.02  # accuracy difference that still counts as "close" when the paired interval excludes zero
ORDER_ACC = "word-order accuracy"


class WordOrder(RecordJob[ClassifyRecord]):
    """A line of a speech as written, or with its words after the first shuffled: accuracy against the majority class.
    Its control fine-tunes with the encoder's default pooling, [CLS], so it rides on [CLS]'s record."""

    name = ORDER_ACC
    step = "classify"
    higher = True

    def decode(self, stored: dict) -> ClassifyRecord:
        return ClassifyRecord.from_json(stored)

    def score(self, record: ClassifyRecord) -> float:
        return record.accuracy

    def baseline(self, record: ClassifyRecord) -> tuple[str, float]:
        return "majority class", record.baseline.accuracy

    def more(self, record: ClassifyRecord) -> list[tuple[str, float]]:
        return [("word-order macro-F1", record.macro_f1)]


WORD_ORDER = WordOrder()

RULE = (
    f"Two claims, on the same pretrained encoders (so equal tokens and equal wall-clock coincide). "
    f"(1) Word-order accuracy (a line of a speech as written, or its words after the first shuffled) with [CLS] "
    f"and with mean pooling is close: their paired interval includes zero or the means differ by at most {CLOSE} "
    "(contradicted otherwise). (2) Mean pooling is ahead on ICT recall@10 (contradicted if [CLS] is ahead). A claim "
    f"is evidence only where the pooling ahead clears its baselines (the majority class, a random ranking, and the "
    f"same block never pretrained, fine-tuned the same way): two poolings at chance are close and prove nothing. "
    f"Falsified if a claim is contradicted, held if both are supported, inconclusive otherwise."
)


@dataclass(frozen=True)
class PoolingMeasures(Measures):
    """Both tasks' scores by pooling on the one encoder, each with its baseline and control."""

    word_order: JobScores
    retrieval: JobScores

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {key(ORDER_ACC, SHARED): self.word_order.to_json(), key(RECALL, SHARED): self.retrieval.to_json()}


def finetune_seconds(record: Record) -> float:
    """A fine-tune's seconds (``run_task`` sets them on every record it returns)."""
    assert record.finetune_s is not None, "a record of run_task's"
    return record.finetune_s


class Pooling(Study[PoolingMeasures]):
    """[CLS] vs mean pooling on one pretrained encoder, for classification and retrieval."""

    reads = ("classify", "embed")  # a user's classify or retrieval rows replace the plays' (ablate --task)
    about = "[CLS] vs mean pooling for classification and retrieval"
    title = "Ablation pooling: [CLS] vs mean pooling on one encoder"
    rules = (
        Rule(
            (
                "On one pretrained encoder, [CLS] and mean pooling are close on classification, and mean "
                "pooling is ahead on retrieval."
            ),
            RULE,
        ),
    )
    step = "pool"
    axes = (TOKENS,)
    extra_rows = False
    tasks: ClassVar[Tuning] = {ClassifyConfig: {"plays_task": "word-order"}}

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return (MLM_ENCODER,)

    def columns(self, arms: Sequence[Arm]) -> list[str]:
        """One column per pooling of the one encoder."""
        return list(POOLINGS)

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """Both tasks with both poolings on one run, ``{task: {pooling: record}}``; each task's control (the untrained
        block fine-tuned with the task's default pooling: [CLS] to classify, mean to retrieve) beside that record."""
        records = {
            task: {p: fine_tuned(setup, task, name, seed, p) for p in POOLINGS} for task in ("classify", "embed")
        }
        records["classify"]["cls"] = with_control(setup, WORD_ORDER, records["classify"]["cls"], seed)
        records["embed"]["mean"] = with_control(setup, RETRIEVAL, records["embed"]["mean"], seed)
        return records

    def tabulate(self, m: Measured) -> Table[PoolingMeasures]:
        runs = m.measured[TOKENS][MLM_ENCODER.key]
        # each task's records by pooling, and those its control sits beside (the pooling it was fine-tuned with)
        order = {p: [r[WORD_ORDER.step][p] for r in runs] for p in POOLINGS}
        retrieval = {p: [r[RETRIEVAL.step][p] for r in runs] for p in POOLINGS}
        measures = PoolingMeasures(
            WORD_ORDER.scores(order, order["cls"]),
            RETRIEVAL.scores(retrieval, retrieval["mean"]),
        )

        def job_rows(job: Job, stored: dict[str, list[dict]], scores: JobScores, pooling: str) -> list[list[str]]:
            """The job's score row, its control's under the pooling it was fine-tuned with, then its further rows."""
            (name, groups), *more = job.rows_of(stored).items()
            cells = [fmt_stat(scores.untrained()) if p == pooling else "—" for p in POOLINGS]
            return [
                table_row(name, SHARED, groups, job.higher),
                [f"{name}, {UNTRAINED} (control)", SHARED, *cells, ""],
                *(table_row(row, SHARED, values, job.higher) for row, values in more),
            ]

        def timed(records: Mapping[str, Sequence[Record]]) -> dict[str, list[float]]:
            return {p: [finetune_seconds(r) for r in rs] for p, rs in records.items()}

        rows = [
            *job_rows(WORD_ORDER, order, measures.word_order, "cls"),
            *job_rows(RETRIEVAL, retrieval, measures.retrieval, "mean"),
            table_row("classification fine-tuning seconds", SHARED, timed(WORD_ORDER.decoded(order)), None, 1),
            table_row("retrieval fine-tuning seconds", SHARED, timed(RETRIEVAL.decoded(retrieval)), None, 1),
        ]
        return Table(measures, rows)

    def judge(self, rule: Rule, measures: PoolingMeasures, m: Measured) -> tuple[str, str]:
        order, retrieval = measures.word_order, measures.retrieval
        acc = order.compare("mean", "cls")
        recall = retrieval.compare("mean", "cls")
        close = acc.winner == "tie" or abs(acc.mean_a - acc.mean_b) <= CLOSE
        best = max(POOLINGS, key=order.mean_of)
        classification: tuple[str, bool | None]
        retrieval_claim: tuple[str, bool | None]
        if order.short_of((best,)):
            classification = (
                (
                    f"close on classification ({acc.describe('mean', 'cls')}), not evidence as {best}, the "
                    f"pooling ahead, does not clear the baselines"
                ),
                None,
            )
        else:
            classification = (f"close on classification ({acc.describe('mean', 'cls')})", close)
        ahead_pooling = {"a": "mean", "b": "cls"}.get(recall.winner)
        if ahead_pooling and retrieval.short_of((ahead_pooling,)):
            retrieval_claim = (
                (
                    f"mean ahead on retrieval ({recall.describe('mean', 'cls')}), not evidence as "
                    f"{ahead_pooling} does not clear the baselines"
                ),
                None,
            )
        else:
            retrieval_claim = (f"mean ahead on retrieval ({recall.describe('mean', 'cls')})", ahead(recall))
        return claims_verdict([classification, retrieval_claim])

    def summary(self, m: Measured, measures: PoolingMeasures) -> str:
        acc, recall = measures.word_order, measures.retrieval
        return (
            f"We replaced [CLS] pooling with mean pooling on the same pretrained encoders: word-order accuracy "
            f"{moved(acc.arms['cls'], acc.arms['mean'])} (majority class {mean(acc.baseline):.3f}; the block never "
            f"pretrained, fine-tuned the same way, {mean(acc.untrained()):.3f}), while ICT recall@10 "
            f"{moved(recall.arms['cls'], recall.arms['mean'])} (random ranking {mean(recall.baseline):.3f}; the block "
            f"never pretrained, fine-tuned the same way, {mean(recall.untrained()):.3f})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                "Both poolings fine-tune copies of the same pretrained encoder for the same steps, so equal tokens and "
                "equal wall-clock are the same comparison; the fine-tuning seconds rows show the costs match."
            ),
            (
                "Classification: a line of a test play's speech, printed as written or with its words after the first "
                "shuffled (half each); both hold the same words, so their order must be read. A fresh head on the "
                "pooled state, body and head fine-tuned. Retrieval: contrastive ICT training of the pooled, normalised "
                "vectors."
            ),
            (
                f"Controls: the encoder's block as its pretraining starts it, never trained, fine-tuned the same way "
                f"({UNTRAINED}: with [CLS] to classify, with mean pooling to retrieve); only what a pooling scores "
                f"above it is pretraining's."
            ),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Both higher is better; the baselines and controls are groups of the metrics."""
        return {ORDER_ACC: (True, None), RECALL: (True, None)}


ABLATION = Pooling()
