"""Ablation embedder: a bidirectional encoder vs a causal decoder as the body of an ICT bi-encoder."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean as mean

from maskwise.experiments.ablations.jobs import (
    RETRIEVAL,
    UNTRAINED,
    JobScores,
    with_control,
)
from maskwise.experiments.arms import AXES, TOKENS, WALL, Arm, Setup, StudyOptions
from maskwise.experiments.framework import (
    MIN_BUCKET,
    Measured,
    Measures,
    Rule,
    Study,
    Table,
    common_buckets,
    fine_tuned,
    key,
    moved,
    on_both_axes,
    table_row,
)
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE, compare

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


@dataclass(frozen=True)
class Bucket:
    """The arms' recall@10 on the passages of one length bucket (characters), per seed."""

    label: str  # "0-199"
    arms: dict[str, list[float]]  # arm label -> per seed

    def pair(self) -> tuple[list[float], list[float]]:
        return self.arms[ENCODER.label], self.arms[DECODER.label]

    def gaps(self) -> list[float]:
        """The encoder's lead over the decoder, per seed."""
        return [a - b for a, b in zip(*self.pair())]


@dataclass(frozen=True)
class EmbedderAxis:
    """What the rule reads at one axis: recall@10 overall (the encoder's bars beside it), and by passage length."""

    recall: JobScores
    buckets: list[Bucket]  # those every run has with ``MIN_BUCKET`` queries, shortest first


@dataclass(frozen=True)
class EmbedderMeasures(Measures):
    at: dict[str, EmbedderAxis]  # axis ->

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        metrics = {}
        for axis, measured in self.at.items():
            metrics[key("recall@10", axis)] = measured.recall.to_json()
            for bucket in measured.buckets:
                metrics[key(f"{BUCKET}{bucket.label} chars", axis)] = bucket.arms
        return metrics


class Embedder(Study[EmbedderMeasures]):
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
        ),
    )
    step = "retrieve"

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return ENCODER, DECODER

    def tabulate(self, m: Measured) -> Table[EmbedderMeasures]:
        buckets = common_buckets(m, "by_passage_chars")
        at, rows = {}, []
        for axis in AXES:
            stored = {arm.label: m.measured[axis][arm.key] for arm in m.arms}
            records = RETRIEVAL.decoded(stored)
            # per seed: the random ranking and the control, from the encoder's records
            recall = RETRIEVAL.scores(stored, m.measured[axis][ENCODER.key])
            rows += [
                table_row("recall@10", axis, recall.arms, True),
                table_row(f"recall@10, {UNTRAINED} (control)", axis, {ENCODER.label: recall.untrained()}, True),
            ]
            by_length = []
            for bucket in buckets:
                by_length.append(
                    Bucket(
                        bucket,
                        {label: [r.by_passage_chars[bucket].recall_at_10 for r in rs] for label, rs in records.items()},
                    )
                )
                rows.append(table_row(f"{BUCKET}{bucket} chars", axis, by_length[-1].arms, True))
            mrr = {label: [RETRIEVAL.mrr(r) for r in rs] for label, rs in records.items()}
            rows.append(table_row("MRR", axis, mrr, True))
            at[axis] = EmbedderAxis(recall, by_length)
        return Table(EmbedderMeasures(at), rows)

    def judge(self, rule: Rule, measures: EmbedderMeasures, m: Measured) -> tuple[str, str]:
        def one_axis(axis: str) -> tuple[str, str]:
            recall = measures.at[axis].recall
            overall = recall.compare(ENCODER.label, DECODER.label)
            buckets = [(bucket, compare(*bucket.pair())) for bucket in measures.at[axis].buckets]
            if not buckets:
                return INCONCLUSIVE, f"no passage-length bucket has {MIN_BUCKET} queries"
            if recall.short_of((ENCODER.label,)):
                bars = [
                    compare(recall.arms[ENCODER.label], values).describe("encoder", name)
                    for (_, values), name in zip(recall.bars(), ("random", "untrained"))
                ]
                return INCONCLUSIVE, (
                    f"the encoder does not clear both a random ranking ({bars[0]}) and its block never "
                    f"pretrained, fine-tuned the same way ({bars[1]}): no pretraining to compare "
                    f"(encoder vs decoder: {overall.describe('encoder', 'decoder')})"
                )
            if overall.winner != "a" and not any(c.winner == "a" for _, c in buckets):
                where = overall.describe("encoder", "decoder")
                return FALSIFIED, (
                    f"the decoder matches or beats the encoder overall ({where}) and in every length bucket"
                )
            # the encoder's gap per seed, on the longest passages against the shortest (paired by seed)
            narrowing = compare(buckets[-1][0].gaps(), buckets[0][0].gaps())
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

    def summary(self, m: Measured, measures: EmbedderMeasures) -> str:
        tok, wall = measures.at[TOKENS].recall, measures.at[WALL].recall
        enc, dec = ENCODER.label, DECODER.label
        buckets = measures.at[TOKENS].buckets
        by_length = " (no length bucket had enough queries to break it down)"
        if buckets:
            ends = buckets[:1] + buckets[1:][-1:]  # the shortest and the longest, once where they are one
            by_length = ", while " + " and ".join(
                f"on passages of {bucket.label} characters it {moved(bucket.arms[enc], bucket.arms[dec])}"
                for bucket in ends
            )
        return (
            f"We replaced the bidirectional encoder (MLM, mean pooling) with a causal decoder of the same size (CLM, "
            f"last-token pooling) as the body of an ICT bi-encoder: recall@10 {moved(tok.arms[enc], tok.arms[dec])} at "
            f"equal tokens ({moved(wall.arms[enc], wall.arms[dec])} at equal wall-clock){by_length} (random ranking: "
            f"{mean(tok.baseline):.3f}; the encoder's block never pretrained, fine-tuned the same way: "
            f"{mean(tok.untrained()):.3f})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                f"Control: the encoder's block as its pretraining starts it, never trained, fine-tuned the same way "
                f"({UNTRAINED}); only what the encoder scores above it is pretraining's."
            ),
            (
                "Both bodies pretrain on the same text with the same block; only the attention mask and the loss "
                "differ. Contrastive training (InfoNCE, in-batch negatives) has the same steps, batch and learning "
                "rate."
            ),
            (
                "Pooling: mean over real tokens for the encoder, the last real token for the decoder (the only "
                "position that has seen the whole text through a causal mask)."
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
