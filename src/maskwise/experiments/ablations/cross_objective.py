"""Ablation cross-objective: a model pretrained in its own objective vs one that spent most of the budget
in the other objective and was then continued in its own (Ettin, Weller et al. 2025).

Two pairs on the same budget: an MLM encoder for the whole of it against a CLM decoder for ``share``
of it (0.75 by default) continued from its weights as an MLM encoder (``Arm.before``); and the
mirror, a CLM decoder against an MLM encoder continued as a CLM decoder. Both families have the same
block (modernbert), so either's weights fit the other. The encoder pair is measured on tagging, the
decoder pair on held-out next-token loss (``jobs.JOBS``); each pair has its own equal-wall-clock budget.

The issue words the prediction's falsification as "the continued model matches the native one". A
match cannot be told from too few seeds with a paired mean-difference test: its interval including
zero says no more than that the seeds could not see a gap. So a tie is inconclusive, the verdict says
why, and only a continued model ahead, separated, falsifies."""

from __future__ import annotations

from collections.abc import Sequence

from maskwise.errors import UserError
from maskwise.experiments.ablations.jobs import (
    NEXT_TOKEN_LOSS,
    TAGGING,
    JobMeasures,
    JobsStudy,
    ahead_on,
    baselines,
    jobs_of,
)
from maskwise.experiments.arms import TOKENS, Arm, Phase, StudyOptions
from maskwise.experiments.framework import (
    Measured,
    Rule,
    claims_verdict,
    moved,
    on_both_axes,
)
from maskwise.experiments.verdict import INCONCLUSIVE

MLM_ARM = Arm("mlm", "MLM encoder", {"family": "encoder", "objective": "mlm"})
CLM_ARM = Arm("clm", "CLM decoder", {"family": "decoder", "objective": "clm"})
DEFAULT_SHARE = 0.75  # of the budget spent in the other objective first
TIE = (
    "a tie is not shown to be a match: a paired mean-difference test over a few seeds cannot tell no gap "
    "from a gap too small for them to see"
)

RULE = (
    "Within each pair, paired by seed, the native model (a) against the continued one (b) on the pair's measures: "
    "the encoders' tagging F1, the decoders' held-out next-token loss. Falsified if the continued model is "
    "ahead, separated. Held if the native model is ahead, separated. Otherwise inconclusive (" + TIE + "). "
    "Applied at equal tokens and at equal wall-clock (both phases counted, each pair at its faster arm's "
    "seconds); the verdict is the common outcome, inconclusive if they differ."
)


def continued(then: Arm, before: Arm, share: float) -> Arm:
    """``before`` on ``share`` of the budget, then ``then`` from its weights on the rest."""
    if not 0.0 < share < 1.0:
        raise UserError(f"share: the first phase's share of the budget must be in (0, 1), got {share}")
    return Arm(
        f"{before.key}{share:g}-{then.key}",
        f"{before.key.upper()} {share:.0%} then {then.label}",
        then.settings,
        before=Phase(before.settings, share),
    )


def first_share(arm: Arm) -> float:
    """The share of the budget a continued arm spends in its first objective (0 for a native one)."""
    return arm.before.share if arm.before is not None else 0.0


def judge_pair(measures: JobMeasures, native: Arm, other: Arm) -> tuple[str, str]:
    """The native model ``native`` against the continued ``other``, on the native's measures."""

    def one_axis(axis: str) -> tuple[str, str]:
        verdict, detail = claims_verdict(ahead_on(measures, axis, native.label, other.label, jobs_of(native)))
        return verdict, detail + (f" ({TIE})" if verdict == INCONCLUSIVE else "")

    return on_both_axes(one_axis)


ENCODERS = Rule(
    (
        "An encoder pretrained with MLM for the whole budget is ahead of a CLM decoder continued as an MLM "
        "encoder (Ettin, Weller et al. 2025)."
    ),
    RULE,
    "encoder",
)
DECODERS = Rule(
    "A decoder pretrained with CLM for the whole budget is ahead of an MLM encoder continued as a CLM "
    "decoder (the mirror).",
    RULE,
    "decoder",
)


# What a continued arm's two runs are, for the notes of every ablation that has one.
TWO_PHASES = (
    "A continued arm is two runs: the first objective on its share of the budget (tokens at equal tokens, "
    "seconds at equal wall-clock), then the second from its final weights (--init-from) on the rest, each "
    "with its own warmup and cosine decay over its part. The tokens and seconds rows count both, and its "
    "curves are drawn at those totals, the second phase where the first ends. The second phase draws its "
    "windows with the same seed, so it begins on the windows the first began on (random offsets into the "
    "same text every arm reads)."
)


class CrossObjective(JobsStudy):
    """Native pretraining vs the other objective first, then continued in the native one (Ettin)."""

    reads = ("tag",)  # a user's tag task replaces the plays' punctuation in the tagging job (ablate --task)
    about = "native MLM/CLM vs the other objective for 75% of the budget, then continued in the native one (Ettin)"
    title = "Ablation cross-objective: native pretraining vs the other objective first, then continued"
    rules = (ENCODERS, DECODERS)
    step = "cross"
    options = ("share",)

    def clock_groups(self, arms: Sequence[Arm]) -> tuple[Sequence[Arm], Sequence[Arm]]:
        """Each pair on its own equal-wall-clock budget: the pairs are never compared with each other."""
        return self.pairs(arms)

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        """The encoder pair, then the decoder pair: each its native model first."""
        share = DEFAULT_SHARE if options.share is None else options.share
        return MLM_ARM, continued(MLM_ARM, CLM_ARM, share), CLM_ARM, continued(CLM_ARM, MLM_ARM, share)

    def pairs(self, arms: Sequence[Arm]) -> tuple[Sequence[Arm], Sequence[Arm]]:
        """The encoder pair and the decoder pair: what the rules compare, each on its own clock."""
        return arms[:2], arms[2:]

    def judge(self, rule: Rule, measures: JobMeasures, m: Measured) -> tuple[str, str]:
        """The encoder pair's rule, or the decoder pair's: each pair's native model first."""
        encoders, decoders = self.pairs(m.arms)
        native, other = encoders if rule is ENCODERS else decoders
        return judge_pair(measures, native, other)

    def summary(self, m: Measured, measures: JobMeasures) -> str:
        mlm, from_clm, clm, from_mlm = (arm.label for arm in m.arms)
        tag, loss = (measures.of(job, TOKENS).arms for job in (TAGGING, NEXT_TOKEN_LOSS))
        share = first_share(m.arms[1])
        return (
            f"We replaced pretraining in the model's own objective with {share:.0%} of the budget in the other one "
            f"before its own: at equal tokens the encoder's tagging F1 {moved(tag[mlm], tag[from_clm])}, "
            f"while the decoder's held-out next-token loss "
            f"{moved(loss[clm], loss[from_mlm])} nats/char (trivial baselines: {baselines(m, measures, TOKENS)})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            TWO_PHASES,
            (
                "Ettin (Weller et al., 2025, 'Seq vs Seq') continued fully trained encoders and decoders in the other "
                "objective for a few percent more tokens and found them behind the native model of the same size; here "
                "the continued arm spends its share (--share) of the same budget in the other objective first, and the "
                "models are tiny."
            ),
            (
                "The validation losses on the plots are per masked token (MLM) and per token (CLM), and a continued "
                "arm's first phase is on the other scale: compare the curves' shapes, not their levels."
            ),
        ]


ABLATION = CrossObjective()
