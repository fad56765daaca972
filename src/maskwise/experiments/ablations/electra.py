"""Ablation electra: replaced-token detection vs masked language modelling for the same encoder.

The downstream task is punctuation restoration as tagging (``tasks.tag``), which every bidirectional
body learns in seconds on about 20,000 test words; genre accuracy was a verdict on six test plays,
and retrieval left ELECTRA near random (docs/results.md, Ablations). Both arms pretrain on twice the
scale's tokens at half its batch, ELECTRA masking 25%: at the scale's own 342 steps and 15% the
discriminator stayed at the base rate of replacements on every seed, and its body tagged like the
untrained one (docs/results.md, 2026-12-05)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from maskwise.experiments.ablations.jobs import TAGGING, JobScores, with_control
from maskwise.experiments.arms import AXES, TOKENS, WALL, Arm, Setup, StudyOptions, tokens_per_second
from maskwise.experiments.framework import (
    TAG_F1,
    Measured,
    Measures,
    Rule,
    Study,
    Table,
    key,
    moved,
    on_both_axes,
    table_row,
)
from maskwise.experiments.report import fmt_stat
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE

# ELECTRA-Large's masking rate (Clark et al., 2020, appendix), not the small and base models' 15%: more replaced
# tokens a step is a denser signal, and at 15% one seed's discriminator of three barely started (docs/results.md).
ELECTRA_MASK_RATIO = 0.25
ELECTRA = Arm(
    "electra", "ELECTRA", {"family": "encoder", "objective": "electra", "mask_ratio": ELECTRA_MASK_RATIO}, costlier=True
)  # its generator
MLM_ARM = Arm("mlm", "MLM", {"family": "encoder", "objective": "mlm"})
DETECTION_GAIN = "replaced-token detection: validation loss below the base rate's (nats/token)"

RULE = (
    "Compare tagging F1 after identical tagging fine-tuning of the ELECTRA "
    "discriminator (a) and the MLM encoder (b), both of the same size: inconclusive if either is not ahead "
    "of tagging's trivial baseline and of the untrained body fine-tuned the same way; else held if ELECTRA "
    "is ahead, falsified if MLM is ahead, inconclusive within noise. Applied at equal tokens and at equal "
    "wall-clock (ELECTRA's generator makes its steps dearer, which only the wall-clock axis charges it for); "
    "the verdict is the common outcome, inconclusive if they differ."
)


@dataclass(frozen=True)
class ElectraMeasures(Measures):
    tagging: dict[str, JobScores]  # axis -> both arms' tagging F1, with its baseline and control

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {key(TAG_F1, axis): scores.to_json() for axis, scores in self.tagging.items()}


def detection_gain(run: dict) -> float:
    """The discriminator's validation loss below the best constant guess's (the entropy of the replaced
    share), in nats a token: 0 means it learned nothing that tells a replacement from the text around it.
    Not its accuracy: with a fifth or less replaced, a discriminator that has learned rarely flips a majority answer."""
    last = run["curve"][-1]
    share = last["val_replaced_fraction"]
    return -sum(p * math.log(p) for p in (share, 1.0 - share) if p > 0) - last["val_discriminator_loss"]


def teraflops(point: dict) -> float:
    """A pretraining curve point's FLOPs estimate so far, in units of 10^12."""
    return point["flops"] / 1e12


class ElectraVsMlm(Study[ElectraMeasures]):
    """Replaced-token detection vs masked language modelling for the same encoder."""

    reads = ("tag",)  # a user's tag task replaces the plays' punctuation in the tagging job (ablate --task)
    about = "ELECTRA vs MLM pretraining, then the same tagging fine-tuning"
    title = "Ablation electra: replaced-token detection vs masked language modelling"
    rules = (
        Rule(
            (
                "ELECTRA (replaced-token detection) pretrains a better encoder than MLM at equal compute, "
                "most clearly for small models (Clark et al., 2020)."
            ),
            RULE,
        ),
    )
    step = "tag"
    tokens_factor = 2.0
    steps_factor = 2

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return ELECTRA, MLM_ARM

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        return with_control(setup, TAGGING, TAGGING.take(setup, name, seed), seed)

    def tabulate(self, m: Measured) -> Table[ElectraMeasures]:
        tagging, rows = {}, []
        for axis in AXES:
            tagging[axis], tagging_rows = TAGGING.tabulated(m, axis)
            rows += [
                *tagging_rows,
                table_row("pretraining FLOPs (estimate, 10^12)", axis, m.final(axis, teraflops), None, 2),
            ]
        gain = [detection_gain(run) for run in m.runs[TOKENS][ELECTRA.key]]  # one run per seed serves both axes
        rows.append([DETECTION_GAIN, "both", fmt_stat(gain), "", ""])
        return Table(ElectraMeasures(tagging), rows)

    def judge(self, rule: Rule, measures: ElectraMeasures, m: Measured) -> tuple[str, str]:
        def one_axis(axis: str) -> tuple[str, str]:
            tagging = measures.tagging[axis]
            c = tagging.compare(ELECTRA.label, MLM_ARM.label)
            short = tagging.short_of((ELECTRA.label, MLM_ARM.label))
            if short:
                return INCONCLUSIVE, (
                    f"{' and '.join(short)} not ahead of the tagging baselines, so no evidence; "
                    f"{c.describe('ELECTRA', 'MLM')}"
                )
            return {"a": HELD, "b": FALSIFIED, "tie": INCONCLUSIVE}[c.winner], c.describe("ELECTRA", "MLM")

        return on_both_axes(one_axis)

    def summary(self, m: Measured, measures: ElectraMeasures) -> str:
        tagging, tagging_w = measures.tagging[TOKENS].arms, measures.tagging[WALL].arms
        rule, rule_f1 = TAGGING.baseline_of(m.first(MLM_ARM))
        speed = {arm.label: [tokens_per_second(r) for r in m.runs[TOKENS][arm.key]] for arm in m.arms}
        return (
            f"We replaced MLM with ELECTRA's replaced-token detection for the same encoder: tagging F1 "
            f"{moved(tagging[MLM_ARM.label], tagging[ELECTRA.label])} at equal tokens "
            f"({moved(tagging_w[MLM_ARM.label], tagging_w[ELECTRA.label])} at equal wall-clock; {rule} {rule_f1:.3f}), "
            f"while pretraining throughput {moved(speed[MLM_ARM.label], speed[ELECTRA.label], 0)} tokens/s."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                "Equal compute is stated two ways: equal wall-clock (the fair one for cost: ELECTRA pretrains for the "
                "seconds MLM needed for the scale's tokens) and equal tokens (the same text: the tokens ELECTRA read "
                "in that time, MLM pretraining again to that count; ELECTRA also runs a generator a quarter the width, "
                "so it spends more per token, see the FLOPs row). The FLOPs estimate counts both of ELECTRA's stacks "
                "(weights and attention) and the generator's head."
            ),
            (
                "What fine-tunes is the discriminator (the run's model.safetensors), a plain encoder of the same size "
                "as the MLM one, with a fresh per-token head on the tagging job's training rows (the train plays' "
                "punctuation windows, or the user's tag task); the same steps, "
                "batch and learning rates."
            ),
            "One model size only: the 'most clearly for small models' part of the prediction is not tested here.",
            (
                f"Both arms pretrain on {self.tokens_factor:g}x the scale's tokens at 1/{self.steps_factor} of "
                f"its batch (more optimizer steps for the same text), and ELECTRA masks {ELECTRA_MASK_RATIO:.0%} of "
                "the tokens, as ELECTRA-Large does (more replacements a step): replaced-token detection learns from "
                "one bit a token, and with fewer steps and 15% the discriminator stayed at the base rate of "
                f"replacements (the '{DETECTION_GAIN}' row: 0 is that)."
            ),
            (
                "ELECTRA's validation loss (generator MLM + 50 x discriminator BCE) is on another scale than MLM's: "
                "compare the curves' shapes, not their levels."
            ),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Tagging F1, higher is better, against the MLM arm's first trivial baseline."""
        return {TAG_F1: (True, TAGGING.baseline_of(m.first(MLM_ARM)))}


ABLATION = ElectraVsMlm()
