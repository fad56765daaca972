"""Ablation pooling: [CLS] vs mean pooling on one pretrained encoder, for classification and retrieval."""

from __future__ import annotations

from maskwise.experiments.ablations.jobs import MLM_ENCODER
from maskwise.experiments.framework import (
    GENRE_ACC,
    RECALL,
    SHARED,
    TOKENS,
    Arm,
    Measured,
    Rule,
    Setup,
    Study,
    ahead,
    claims_verdict,
    fine_tuned,
    key,
    moved,
    table_row,
)
from maskwise.experiments.verdict import compare

POOLINGS = ("cls", "mean")
CLOSE = 0.02  # accuracy difference that still counts as "close" when the paired interval excludes zero

RULE = (f"Two claims, on the same pretrained encoders (so equal tokens and equal wall-clock coincide). "
        f"(1) Genre accuracy with [CLS] and with mean pooling is close: their paired interval includes zero or the "
        f"means differ by at most {CLOSE} (contradicted otherwise). (2) Mean pooling is ahead on ICT recall@10 "
        f"(contradicted if [CLS] is ahead). Falsified if a claim is contradicted, held if both are "
        f"supported, inconclusive otherwise.")


def judge(metrics: dict, arms=None) -> tuple[str, str]:
    acc = compare(metrics[key(GENRE_ACC, SHARED)]["mean"], metrics[key(GENRE_ACC, SHARED)]["cls"])
    recall = compare(metrics[key(RECALL, SHARED)]["mean"], metrics[key(RECALL, SHARED)]["cls"])
    close = acc.winner == "tie" or abs(acc.mean_a - acc.mean_b) <= CLOSE
    return claims_verdict([(f"close on classification ({acc.describe('mean', 'cls')})", close),
                           (f"mean ahead on retrieval ({recall.describe('mean', 'cls')})", ahead(recall))])


def measure(setup: Setup, arm: Arm, name: str, seed: int) -> dict:
    """Both tasks with both poolings on one run: ``{task: {pooling: record}}``."""
    return {task: {p: fine_tuned(setup, task, name, seed, p) for p in POOLINGS} for task in ("classify", "embed")}


def tabulate(m: Measured) -> tuple[dict, list]:
    def groups(task: str, field: str) -> dict[str, list[float]]:
        return {p: [r[task][p][field] for r in m.measured[TOKENS][MLM_ENCODER.key]] for p in POOLINGS}

    metrics = {key(GENRE_ACC, SHARED): groups("classify", "accuracy"),
               key(RECALL, SHARED): groups("embed", "recall@10")}
    rows = [table_row(GENRE_ACC, SHARED, metrics[key(GENRE_ACC, SHARED)], True),
            table_row("genre macro-F1", SHARED, groups("classify", "macro_f1"), True),
            table_row(RECALL, SHARED, metrics[key(RECALL, SHARED)], True),
            table_row("MRR", SHARED, groups("embed", "mrr"), True),
            table_row("classification fine-tuning seconds", SHARED, groups("classify", "finetune_s"), None, 1),
            table_row("retrieval fine-tuning seconds", SHARED, groups("embed", "finetune_s"), None, 1)]
    return metrics, rows


def summary(m: Measured, metrics: dict) -> str:
    acc, recall = metrics[key(GENRE_ACC, SHARED)], metrics[key(RECALL, SHARED)]
    return (f"We replaced [CLS] pooling with mean pooling on the same pretrained encoders: genre accuracy "
            f"{moved(acc['cls'], acc['mean'])}, while ICT recall@10 {moved(recall['cls'], recall['mean'])}.")


def notes(m: Measured) -> list[str]:
    return [
        ("Both poolings fine-tune copies of the same pretrained encoder for the same steps, so equal tokens and "
         "equal wall-clock are the same comparison; the fine-tuning seconds rows show the costs match."),
        ("Classification: a fresh head on the pooled state, body and head fine-tuned. Retrieval: contrastive ICT "
         "training of the pooled, normalised vectors."),
    ]


ABLATION = Study(
    about="[CLS] vs mean pooling for classification and retrieval",
    title="Ablation pooling: [CLS] vs mean pooling on one encoder",
    rules=(Rule(("On one pretrained encoder, [CLS] and mean pooling are close on classification, and mean "
                "pooling is ahead on retrieval."), RULE, judge),),
    step="pool", arms=lambda: (MLM_ENCODER,), measure=measure, tabulate=tabulate, summary=summary, notes=notes,
    axes=(TOKENS,), columns=lambda arms: list(POOLINGS), extra_rows=False,
    meaning=lambda m: {
        GENRE_ACC: (True, ("majority class", m.first(MLM_ENCODER)["classify"]["cls"]["baseline"]["accuracy"])),
        RECALL: (True, ("random ranking", m.first(MLM_ENCODER)["embed"]["cls"]["baseline"]["recall@10"]))})
