"""Causal language modelling (GPT): predict every next token.

The chain rule factorises the joint p(x) = prod_t p(x_t | x_<t), so a decoder trained this way can
generate. The shift by one position happens here and nowhere else; ``shift=False`` deliberately
trains the model to predict the token it is already looking at (the shift-bug ablation): the loss
collapses towards zero while the model learns nothing about what comes next.
"""

from __future__ import annotations

import torch
from torch import nn

from maskwise.objectives.base import LossParts, Objective


def clm_inputs_and_labels(ids: torch.Tensor, shift: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T+1) ids -> inputs (B, T) and labels (B, T) where labels[t] = ids[t + 1].

    With ``shift=False``: (B, T) ids -> inputs = labels = ids (predict the current token).
    """
    if not shift:
        return ids, ids.clone()
    return ids[:, :-1], ids[:, 1:].clone()


class CLM(Objective):
    name = "clm"
    families = ("decoder",)

    def __init__(self, shift: bool = True):
        self.shift = shift

    def raw_length(self, block_size: int) -> int:
        return block_size + 1 if self.shift else block_size

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        inputs, labels = clm_inputs_and_labels(windows, self.shift)
        return {"input_ids": inputs, "labels": labels}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        out = model(batch["input_ids"], labels=batch["labels"], return_logits=False)  # only the loss is used
        return LossParts(out.loss_sum, out.n_loss_positions, decoder_tokens=batch["input_ids"].numel())
