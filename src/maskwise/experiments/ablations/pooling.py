"""Ablation pooling: [CLS] vs mean pooling on one pretrained encoder, for classification (word order: is a line
printed as written or with its words after the first shuffled) and retrieval."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import fmean as mean
from typing import Any, ClassVar

from maskwise.experiments.ablations.jobs import (
    BASELINE,
    MLM_ENCODER,
    RETRIEVAL,
    UNTRAINED,
    Job,
    short_of,
    with_control,
)
from maskwise.experiments.arms import TOKENS, Arm, Setup
from maskwise.experiments.framework import (
    RECALL,
    SHARED,
    Measured,
    Rule,
    Study,
    ahead,
    claims_verdict,
    fine_tuned,
    key,
    moved,
    table_row,
)
from maskwise.experiments.report import fmt_stat
from maskwise.experiments.verdict import compare
from maskwise.recipes import Tuning
from maskwise.tasks.classify import ClassifyConfig, ClassifyRecord

POOLINGS = ("cls", "mean")
CLOSE = 0.02  # accuracy difference that still counts as "close" when the paired interval excludes zero
ORDER_ACC = "word-order accuracy"
# Its control fine-tunes with the encoder's default pooling, [CLS], so it rides on [CLS]'s record.
WORD_ORDER = Job(
    ORDER_ACC, "classify", True, ClassifyRecord, lambda r: r.accuracy, lambda r: ("majority class", r.baseline.accuracy)
)

RULE = (
    f"Two claims, on the same pretrained encoders (so equal tokens and equal wall-clock coincide). "
    f"(1) Word-order accuracy (a line of a speech as written, or its words after the first shuffled) with [CLS] "
    f"and with mean pooling is close: their paired interval includes zero or the means differ by at most {CLOSE} (contradicted "
    f"otherwise). (2) Mean pooling is ahead on ICT recall@10 (contradicted if [CLS] is ahead). A claim is "
    f"evidence only where the pooling ahead clears its baselines (the majority class, a random ranking, and the "
    f"same block never pretrained, fine-tuned the same way): two poolings at chance are close and prove nothing. "
    f"Falsified if a claim is contradicted, held if both are supported, inconclusive otherwise."
)


def judge(metrics: dict, arms=None) -> tuple[str, str]:
    order, retrieval = metrics[key(ORDER_ACC, SHARED)], metrics[key(RECALL, SHARED)]
    acc = compare(order["mean"], order["cls"])
    recall = compare(retrieval["mean"], retrieval["cls"])
    close = acc.winner == "tie" or abs(acc.mean_a - acc.mean_b) <= CLOSE
    best = max(POOLINGS, key=lambda p: mean(order[p]))
    classification: tuple[str, bool | None]
    retrieval_claim: tuple[str, bool | None]
    if short_of(metrics, SHARED, (best,), WORD_ORDER):
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
    if ahead_pooling and short_of(metrics, SHARED, (ahead_pooling,), RETRIEVAL):
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


class Pooling(Study):
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
            judge,
        ),
    )
    step = "pool"
    axes = (TOKENS,)
    extra_rows = False
    tasks: ClassVar[Tuning] = {ClassifyConfig: {"plays_task": "word-order"}}

    def arms(self) -> tuple[Arm, ...]:
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

    def tabulate(self, m: Measured) -> tuple[dict, list]:
        runs = m.measured[TOKENS][MLM_ENCODER.key]

        def groups(job: Job, read: Callable[[Any], float]) -> dict[str, list[float]]:
            """``read`` of every run's record of ``job``'s task, by pooling."""
            return {p: [read(job.record.from_json(r[job.step][p])) for r in runs] for p in POOLINGS}

        metrics = {
            key(ORDER_ACC, SHARED): {
                **groups(WORD_ORDER, WORD_ORDER.score),
                **WORD_ORDER.bars([r["classify"]["cls"] for r in runs]),
            },
            key(RECALL, SHARED): {
                **groups(RETRIEVAL, RETRIEVAL.score),
                **RETRIEVAL.bars([r["embed"]["mean"] for r in runs]),
            },
        }

        def control_row(name: str, pooling: str) -> list[str]:  # under the pooling it was fine-tuned with
            cells = {p: fmt_stat(metrics[key(name, SHARED)][UNTRAINED]) if p == pooling else "—" for p in POOLINGS}
            return [f"{name}, {UNTRAINED} (control)", SHARED, *cells.values(), ""]

        rows = [
            table_row(ORDER_ACC, SHARED, groups(WORD_ORDER, WORD_ORDER.score), True),
            control_row(ORDER_ACC, "cls"),
            table_row("word-order macro-F1", SHARED, groups(WORD_ORDER, lambda r: r.macro_f1), True),
            table_row(RECALL, SHARED, groups(RETRIEVAL, RETRIEVAL.score), True),
            control_row(RECALL, "mean"),
            table_row("MRR", SHARED, groups(RETRIEVAL, lambda r: r.mrr), True),
            table_row(
                "classification fine-tuning seconds", SHARED, groups(WORD_ORDER, lambda r: r.finetune_s), None, 1
            ),
            table_row("retrieval fine-tuning seconds", SHARED, groups(RETRIEVAL, lambda r: r.finetune_s), None, 1),
        ]
        return metrics, rows

    def summary(self, m: Measured, metrics: dict) -> str:
        acc, recall = metrics[key(ORDER_ACC, SHARED)], metrics[key(RECALL, SHARED)]
        return (
            f"We replaced [CLS] pooling with mean pooling on the same pretrained encoders: word-order accuracy "
            f"{moved(acc['cls'], acc['mean'])} (majority class {mean(acc[BASELINE]):.3f}; the block never pretrained, "
            f"fine-tuned the same way, {mean(acc[UNTRAINED]):.3f}), while ICT recall@10 "
            f"{moved(recall['cls'], recall['mean'])} (random ranking {mean(recall[BASELINE]):.3f}; the block never "
            f"pretrained, fine-tuned the same way, {mean(recall[UNTRAINED]):.3f})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                "Both poolings fine-tune copies of the same pretrained encoder for the same steps, so equal tokens and "
                "equal wall-clock are the same comparison; the fine-tuning seconds rows show the costs match."
            ),
            (
                "Classification: a line of a test play's speech, printed as written or with its words after the first "
                "shuffled (half each); both hold the same words, so their order must be read. A fresh head on the pooled "
                "state, body and head fine-tuned. Retrieval: contrastive ICT training of the pooled, normalised vectors."
            ),
            (
                f"Controls: the encoder's block as its pretraining starts it, never trained, fine-tuned the same way "
                f"({UNTRAINED}: with [CLS] to classify, with mean pooling to retrieve); only what a pooling scores above "
                f"it is pretraining's."
            ),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Both higher is better; the baselines and controls are groups of the metrics."""
        return {ORDER_ACC: (True, None), RECALL: (True, None)}


ABLATION = Pooling()
