"""Ablation shift-bug: a causal LM that forgot to shift its labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from maskwise.data.corpus import SHAKESPEARE
from maskwise.experiments.ablations.jobs import val_loss
from maskwise.experiments.arms import AXES, TOKENS, Arm, Setup, StudyOptions
from maskwise.experiments.framework import (
    Measured,
    Measures,
    Rule,
    Study,
    Table,
    ahead,
    claims_verdict,
    key,
    moved,
    on_both_axes,
    table_row,
)
from maskwise.experiments.held_out import held_out_text
from maskwise.experiments.verdict import compare
from maskwise.tasks.fill_mask import decoder_nats_per_char
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.reading import seeded_generator
from maskwise.tasks.record import Fields

SHIFT_OK = Arm("shift", "correct shift", {"family": "decoder", "objective": "clm"})
SHIFT_BUG = Arm("noshift", "no shift (bug)", {"family": "decoder", "objective": "clm", "no_shift": True})
REPORTED = "reported validation loss"
COPY_RATE = "sample copy rate"
TRUE_LOSS = "next-token loss on held-out text, nats/char"
SAMPLE_PROMPTS, PROMPT_TOKENS, SAMPLE_TOKENS = 8, 12, 48

RULE = (
    "Two claims. (1) The broken model's reported validation loss is lower (paired by seed, interval excluding zero) "
    "and below half the correct model's (contradicted if the correct one is lower, or the broken one "
    "lower but not by half). (2) Its samples repeat the previous token more often (copy rate, "
    "paired likewise). Falsified if a claim is contradicted, held if both are supported, "
    "inconclusive otherwise. Applied at equal tokens and at equal wall-clock; the verdict is the "
    "common outcome, inconclusive if they differ."
)


def copy_rate(prompt: Sequence[int], new: Sequence[int]) -> tuple[int, int]:
    """(generated tokens equal to the token just before them, generated tokens): the signature of a
    model that learned to copy its input instead of predicting what comes next."""
    previous = [prompt[-1], *new[:-1]] if new else []
    return sum(a == b for a, b in zip(new, previous)), len(new)


@dataclass(frozen=True)
class Sampled(Fields):
    """What one run is measured on (``ShiftBug.measure``): its held-out next-token loss with the correct shift, the
    copy rate of its sampled continuations, and the first one as text."""

    nats_per_char: float
    copy_rate: float
    sample: str


@dataclass(frozen=True)
class ShiftAxis:
    """What the rule reads at one axis, by arm label, per seed."""

    reported: dict[str, list[float]]  # each run's own last validation loss
    copies: dict[str, list[float]]  # its samples' copy rate


@dataclass(frozen=True)
class ShiftMeasures(Measures):
    at: dict[str, ShiftAxis]  # axis ->

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        metrics = {}
        for axis, measured in self.at.items():
            metrics[key(REPORTED, axis)] = measured.reported
            metrics[key(COPY_RATE, axis)] = measured.copies
        return metrics


def sampled(m: Measured, axis: str) -> dict[str, list[Sampled]]:
    """Each arm's runs' measures on ``axis``, by arm label."""
    return {arm.label: [Sampled.from_json(r) for r in m.measured[axis][arm.key]] for arm in m.arms}


class ShiftBug(Study[ShiftMeasures]):
    """A causal LM with and without the one-position label shift."""

    about = "a causal LM with and without the one-position label shift"
    title = "Ablation shift-bug: a causal LM that forgot to shift its labels"
    rules = (
        Rule(
            (
                "A decoder trained to predict the token it is looking at (no shift) reports a much lower "
                "loss than a correct one and generates degenerate copies."
            ),
            RULE,
        ),
    )
    step = "shift"

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return SHIFT_OK, SHIFT_BUG

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """Held-out next-token loss with the correct shift, and sampled continuations of held-out
        prompts: their copy rate and the first one as text."""
        run = setup.exp.load(name)
        tok, text = run.tokenizer, held_out_text(setup.scale.held_out_chars, setup.corpus.get("data", SHAKESPEARE))
        ids = tok.encode(text)
        room = max(1, len(ids) - PROMPT_TOKENS)
        prompts = [ids[i * room // SAMPLE_PROMPTS :][:PROMPT_TOKENS] for i in range(SAMPLE_PROMPTS)]
        sampling = GenerationConfig(max_new_tokens=SAMPLE_TOKENS, temperature=0.8, top_k=40)
        new = generate(
            run.model, prompts, sampling, tok.eos_id, tok.pad_id, None, seeded_generator(run.model, seed)
        ).tokens
        copied, total = map(sum, zip(*(copy_rate(p, n) for p, n in zip(prompts, new))))
        return Sampled(
            decoder_nats_per_char(run.model, tok, text),
            copied / max(total, 1),
            f"PROMPT: {tok.decode(prompts[0])}\nCONTINUATION: {tok.decode(new[0])}",
        ).to_json()

    def tabulate(self, m: Measured) -> Table[ShiftMeasures]:
        at, rows = {}, []
        for axis in AXES:
            runs = sampled(m, axis)
            measured = at[axis] = ShiftAxis(
                m.final(axis, val_loss), {label: [r.copy_rate for r in rs] for label, rs in runs.items()}
            )
            true_loss = {label: [r.nats_per_char for r in rs] for label, rs in runs.items()}
            rows += [
                table_row(REPORTED + " (its own objective, per token)", axis, measured.reported, False),
                table_row(TRUE_LOSS + " (correct shift for both)", axis, true_loss, False),
                table_row(COPY_RATE + " (generated token = previous token)", axis, measured.copies, False),
            ]
        return Table(ShiftMeasures(at), rows)

    def judge(self, rule: Rule, measures: ShiftMeasures, m: Measured) -> tuple[str, str]:
        bug, ok = SHIFT_BUG.label, SHIFT_OK.label

        def one_axis(axis: str) -> tuple[str, str]:
            at = measures.at[axis]
            reported = compare(at.reported[bug], at.reported[ok], higher_is_better=False)
            copies = compare(at.copies[bug], at.copies[ok])
            lower = ahead(reported)
            if lower and not reported.mean_a < 0.5 * reported.mean_b:
                lower = False  # lower, but not "much lower"
            ratio = reported.mean_a / reported.mean_b
            return claims_verdict(
                [
                    (f"reported loss below half ({reported.describe(bug, ok)}; ratio {ratio:.2f})", lower),
                    (f"more copies ({copies.describe(bug, ok)})", ahead(copies)),
                ]
            )

        return on_both_axes(one_axis)

    def summary(self, m: Measured, measures: ShiftMeasures) -> str:
        ok, bug = SHIFT_OK.label, SHIFT_BUG.label
        reported, copies = measures.at[TOKENS].reported, measures.at[TOKENS].copies
        true_loss = {label: [r.nats_per_char for r in rs] for label, rs in sampled(m, TOKENS).items()}
        return (
            f"We replaced the next-token target with the current token (CLM without the shift): the reported "
            f"validation loss {moved(reported[ok], reported[bug])} at equal tokens, while the true next-token loss "
            f"on held-out text {moved(true_loss[ok], true_loss[bug])} nats per character and the share of sampled "
            f"tokens that copy the previous one {moved(copies[ok], copies[bug])}."
        )

    def samples(self, m: Measured) -> dict[str, str]:
        return {
            f"{arm.label}, seed {m.setup.seeds[0]} (temperature 0.8, top-k 40)": Sampled.from_json(m.first(arm)).sample
            for arm in m.arms
        }

    def notes(self, m: Measured) -> list[str]:
        return [
            (
                "The reported loss is each run's own validation loss: for the broken run, the loss of predicting the "
                "token at the same position, which the causal mask lets it see; so it falls towards zero."
            ),
            (
                "The held-out next-token loss scores both models with the correct shift on the opening of a test play "
                "(nats per character, so the tokenizer does not matter): what the broken run actually knows about "
                "what comes next."
            ),
            (
                f"Copy rate: over {SAMPLE_PROMPTS} held-out prompts of {PROMPT_TOKENS} tokens, each continued for "
                f"{SAMPLE_TOKENS} tokens, the share of generated tokens equal to the token just before them."
            ),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        return {REPORTED: (False, None), COPY_RATE: (None, None)}


ABLATION = ShiftBug()
