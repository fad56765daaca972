"""Ablation shift-bug: a causal LM that forgot to shift its labels."""

from __future__ import annotations

from collections.abc import Sequence

from maskwise.data.corpus import SHAKESPEARE
from maskwise.experiments.arms import AXES, TOKENS, Arm, Setup
from maskwise.experiments.framework import (
    Measured,
    Rule,
    Study,
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


def judge(metrics: dict, arms=None) -> tuple[str, str]:
    bug, ok = SHIFT_BUG.label, SHIFT_OK.label

    def one_axis(axis: str) -> tuple[str, str]:
        reported = compare(metrics[key(REPORTED, axis)][bug], metrics[key(REPORTED, axis)][ok], higher_is_better=False)
        copies = compare(metrics[key(COPY_RATE, axis)][bug], metrics[key(COPY_RATE, axis)][ok])
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


class ShiftBug(Study):
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
            judge,
        ),
    )
    step = "shift"

    def arms(self) -> tuple[Arm, ...]:
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
        return {
            "nats_per_char": decoder_nats_per_char(run.model, tok, text),
            "copy_rate": copied / max(total, 1),
            "sample": f"PROMPT: {tok.decode(prompts[0])}\nCONTINUATION: {tok.decode(new[0])}",
        }

    def tabulate(self, m: Measured) -> tuple[dict, list]:
        metrics, rows = {}, []
        for axis in AXES:
            metrics[key(REPORTED, axis)] = m.final(axis, lambda last: last["val_loss"])
            metrics[key(COPY_RATE, axis)] = m.per_arm(axis, lambda r: r["copy_rate"])
            rows += [
                table_row(REPORTED + " (its own objective, per token)", axis, metrics[key(REPORTED, axis)], False),
                table_row(
                    TRUE_LOSS + " (correct shift for both)", axis, m.per_arm(axis, lambda r: r["nats_per_char"]), False
                ),
                table_row(
                    COPY_RATE + " (generated token = previous token)", axis, metrics[key(COPY_RATE, axis)], False
                ),
            ]
        return metrics, rows

    def summary(self, m: Measured, metrics: dict) -> str:
        ok, bug = SHIFT_OK.label, SHIFT_BUG.label
        reported, copies = metrics[key(REPORTED, TOKENS)], metrics[key(COPY_RATE, TOKENS)]
        true_loss = m.per_arm(TOKENS, lambda r: r["nats_per_char"])
        return (
            f"We replaced the next-token target with the current token (CLM without the shift): the reported "
            f"validation loss {moved(reported[ok], reported[bug])} at equal tokens, while the true next-token loss "
            f"on held-out text {moved(true_loss[ok], true_loss[bug])} nats per character and the share of sampled "
            f"tokens that copy the previous one {moved(copies[ok], copies[bug])}."
        )

    def samples(self, m: Measured) -> dict[str, str]:
        return {
            f"{arm.label}, seed {m.setup.seeds[0]} (temperature 0.8, top-k 40)": m.first(arm)["sample"]
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
