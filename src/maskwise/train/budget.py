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

BUDGET_KINDS = ("tokens", "seconds", "flops")


@dataclass(frozen=True)
class Budget:
    kind: str
    amount: float

    @classmethod
    def parse(cls, text: str) -> "Budget | None":
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


def _block_parameters(stack: nn.Module) -> int:
    return sum(p.numel() for p in stack.blocks.parameters())


def flops_per_token(model: nn.Module, context: int) -> tuple[float, float, float]:
    """(encoder FLOPs per token, decoder FLOPs per token, LM-head FLOPs per loss position).

    Falls back to 6 x all parameters per token for models that are not a plain maskwise family
    (e.g. ELECTRA's generator + discriminator pair), counted as encoder tokens.
    """
    cfg = getattr(model, "cfg", None)
    family = getattr(model, "family", None)
    if cfg is None or family is None:
        return 6.0 * sum(p.numel() for p in model.parameters()), 0.0, 0.0
    width = cfg.n_heads * cfg.head_dim
    head = 6.0 * cfg.d_model * cfg.vocab_size + (6.0 * cfg.d_model ** 2 if cfg.lm_head_transform else 0.0)
    if family == "encoder-decoder":
        enc = 6.0 * _block_parameters(model.encoder) + 12.0 * cfg.n_layers * context * width
        dec = 6.0 * _block_parameters(model.decoder) + 12.0 * cfg.decoder_layers * 2 * context * width
        return enc, dec, head
    per_token = 6.0 * _block_parameters(model.stack) + 12.0 * cfg.n_layers * context * width
    return (per_token, 0.0, head) if family == "encoder" else (0.0, per_token, head)
