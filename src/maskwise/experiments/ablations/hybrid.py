"""Ablation hybrid: one decoder trained both ways (GPT-BERT) against the two specialists it would replace.

An MLM encoder, a CLM decoder and a hybrid decoder (``objectives/hybrid.py``: 1/16 of its batches
CLM, the rest masked next-token prediction read bidirectionally) pretrain on the same budget. Each
takes the jobs of its objective (``jobs.JOBS``): the encoder tagging, the decoder held-out next-token
loss, the hybrid both (read bidirectionally when fine-tuned, left to right for the loss), so that the
hybrid meets each specialist on the specialist's own job."""

from __future__ import annotations

from collections.abc import Sequence

from maskwise.experiments.ablations.jobs import (
    CLM_DECODER,
    MLM_ENCODER,
    NEXT_TOKEN_LOSS,
    TAGGING,
    JobMeasures,
    JobsStudy,
    baselines,
    jobs_of,
)
from maskwise.experiments.arms import TOKENS, WALL, Arm, StudyOptions
from maskwise.experiments.framework import (
    Measured,
    Rule,
    moved,
    on_both_axes,
)
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE

HYBRID = Arm("hybrid", "hybrid (GPT-BERT)", {"family": "decoder", "objective": "hybrid"})
ARMS = (MLM_ENCODER, CLM_DECODER, HYBRID)

RULE = (
    "Paired by seed, the hybrid against each specialist on the specialist's own job: the encoder's tagging F1 "
    "(the plays' punctuation, or the user's tag task), the decoder's held-out next-token loss (the hybrid read left to "
    "right). Falsified if the hybrid is behind a specialist, separated, where that specialist clears its baselines. "
    "Held if it is behind on neither and every arm clears its baselines on each of its jobs (tagging: the stronger of "
    "a mark before every line break and the most frequent tag, and the untrained body; loss: the unigram). Otherwise "
    "inconclusive, naming the baselines not cleared. Applied at equal tokens and at equal wall-clock; the verdict is "
    "the common outcome, inconclusive if they differ."
)


class HybridVsSpecialists(JobsStudy):
    """One decoder trained both ways (GPT-BERT) against the two specialists it would replace."""

    reads = ("tag",)  # a user's tag task replaces the plays' punctuation in the tagging job (ablate --task)
    about = "a hybrid decoder (GPT-BERT) vs an MLM encoder and a CLM decoder, each on the specialist's own job"
    title = "Ablation hybrid: one decoder trained both ways vs the two specialists"
    rules = (
        Rule(
            (
                "A hybrid trained with masked next-token prediction is within noise of each specialist on its "
                "own job, or ahead: of the MLM encoder on tagging, of the CLM decoder on next-token loss "
                "(GPT-BERT, Charpentier & Samuel 2024)."
            ),
            RULE,
        ),
    )
    step = "hybrid"

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return ARMS

    def pairs(self, arms: Sequence[Arm]) -> tuple[tuple[Arm, Arm], tuple[Arm, Arm]]:
        """The hybrid against each specialist."""
        return (HYBRID, MLM_ENCODER), (HYBRID, CLM_DECODER)

    def judge(self, rule: Rule, measures: JobMeasures, m: Measured) -> tuple[str, str]:
        hybrid = HYBRID.label

        def one_axis(axis: str) -> tuple[str, str]:
            behind, parts = [], []
            for specialist in (MLM_ENCODER, CLM_DECODER):
                for job in jobs_of(specialist):
                    scores = measures.of(job, axis)
                    c = scores.compare(hybrid, specialist.label)
                    parts.append(f"{job.name}: {c.describe(hybrid, specialist.label)}")
                    if c.winner == "b" and scores.clears(specialist.label):
                        behind.append(f"the {specialist.label} on {job.name}")
            uncleared = [
                f"{arm.label} on {job.name}"
                for arm in ARMS
                for job in jobs_of(arm)
                if not measures.of(job, axis).clears(arm.label)
            ]
            text = "; ".join(parts)
            if behind:
                return FALSIFIED, f"the hybrid is behind {' and '.join(behind)}; {text}"
            if uncleared:
                return INCONCLUSIVE, f"the baselines are not cleared by {', '.join(uncleared)}; {text}"
            return HELD, text

        return on_both_axes(one_axis)

    def summary(self, m: Measured, measures: JobMeasures) -> str:
        enc, dec, hybrid = MLM_ENCODER.label, CLM_DECODER.label, HYBRID.label
        tag, loss = (measures.of(job, TOKENS).arms for job in (TAGGING, NEXT_TOKEN_LOSS))
        tag_w, loss_w = measures.of(TAGGING, WALL).arms, measures.of(NEXT_TOKEN_LOSS, WALL).arms
        return (
            f"We replaced the two specialists, an MLM encoder and a CLM decoder, with one decoder trained both ways "
            f"(GPT-BERT's masked next-token prediction): against the encoder, tagging F1 "
            f"{moved(tag[enc], tag[hybrid])} at equal tokens "
            f"(tagging F1 {moved(tag_w[enc], tag_w[hybrid])} at equal wall-clock); against the decoder, held-out "
            f"next-token loss {moved(loss[dec], loss[hybrid])} nats/char ({moved(loss_w[dec], loss_w[hybrid])} at "
            f"equal wall-clock; trivial baselines: {baselines(m, measures, TOKENS)})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                "The hybrid is the decoder with GPT-BERT's objective (Charpentier & Samuel, 2024, 'GPT or BERT: why "
                "not both?'): 1/16 of its batches CLM, the rest masked next-token prediction read bidirectionally, "
                "each masked token predicted from the position before it. Fine-tuned for tagging it reads "
                "bidirectionally; on held-out text it is scored left to right, as a causal LM."
            ),
            (
                "Each arm is measured on the jobs of its objective only: the encoder is not scored left to right (it "
                "is no next-token model), the decoder is not fine-tuned for tagging (compare measures it there). Each "
                "job's trivial baseline is a group of its metric (per seed, on the same test items) and stands in the "
                "table's last column."
            ),
            (
                "The validation losses on the plots are on different scales (MLM per masked token, CLM per token, the "
                "hybrid's pooling its causal and masked positions): compare their shapes, not their levels."
            ),
        ]


ABLATION = HybridVsSpecialists()
