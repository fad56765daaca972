"""``maskwise finetune tag`` and ``maskwise evaluate`` for tag: the command line's adapter of ``tasks.tag``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torch import nn

from maskwise.cli.task_flags import config_from_flags, finetune_config, positive
from maskwise.cli.task_inputs import task_rows
from maskwise.data.tagging import tagged_from_file
from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.interop.folders import FineTune
from maskwise.tasks.registry import TASKS
from maskwise.tasks.tag import (
    READ_OUTS,
    Tag,
    TagConfig,
    TagRecord,
    TokenTagger,
    evaluate_tagger,
    tag_counts,
)

TASK = TASKS[Tag.kind]


def flags(parser: argparse.ArgumentParser, evaluating: bool) -> None:
    parser.add_argument(
        "--window-chars",
        type=positive,
        default=None,
        help="the plays' windows, in characters (default: what fits the model's context)",
    )
    if not evaluating:
        parser.add_argument(
            "--read-out",
            dest="read_out",
            choices=READ_OUTS,
            default=None,
            help="where a word's tag is read: its last token (default; a causal reader has "
            "then read the whole word) or its first (HF's convention)",
        )
        parser.add_argument(
            "--train-windows",
            type=positive,
            default=None,
            help=f"training windows of the plays (default {TagConfig.train_windows})",
        )
    parser.add_argument(
        "--eval-windows",
        dest="test_windows",
        type=positive,
        default=None,
        help=f"evaluation windows of the plays (default {TagConfig.test_windows})",
    )


def finetune(
    args: argparse.Namespace, model: nn.Module, tokenizer: Tokenizer, run: Callable[..., tuple[nn.Module, TagRecord]]
) -> tuple[dict[str, Any], TagRecord, dict[str, Any], nn.Module, nn.Module | None]:

    cfg = finetune_config(TagConfig, args)
    train, test = task_rows(args, TASK, cfg, model, tagged_from_file, training=True)
    tagger, record = run(cfg, (train, test))
    task, body, head = TASK.kept(tagger, record, cfg)
    return task, record, {}, body, head


def evaluate(args, model, tokenizer, fine_tune: FineTune) -> TagRecord:

    saved = fine_tune.task
    if saved.get("kind") != "tag":
        raise UserError(f"{args.model} has no tagging head: run `maskwise finetune tag` first")
    _, test = task_rows(
        args, TASK, config_from_flags(TagConfig, args), model, tagged_from_file, args.split, training=False
    )
    tagger = TokenTagger.from_fine_tune(model, saved, fine_tune.head, args.model)
    # An HF-fine-tuned folder records no training counts: the baselines are drawn from the test set's.
    return evaluate_tagger(tagger, tokenizer, test, saved.get("train_counts") or tag_counts(test))
