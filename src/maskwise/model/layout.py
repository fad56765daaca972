"""Projection weights in the (in, out) layout while a generation call runs on the CPU.

``nn.Linear`` keeps its weight as (out, in) and computes ``x @ W.T``. For the few rows of a decoding
step, the CPU BLAS runs that transposed product at under half the speed of the same product with an
(in, out) contiguous matrix. Measured on the 2-core development VM (AMD EPYC, torch 2.13, 2 threads)
over the 17 matrices of a 4-layer d256 GPT-2 shape with an 8192-token head: one row 1.66 ms against
0.76 ms; 8 rows 2.62 vs 2.37 ms; 128 rows 10.5 vs 10.2 ms, so training, with thousands of rows, would
gain nothing from changing the stored layout.

That holds for matrices at least as wide as they are tall (out >= in). For a narrowing one (the
FFN's down projection, 1024 -> 256) the stored (out, in) layout is the faster one for a single row:
one row through a 1024 x 256 matrix not in cache, 115 us with the stored layout against 142 us with
an (in, out) copy; 256 -> 1024 is 142 vs 82 us, 256 -> 8192 1000 vs 380 us. Copying only the wide
matrices took the benchmark's decoding from 2.01 to 1.86 ms per token (A/B in one process).

``decoding_layout(model)`` gives every module with a ``decoding_weight`` (``Linear``, the LM head) that
is at least as wide as tall an (in, out) copy for the length of one generation call and drops it
afterwards: checkpoints keep the usual layout, a copy can never go stale when fine-tuning moves the
weights, and the cost is one transpose per call plus those weights' memory once more while it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            weight_in_out: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x of shape (..., in) and an (out, in) weight, computed from
    the (in, out) copy ``weight_in_out`` when ``decoding_layout`` holds one: ``F.linear`` multiplies
    by its weight's transpose, and the transpose of ``weight_in_out.t()`` is that contiguous (in, out)
    matrix, so the BLAS call reads the fast layout with no copy and no reshaping in Python."""
    return F.linear(x, weight if weight_in_out is None else weight_in_out.t(), bias)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) that uses an (in, out) copy of its weight
    while ``decoding_layout`` holds one."""

    weight_in_out: torch.Tensor | None = None

    def decoding_weight(self) -> torch.Tensor:
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.weight, self.bias, self.weight_in_out)


@contextlib.contextmanager
def decoding_layout(model: nn.Module) -> Iterator[None]:
    """Within the block, every ``decoding_weight`` of ``model`` with out >= in is also held as an
    (in, out) contiguous copy (CPU only: GPU matrix products do not care about this layout)."""
    holders = [m for m in model.modules() if hasattr(m, "decoding_weight")]
    if not holders or holders[0].decoding_weight().device.type != "cpu":
        yield
        return
    with torch.no_grad():
        for module in holders:
            weight = module.decoding_weight()  # (out, in)
            if weight.shape[0] >= weight.shape[1]:
                module.weight_in_out = weight.t().contiguous()  # (in, out)
    try:
        yield
    finally:
        for module in holders:
            module.weight_in_out = None
