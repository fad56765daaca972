"""Ablation embedder: a bidirectional encoder vs a causal decoder as the body of an ICT bi-encoder."""

from __future__ import annotations

from functools import partial
from statistics import fmean as mean

from maskwise.experiments.ablations.jobs import (
    BASELINE,
    RETRIEVAL,
    UNTRAINED,
    short_of,
    with_control,
)
from maskwise.experiments.arms import AXES, TOKENS, WALL, Arm, Setup
from maskwise.experiments.framework import (
    MIN_BUCKET,
    Measured,
    Rule,
    Study,
    buckets_of,
    common_buckets,
    fine_tuned,
    key,
    moved,
    on_both_axes,
    table_row,
)
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE, compare
from maskwise.tasks.retrieve import RetrievalRecord

ENCODER = Arm("mlm", "encoder (MLM, mean)", {"family": "encoder", "objective": "mlm"})
DECODER = Arm("clm", "decoder (CLM, last)", {"family": "decoder", "objective": "clm"})
BUCKET = "recall@10, passages of "
POOLING = {ENCODER.key: "mean", DECODER.key: "last"}  # each family's summary position (see the notes)

RULE = (
    "Compare recall@10 of the encoder (a) and the decoder (b) overall and per passage-length bucket "
    "(characters; buckets with at least 10 queries). Inconclusive if the encoder is not ahead of a random "
    "ranking and of its block never pretrained, fine-tuned the same way (then nothing pretraining built is "
    "compared). Falsified if the encoder is ahead neither "
    "overall nor in any bucket (the causal model matches or beats it at every length). Held if the "
    "encoder is ahead overall and its gap is smaller in the shortest bucket than in the longest (paired by seed). "
    "Otherwise inconclusive. Applied at equal tokens and at equal wall-clock; the verdict is the "
    "common outcome, inconclusive if they differ."
)


def bucket_recall(bucket: str, measures: dict) -> float:
    """A run's recall@10 on the passages of length bucket ``bucket`` (``framework.common_buckets``: every run has
    one there)."""
    return RetrievalRecord.from_json(measures).by_passage_chars[bucket].recall_at_10


def judge(metrics: dict, arms=None) -> tuple[str, str]:
    def pair(groups: dict[str, list[float]]) -> tuple[list[float], list[float]]:
        return groups[ENCODER.label], groups[DECODER.label]

    def gaps(groups: dict[str, list[float]]) -> list[float]:
        return [a - b for a, b in zip(*pair(groups))]

    def one_axis(axis: str) -> tuple[str, str]:
        overall = compare(*pair(metrics[key("recall@10", axis)]))
        buckets = [(k, compare(*pair(metrics[k]))) for k in buckets_of(metrics, BUCKET, axis)]
        if not buckets:
            return INCONCLUSIVE, f"no passage-length bucket has {MIN_BUCKET} queries"
        if short_of(metrics, axis, (ENCODER.label,), RETRIEVAL):
            groups = metrics[key("recall@10", axis)]
            bars = [
                compare(groups[ENCODER.label], groups[bar]).describe("encoder", name)
                for bar, name in ((BASELINE, "random"), (UNTRAINED, "untrained"))
            ]
            return INCONCLUSIVE, (
                f"the encoder does not clear both a random ranking ({bars[0]}) and its block never "
                f"pretrained, fine-tuned the same way ({bars[1]}): no pretraining to compare "
                f"(encoder vs decoder: {overall.describe('encoder', 'decoder')})"
            )
        if overall.winner != "a" and not any(c.winner == "a" for _, c in buckets):
            where = overall.describe("encoder", "decoder")
            return FALSIFIED, f"the decoder matches or beats the encoder overall ({where}) and in every length bucket"
        # the encoder's gap per seed, on the longest passages against the shortest (paired by seed)
        narrowing = compare(gaps(metrics[buckets[-1][0]]), gaps(metrics[buckets[0][0]]))
        text = (
            f"overall {overall.describe('encoder', 'decoder')}; the encoder's gap on the longest vs the "
            f"shortest passages: {narrowing.describe('longest', 'shortest')}"
        )
        if overall.winner == "a" and narrowing.winner == "a":
            return HELD, text
        return INCONCLUSIVE, text + (
            " (not ahead overall)" if overall.winner != "a" else " (the gap does not narrow on short passages)"
        )

    return on_both_axes(one_axis)


def mrr_of(measures: dict) -> float:
    """A run's MRR: set for the plays' ICT queries, each with one relevant passage (graded judgements have none)."""
    mrr = RetrievalRecord.from_json(measures).mrr
    assert mrr is not None
    return mrr


class Embedder(Study):
    """A bidirectional encoder vs a causal decoder as the body of an ICT bi-encoder."""

    reads = ("embed",)  # a user's retrieval rows replace the plays' ICT pairs (ablate --task)
    about = "bidirectional encoder vs causal decoder as bi-encoders (ICT retrieval)"
    title = "Ablation embedder: bidirectional encoder vs causal decoder as a bi-encoder"
    rules = (
        Rule(
            (
                "A bidirectional encoder makes a better bi-encoder than a causal decoder of the same size and "
                "pretraining budget; the gap narrows for short passages."
            ),
            RULE,
            judge,
        ),
    )
    step = "retrieve"

    def arms(self) -> tuple[Arm, ...]:
        return ENCODER, DECODER

    def tabulate(self, m: Measured) -> tuple[dict, list]:
        buckets = common_buckets(m, "by_passage_chars")
        metrics, rows = {}, []
        for axis in AXES:
            recall = m.per_arm(axis, RETRIEVAL.score_of)
            bars = RETRIEVAL.bars(m.measured[axis][ENCODER.key])  # per seed: the random ranking and the control
            metrics[key("recall@10", axis)] = {**recall, **bars}
            rows += [
                table_row("recall@10", axis, recall, True),
                table_row(f"recall@10, {UNTRAINED} (control)", axis, {ENCODER.label: bars[UNTRAINED]}, True),
            ]
            for bucket in buckets:
                name = f"{BUCKET}{bucket} chars"
                metrics[key(name, axis)] = m.per_arm(axis, partial(bucket_recall, bucket))
                rows.append(table_row(name, axis, metrics[key(name, axis)], True))
            rows.append(table_row("MRR", axis, m.per_arm(axis, mrr_of), True))
        return metrics, rows

    def summary(self, m: Measured, metrics: dict) -> str:
        tok, wall = metrics[key("recall@10", TOKENS)], metrics[key("recall@10", WALL)]
        enc, dec = ENCODER.label, DECODER.label
        buckets = buckets_of(metrics, BUCKET, TOKENS)
        by_length = " (no length bucket had enough queries to break it down)"
        if buckets:
            parts = []
            for bucket_key in dict.fromkeys((buckets[0], buckets[-1])):
                chars = bucket_key[len(BUCKET) : -len(f" chars at {TOKENS}")]
                groups = metrics[bucket_key]
                parts.append(f"on passages of {chars} characters it {moved(groups[enc], groups[dec])}")
            by_length = ", while " + " and ".join(parts)
        return (
            f"We replaced the bidirectional encoder (MLM, mean pooling) with a causal decoder of the same size (CLM, "
            f"last-token pooling) as the body of an ICT bi-encoder: recall@10 {moved(tok[enc], tok[dec])} at equal "
            f"tokens ({moved(wall[enc], wall[dec])} at equal wall-clock){by_length} (random ranking: "
            f"{mean(tok[BASELINE]):.3f}; the encoder's block never pretrained, fine-tuned the same way: "
            f"{mean(tok[UNTRAINED]):.3f})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                f"Control: the encoder's block as its pretraining starts it, never trained, fine-tuned the same way "
                f"({UNTRAINED}); only what the encoder scores above it is pretraining's."
            ),
            (
                "Both bodies pretrain on the same text with the same block; only the attention mask and the loss "
                "differ. Contrastive training (InfoNCE, in-batch negatives) has the same steps, batch and learning rate."
            ),
            (
                "Pooling: mean over real tokens for the encoder, the last real token for the decoder (the only position "
                "that has seen the whole text through a causal mask)."
            ),
            (
                f"Inputs are cut to {m.setup.recipe.block_size} tokens ({m.setup.recipe.tokenizer}): in the longest "
                "buckets both models read only the start of the passage."
            ),
            (
                "The validation losses on the plots are per masked token (MLM) and per token (CLM): compare shapes, "
                "not levels."
            ),
        ]

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """The arm's retrieval record; the encoder's with its control (mean pooling, as the encoder's) beside it."""
        record = fine_tuned(setup, "embed", name, seed, POOLING[arm.key])
        return with_control(setup, RETRIEVAL, record, seed) if arm is ENCODER else record

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Recall, higher is better; its random ranking and control are groups of the metric."""
        return {"recall@10": (True, None)}


ABLATION = Embedder()
