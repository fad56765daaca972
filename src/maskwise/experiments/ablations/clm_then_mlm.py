"""Ablation clm-then-mlm: an MLM encoder for the whole budget vs a CLM decoder for half of it continued
as an MLM encoder (Gisserot-Boukhlef et al., 2025), on tagging.

It is the encoder pair of ``cross_objective`` at an even split (``--share``, 0.5 by default), with
the prediction the other way round: that CLM first makes the better encoder."""

from __future__ import annotations

from collections.abc import Sequence

from maskwise.experiments.ablations.cross_objective import (
    CLM_ARM,
    MLM_ARM,
    TWO_PHASES,
    continued,
    first_share,
)
from maskwise.experiments.ablations.jobs import (
    TAGGING,
    JobMeasures,
    JobsStudy,
    ahead_on,
    baselines,
    jobs_of,
)
from maskwise.experiments.arms import TOKENS, WALL, Arm, StudyOptions
from maskwise.experiments.framework import (
    Measured,
    Rule,
    claims_verdict,
    moved,
    on_both_axes,
)

DEFAULT_SHARE = 0.5  # of the budget in CLM before MLM

RULE = (
    "Paired by seed, CLM then MLM (a) against MLM alone (b) on tagging F1 after the same fine-tuning. "
    "Falsified if MLM alone is ahead, separated. Held if CLM then MLM is ahead, separated. Otherwise "
    "inconclusive. Applied at equal tokens and at equal wall-clock (both phases counted); the verdict is the "
    "common outcome, inconclusive if they differ."
)


class ClmThenMlm(JobsStudy):
    """MLM alone vs CLM for part of the budget, then MLM, for the same encoder."""

    reads = ("tag",)  # a user's tag task replaces the plays' punctuation in the tagging job (ablate --task)
    about = "MLM alone vs CLM for half the budget, then MLM, for the same encoder (tagging)"
    title = "Ablation clm-then-mlm: MLM alone vs CLM first, then MLM"
    rules = (
        Rule(
            (
                "At the same budget, an encoder pretrained with CLM first and MLM after is ahead of one pretrained "
                "with MLM alone (Gisserot-Boukhlef et al., 2025)."
            ),
            RULE,
        ),
    )
    step = "clm-mlm"
    options = ("share",)

    def pairs(self, arms: Sequence[Arm]) -> tuple[tuple[Arm, Arm]]:
        """CLM then MLM against MLM alone."""
        return ((arms[1], arms[0]),)

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return MLM_ARM, continued(MLM_ARM, CLM_ARM, DEFAULT_SHARE if options.share is None else options.share)

    def judge(self, rule: Rule, measures: JobMeasures, m: Measured) -> tuple[str, str]:
        mlm, first_clm = m.arms

        def one_axis(axis: str) -> tuple[str, str]:
            return claims_verdict(ahead_on(measures, axis, first_clm.label, mlm.label, jobs_of(mlm)))

        return on_both_axes(one_axis)

    def summary(self, m: Measured, measures: JobMeasures) -> str:
        mlm, first_clm = (arm.label for arm in m.arms)
        tag, tag_w = (measures.of(TAGGING, axis).arms for axis in (TOKENS, WALL))
        return (
            f"We replaced MLM for the whole budget with CLM for its first {first_share(m.arms[1]):.0%} and MLM for "
            f"the rest: tagging F1 {moved(tag[mlm], tag[first_clm])} at equal tokens "
            f"({moved(tag_w[mlm], tag_w[first_clm])} at equal wall-clock; trivial baselines: "
            f"{baselines(m, measures, TOKENS)})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            TWO_PHASES,
            (
                "Gisserot-Boukhlef et al. (2025, 'Should We Still Pretrain Encoders with Masked Language Modeling?') "
                "found CLM followed by MLM ahead of MLM alone on downstream encoder tasks at the same compute, with "
                "models of hundreds of millions of parameters; the tiny models here are far below that."
            ),
            (
                "The validation losses on the plots are per token (CLM, the first phase) and per masked token (MLM): "
                "compare the curves' shapes, not their levels."
            ),
        ]


ABLATION = ClmThenMlm()
