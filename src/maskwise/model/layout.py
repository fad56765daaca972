"""Projection weights split across the CPU's threads while a generation call runs.

A decoding step multiplies one row (per sequence) by every weight matrix. On a CPU that product is
bound by how fast the weights stream from memory, and the BLAS runs a one-row product on a single
core: on the 2-core development VM (AMD EPYC, torch 2.13) the 17 matrices of the benchmark's 4-layer
d256 GPT-2 shape took 1.13 ms per token inside ``generate``, the same with one thread or two.

``decoding_layout(model)`` therefore gives every module with a ``decoding_weight`` (``Linear``, the LM
head) a ``split_weight`` of shape (S, in, out / S), S = torch's thread count: the output columns in S
blocks, multiplied by one ``bmm`` whose batch is spread over the threads, so each core streams its
own share. One row through the 256 -> 8192 LM head: 183 us as one product, 79 us split in two (in
cache; 352 vs 198 us not in cache); 256 -> 768: 16 vs 11 us. With 4 to 128 rows the split product
was never slower (measured up to a 128-row prompt), so one code path serves prompts and steps.

Layout inside each block: for a matrix at least as wide as tall (out >= in) the block is an (in,
out / S) contiguous copy, because a one-row product reads that layout at about twice the speed of
the stored (out, in) one (256 -> 8192, not in cache: 380 vs 1000 us); for a narrowing matrix (the
FFN's 1024 -> 256) the stored layout is the faster one (115 vs 142 us), and the block is a view of
the weight, no copy. A matrix whose width S does not divide keeps S = 1 (the whole matrix as one
block). Copies last for one generation call: checkpoints keep the usual layout, a copy can never go
stale when fine-tuning moves the weights, and the cost is one copy per call plus those weights'
memory once more while it runs. Training, with thousands of rows per product, is not affected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            split_weight: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x of shape (..., in) and an (out, in) weight, computed as one
    batched product over ``split_weight`` (S, in, out / S) when ``decoding_layout`` holds one."""
    if split_weight is None:
        return F.linear(x, weight, bias)
    parts, in_features, part_out = split_weight.shape
    rows = x.reshape(1, -1, in_features).expand(parts, -1, -1)  # (S, N, in)
    if bias is None:
        y = torch.bmm(rows, split_weight)  # (S, N, out/S)
    else:
        y = torch.baddbmm(bias.view(parts, 1, part_out), rows, split_weight)  # (S, N, out/S)
    return y.transpose(0, 1).reshape(*x.shape[:-1], parts * part_out)  # (..., out)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) that multiplies through its split weight while
    ``decoding_layout`` holds one."""

    split_weight: torch.Tensor | None = None

    def decoding_weight(self) -> torch.Tensor:
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.weight, self.bias, self.split_weight)


def split_for_decoding(weight: torch.Tensor, parts: int) -> torch.Tensor:
    """(out, in) -> (S, in, out / S): a contiguous copy per block when out >= in, else a view."""
    out_features, in_features = weight.shape
    if out_features % parts:
        parts = 1
    blocks = weight.view(parts, out_features // parts, in_features).transpose(1, 2)  # (S, in, out/S)
    return blocks.contiguous() if out_features >= in_features else blocks


@contextlib.contextmanager
def decoding_layout(model: nn.Module) -> Iterator[None]:
    """Within the block, every ``decoding_weight`` of ``model`` also has its ``split_weight`` (CPU
    only: a GPU spreads a one-row product over its cores by itself)."""
    holders = [m for m in model.modules() if hasattr(m, "decoding_weight")]
    if not holders or holders[0].decoding_weight().device.type != "cpu":
        yield
        return
    parts = torch.get_num_threads()
    with torch.no_grad():
        for module in holders:
            module.split_weight = split_for_decoding(module.decoding_weight(), parts)
    try:
        yield
    finally:
        for module in holders:
            module.split_weight = None
