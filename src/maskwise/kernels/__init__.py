"""The one place that picks, by device, how the model's hot operations are computed.

On a CPU, where they measured faster (docs/results.md, Performance), the implementations in
``maskwise.kernels.cpu``; on every other device torch's own kernels (``F.rms_norm``, SDPA's flash
and memory-efficient attention, ``F.cross_entropy``). Same results either way, to rounding (the tanh
GELU in bf16 on a CPU: to ``GELU_TANH_MAX_GAP``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from maskwise.kernels import cpu
from maskwise.masks import Mask


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, as ``F.rms_norm``."""
    if x.device.type == "cpu":
        return cpu.rms_norm(x, weight, eps)
    return F.rms_norm(x, weight.shape, weight, eps)


def packed_rows(device: torch.device, real: int, cells: int) -> int | None:
    """How many rows a padded batch of ``cells`` positions, ``real`` of them real tokens, runs its token-wise work on
    (``model.packing``): the real count rounded up to a multiple of ``cpu.PACK_ROW_MULTIPLE``, on a CPU where
    padding is at least ``1 - cpu.PACK_MAX_REAL_SHARE`` of the batch; None (every position) elsewhere, where it was
    not measured."""
    if device.type != "cpu" or not 0 < real <= cpu.PACK_MAX_REAL_SHARE * cells:
        return None
    rows = -(-real // cpu.PACK_ROW_MULTIPLE) * cpu.PACK_ROW_MULTIPLE
    return rows if rows < cells else None


# The largest gap between the exact (erf) GELU and its tanh approximation over all reals (at x ~ 2.70;
# their slopes differ by at most 8.7e-4, at x ~ -2.02): measured on a fine fp64 grid, docs/results.md 2026-12-06.
GELU_TANH_MAX_GAP = 4.8e-4


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh-approximated GELU; on a CPU in bf16, the exact (erf) GELU in its place. Why:
    torch's CPU tanh made the tanh form 4.7x slower forward and 2x backward than the exact one in
    bf16, and in bf16 the two agree to within ``GELU_TANH_MAX_GAP``, under half a bf16 step for any
    output of magnitude 1/8 or more (docs/results.md, 2026-12-06)."""
    if x.device.type == "cpu" and x.dtype == torch.bfloat16:
        return F.gelu(x)
    return F.gelu(x, approximate="tanh")


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Mask,
    bias: torch.Tensor | None,
    dropout_p: float,
    scale: float | None,
) -> torch.Tensor:
    """q (B, H, T, hd), k and v (B, H, S, hd) -> (B, H, T, hd), masked by maskwise's ``Mask`` or by
    T5's bias, which arrives with the mask already folded in (-inf where not allowed) and replaces it.

    On a CPU under autocast or with T5's bias: ``cpu.explicit_attention`` up to
    ``cpu.EXPLICIT_ATTENTION_MAX_KEYS`` keys, fp32 SDPA beyond (on a CPU fp32 flash measured faster
    than bf16 flash). Everywhere else SDPA, which picks its flash / memory-efficient kernel itself."""
    if q.device.type == "cpu" and (bias is not None or torch.is_autocast_enabled("cpu")):
        if k.shape[2] <= cpu.EXPLICIT_ATTENTION_MAX_KEYS:
            return cpu.explicit_attention(q, k, v, mask, bias, dropout_p, scale)
        with torch.autocast("cpu", enabled=False):
            return _sdpa(q.float(), k.float(), v.float(), mask, bias, dropout_p, scale)
    return _sdpa(q, k, v, mask, bias, dropout_p, scale)


def _sdpa(q, k, v, mask: Mask, bias: torch.Tensor | None, dropout_p: float, scale: float | None) -> torch.Tensor:
    """``scaled_dot_product_attention`` with a ``Mask`` (its causal fast path kept) or T5's bias."""
    attn_mask = mask.allowed if bias is None else bias.to(q.dtype)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=mask.is_causal and attn_mask is None, dropout_p=dropout_p, scale=scale
    )


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor, ignore_index: int
) -> torch.Tensor:
    """``F.cross_entropy(F.linear(h, weight, bias).float(), targets, reduction="sum")``, the fp32
    summed loss; h: (N, d), weight: (V, d), targets: (N,). On a CPU, for more than
    ``cpu.LOSS_FUSED_MIN_LOGITS`` logits, fused and chunked, never holding the (N, V) logits
    (``cpu.linear_cross_entropy``)."""
    if h.device.type == "cpu" and h.shape[0] * weight.shape[0] > cpu.LOSS_FUSED_MIN_LOGITS:
        return cpu.linear_cross_entropy(h, weight, bias, targets, ignore_index)
    return F.cross_entropy(F.linear(h, weight, bias).float(), targets, ignore_index=ignore_index, reduction="sum")


def project(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, split: cpu.DecodingSplit | None
) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, through ``split`` when ``decoding_split`` made one."""
    if split is None:
        return F.linear(x, weight, bias)
    return cpu.split_project(x, split)


def decoding_split(weight: torch.Tensor, bias: torch.Tensor | None) -> cpu.DecodingSplit | None:
    """The (out, in) weight and its bias laid out for one-row decoding products: on a CPU split over its threads
    (``cpu.split_for_decoding``); elsewhere None, as a GPU spreads a one-row product over its cores."""
    if weight.device.type != "cpu":
        return None
    return cpu.split_for_decoding(weight, bias, torch.get_num_threads())
