"""Multi-head attention, the one module every family's self- and cross-attention is (``transformer.Block``)."""

from __future__ import annotations

import torch
from torch import nn

from maskwise import kernels
from maskwise.config import ModelConfig
from maskwise.masks import Mask, query_rows
from maskwise.model.cache import KVCache
from maskwise.model.layout import Linear
from maskwise.model.packing import Packing
from maskwise.model.positions import RotaryAngles, rotate


class Attention(nn.Module):
    """Multi-head attention for self-attention (``context=None``) and cross-attention.

    Self-attention projects q, k, v with one fused matrix; cross-attention projects q from ``x`` and
    k, v (fused) from ``context``. With grouped-query attention (``cfg.n_kv_heads``) k and v have fewer
    heads than q, so the fused matrix is uneven (H + 2 Hkv heads wide); the cache keeps the Hkv heads
    and each is repeated for its group of query heads only when the scores are computed. Scores go
    through ``kernels.attention`` with the mask from ``maskwise.masks`` or, for T5, an additive
    relative position bias into which the stack has already folded that mask (``bias`` replaces
    ``mask`` when given).

    Rotary positions (RoPE) rotate self-attention's queries and keys; with ``cross_rope`` they also
    rotate cross-attention's (queries at decoder positions, keys at source positions 0..S-1), so
    cross-attention can align by offset and not by content alone. Why: without it a small
    encoder-decoder learned to copy its source far more slowly (docs/results.md, Task quality).
    A ``local`` (sliding-window) layer's self-attention rotates by ``local_rope_theta``, as ModernBERT's.
    """

    def __init__(self, cfg: ModelConfig, cross: bool = False, local: bool = False):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        inner, kv_inner = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        qkv_bias = cfg.bias or cfg.qkv_bias
        self.cross = cross
        if cross:
            self.q = Linear(cfg.d_model, inner, bias=qkv_bias)
            self.kv = Linear(cfg.d_model, 2 * kv_inner, bias=qkv_bias)
        else:
            self.qkv = Linear(cfg.d_model, inner + 2 * kv_inner, bias=qkv_bias)
            self.qkv_heads = (cfg.n_heads, cfg.kv_heads, cfg.kv_heads)  # the fused output's q;k;v, in heads
        self.out = Linear(inner, cfg.d_model, bias=cfg.bias)
        self.scale = None if cfg.attention_scale else 1.0
        self.dropout = cfg.dropout
        theta = cfg.local_rope_theta if local else cfg.rope_theta
        self.rope_theta = theta if cfg.position == "rope" and (cfg.cross_rope or not cross) else None

    def _heads(self, x: torch.Tensor, *counts: int) -> tuple[torch.Tensor, ...]:
        """(B, T, sum(counts)*hd) -> one (B, count, T, hd) view per count: a fused projection's outputs
        (q, k, v side by side, of H, Hkv, Hkv heads) split into heads, no copy. Split before the
        transpose: backward, the split's concatenation then writes the projection's (B, T, ...) layout
        itself, where split after it needed a second copy back from (B, heads, T, hd)."""
        B, T, _ = x.shape
        parts = x.view(B, T, -1, self.head_dim).split_with_sizes(counts, dim=2)  # count x (B, T, count, hd)
        return tuple(part.transpose(1, 2) for part in parts)  # count x (B, count, T, hd)

    def _self_qkv(
        self, x: torch.Tensor, rotary: RotaryAngles | None, packing: Packing | None
    ) -> tuple[torch.Tensor, ...]:
        """Self-attention's q (B, H, T, hd) and k, v (B, Hkv, T, hd) from the fused projection. With
        RoPE, q and k sit side by side in it and are rotated in one call (one pass over both, not two)."""
        fused = _padded(self.qkv(x), packing)  # (B, T, (H + 2 Hkv) hd)
        if self.rope_theta is None:
            return self._heads(fused, *self.qkv_heads)
        assert rotary is not None  # a RoPE layer is handed its stack's angles
        qk, v = self._heads(fused, self.n_heads + self.n_kv_heads, self.n_kv_heads)  # (B, H+Hkv, T, hd), v
        q, k = rotate(qk, rotary, self.rope_theta).split_with_sizes((self.n_heads, self.n_kv_heads), dim=1)
        return q, k, v

    def _grouped(self, kv: torch.Tensor) -> torch.Tensor:
        """(B, Hkv, S, hd) -> (B, H, S, hd): each key/value head repeated for the query heads of its
        group (query head h reads key/value head h // (H / Hkv)). A copy made here rather than SDPA's
        ``enable_gqa``: CUDA's memory-efficient kernel refuses unequal head counts, so a masked or
        fp32 call would silently fall back to the math kernel."""
        if self.n_kv_heads == self.n_heads:
            return kv
        return kv.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (B, H, S, hd)

    def forward(
        self,
        x: torch.Tensor,
        mask: Mask,
        context: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        rotary: RotaryAngles | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        queries: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d); with ``queries`` ((B, R) positions, self-attention only), every
        position's keys and values but only those R queries: (B, R, d). With ``packing``, x is the real
        tokens alone, (N, d) -> (N, d) (or (B, R, d) with ``queries``): the projections run on them, the scores
        on the padded layout."""
        B, T = (packing.batch, packing.length) if packing is not None else x.shape[:2]
        if self.cross:
            q = self._heads(_padded(self.q(x), packing), self.n_heads)[0]  # (B, H, T, hd)
            if self.rope_theta is not None:  # cross_rope: the query's offset from each source key
                assert rotary is not None  # a RoPE layer is handed its stack's angles
                q = rotate(q, rotary, self.rope_theta)
            cached = cache.cross[layer] if cache is not None else None
            if cached is None:
                k, v = self._heads(self.kv(context), self.n_kv_heads, self.n_kv_heads)  # 2 x (B, Hkv, S, hd)
                if self.rope_theta is not None:
                    k = rotate(k, RotaryAngles(torch.arange(k.shape[2], device=k.device)), self.rope_theta)
                if cache is not None:
                    cache.cross[layer] = (k, v)
            else:
                k, v = cached
        else:
            q, k, v = self._self_qkv(x, rotary, packing)  # (B, H, T, hd), 2 x (B, Hkv, T, hd)
            if cache is not None:
                k, v = cache.append(layer, k, v)  # (B, Hkv, cached + T, hd)
            if queries is not None:
                mask = mask.rows(queries, T, k.shape[2])
                bias = query_rows(bias, queries) if bias is not None else None  # (B, H, R, S)
                q, T = query_rows(q, queries), queries.shape[1]  # (B, H, R, hd)

        dropout_p = self.dropout if self.training else 0.0
        k, v = self._grouped(k), self._grouped(v)  # (B, H, S, hd)
        y = kernels.attention(q, k, v, mask, bias, dropout_p, self.scale)  # (B, H, T, hd)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*hd)
        return self.out(packing.pack(y) if packing is not None and queries is None else y)


def _padded(x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
    """A projection's output in the padded (B, T, ...) layout attention reads."""
    return packing.for_attention(x) if packing is not None else x
