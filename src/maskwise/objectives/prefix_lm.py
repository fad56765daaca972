"""Prefix LM (non-causal decoder): read a prefix bidirectionally, continue it left to right.

Each window is split at a prefix length p drawn uniformly from [1, T - 1] (T = block size), so that
there is always at least one prefix token and one token to predict. The decoder's "prefix" mask
(``maskwise.masks``) lets every position see the whole prefix, keys j < p, and beyond it only the
past, keys j <= i. The loss is CLM's restricted to the continuation: with the usual shift, position
t predicts token t + 1, and only positions t >= p - 1 carry a loss. The last prefix position
predicts the first continuation token; earlier positions would predict prefix tokens, which every
prefix position can already see, so they must not carry one.

One decoder, one set of weights: the prefix plays the encoder's part without a second stack.
"""

from __future__ import annotations

import torch
from torch import nn

from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.base import LossParts, Objective
from maskwise.objectives.clm import clm_inputs_and_labels


def sample_prefix_lengths(lengths: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(B,) sequence lengths -> (B,) prefix lengths, each uniform in [1, length - 1]."""
    if bool((lengths < 2).any()):
        raise ValueError(f"a prefix-LM sequence needs at least 2 tokens, got lengths {lengths.tolist()}")
    draws = torch.rand(lengths.shape, generator=generator)  # (B,) in [0, 1)
    return 1 + (draws * (lengths - 1)).long()


def hide_prefix(labels: torch.Tensor, first_loss: torch.Tensor) -> torch.Tensor:
    """(B, T) labels with -100 at positions t < ``first_loss[b]`` of each row b."""
    positions = torch.arange(labels.shape[1], device=labels.device)  # (T,)
    return labels.masked_fill(positions[None, :] < first_loss[:, None], IGNORE_INDEX)


class PrefixLM(Objective):
    name = "prefix-lm"
    families = ("decoder",)

    def raw_length(self, block_size: int) -> int:
        return block_size + 1  # the shift by one

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        inputs, labels = clm_inputs_and_labels(windows)  # (B, T) each; labels[t] = windows[t + 1]
        B, T = inputs.shape
        prefix_lengths = sample_prefix_lengths(torch.full((B,), T), generator)  # (B,)
        return {
            "input_ids": inputs,
            "labels": hide_prefix(labels, prefix_lengths - 1),
            "prefix_lengths": prefix_lengths,
        }

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        out = model(
            batch["input_ids"], labels=batch["labels"], prefix_lengths=batch["prefix_lengths"], return_logits=False
        )  # only the loss is used
        return LossParts(out.loss_sum, out.n_loss_positions, decoder_tokens=batch["input_ids"].numel())
