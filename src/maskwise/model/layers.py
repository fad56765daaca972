"""Activations and norms, shared by the transformer and its heads."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from maskwise import kernels
from maskwise.config import ModelConfig

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": kernels.gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,
}


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout`` where it drops anything, else ``x`` itself. Why not ``nn.Dropout``: a decoding
    step passes 13 of them at batch 1, and their module calls were a measurable part of its Python time."""
    return F.dropout(x, p, training=True) if training and p else x


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` (same parameters, same state dict) computed by ``kernels.rms_norm``."""

    eps: float  # always given: ``kernels.rms_norm`` has no default for it

    def __init__(self, normalized_shape: int, eps: float) -> None:
        super().__init__(normalized_shape, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)


def make_norm(cfg: ModelConfig, width: int | None = None) -> nn.Module:
    """``cfg``'s norm over ``width`` features (default d_model; factorised embeddings are narrower)."""
    width = width or cfg.d_model
    if cfg.norm == "rmsnorm":
        return RMSNorm(width, eps=cfg.norm_eps)
    return nn.LayerNorm(width, eps=cfg.norm_eps, bias=cfg.bias)
