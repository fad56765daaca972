"""Projection weights laid out for decoding while a generation call runs.

``decoding_layout(model)`` gives every module with a ``decoding_weight`` (``Linear``, the LM head) the
``split_weight`` that ``kernels.decoding_split`` makes for its device (on a CPU, the output columns in
one block per thread; elsewhere none) and takes it away when the call ends. The copies last for one
call: checkpoints keep the usual layout, a copy can never go stale when fine-tuning moves the
weights, and the cost is one copy per call plus those weights' memory once more while it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from maskwise import kernels


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) that multiplies through its split weight while
    ``decoding_layout`` holds one."""

    split_weight: torch.Tensor | None = None

    def decoding_weight(self) -> torch.Tensor:
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.project(x, self.weight, self.bias, self.split_weight)


@contextlib.contextmanager
def decoding_layout(model: nn.Module) -> Iterator[None]:
    """Within the block, every ``decoding_weight`` of ``model`` also has its ``split_weight``."""
    holders = [m for m in model.modules() if hasattr(m, "decoding_weight")]
    with torch.no_grad():
        for module in holders:
            module.split_weight = kernels.decoding_split(module.decoding_weight())
    try:
        yield
    finally:
        for module in holders:
            module.split_weight = None
