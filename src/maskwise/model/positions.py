"""Where a token is, as attention sees it: rotary embeddings (RoPE) on queries and keys, and T5's
learned relative-position bias on the scores; learned absolute embeddings live in ``Stack.embed``."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch import nn
from torch.autograd.function import FunctionCtx

from maskwise.config import ModelConfig


class _Rotation(torch.autograd.Function):
    """y = x * cos + swap(x) * sin, where ``swap`` exchanges the two halves of the last dimension and
    cos = [c, c], sin = [-s, s]: RoPE's rotation of each pair (x_i, x_{i + hd/2}) by its angle.

    Why a Function: autograd's path through the halves (four products, a sum, a difference, a
    concatenation, then as many again backward) took a quarter of a fine-tuning step's element-wise
    time at 16-wide heads; this is three passes each way. The backward is the rotation by the opposite
    angle (the transpose of a rotation): swap(S * g) = -S * swap(g), since swapping [-s, s] gives -sin.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return (x * cos).addcmul_(_swap_halves(x), sin)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # ctx: Any, as torch's stubs type ``saved_tensors`` a 1-tuple
        cos, sin = ctx.saved_tensors
        return (grad * cos).addcmul_(_swap_halves(grad), sin, value=-1), None, None


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([x[..., half:], x[..., :half]], dim=-1)


class RotaryAngles:
    """A forward pass's positions, (T,) or (B, T), with RoPE's cos and sin for them made once per
    (theta, head width, dtype) and shared by every layer of the pass. Why: made in each layer, they
    took a quarter of a small RoPE decoder's time per generated token (docs/results.md, 2026-12-06)."""

    def __init__(self, positions: torch.Tensor):
        self.positions = positions
        self._tables: dict[tuple[float, int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, theta: float, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) for ``_Rotation``, each (T, hd) or (B, 1, T, hd): cos = [c, c], sin = [-s, s]."""
        key = (theta, head_dim, dtype)
        if key not in self._tables:
            half = head_dim // 2
            inv_freq = 1.0 / theta ** (torch.arange(half, device=self.positions.device, dtype=torch.float32) / half)
            angles = self.positions.to(torch.float32)[..., None] * inv_freq  # (B?, T, hd/2)
            if angles.dim() == 3:
                angles = angles[:, None]  # (B, 1, T, hd/2)
            cos, sin = angles.cos(), angles.sin()
            self._tables[key] = (torch.cat([cos, cos], -1).to(dtype), torch.cat([-sin, sin], -1).to(dtype))
        return self._tables[key]


def rotate(x: torch.Tensor, angles: RotaryAngles, theta: float) -> torch.Tensor:
    """Rotary position embedding (RoPE), the half-split convention of GPT-NeoX / Llama.

    x: (B, H, T, hd); ``angles``: the pass's positions, (B, T) or (T,) absolute.
    """
    cos, sin = angles.tables(theta, x.shape[-1], x.dtype)
    return _Rotation.apply(x, cos, sin)


def relative_buckets(relative: torch.Tensor, bidirectional: bool, n_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucketing of key-minus-query offsets: exact for small offsets, logarithmic beyond.

    Half the buckets are exact offsets 0..n/2-1; the rest cover n/2..max_distance logarithmically,
    and everything farther shares the last bucket. Bidirectional attention splits the buckets
    between keys before and after the query.
    """
    bucket = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        bucket = bucket + (relative > 0).long() * n_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = n_buckets // 2
    log_ratio = torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact)
    far = exact + (log_ratio * (n_buckets - exact)).long()
    far = far.clamp(max=n_buckets - 1)
    return bucket + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """T5's learned per-head bias on attention scores, indexed by bucketed relative offset.

    Computed once per stack and added in every layer's self-attention (as T5 shares layer 0's).
    """

    def __init__(self, cfg: ModelConfig, bidirectional: bool):
        super().__init__()
        self.bidirectional = bidirectional
        self.n_buckets, self.max_distance = cfg.relative_buckets, cfg.relative_max_distance
        self.embedding = nn.Embedding(cfg.relative_buckets, cfg.n_heads)

    def forward(self, q_len: int, k_len: int, q_offset: int, device: torch.device) -> torch.Tensor:
        q_pos = torch.arange(q_offset, q_offset + q_len, device=device)[:, None]
        k_pos = torch.arange(k_len, device=device)[None, :]
        buckets = relative_buckets(k_pos - q_pos, self.bidirectional, self.n_buckets, self.max_distance)
        return self.embedding(buckets).permute(2, 0, 1)[None]  # (1, H, Tq, Tk)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` positions that count real tokens only, so a left-padded row's first real token
    sits at position 0 as it did in pretraining. Padding gets position 0 (its output is unused)."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def extend_context(model: nn.Module, tokens: int) -> int:
    """Let ``model`` read ``tokens`` positions where its positions allow it, and return how many past its pretrained
    context it now reads (0: none asked, or it cannot). Rotary angles and relative buckets are computed for any
    position, so only the limit moves; a learned table has no row past its own, so such a model keeps its context."""
    cfg = model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise body's layout
    if tokens <= cfg.max_seq_len or cfg.position == "learned":
        return 0
    longer = replace(cfg, max_seq_len=tokens)
    for module in model.modules():  # every stack shares its model's config object
        if getattr(module, "cfg", None) is cfg:
            module.cfg = longer
    return tokens - cfg.max_seq_len
