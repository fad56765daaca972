"""Projection weights laid out for decoding while a generation call runs.

``decoding_layout(model)`` gives every module with ``decoding_params`` (``Linear``, the LM head) the
``decoding_split`` that ``kernels.decoding_split`` makes for its device (on a CPU, the output columns in
one block per thread; elsewhere none) and takes it away when the call ends. The copies last for one
call: checkpoints keep the usual layout, a copy can never go stale when fine-tuning moves the
weights, and the cost is one copy per call plus those weights' memory once more while it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from maskwise import kernels


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) that multiplies through its split weight while
    ``decoding_layout`` holds one."""

    decoding_split: kernels.cpu.DecodingSplit | None = None

    def decoding_params(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.weight, self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.project(x, self.weight, self.bias, self.decoding_split)


@runtime_checkable
class DecodingHolder(Protocol):
    """A module that multiplies through ``decoding_split`` while it holds one (``Linear``, the LM head)."""

    decoding_split: kernels.cpu.DecodingSplit | None

    def decoding_params(self) -> tuple[torch.Tensor, torch.Tensor | None]: ...


@contextlib.contextmanager
def decoding_layout(model: nn.Module) -> Iterator[None]:
    """Within the block, every module of ``model`` with ``decoding_params`` also has its ``decoding_split``."""
    holders = [m for m in model.modules() if isinstance(m, DecodingHolder)]
    with torch.no_grad():
        for module in holders:
            module.decoding_split = kernels.decoding_split(*module.decoding_params())
    try:
        yield
    finally:
        for module in holders:
            module.decoding_split = None
