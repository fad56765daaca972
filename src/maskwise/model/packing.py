"""A padded batch's real tokens, packed: a layer's token-wise work (projections, FFN, norms, residuals)
runs on them alone, attention on the padded layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from maskwise import kernels


def _rows(x: torch.Tensor, rows: torch.Tensor, zero_row: bool, zero_tail: int) -> torch.Tensor:
    """(M, ...) -> (K, ...): x's ``rows`` (K,); with ``zero_row``, row M is a row of zeros; the output's last
    ``zero_tail`` rows zeroed."""
    if zero_row:
        x = torch.cat([x, x.new_zeros(1, *x.shape[1:])])  # (M + 1, ...)
    out = x.index_select(0, rows)  # (K, ...)
    if zero_tail:
        out[-zero_tail:] = 0
    return out


class _Rows(torch.autograd.Function):
    """``_rows(x, rows, ...)`` whose gradient is ``_rows(grad, back, ...)``: packing and unpacking are each other's
    selection. Why not autograd's own ``index_select``: its backward, an ``index_add_`` into zeros, measured 3-5x
    slower on a CPU than one more ``index_select``."""

    @staticmethod
    def forward(
        ctx: Any,  # holds ``back`` and its flags, attributes torch's stubs do not know
        x: torch.Tensor,
        rows: torch.Tensor,
        zero_row: bool,
        back: torch.Tensor,
        back_zero_row: bool,
        back_zero_tail: int,
    ) -> torch.Tensor:
        ctx.back, ctx.back_zero_row, ctx.back_zero_tail = back, back_zero_row, back_zero_tail
        return _rows(x, rows, zero_row, 0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None, None]:
        return _rows(grad, ctx.back, ctx.back_zero_row, ctx.back_zero_tail), None, None, None, None, None


@dataclass(frozen=True)
class Packing:
    """The real tokens' places in a ``(B, T)`` padded batch. Why: every position's projections, FFN and
    norms are computed and then thrown away at padding; a batch of rows of 64-128 tokens is a quarter padding.

    Only while autograd records (training): no loss reads the padding's outputs, which a packed pass leaves
    zero, whereas a forward without gradients gives every position's, as HF and ``reference.numpy_ref`` do."""

    taken: torch.Tensor  # (N,) each packed row's flat position in (B * T): the real tokens', then a padding position's
    placed: torch.Tensor  # (B * T,) each position's packed row; N (a zero row) at the padding
    spread: torch.Tensor  # (B * T,) as placed, but row 0 at the padding
    batch: int
    length: int
    rounding: int  # the rows past the real tokens, which round N up (``kernels.packed_rows``)

    @staticmethod
    def of(attention_mask: torch.Tensor | None) -> Packing | None:
        """The packing of a ``(B, T)`` mask (1 = real token), or None where packing would not pay or not
        apply (no mask, no gradients, or under ``torch.compile``, where the real tokens' count would break the
        graph)."""
        if attention_mask is None or not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return None
        B, T = attention_mask.shape
        is_real = attention_mask.reshape(-1).bool()  # (B * T,)
        real = is_real.nonzero().squeeze(1)  # (real count,)
        rows = kernels.packed_rows(attention_mask.device, real.numel(), B * T)
        if rows is None:
            return None
        first_padding = (~is_real).int().argmax()  # there is padding: packed_rows leaves a full batch unpacked
        taken = torch.cat([real, first_padding.expand(rows - real.numel())])  # (N,)
        ranks = is_real.cumsum(0) - 1  # (B * T,)
        placed = torch.where(is_real, ranks, rows)  # (B * T,)
        spread = torch.where(is_real, ranks, 0)  # (B * T,)
        return Packing(taken, placed, spread, B, T, rows - real.numel())

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...): the real tokens' rows (then the rounding's, copies of a padding position's);
        the padding's gradient zero."""
        flat = x.reshape(self.batch * self.length, *x.shape[2:])  # (B * T, ...)
        return _Rows.apply(flat, self.taken, False, self.placed, True, 0)  # (N, ...)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...): the real tokens' rows back in place, zeros at the padding."""
        out = _Rows.apply(x, self.placed, True, self.taken, False, self.rounding)  # (B * T, ...)
        return out.view(self.batch, self.length, *x.shape[1:])

    def for_attention(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...) as ``unpack``, but a real row's copy at the padding (no zero row to make): attention
        neither reads the padding's keys nor passes on its queries' outputs, so the padding's gradient is zero (and
        the rounding rows, which take it, get zero)."""
        out = _Rows.apply(x, self.spread, False, self.taken, False, 0)  # (B * T, ...)
        return out.view(self.batch, self.length, *x.shape[1:])

    def at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(N, d) packed rows -> (B, R, d): those at the padded layout's ``positions`` (B, R), zeros at the padding."""
        B, R = positions.shape
        flat = positions + torch.arange(B, device=positions.device)[:, None] * self.length  # (B, R)
        rows = self.placed.index_select(0, flat.reshape(-1))  # (B * R,)
        return _rows(x, rows, True, 0).view(B, R, x.shape[1])  # autograd's backward: read_at may repeat a position
