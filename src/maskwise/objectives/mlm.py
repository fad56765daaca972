"""Masked language modelling (BERT): the 80/10/10 recipe.

The loss fits p(x_i | x_without_masked) at ~15% of positions only; nothing models the joint, which
is why an MLM encoder cannot generate text left to right.
"""

from __future__ import annotations

import torch
from torch import nn

from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.base import LossParts, Objective, correct_predictions


def check_ratio(name: str, value: float) -> float:
    if not 0.0 < value < 1.0:
        raise UserError(f"{name} must be in (0, 1), got {value}")
    return value


def mask_tokens(
    ids: torch.Tensor,
    is_special: torch.Tensor,
    mask_id: int,
    generator: torch.Generator | None,
    ratio: float = 0.15,
    p_mask: float = 0.8,
    p_random: float = 0.1,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption. Returns ``(inputs, labels)``, both (B, T).

    Of the non-special (and non-padding) positions, each is chosen with probability ``ratio``; a row
    with none chosen gets one chosen at random, so every sequence contributes to the loss. A chosen
    position becomes ``[MASK]`` with probability ``p_mask``, a random non-special token with
    ``p_random``, and stays unchanged otherwise (the remaining 1 - p_mask - p_random). ``labels``
    holds the original token at chosen positions and -100 elsewhere.

    ``is_special``: (V,) bool, True for ids that are never chosen nor drawn as random replacements.
    """
    if p_mask < 0 or p_random < 0 or p_mask + p_random > 1:
        raise UserError(
            f"MLM rates must satisfy p_mask, p_random >= 0 and p_mask + p_random <= 1, got {p_mask} and {p_random}"
        )
    candidates = ~is_special[ids]  # (B, T)
    if attention_mask is not None:
        candidates &= attention_mask.bool()
    draws = torch.rand(ids.shape, generator=generator)
    chosen = candidates & (draws < ratio)
    # Rows with no chosen position: choose one candidate uniformly (random scores, argmax).
    empty = ~chosen.any(dim=1) & candidates.any(dim=1)  # (B,)
    if empty.any():
        scores = torch.rand(ids.shape, generator=generator).masked_fill(~candidates, -1.0)
        fallback = torch.zeros_like(chosen)
        fallback[torch.arange(ids.shape[0]), scores.argmax(dim=1)] = True
        chosen |= fallback & empty[:, None]

    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    action = torch.rand(ids.shape, generator=generator)
    to_mask = chosen & (action < p_mask)
    to_random = chosen & (action >= p_mask) & (action < p_mask + p_random)
    ordinary = (~is_special).nonzero().squeeze(1)  # (V_ordinary,)
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


def special_lookup(tokenizer, vocab_size: int) -> torch.Tensor:
    """(V,) bool: True for the tokenizer's special and sentinel ids (never masked or sampled)."""
    is_special = torch.zeros(vocab_size, dtype=torch.bool)
    is_special[[i for i in tokenizer.special_ids if i < vocab_size]] = True
    return is_special


class MLM(Objective):
    """Encoder pretraining: ``[CLS]`` + window, 80/10/10 masking, loss on chosen positions only."""

    name = "mlm"
    families = ("encoder",)

    def __init__(
        self, tokenizer, vocab_size: int, mask_ratio: float = 0.15, p_mask: float = 0.8, p_random: float = 0.1
    ):
        self.ratio = check_ratio("mask_ratio", mask_ratio)
        self.p_mask, self.p_random = p_mask, p_random
        self.cls_id, self.mask_id = tokenizer.cls_id, tokenizer.mask_id
        self.is_special = special_lookup(tokenizer, vocab_size)

    def raw_length(self, block_size: int) -> int:
        return block_size - 1  # one position goes to [CLS]

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        cls = torch.full((windows.shape[0], 1), self.cls_id, dtype=windows.dtype)
        ids = torch.cat([cls, windows], dim=1)  # (B, T)
        inputs, labels = mask_tokens(
            ids, self.is_special, self.mask_id, generator, self.ratio, self.p_mask, self.p_random
        )
        return {"input_ids": inputs, "labels": labels}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        evaluating = not model.training  # a training step reports only the loss: no logits, no accuracy
        out = model(batch["input_ids"], labels=batch["labels"], return_logits=evaluating)
        metrics = {"correct": correct_predictions(out.logits, batch["labels"])} if evaluating else {}
        return LossParts(out.loss_sum, out.n_loss_positions, encoder_tokens=batch["input_ids"].numel(), metrics=metrics)

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return {"masked_acc": totals["correct"] / max(totals["n_positions"], 1)}
