"""What every objective is: the ``Objective`` interface the training loop calls, the ``LossParts``
it returns per micro-batch, and the masked-accuracy count several objectives report."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from maskwise.config import ModelConfig
from maskwise.model.heads import IGNORE_INDEX


def correct_predictions(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """How many of the labelled positions' argmax predictions hit their label. ``logits``: (N, V) at
    the N labelled positions (the sparse LM head's order); ``labels``: any shape, -100 = no label."""
    return float((logits.argmax(-1) == labels[labels != IGNORE_INDEX]).sum())


@dataclass
class LossParts:
    """One micro-batch's contribution.

    ``loss_sum``: summed (not averaged) loss, so the loop can divide by the positions of the whole
    accumulated batch. ``n_positions``: positions that carried a loss. ``encoder_tokens`` /
    ``decoder_tokens``: tokens the model read, for compute accounting (a decoder-only model counts
    all its tokens as decoder tokens; an encoder as encoder tokens). ``metrics``: extra sums to
    report (e.g. ``correct`` for masked accuracy), also summed over micro-batches.
    """

    loss_sum: torch.Tensor
    n_positions: int
    encoder_tokens: int = 0
    decoder_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


class Objective:
    """Base class. Subclasses set ``name`` and ``families`` and implement the three methods."""

    name: str = ""
    families: tuple[str, ...] = ()

    def raw_length(self, block_size: int) -> int:
        """How many raw corpus tokens one example consumes to make inputs of ``block_size``."""
        return block_size

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """(B, raw_length) token windows -> model inputs and labels (pure, seeded by ``generator``)."""
        raise NotImplementedError

    def prepare_eval(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """What evaluation measures on ``windows``: ``prepare``'s batch, unless the objective draws
        among kinds of batch and evaluation must measure every kind each time (the hybrid)."""
        return self.prepare(windows, generator)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        raise NotImplementedError

    def model_config(self, cfg: ModelConfig) -> ModelConfig:
        """The ``ModelConfig`` this objective trains, from the family's ``cfg``: ``cfg`` itself, unless
        the objective changes how the trained model is used (the hybrid reads bidirectionally)."""
        return cfg

    def build_model(self, cfg: ModelConfig) -> nn.Module | None:
        """The model this objective trains for ``cfg`` (a ``ModelConfig``), or None for the family's
        usual model (``maskwise.model.transformer.build_model(cfg)``). ELECTRA returns its
        generator + discriminator pair, which no family preset describes."""
        return None

    def final_model(self, model: nn.Module) -> nn.Module:
        """What a finished run saves as its model: the trained model itself, unless the objective
        trains more than it keeps (ELECTRA keeps only its discriminator)."""
        return model

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """Turn summed metrics from ``LossParts.metrics`` over an evaluation into reported values."""
        return {}
