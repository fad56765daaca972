"""``maskwise finetune embed`` and ``maskwise evaluate`` for embed: the command line's adapter of ``tasks.embed``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torch import nn

from maskwise.cli.task_flags import config_from_flags, finetune_config, positive
from maskwise.cli.task_inputs import (
    beir_data,
    beir_finetune_data,
    embedder_of,
    is_beir_folder,
    retrieval_data,
    user_task,
)
from maskwise.data.tokenizers import Tokenizer
from maskwise.interop.folders import FineTune
from maskwise.tasks.embed import Embed, EmbedConfig
from maskwise.tasks.registry import TASKS
from maskwise.tasks.retrieve import (
    RetrievalRecord,
    evaluate_graded_retrieval,
    evaluate_retrieval,
)

TASK = TASKS[Embed.kind]


def flags(parser: argparse.ArgumentParser, evaluating: bool) -> None:
    if not evaluating:
        parser.add_argument(
            "--pooling", choices=("cls", "mean", "last"), default=None, help="default: mean (last for a decoder)"
        )
        parser.add_argument(
            "--temperature", type=float, default=None, help=f"InfoNCE temperature (default {EmbedConfig.temperature})"
        )
        parser.add_argument(
            "--train-queries",
            type=positive,
            default=None,
            help="limit training queries (a random subset; a BEIR query brings all its positives)",
        )
    parser.add_argument(
        "--max-queries",
        dest="test_queries",
        type=positive,
        default=None,
        help="evaluation queries, a seeded random subset (all passages stay); default: "
        f"{EmbedConfig.test_queries} of the plays', every query of a BEIR folder",
    )
    parser.add_argument(
        "--ignore-identical-ids",
        action="store_true",
        default=None,
        help="BEIR folder: never retrieve a document whose id is the query's own (BEIR's "
        "default; MTEB's for ArguAna and Quora, whose queries are in the corpus)",
    )


def finetune(
    args: argparse.Namespace,
    model: nn.Module,
    tokenizer: Tokenizer,
    run: Callable[..., tuple[nn.Module, RetrievalRecord]],
) -> tuple[dict[str, Any], RetrievalRecord, dict[str, Any], nn.Module, nn.Module | None]:

    cfg = finetune_config(EmbedConfig, args, train_pairs=args.train_queries)  # on the plays one pair a query
    beir, split = is_beir_folder(args.data), None
    if beir:
        train, test, split = beir_finetune_data(args, cfg)
        data = (train.pairs(), test)
    elif args.data is not None:
        rows = user_task(args, TASK)
        data = (rows.train.pairs(), rows.test)
    else:
        data = TASK.plays(cfg, model, "test", True)
    bi_encoder, record = run(cfg, data, "fine-tuned bi-encoder")
    beside = {"data": str(args.data), "split": split} if beir else {}
    task, body, head = TASK.kept(bi_encoder, record, cfg)
    return task, record, beside, body, head


def evaluate(args, model, tokenizer, fine_tune: FineTune) -> RetrievalRecord:
    """Retrieval over a BEIR folder's graded judgements (--data FOLDER), else over --data's rows or the plays'."""

    if is_beir_folder(args.data):
        test = beir_data(args, args.split)
        embedder, name = embedder_of(args.model, args, args.progress, args.pooling)
        return evaluate_graded_retrieval(
            embedder, test, name=name, ignore_identical_ids=bool(args.ignore_identical_ids)
        )
    embedder, name = embedder_of(args.model, args, args.progress, args.pooling)
    test = retrieval_data(args, config_from_flags(EmbedConfig, args), args.split)
    return evaluate_retrieval(embedder, test, name=name)
