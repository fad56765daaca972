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

    def validate(self) -> FinetuneConfig:
        for name in ("steps", "batch_size"):
            if getattr(self, name) <= 0:
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
class PretrainedRule:
    """How a body pretrained elsewhere is fine-tuned: HF Trainer's defaults, which its Seq2SeqTrainer and
    sentence-transformers' trainer share (3 epochs at batch 8, lr 5e-5 for body and head alike, no warmup, no weight
    decay). Epochs, not a step count, so that every checkpoint sees each training row equally often whatever the
    task's size; maskwise's loop reaches what Trainer reaches on MiniLM under it (benchmarks/bench_minilm_finetune.py,
    docs/results.md). Where the loops still differ, maskwise's stays: a cosine decay, batches drawn with replacement."""

    epochs: float = 3.0
    batch_size: int = 8
    lr: float = 5e-5

    def steps(self, rows: int) -> int:
        """The optimizer steps of ``epochs`` passes over ``rows`` training rows, each pass's last batch kept."""
        return max(1, math.ceil(self.epochs * math.ceil(rows / self.batch_size)))

    def applied(self, cfg: C, rows: int) -> C:
        """``cfg`` under this rule for a task of ``rows`` training rows (its other settings as they are)."""
        return replace(
            cfg.for_pretrained_body(self.lr, self.lr),
            steps=self.steps(rows),
            batch_size=self.batch_size,
            warmup=0.0,
            weight_decay=0.0,
        )

    def described(self) -> str:
        return (
            f"{self.epochs:g} epochs of the task's training rows at batch {self.batch_size}, lr {self.lr:g} for "
            "body and head, no warmup, no weight decay (HF Trainer's defaults)"
        )


PRETRAINED = PretrainedRule()


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
