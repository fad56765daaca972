"""One optimizer step, shared by pretraining (``train.loop.Trainer``) and fine-tuning (``tasks.finetune.fine_tune``).

The caller supplies the loss (an objective's, or a task's) and the optimizer's parameter groups;
everything else happens here, once: autocast of the forward pass, the fp16 gradient scaler,
scaling the gradients to "sum of losses / positions", clipping, the non-finite guard and the step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from maskwise.runtime import Runtime

Output = TypeVar("Output")


class OptimizerStep:
    """``begin()``, then ``backward(...)`` per micro-batch, then ``apply(...)``: one optimizer step."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, runtime: Runtime, grad_clip: float):
        self.model, self.optimizer, self.runtime, self.grad_clip = model, optimizer, runtime, grad_clip
        self.scaler = runtime.grad_scaler()

    def begin(self) -> None:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, compute: Callable[[], Output], loss_of: Callable[[Output], torch.Tensor]) -> Output:
        """Run ``compute()`` under the runtime's autocast and backpropagate ``loss_of`` its output
        (through the scaler); returns the output."""
        with self.runtime.autocast():
            output = compute()
        self.scaler.scale(loss_of(output)).backward()
        return output

    def apply(self, loss: torch.Tensor, grad_scale: float = 1.0) -> bool:
        """Multiply the gradients by ``grad_scale``, clip, and step unless the loss or the gradient
        norm is non-finite (then the gradients are dropped); returns whether the step was taken.

        The scale and the clipping are one foreach multiply, by their product (the norm of the scaled
        gradients is ``grad_scale`` times theirs), skipped when that is exactly 1: ``clip_grad_norm_``'s
        numbers in one pass over the gradients, not two; one host synchronisation in all."""
        self.scaler.unscale_(self.optimizer)  # fp16: back to true gradients before scaling and clipping
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        total_norm = nn.utils.get_total_norm(grads).to(loss.device) * grad_scale
        clip_factor = self.grad_clip / (total_norm + 1e-6)
        finite = torch.isfinite(loss)
        if not self.scaler.is_enabled():  # with a scaler, overflowing gradients are its to skip
            finite &= torch.isfinite(total_norm)
        finite, clip_factor = torch.stack([finite.to(clip_factor.dtype), clip_factor]).tolist()  # the one sync
        factor = grad_scale * min(clip_factor, 1.0)
        if finite and grads and factor != 1.0:  # foreach refuses an empty list
            torch._foreach_mul_(grads, factor)
        if finite:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        return bool(finite)
