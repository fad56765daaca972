"""``maskwise finetune rerank`` and ``maskwise evaluate`` for rerank: the command line's adapter of ``tasks.rerank``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torch import nn

from maskwise.cli.task_flags import config_from_flags, positive
from maskwise.cli.task_inputs import embedder_of, retrieval_data, user_task
from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.interop.folders import FineTune
from maskwise.runs import load_weights_into
from maskwise.tasks.cross_encoder import READOUTS, CrossEncoder, cross_encoder_scorer
from maskwise.tasks.reading import config_of
from maskwise.tasks.registry import TASKS
from maskwise.tasks.rerank import (
    Rerank,
    RerankConfig,
    default_reranker,
    generative_scorer,
    training_negatives,
)
from maskwise.tasks.rerank_eval import RerankRecord, evaluate_reranker
from maskwise.tasks.retrieve import rank

TASK = TASKS[Rerank.kind]


def flags(parser: argparse.ArgumentParser, evaluating: bool) -> None:
    if not evaluating:
        parser.add_argument(
            "--reranker",
            choices=("cross", "generative"),
            default=None,
            help="default: cross for an encoder, generative otherwise",
        )
        parser.add_argument(
            "--readout",
            choices=READOUTS,
            default=None,
            help="the cross-encoder's score: a fresh head on [CLS] (default), or the cosine of the "
            "query's and passage's mean states in the joint pass (for a body trained as a "
            "bi-encoder, such as all-MiniLM-L6-v2)",
        )
        parser.add_argument(
            "--n-negatives",
            type=positive,
            default=None,
            help=f"negatives per query (default {RerankConfig.n_negatives})",
        )
        parser.add_argument(
            "--negatives",
            choices=("first-stage", "random"),
            default="first-stage",
            help="training negatives: the first stage's top-ranked wrong documents, or random "
            "ones (cheaper, and better for the small body measured in the README)",
        )
        parser.add_argument("--train-queries", type=positive, default=None, help="limit training queries")
    parser.add_argument(
        "--first-stage", default=None, help="bi-encoder run for the candidates (default: the model itself, mean-pooled)"
    )
    parser.add_argument(
        "--candidates", type=positive, default=None, help=f"first-stage candidates (default {RerankConfig.candidates})"
    )
    parser.add_argument(
        "--rerank-queries",
        dest="rerank_queries",
        type=positive,
        default=None,
        help=f"evaluation queries (default {RerankConfig.test_queries})",
    )


def rerank_config(args, **values) -> RerankConfig:
    """The reranker's config from the flags: ``--rerank-queries`` (its own dest, beside retrieval's
    ``--max-queries`` on evaluate's one parser) sets its test queries."""
    queries = {} if args.rerank_queries is None else {"test_queries": args.rerank_queries}
    return config_from_flags(RerankConfig, args, **queries, **values)


def finetune(
    args: argparse.Namespace, model: nn.Module, tokenizer: Tokenizer, run: Callable[..., tuple[nn.Module, RerankRecord]]
) -> tuple[dict[str, Any], RerankRecord, dict[str, Any], nn.Module, nn.Module | None]:

    cfg = rerank_config(args, data_seed=args.seed)
    kind = cfg.reranker or default_reranker(config_of(model).family)
    first_stage_path = args.first_stage or args.model
    embedder, first_stage = embedder_of(first_stage_path, args, args.progress)
    if args.data is not None:
        rows = user_task(args, TASK)
        train, test = rows.train, rows.test
    else:
        train, test = TASK.plays(cfg, model, "test", True)
    negatives = training_negatives(train, cfg.n_negatives, args.negatives, embedder, args.seed)
    candidates, _ = rank(embedder, test, k=cfg.candidates)
    reranker, record = run(cfg, (train, negatives, test, candidates), f"{kind} reranker")
    task, trained, head = TASK.kept(reranker, record, cfg)
    task.update(first_stage=str(first_stage_path), negatives=args.negatives)  # this command's own first stage
    return task, replace(record, first_stage=first_stage), {}, trained, head


def evaluate(args, model, tokenizer, fine_tune: FineTune) -> RerankRecord:

    saved = fine_tune.task
    kind = saved.get("reranker") if saved.get("kind") == "rerank" else None
    if kind is None and model.cfg.kind.encoder_only:
        raise UserError("an encoder reranks through a trained head: run `maskwise finetune rerank` first")
    if kind == "cross":
        reranker = CrossEncoder(model, readout=saved.get("readout") or "cls")
        load_weights_into(reranker.head, fine_tune.head or {}, f"cross-encoder head of {args.model}")
        score = cross_encoder_scorer(reranker, tokenizer, saved.get("max_len"))
    else:
        score = generative_scorer(model, tokenizer, saved.get("max_len"))
        kind = kind or "generative (zero-shot)"
    first_stage = args.first_stage or saved.get("first_stage") or args.model
    embedder, name = embedder_of(first_stage, args, args.progress)
    cfg = rerank_config(args)
    test = retrieval_data(args, cfg, args.split)
    candidates, _ = rank(embedder, test, k=cfg.candidates)
    return replace(evaluate_reranker(score, test, candidates, f"{kind} reranker", args.progress), first_stage=name)
