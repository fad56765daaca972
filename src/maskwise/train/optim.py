"""AdamW with parameter groups, and the warmup + cosine learning-rate schedule.

Weight decay is applied to matrices only: norms, biases and embeddings are excluded (decaying a
LayerNorm gain or an embedding row towards zero is regularisation nobody asked for). Heads may get
their own learning rate (fine-tuning: a fresh head learns at 1e-3 while the pretrained body moves
at 2e-5).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from maskwise.errors import UserError

# The numbers a training loop's config hands to AdamW, clipping and the RNG, each with what it must be
# (NaN fails every test): out of range, torch raises a traceback, or trains a model of NaN.
_OPTIMIZATION_RANGES = {
    "lr": (lambda v: 0 < v < math.inf, "positive and finite"),
    "head_lr": (lambda v: 0 < v < math.inf, "positive and finite"),
    "weight_decay": (lambda v: 0 <= v < math.inf, ">= 0 and finite"),
    "beta2": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "grad_clip": (lambda v: v > 0, "positive (inf: no clipping)"),
    "seed": (lambda v: 0 <= v < 2**63, "in [0, 2**63)"),
}


def check_optimization(config) -> None:
    """Refuse, in one line, a field of ``config`` (a pretraining or fine-tuning config) out of its range."""
    for name, (ok, allowed) in _OPTIMIZATION_RANGES.items():
        value = getattr(config, name, None)
        if value is not None and not ok(value):
            raise UserError(f"{name.replace('_', '-')} must be {allowed}, got {value}")


def parameter_groups(
    model: nn.Module, lr: float, weight_decay: float, head_prefixes: tuple[str, ...] = (), head_lr: float | None = None
) -> list[dict]:
    """Split parameters into (body|head) x (decay|no-decay) groups. A parameter is "head" when its
    name starts with one of ``head_prefixes``; each group records its ``name`` for inspection."""
    no_decay_types = (nn.LayerNorm, nn.RMSNorm, nn.Embedding)
    no_decay = set()
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if isinstance(module, no_decay_types) or param.ndim < 2:
                no_decay.add(f"{module_name}.{param_name}" if module_name else param_name)
    groups: dict[tuple[str, bool], list] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        part = "head" if head_prefixes and name.startswith(head_prefixes) else "body"
        groups.setdefault((part, name not in no_decay), []).append(param)
    result = []
    for (part, decay), params in sorted(groups.items()):
        group_lr = head_lr if part == "head" and head_lr is not None else lr
        result.append(
            {
                "name": f"{part}.{'decay' if decay else 'no_decay'}",
                "params": params,
                "lr": group_lr,
                "base_lr": group_lr,
                "weight_decay": weight_decay if decay else 0.0,
            }
        )
    return result


def build_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.1,
    betas=(0.9, 0.95),
    head_prefixes: tuple[str, ...] = (),
    head_lr: float | None = None,
) -> torch.optim.AdamW:
    """AdamW over ``parameter_groups``; fused (one kernel per parameter doing the whole update, where
    the default foreach path makes about a dozen passes over every tensor) when every parameter is
    floating-point on a CPU or CUDA device, the devices torch >= 2.4 has fused AdamW kernels for."""
    groups = parameter_groups(model, lr, weight_decay, head_prefixes, head_lr)
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8, fused=fused)


def lr_factor(step: int, warmup: int, total: int, min_ratio: float = 0.1) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay to ``min_ratio`` of the peak at
    ``total`` steps (and flat after). Multiplies each group's ``base_lr``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if step >= total:
        return min_ratio
    progress = (step - warmup) / max(1, total - warmup)
    return min_ratio + 0.5 * (1.0 - min_ratio) * (1.0 + math.cos(math.pi * progress))


def wsd_factor(step: int, progress: float, warmup: int, cooldown: float) -> float:
    """Warmup, stable, decay (Hägele et al. 2024): linear warmup over ``warmup`` steps, the peak until ``1 - cooldown``
    of the run (``progress``: its used fraction), then linear to 0 at its end. A shorter run is the stable phase's
    state at its own ``1 - cooldown`` cooled down from there, so every point of the stable phase is a valid start."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if progress <= 1.0 - cooldown:
        return 1.0
    return max(0.0, (1.0 - progress) / cooldown)


def set_lr(optimizer: torch.optim.Optimizer, factor: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor
