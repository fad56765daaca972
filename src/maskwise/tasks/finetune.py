"""The fine-tuning loop: AdamW with a separate learning rate for a fresh head, warmup + cosine, a
progress bar. Its optimizer step (autocast, the fp16 scaler, clipping, the non-finite guard) is
pretraining's own, ``train.step.OptimizerStep``; only the loss, drawn from task batches, and the
parameter groups differ."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Self, TypeVar

import torch
from torch import nn
from tqdm import tqdm

from maskwise.errors import UserError
from maskwise.kernels.memory import retain_freed_memory
from maskwise.runtime import Runtime, announce, precision_setting, resolve
from maskwise.tasks.reading import device_of
from maskwise.train.optim import build_optimizer, check_optimization, lr_factor, set_lr
from maskwise.train.step import OptimizerStep


@dataclass
class FinetuneConfig:
    """Settings of the fine-tuning loop. ``lr`` moves the pretrained body; ``head_lr`` a freshly
    initialised head, which starts from nothing and can take steps 50x larger (BERT's recipe)."""

    steps: int = 300
    batch_size: int = 16
    lr: float = 2e-5
    head_lr: float = 1e-3
    warmup: float = 0.1  # fraction of steps
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    progress: bool = True
    precision: str = "auto"  # autocast of the forward pass (weights and optimizer stay fp32); maskwise.runtime
    bf16: bool | None = None  # alias: True is precision "bf16", False is "fp32", None leaves precision as it is
    # Which of the plays' rows a task draws when it is given none (``tasks.run.plays_rows``): the CLI keeps
    # the test draw fixed, so that seeds share one test set; an experiment draws both with its seed.
    data_seed: int = 0
    test_seed: int = 0
    # The most of a user's training rows drawn (by ``data_seed``; ``Task.user_data``): where a budget cannot afford the
    # fine-tuning rule's epochs over all of them (compare's own bodies). None: every row.
    max_train_rows: int | None = None

    def validate(self) -> FinetuneConfig:
        for name in ("steps", "batch_size", "max_train_rows"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise UserError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        check_optimization(self)
        if not 0.0 <= self.warmup < 1.0:
            raise UserError(f"warmup must be a fraction of steps in [0, 1), got {self.warmup}")
        precision_setting(self.precision, self.bf16)
        return self

    def for_pretrained_body(self, body_lr: float, head_lr: float) -> Self:
        """This config for a body pretrained elsewhere: the body at ``body_lr``, a fresh head at ``head_lr``;
        a task whose head can start from what such a body learned says so in its override."""
        return replace(self, lr=body_lr, head_lr=head_lr)

    def runtime(self, model: nn.Module) -> Runtime:
        """This precision on the device the model is on."""
        return resolve(str(device_of(model)), precision_setting(self.precision, self.bf16))


C = TypeVar("C", bound=FinetuneConfig)


@dataclass(frozen=True)
class FineTuningRule:
    """How every body is fine-tuned, in compare (each column of one run) and by ``maskwise finetune``: the same epochs
    of the task's training rows, warmup, weight decay and cosine decay for all, so that no column wins by seeing its
    rows more often. Only the batch and the rates follow the body's origin, by this one stated rule: a body pretrained
    elsewhere at HF Trainer's batch 8 and 5e-5 for body and head (what the field fine-tunes such a checkpoint by; at
    batch 8 maskwise's loop reaches Trainer's on MiniLM: benchmarks/bench_minilm_finetune.py), a body pretrained here
    for minutes, whose weights have not settled, at the kind's batch, 20x the rate and a head at 3x its body's (the
    rates compare's scratch bodies were measured at, docs/results.md). Epochs, not steps: where a budget cannot
    afford them, what gives is the number of training rows drawn (``rows_within``), never the rule."""

    epochs: float = 3.0
    warmup: float = 0.1  # fraction of steps (BERT's recipe)
    weight_decay: float = 0.01
    pretrained_batch: int = 8
    pretrained_lr: float = 5e-5
    scratch_lr: float = 1e-3
    scratch_head_lr: float = 3e-3

    def steps(self, rows: int, batch_size: int) -> int:
        """The optimizer steps of ``epochs`` passes over ``rows`` training rows, each pass's last batch kept."""
        return max(1, math.ceil(self.epochs * math.ceil(rows / batch_size)))

    def rows_within(self, steps: int, batch_size: int) -> int:
        """The most training rows that ``epochs`` passes fit in ``steps`` steps at ``batch_size``: the rows a budget
        of that many steps draws."""
        return max(1, int(steps * batch_size // self.epochs))

    def rates(self, cfg: C, pretrained: bool) -> C:
        """``cfg``'s batch and learning rates for a body of this origin (the kind's batch for one trained here)."""
        if pretrained:
            return replace(
                cfg.for_pretrained_body(self.pretrained_lr, self.pretrained_lr), batch_size=self.pretrained_batch
            )
        return replace(cfg, lr=self.scratch_lr, head_lr=self.scratch_head_lr)

    def applied(self, cfg: C, rows: int, pretrained: bool) -> C:
        """``cfg`` under this rule for a body of this origin and a task of ``rows`` training rows (its other
        settings as they are)."""
        cfg = self.rates(cfg, pretrained)
        return replace(cfg, steps=self.steps(rows, cfg.batch_size), warmup=self.warmup, weight_decay=self.weight_decay)

    def described(self) -> str:
        return (
            f"{self.epochs:g} epochs of the task's training rows, {self.warmup:.0%} warmup, cosine decay, weight "
            f"decay {self.weight_decay:g} for every body; a body pretrained elsewhere at batch {self.pretrained_batch} "
            f"and lr {self.pretrained_lr:g} for body and head (HF Trainer's), one pretrained here at the kind's batch, "
            f"lr {self.scratch_lr:g} and head lr {self.scratch_head_lr:g}"
        )


FINE_TUNING = FineTuningRule()
BODIES = ("pretrained", "scratch")  # the origins the rule tells apart: elsewhere, or here from scratch


def finetune_optimizer(model: nn.Module, cfg: FinetuneConfig, head_prefixes: tuple[str, ...] = ()):
    """AdamW over the trainable parameters: the body's groups at ``cfg.lr``, the groups of
    parameters named with one of ``head_prefixes`` at ``cfg.head_lr``. Frozen parameters
    (``requires_grad=False``) are left out, so a linear probe's optimizer holds the head only."""
    if not any(p.requires_grad for p in model.parameters()):
        raise UserError("nothing to train: every parameter is frozen")
    return build_optimizer(
        model, cfg.lr, cfg.weight_decay, betas=(0.9, 0.999), head_prefixes=head_prefixes, head_lr=cfg.head_lr
    )


def fine_tune(
    model: nn.Module,
    step_loss: Callable[[random.Random], torch.Tensor],
    cfg: FinetuneConfig,
    head_prefixes: tuple[str, ...] = (),
    desc: str = "finetune",
    runtime: Runtime | None = None,
) -> list[float]:
    """Run ``cfg.steps`` optimizer steps of ``step_loss`` (which draws its own batch from the
    seeded ``random.Random`` it is given and returns a mean loss), with ``finetune_optimizer``.
    ``runtime``: the command's, resolved once (else ``cfg``'s precision on the model's device). Returns
    the losses."""
    cfg.validate()
    runtime = runtime or cfg.runtime(model)
    announce(runtime)
    retain_freed_memory(runtime.device_type)
    optimizer_step = OptimizerStep(model, finetune_optimizer(model, cfg, head_prefixes), runtime, cfg.grad_clip)
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    warmup = int(cfg.warmup * cfg.steps)
    losses = []
    bar = tqdm(range(cfg.steps), desc=desc, unit="step", disable=not cfg.progress, leave=False, dynamic_ncols=True)
    for step in bar:
        set_lr(optimizer_step.optimizer, lr_factor(step, warmup, cfg.steps, min_ratio=0.0))
        optimizer_step.begin()
        loss = optimizer_step.backward(lambda: step_loss(rng), lambda loss: loss).detach()
        if not optimizer_step.apply(loss):
            bar.close()
            raise UserError(f"fine-tuning diverged at step {step}: loss {float(loss)} (lower --lr/--head-lr)")
        losses.append(float(loss))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()
    return losses
