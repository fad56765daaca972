"""Ablation mask-ratio: how much to mask in MLM (0.15 vs 0.30 by default).

Downstream is punctuation restoration as tagging (``tasks.tag``): a task every bidirectional body
learns in seconds, with about 20,000 test words, where genre accuracy over the test split's six
plays spread too far across seeds to decide and retrieval's gap would have needed ~16 seeds."""

from __future__ import annotations

from dataclasses import dataclass

from maskwise.data.corpus import load_corpus
from maskwise.data.stream import TokenStream
from maskwise.errors import UserError
from maskwise.experiments.ablations.jobs import TAGGING, JobScores, val_loss, with_control
from maskwise.experiments.arms import AXES, TOKENS, WALL, Arm, Setup, StudyOptions
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
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE, compare
from maskwise.objectives.mlm import MLM
from maskwise.recipes import Scale
from maskwise.tasks.reading import config_of
from maskwise.tasks.record import Fields
from maskwise.train.loop import Trainer
from maskwise.train.settings import TrainConfig

MASK_LOSS = "held-out MLM loss at 15% masking"
DEFAULT_RATIOS = (0.15, 0.30)

RULE = (
    "Compare the lowest ratio (a) and the highest (b). The loss is MLM loss per masked token on "
    "held-out text with the same 15% masks for every model (a loss at each model's own ratio would "
    "compare different tasks), after the same steps (equal tokens: the batches are the same size). "
    "Downstream: tagging F1 after the same tagging fine-tuning. "
    "Inconclusive if either is not ahead of tagging's trivial baseline and of the untrained body fine-tuned the "
    "same way. Falsified if b is ahead on tagging F1. Held if a is ahead on it and b has the lower "
    "loss. Otherwise inconclusive. Applied at equal tokens and at equal wall-clock; the verdict is "
    "the common outcome, inconclusive if they differ."
)


def ratio_arm(ratio: float) -> Arm:
    return Arm(f"ratio{ratio:g}", f"mask {ratio:g}", {"family": "encoder", "objective": "mlm", "mask_ratio": ratio})


@dataclass(frozen=True)
class MaskedLoss(Fields):
    """A run's MLM loss per masked token at 15% masking (``mlm_loss_at``), stored beside its tagging record."""

    mlm_loss_15: float


@dataclass(frozen=True)
class RatioAxis:
    """What the rule reads at one axis: each arm's loss at 15% masking, and tagging with its baseline and control."""

    loss: dict[str, list[float]]  # arm label -> per seed
    tagging: JobScores


@dataclass(frozen=True)
class MaskRatioMeasures(Measures):
    at: dict[str, RatioAxis]  # axis ->

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        metrics = {}
        for axis, measured in self.at.items():
            metrics[key(MASK_LOSS, axis)] = measured.loss
            metrics[key(TAG_F1, axis)] = measured.tagging.to_json()
        return metrics


def masked_loss(stored: dict) -> float:
    """A run's stored ``MaskedLoss``."""
    return MaskedLoss.from_json(stored).mlm_loss_15


def mlm_loss_at(setup: Setup, name: str, ratio: float = 0.15) -> float:
    """MLM loss per masked token of run ``name`` on the validation plays, masking ``ratio`` with
    the same seed for every model, through the training loop's own evaluation."""

    run = setup.exp.load(name)
    val = TokenStream.from_texts(load_corpus("shakespeare").val, run.tokenizer, "validation data")
    block = setup.recipe.model()
    assert isinstance(setup.scale, Scale)  # an ablation's scale
    cfg = TrainConfig(
        block_size=block["block_size"],
        batch_size=block["batch_size"],
        eval_batches=4 * setup.scale.eval_batches,
        seed=0,
        progress=False,
    )
    objective = MLM(run.tokenizer, config_of(run.model).vocab_size, mask_ratio=ratio)
    return Trainer(run.model, objective, val, val, cfg, runtime=setup.exp.runtime).evaluate()["val_loss"]


class MaskRatio(Study[MaskRatioMeasures]):
    """How much to mask in MLM."""

    reads = ("tag",)  # a user's tag task replaces the plays' punctuation in the tagging job (ablate --task)
    about = "MLM mask ratio 0.15 vs 0.30: pretraining loss and downstream tagging"
    title = "Ablation mask-ratio: how much to mask in MLM"
    rules = (
        Rule(
            (
                "Masking 30% instead of 15% gives a lower pretraining loss per step (twice the predictions "
                "per step) but a worse downstream score (here: tagging, punctuation restoration on the plays)."
            ),
            RULE,
        ),
    )
    step = "mask"
    options = ("ratios",)

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        ratios = DEFAULT_RATIOS if options.ratios is None else options.ratios
        values = tuple(sorted({float(r) for r in ratios}))
        if len(values) < 2 or not all(0.0 < r < 1.0 for r in values):
            raise UserError(f"ratios: need at least two distinct mask ratios in (0, 1), got {list(ratios)}")
        return tuple(ratio_arm(r) for r in values)

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        tagging = with_control(setup, TAGGING, TAGGING.take(setup, name, seed), seed)
        return {**MaskedLoss(mlm_loss_at(setup, name)).to_json(), **tagging}

    def tabulate(self, m: Measured) -> Table[MaskRatioMeasures]:
        at, rows = {}, []
        for axis in AXES:
            loss = m.per_arm(axis, masked_loss)
            tagging, tagging_rows = TAGGING.tabulated(m, axis)
            at[axis] = RatioAxis(loss, tagging)
            rows += [
                table_row(MASK_LOSS + " (nats per masked token)", axis, loss, False),
                table_row(
                    "validation loss at its own ratio (not comparable across ratios)",
                    axis,
                    m.final(axis, val_loss),
                    None,
                ),
                *tagging_rows,
            ]
        return Table(MaskRatioMeasures(at), rows)

    def judge(self, rule: Rule, measures: MaskRatioMeasures, m: Measured) -> tuple[str, str]:
        """Between the lowest ratio's arm (``m.arms[0]``) and the highest's (``m.arms[-1]``)."""
        low, high = m.arms[0].label, m.arms[-1].label

        def one_axis(axis: str) -> tuple[str, str]:
            at = measures.at[axis]
            loss = compare(at.loss[low], at.loss[high], higher_is_better=False)
            tagging = at.tagging.compare(low, high)
            text = f"loss {loss.describe(low, high)}; tagging F1 {tagging.describe(low, high)}"
            short = at.tagging.short_of((low, high))
            if short:
                return INCONCLUSIVE, f"{' and '.join(short)} not ahead of the tagging baselines, so no evidence; {text}"
            if tagging.winner == "b":
                return FALSIFIED, text
            if tagging.winner == "a" and loss.winner == "b":
                return HELD, text
            return INCONCLUSIVE, text

        return on_both_axes(one_axis)

    def summary(self, m: Measured, measures: MaskRatioMeasures) -> str:
        low, high = m.arms[0].label, m.arms[-1].label
        loss, tagging = measures.at[TOKENS].loss, measures.at[TOKENS].tagging.arms
        loss_w, tagging_w = measures.at[WALL].loss, measures.at[WALL].tagging.arms
        rule, rule_f1 = TAGGING.baseline_of(m.first(m.arms[0]))
        return (
            f"We replaced mask ratio {low.split()[-1]} with {high.split()[-1]}: held-out MLM loss at 15% masking "
            f"{moved(loss[low], loss[high])} after the same steps ({moved(loss_w[low], loss_w[high])} at equal "
            f"wall-clock), while tagging F1 {moved(tagging[low], tagging[high])} "
            f"({moved(tagging_w[low], tagging_w[high])} at equal wall-clock; {rule} {rule_f1:.3f})."
        )

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                "What is compared: MLM loss per masked token, on the same held-out windows with the same 15% masks "
                "for every model. A model trained at 30% is scored on the loss at its own ratio during training (the "
                "curves and the 'own ratio' row), where each prediction has less context: those numbers measure "
                "different tasks and are not compared."
            ),
            (
                "Wettig et al. (2023, 'Should You Mask 15% in Masked Language Modeling?') found 40% masking beating "
                "15% downstream for BERT-large-sized models with an efficient recipe; the tiny models here are far "
                "from that regime, and the verdict is reported either way."
            ),
            (
                "Tagging: a fresh per-token head on the body, fine-tuned on the train plays' punctuation windows (or "
                "the user's tag task) with the same steps, batch and learning rates for every ratio, scored on the "
                "same test rows."
            ),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """The loss at 15% masking, lower is better; tagging F1 against the lowest ratio's trivial baseline."""
        return {MASK_LOSS: (False, None), TAG_F1: (True, TAGGING.baseline_of(m.first(m.arms[0])))}


ABLATION = MaskRatio()
