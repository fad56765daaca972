"""Run folders: atomic JSON and safetensors I/O, the one overwrite guard, and ``load()``.

A run folder holds::

    config.json          model config + training settings (data, never code)
    tokenizer.json       the tokenizer, loadable by HF PreTrainedTokenizerFast
    metrics.jsonl        a header line each time training starts or resumes ({"header": "runtime",
                         "step", "runtime"}: where and in which precision it ran), then one JSON
                         object per evaluation (``read_metrics`` returns those)
    model.safetensors    the final weights (written at the end of training)
    checkpoints/step-00000100/{model,optimizer}.safetensors, state.json, manifest.json

Every file is written to a temporary name, fsynced, then renamed, so a crash or a full disk leaves
the previous file intact. A checkpoint's ``manifest.json`` (written last, by
``train.checkpoint``) holds a SHA-256 of every file, so a truncated or corrupted checkpoint is
detected and skipped when a run is opened. Nothing here unpickles.
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
from maskwise.data.jsonl import jsonl_rows
from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.model.transformer import build_model

CONFIG_FILE, TOKENIZER_FILE, MODEL_FILE, METRICS_FILE = (
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "metrics.jsonl",
)
CHECKPOINTS, MANIFEST_FILE = "checkpoints", "manifest.json"
POINTS = "points"  # a WSD run's checkpoints at its branch points: points/<fraction>/step-N, never pruned
HEAD_FILE = "head.safetensors"  # the head a fine-tune trained, beside the body's model.safetensors


# ---- atomic files ---------------------------------------------------------------------------


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
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (where the OS lets a folder be opened at all)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def json_bytes(obj: Any) -> bytes:
    """``obj`` as the indented, key-sorted JSON every file maskwise writes uses (diffs stay small)."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write(path, json_bytes(obj))


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read it ({error.strerror or error})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def read_metrics(run_dir: str | Path, headers: bool = False) -> list[dict]:
    """The evaluation records of ``metrics.jsonl`` in order (or, with ``headers``, the header lines)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"run metrics: {path} is not UTF-8 text (byte offset {error.start})") from None
    return [
        record for _, record in jsonl_rows(path, text.split("\n"), "run metrics") if ("header" in record) == headers
    ]


# ---- weights --------------------------------------------------------------------------------


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
        problems.append(f"missing {len(missing)} key(s) e.g. {missing[0]} (model {tuple(expected[missing[0]].shape)})")
    if unexpected:
        problems.append(
            f"unexpected {len(unexpected)} key(s) e.g. {unexpected[0]} "
            f"(checkpoint {tuple(tensors[unexpected[0]].shape)})"
        )
    if wrong:
        k = wrong[0]
        problems.append(
            f"shape mismatch for {k}: checkpoint {tuple(tensors[k].shape)} vs model {tuple(expected[k].shape)}"
        )
    if problems:
        raise UserError(f"{source} does not match the model: {'; '.join(problems)}")
    model.load_state_dict(tensors)


# ---- checkpoints, as a reader sees them ----------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checkpoint(path: Path) -> str | None:
    """None if every file matches the manifest; else what is wrong, in a few words."""
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        return "no manifest"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return "unreadable manifest"
    if not isinstance(manifest, dict):
        return "unreadable manifest"
    for name, digest in manifest.items():
        file = path / name
        if not file.is_file():
            return f"{name} missing"
        if sha256_of(file) != digest:
            return f"{name} checksum mismatch"
    return None


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint whose checksums verify; corrupt ones are skipped with a warning."""
    return newest_intact(Path(run_dir) / CHECKPOINTS)


def point_root(run_dir: str | Path, fraction: float) -> Path:
    """Where a run keeps its checkpoint at branch point ``fraction`` (of its budget)."""
    return Path(run_dir) / POINTS / f"{fraction:g}"


def newest_intact(root: Path) -> Path | None:
    """The newest ``step-*`` checkpoint under ``root`` whose checksums verify; corrupt ones are skipped, warned."""
    for path in sorted(root.glob("step-*"), reverse=True):
        problem = verify_checkpoint(path)
        if problem is None:
            return path
        warnings.warn(f"skipping corrupt checkpoint {path}: {problem}", stacklevel=2)
    return None


# ---- the one overwrite guard --------------------------------------------------------------------


def prepare_folder(
    path: str | Path,
    overwrite: bool = False,
    resume: bool = False,
    marker: str = CONFIG_FILE,
    kind: str = "maskwise run folder",
    what: str = "--out",
    resume_flag: str | None = None,
    create: bool = True,
    replace: bool = True,
) -> Path:
    """Refuse to write into ``path`` unless that loses nothing; then (with ``create``) empty and make it.

    A non-empty folder is kept with ``resume`` and replaced with ``overwrite``, either only when it
    holds ``marker`` (so a typo never wipes a folder maskwise did not write). ``what`` names the
    flag in messages and ``resume_flag`` the one that continues a folder. Without ``create`` only
    the checks run: the caller assembles the new folder elsewhere and swaps it in. Without ``replace``
    everything but the replacing runs (a folder is made, and writing into it tried): the caller checks
    the rest of its input, then calls again to replace.
    """
    path = Path(path)
    name = f"{what} {path}" if what else str(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{name} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        has_marker = (path / marker).is_file()
        if resume and not has_marker:
            raise UserError(f"{name} exists and is not a {kind}; refusing to write there")
        if not resume:
            if not overwrite:
                how = f"use {resume_flag} to continue it or --overwrite" if resume_flag else "use --overwrite"
                raise UserError(f"{name} already exists; {how} to replace it")
            if not has_marker:
                raise UserError(f"refusing to --overwrite {path}: it is not a {kind}")
            if create and replace:
                shutil.rmtree(path)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            raise UserError(f"{name} is not writable ({error.strerror or error})") from None
    return path


# ---- opening a run folder ----------------------------------------------------------------------


@dataclass
class Run:
    """A trained model loaded from a run folder, with its tokenizer and settings."""

    path: Path
    model: torch.nn.Module
    tokenizer: Any
    config: dict


def read_run_config(run_dir: str | Path) -> dict:
    """A run folder's config.json, without its weights (what a caller asking only the model's shape needs)."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise UserError(f"{run_dir}: not a maskwise run folder (no {CONFIG_FILE})")
    return read_json(run_dir / CONFIG_FILE)


def load_run(run_dir: str | Path, weights: str | Path | None = None) -> Run:
    """Open a run folder: model (final weights, else the newest intact checkpoint) and tokenizer."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
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
        raise UserError(
            f"{run_dir}: tokenizer has {tokenizer.vocab_size} tokens but the model only {model.cfg.vocab_size}"
        )
    model.eval()
    return Run(run_dir, model, tokenizer, config)
