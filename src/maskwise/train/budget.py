"""Compute accounting: tokens read, loss positions, estimated training FLOPs, and budgets.

Objectives are compared at equal tokens seen, equal wall-clock or equal FLOPs, never at equal steps:
an MLM step takes a loss on 15% of its positions and a CLM step on all of them.

The FLOP estimate is the usual 6 x parameters x tokens (forward 2, backward 4 per weight per token)
for each stack's blocks, plus attention's score and mixing matmuls (12 x layers x context x width
per token), plus the LM head only at loss positions (the head is sparse).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from maskwise.errors import UserError
from maskwise.model.accounting import stack_flops
from maskwise.model.transformer import Decoder, Encoder, EncoderDecoder

BUDGET_KINDS = ("tokens", "seconds", "flops")


@dataclass(frozen=True)
class Budget:
    kind: str
    amount: float

    @classmethod
    def parse(cls, text: str) -> Budget | None:
        """``"tokens=1e6"``, ``"seconds=120"`` or ``"flops=1e13"``; empty -> no budget."""
        if not text:
            return None
        kind, _, value = text.partition("=")
        try:
            amount = float(value)
        except ValueError:
            amount = float("nan")
        if kind not in BUDGET_KINDS or not amount > 0:
            raise UserError(f"budget must be tokens=N, seconds=S or flops=F with a positive number, got {text!r}")
        return cls(kind, amount)

    def used_fraction(self, tokens: float, seconds: float, flops: float) -> float:
        used = {"tokens": tokens, "seconds": seconds, "flops": flops}[self.kind]
        return used / self.amount


def flops_per_token(model: nn.Module, context: int) -> tuple[float, float, float]:
    """(encoder FLOPs per token, decoder FLOPs per token, LM-head FLOPs per loss position).

    A composite model that is not one family (ELECTRA's generator + discriminator pair) counts its
    own parts through its ``flops_per_token(context)``; any other module that is not a maskwise
    family falls back to 6 x all its parameters per token.
    """
    own = getattr(model, "flops_per_token", None)
    if callable(own):
        return own(context)
    if not isinstance(model, Encoder | Decoder | EncoderDecoder):
        return 6.0 * sum(p.numel() for p in model.parameters()), 0.0, 0.0
    cfg = model.cfg
    head = 6.0 * cfg.d_model * cfg.vocab_size + (6.0 * cfg.d_model**2 if cfg.lm_head_transform else 0.0)
    if isinstance(model, EncoderDecoder):
        return stack_flops(model.encoder, context), stack_flops(model.decoder, context, attended=2), head
    per_token = stack_flops(model.stack, context)
    return (per_token, 0.0, head) if cfg.kind.encoder_only else (0.0, per_token, head)
