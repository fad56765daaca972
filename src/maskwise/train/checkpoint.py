"""Training checkpoints: the model, optimizer and loop state to resume from, written atomically.

``save_checkpoint`` assembles ``checkpoints/step-N`` (see ``maskwise.runs`` for the run folder)
under a temporary name and renames it as a whole; its ``manifest.json`` (written last) holds a
SHA-256 of every file, which ``runs.latest_checkpoint`` checks, so a truncated or corrupted
checkpoint is skipped on resume. Nothing here unpickles.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save as save_safetensors_bytes

from maskwise.errors import UserError
from maskwise.runs import (
    MANIFEST_FILE,
    METRICS_FILE,
    MODEL_FILE,
    atomic_write,
    fsync_dir,
    load_weights_into,
    read_json,
    read_safetensors,
    sha256_of,
    weights_bytes,
    write_json,
)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Flatten an optimizer's state into named CPU tensors plus JSON-able group settings (a run saved
    on a GPU resumes on a CPU: ``load_state_dict`` moves the state to each parameter's device)."""
    state = optimizer.state_dict()
    tensors = {}
    for index, slots in state["state"].items():
        for key, value in slots.items():
            tensors[f"{index}.{key}"] = torch.as_tensor(value).detach().to("cpu", copy=True).contiguous()
    return tensors, state["param_groups"]


def restore_optimizer(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: list[dict], where: str
) -> None:
    """Load the flattened state into ``optimizer`` after checking that it fits: every state tensor the shape of
    its parameter (AdamW's fused step on a misfitting one corrupts memory instead of raising)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, _, key = name.partition(".")
        if not (index.isdigit() and int(index) < len(params) and key):
            raise UserError(f"{where}: optimizer state {name!r} names no parameter of this model")
        if value.ndim and value.shape != params[int(index)].shape:
            raise UserError(
                f"{where}: optimizer state {name!r} has shape {tuple(value.shape)}, its parameter "
                f"{tuple(params[int(index)].shape)}"
            )
        slots.setdefault(int(index), {})[key] = value
    if not (
        isinstance(groups, list)
        and len(groups) == len(optimizer.param_groups)
        and all(
            isinstance(g, dict) and len(g.get("params", ())) == len(mine["params"])
            for g, mine in zip(groups, optimizer.param_groups)
        )
    ):
        raise UserError(f"{where}: its optimizer's parameter groups are not this model's")
    optimizer.load_state_dict({"state": slots, "param_groups": groups})


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict,
    extra_tensors: dict[str, torch.Tensor],
    keep_last: int = 3,
) -> Path:
    """Write ``root/step-N`` atomically (``root``: a run's ``checkpoints`` or one of its ``points``) and prune to the
    newest ``keep_last``.

    ``state``: JSON-able loop state (step, counters, data position); ``extra_tensors``: RNG states.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        opt_tensors, groups = optimizer_tensors(optimizer)
        atomic_write(tmp / MODEL_FILE, weights_bytes(model))
        atomic_write(
            tmp / "optimizer.safetensors",
            save_safetensors_bytes({**opt_tensors, **{f"extra.{k}": v.contiguous() for k, v in extra_tensors.items()}}),
        )
        write_json(tmp / "state.json", {**state, "optimizer_groups": groups})
        files = sorted(p.name for p in tmp.iterdir())
        write_json(tmp / MANIFEST_FILE, {name: sha256_of(tmp / name) for name in files})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in sorted(root.glob("step-*"))[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict, dict[str, torch.Tensor]]:
    """Restore model and optimizer from a checkpoint folder; return (loop state, extra tensors)."""
    load_weights_into(model, read_safetensors(path / MODEL_FILE), str(path / MODEL_FILE))
    tensors = read_safetensors(path / "optimizer.safetensors")
    state = read_json(path / "state.json")
    if not isinstance(state, dict) or "optimizer_groups" not in state:
        raise UserError(f"checkpoint {path}: state.json is not a checkpoint's loop state")
    extra = {k[len("extra.") :]: v for k, v in tensors.items() if k.startswith("extra.")}
    restore_optimizer(
        optimizer,
        {k: v for k, v in tensors.items() if not k.startswith("extra.")},
        state.pop("optimizer_groups"),
        f"checkpoint {path}",
    )
    return state, extra


def truncate_metrics(run_dir: str | Path, last_step: int) -> None:
    """Drop metrics lines written after checkpoint ``last_step`` (a crash between writing metrics
    and finishing the checkpoint would otherwise duplicate them on resume)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return
    kept = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():  # bytes no record holds: cut
        try:
            if json.loads(line)["step"] <= last_step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut short by the crash
    atomic_write(path, "".join(f"{line}\n" for line in kept).encode())
