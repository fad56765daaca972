"""Run folders and checkpoints: safetensors only, atomic writes, checksums, resume.

A run folder holds::

    config.json          model config + training settings (data, never code)
    tokenizer.json       the tokenizer, loadable by HF PreTrainedTokenizerFast
    metrics.jsonl        a header line each time training starts or resumes ({"header": "runtime",
                         "step", "runtime"}: where and in which precision it ran), then one JSON
                         object per evaluation (``read_metrics`` returns those)
    model.safetensors    the final weights (written at the end of training)
    checkpoints/step-00000100/{model,optimizer}.safetensors, state.json, manifest.json

Every file is written to a temporary name, fsynced, then renamed, so a crash or a full disk leaves
the previous file intact. A checkpoint folder is assembled under a temporary name and renamed as a
whole; its ``manifest.json`` (written last) holds a SHA-256 of every file, so a truncated or
corrupted checkpoint is detected and skipped on resume. Nothing here unpickles.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from maskwise.config import ModelConfig
from maskwise.errors import UserError

CONFIG_FILE, TOKENIZER_FILE, MODEL_FILE, METRICS_FILE = (
    "config.json", "tokenizer.json", "model.safetensors", "metrics.jsonl")
CHECKPOINTS = "checkpoints"


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that ``path`` is either the old file or the whole new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def weights_bytes(model: torch.nn.Module) -> bytes:
    return save_safetensors_bytes({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()})


def save_weights(model: torch.nn.Module, path: str | Path) -> None:
    atomic_write(path, weights_bytes(model))


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    try:
        return load_safetensors_bytes(Path(path).read_bytes())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None


def load_weights_into(model: torch.nn.Module, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Load ``tensors`` into ``model`` strictly; mismatches become one-line ``UserError``s."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong = sorted(k for k in set(expected) & set(tensors) if expected[k].shape != tensors[k].shape)
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} key(s) e.g. {missing[0]}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} key(s) e.g. {unexpected[0]}")
    if wrong:
        k = wrong[0]
        problems.append(f"shape mismatch for {k}: checkpoint {tuple(tensors[k].shape)} vs model "
                        f"{tuple(expected[k].shape)}")
    if problems:
        raise UserError(f"{source} does not match the model: {'; '.join(problems)}")
    model.load_state_dict(tensors)


@dataclass
class Run:
    """A trained model loaded from a run folder, with its tokenizer and settings."""

    path: Path
    model: torch.nn.Module
    tokenizer: Any
    config: dict


def load_run(run_dir: str | Path, weights: str | Path | None = None) -> Run:
    """Open a run folder: model (final weights, else the newest intact checkpoint) and tokenizer."""
    from maskwise.data.tokenizers import Tokenizer
    from maskwise.model.transformer import build_model

    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise UserError(f"{run_dir}: not a maskwise run folder (no {CONFIG_FILE})")
    config = read_json(run_dir / CONFIG_FILE)
    model = build_model(ModelConfig.from_dict(config["model"]))
    if weights is None:
        weights = run_dir / MODEL_FILE
        if not weights.is_file():
            newest = latest_checkpoint(run_dir)
            if newest is None:
                raise UserError(f"{run_dir}: no weights yet (no {MODEL_FILE} and no intact checkpoint)")
            weights = newest / MODEL_FILE
    load_weights_into(model, read_safetensors(weights), str(weights))
    tokenizer = Tokenizer.load(run_dir / TOKENIZER_FILE)
    if tokenizer.vocab_size > model.cfg.vocab_size:
        raise UserError(f"{run_dir}: tokenizer has {tokenizer.vocab_size} tokens but the model only "
                        f"{model.cfg.vocab_size}")
    model.eval()
    return Run(run_dir, model, tokenizer, config)


# ---- training checkpoints -------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Flatten an optimizer's state into named CPU tensors plus JSON-able group settings (a run saved
    on a GPU resumes on a CPU: ``load_state_dict`` moves the state to each parameter's device)."""
    state = optimizer.state_dict()
    tensors = {}
    for index, slots in state["state"].items():
        for key, value in slots.items():
            tensors[f"{index}.{key}"] = torch.as_tensor(value).detach().to("cpu", copy=True).contiguous()
    return tensors, state["param_groups"]


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                      groups: list[dict]) -> None:
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        slots.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": slots, "param_groups": groups})


def save_checkpoint(run_dir: str | Path, step: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, state: dict, extra_tensors: dict[str, torch.Tensor],
                    keep_last: int = 3) -> Path:
    """Write ``checkpoints/step-N`` atomically and prune to the newest ``keep_last``.

    ``state``: JSON-able loop state (step, counters, data position); ``extra_tensors``: RNG states.
    """
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        opt_tensors, groups = optimizer_tensors(optimizer)
        atomic_write(tmp / MODEL_FILE, weights_bytes(model))
        atomic_write(tmp / "optimizer.safetensors", save_safetensors_bytes({**opt_tensors, **{
            f"extra.{k}": v.contiguous() for k, v in extra_tensors.items()}}))
        write_json(tmp / "state.json", {**state, "optimizer_groups": groups})
        files = sorted(p.name for p in tmp.iterdir())
        write_json(tmp / "manifest.json", {name: _sha256(tmp / name) for name in files})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in sorted(root.glob("step-*"))[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def verify_checkpoint(path: Path) -> str | None:
    """None if every file matches the manifest; else what is wrong, in a few words."""
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        return "no manifest"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "unreadable manifest"
    for name, digest in manifest.items():
        file = path / name
        if not file.is_file():
            return f"{name} missing"
        if _sha256(file) != digest:
            return f"{name} checksum mismatch"
    return None


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint whose checksums verify; corrupt ones are skipped with a warning."""
    root = Path(run_dir) / CHECKPOINTS
    for path in sorted(root.glob("step-*"), reverse=True):
        problem = verify_checkpoint(path)
        if problem is None:
            return path
        warnings.warn(f"skipping corrupt checkpoint {path}: {problem}", stacklevel=2)
    return None


def load_checkpoint(path: Path, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer) -> tuple[dict, dict[str, torch.Tensor]]:
    """Restore model and optimizer from a checkpoint folder; return (loop state, extra tensors)."""
    load_weights_into(model, read_safetensors(path / MODEL_FILE), str(path / MODEL_FILE))
    tensors = read_safetensors(path / "optimizer.safetensors")
    state = read_json(path / "state.json")
    extra = {k[len("extra."):]: v for k, v in tensors.items() if k.startswith("extra.")}
    restore_optimizer(optimizer, {k: v for k, v in tensors.items() if not k.startswith("extra.")},
                      state.pop("optimizer_groups"))
    return state, extra


def read_metrics(run_dir: str | Path, headers: bool = False) -> list[dict]:
    """The evaluation records of ``metrics.jsonl`` in order (or, with ``headers``, the header lines)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if ("header" in line) == headers]


def truncate_metrics(run_dir: str | Path, last_step: int) -> None:
    """Drop metrics lines written after checkpoint ``last_step`` (a crash between writing metrics
    and finishing the checkpoint would otherwise duplicate them on resume)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= last_step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut short by the crash
    atomic_write(path, "".join(f"{line}\n" for line in kept).encode())
