"""``run_task``: fine-tune a model on one task, evaluate it, return a record. One way for the CLI,
``compare``, every ablation and the benchmarks.

The task is the type of its config (``ClassifyConfig``, ``EmbedConfig``, ``RerankConfig``,
``Seq2SeqConfig``, ``TagConfig``), found through ``tasks.registry``: each config holds its fine-tuning
settings and, for a run given no rows of its own, which slice of the plays it trains and is tested on
(its task's ``plays``, ``plays_rows`` here); its task's ``run`` fine-tunes it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.record import Record
from maskwise.tasks.registry import task_of


@dataclass
class TaskResult:
    record: Record  # the evaluation, its finetune_s set
    model: nn.Module  # what fine-tuning produced (classifier, bi-encoder, reranker, tagger, or the model itself)
    test: Any  # the rows it was evaluated on


def plays_rows(cfg: FinetuneConfig, model: nn.Module | None, split: str = "test", training: bool = True):
    """(training rows, or None when not ``training``; the ``split`` rows to evaluate on) of the plays
    for the task ``cfg`` configures: its slice, drawn with ``cfg.data_seed`` and ``cfg.test_seed``."""
    return task_of(cfg).plays(cfg, model, split, training)


def run_task(
    cfg: FinetuneConfig,
    model: nn.Module,
    tokenizer,
    runtime: Runtime,
    data: Sequence | None = None,
    label: str = "model",
) -> TaskResult:
    """Fine-tune ``model`` (moved to ``runtime``'s device, trained under its precision) on the task
    ``cfg`` configures and evaluate it. ``data``: the caller's rows instead of the plays' (classify:
    ``LabelledText`` lists ``(train, test)``; embed: query/passage pairs and a ``RetrievalSet``;
    seq2seq: ``Seq2SeqExample`` lists; tag: ``TaggedText`` lists; rerank: ``(train set, its negatives,
    test set, its first-stage candidates)``); ``label`` names the model in the record (the task's ``Record``)."""
    run = task_of(cfg).run
    cfg.validate()  # before any rows are drawn from its settings
    model.to(runtime.torch_device)
    started = time.perf_counter()
    trained, evaluate, test = run(model, tokenizer, cfg, runtime, data, label)
    seconds = time.perf_counter() - started
    with runtime.inference().autocast():  # as `maskwise evaluate` will score the saved model
        record = evaluate()
    return TaskResult(record.timed(seconds), trained, test)
