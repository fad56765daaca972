"""Masked next-token prediction (GPT-BERT, Charpentier & Samuel 2024): one decoder trained both ways.

Each micro-batch is drawn causal, with probability ``causal_fraction`` (the paper's 1/16), or
masked. A causal batch is CLM exactly: the causal mask, position t predicts token t + 1. A masked
batch corrupts inputs 1..T-1 of the window by MLM's 80/10/10 recipe, reads them with the
bidirectional mask, and predicts each chosen token from the position before it: both kinds are
shifted by one, so the one LM head always answers "the next token" and the model can be read
either way afterwards (``ModelConfig.reads_bidirectionally``: tasks read bidirectionally, generation
writes causally with the KV cache).

A batch holds its causal rows first (``n_causal`` of them) and its masked rows after: a training
batch is all one kind, an evaluation batch (``prepare_eval``) reads every window both ways, so each
evaluation reports both kinds' losses on the same windows (``val_causal_loss``, ``val_masked_loss``);
its ``val_loss`` pools the positions of both.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.base import LossParts, Objective, correct_predictions
from maskwise.objectives.clm import clm_inputs_and_labels
from maskwise.objectives.mlm import check_ratio, mask_tokens, special_lookup

KINDS = ("causal", "masked")


def masked_next_token(
    windows: torch.Tensor,
    is_special: torch.Tensor,
    mask_id: int,
    generator: torch.Generator,
    ratio: float = 0.15,
    p_mask: float = 0.8,
    p_random: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T+1) windows -> inputs (B, T) with positions 1..T-1 corrupted by ``mask_tokens``, and
    labels (B, T) where labels[t] = windows[t + 1] if position t + 1 was chosen, else -100.
    Position 0 has no position before it to be predicted from; windows[T] is not read."""
    ids = windows[:, :-1]  # (B, T)
    corrupted, chosen = mask_tokens(ids[:, 1:], is_special, mask_id, generator, ratio, p_mask, p_random)  # (B, T-1)
    inputs = torch.cat([ids[:, :1], corrupted], dim=1)  # (B, T)
    last = torch.full_like(ids[:, :1], IGNORE_INDEX)  # (B, 1): position T-1 would predict windows[T]
    return inputs, torch.cat([chosen, last], dim=1)  # labels shifted left by one: (B, T)


class Hybrid(Objective):
    """GPT-BERT's hybrid on the decoder: causal batches and bidirectional masked batches, one head."""

    name = "hybrid"
    families = ("decoder",)

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        causal_fraction: float = 1 / 16,
        mask_ratio: float = 0.15,
        p_mask: float = 0.8,
        p_random: float = 0.1,
    ):
        if not 0.0 <= causal_fraction <= 1.0:
            raise UserError(f"causal-fraction must be in [0, 1], got {causal_fraction}")
        if tokenizer.mask_id is None:
            raise UserError("the hybrid objective needs a [MASK] token, and this tokenizer has none")
        self.causal_fraction = causal_fraction
        self.ratio = check_ratio("mask_ratio", mask_ratio)
        self.p_mask, self.p_random = p_mask, p_random
        self.mask_id = tokenizer.mask_id
        self.is_special = special_lookup(tokenizer, vocab_size)

    def raw_length(self, block_size: int) -> int:
        return block_size + 1  # the shift by one, of both kinds

    def model_config(self, cfg: ModelConfig) -> ModelConfig:
        return dataclasses.replace(cfg, reads_bidirectionally=True).validate()

    def _masked(self, windows: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return masked_next_token(
            windows, self.is_special, self.mask_id, generator, self.ratio, self.p_mask, self.p_random
        )

    # A batch is Any-valued: beside its tensors, ``n_causal`` is an int, how many of its rows are causal.
    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, Any]:
        causal = bool(torch.rand((), generator=generator) < self.causal_fraction)
        inputs, labels = clm_inputs_and_labels(windows) if causal else self._masked(windows, generator)
        return {"input_ids": inputs, "labels": labels, "n_causal": len(inputs) if causal else 0}

    def prepare_eval(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, Any]:
        causal, masked = clm_inputs_and_labels(windows), self._masked(windows, generator)
        return {
            "input_ids": torch.cat([causal[0], masked[0]]),
            "labels": torch.cat([causal[1], masked[1]]),
            "n_causal": len(windows),
        }  # (2B, T) each: every window read both ways

    def loss(self, model: nn.Module, batch: dict[str, Any]) -> LossParts:
        evaluating = not model.training  # a training step reports only the loss: no logits, no metrics
        n = batch["n_causal"]
        rows = {"causal": slice(0, n), "masked": slice(n, None)}
        loss_sum: torch.Tensor | int = 0
        positions = 0
        metrics: dict[str, float] = {}
        for kind in KINDS:
            ids, labels = batch["input_ids"][rows[kind]], batch["labels"][rows[kind]]
            if not len(ids):
                continue
            masked = kind == "masked"
            out = model(ids, labels=labels, bidirectional=masked, return_logits=evaluating and masked)
            loss_sum, positions = loss_sum + out.loss_sum, positions + out.n_loss_positions
            if evaluating:
                metrics[f"{kind}_loss_sum"] = float(out.loss_sum.detach())
                metrics[f"{kind}_positions"] = float(out.n_loss_positions)
                if masked:
                    metrics["correct"] = correct_predictions(out.logits, labels)
        assert isinstance(loss_sum, torch.Tensor)  # a batch has rows of one kind at least
        return LossParts(loss_sum, positions, decoder_tokens=batch["input_ids"].numel(), metrics=metrics)

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        result = {f"{kind}_loss": totals[f"{kind}_loss_sum"] / max(totals[f"{kind}_positions"], 1) for kind in KINDS}
        return {**result, "masked_acc": totals["correct"] / max(totals["masked_positions"], 1)}
