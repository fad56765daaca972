"""The flags and argparse types that ``finetune``, ``evaluate`` and the inference commands share."""

from __future__ import annotations

import argparse
import dataclasses

from maskwise.cli.runtime import runtime_flags
from maskwise.tasks.classify import PLAYS_TASKS, ClassifyConfig
from maskwise.tasks.embed import EmbedConfig
from maskwise.tasks.rerank import RerankConfig
from maskwise.tasks.seq2seq import Seq2SeqConfig
from maskwise.tasks.tag import READ_OUTS, TagConfig


def positive(text: str) -> int:
    """argparse type for counts: a positive integer (argparse turns the error into one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def probability(text: str) -> float:
    """argparse type for a probability in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
    return value


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """--device / --precision and --no-progress, on every task command."""
    runtime_flags(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def add_task_flags(parser, task: str, evaluating: bool = False) -> None:
    """The flags of ``task``: its data sizes and settings (``evaluating``: only what evaluation reads).
    A flag that sets a field of the task's config (``tasks.run.CONFIGS``) has that field's name as its
    dest and None as its default: the config holds the default (``config_from_flags``)."""
    if task == "classify":
        parser.add_argument("--pooling", choices=("cls", "mean", "last"), default=None,
                            help="retrieval embedding pooling (a fine-tuned classifier keeps its own)"
                            if evaluating else "default: cls (encoder), last (decoder), mean (encoder-decoder)")
        if not evaluating:
            parser.add_argument("--freeze", action="store_true", default=None, help="linear probe: train the head only")
            parser.add_argument("--per-label", dest="train_per_label", type=positive, default=None,
                                help=f"the plays' training texts per label (default {ClassifyConfig.train_per_label})")
        parser.add_argument("--plays-task", choices=tuple(PLAYS_TASKS), default=None,
                            help="without --data: the plays' genre windows, line-order pairs (two consecutive "
                            "lines, in order or swapped), lines as written or with their words after the first "
                            "shuffled (word-order), or sentences without their marks (statement, question or "
                            "exclamation); default " + ClassifyConfig.plays_task
                            + (", or the one the classifier was fine-tuned on" if evaluating else ""))
        parser.add_argument("--eval-per-label", dest="test_per_label", type=positive, default=None,
                            help=f"the plays' evaluation texts per label (default {ClassifyConfig.test_per_label})")
        parser.add_argument("--text-column", default="text",
                            help="--data's column (CSV, TSV) or field (JSONL) holding the text")
        parser.add_argument("--label-column", default="label",
                            help="--data's column or field holding the label (any text; ids follow sorted order)")
    elif task in ("embed", "retrieve"):
        if not evaluating:
            parser.add_argument("--pooling", choices=("cls", "mean", "last"), default=None,
                                help="default: mean (last for a decoder)")
            parser.add_argument("--temperature", type=float, default=None,
                                help=f"InfoNCE temperature (default {EmbedConfig.temperature})")
            parser.add_argument("--train-queries", type=positive, default=None,
                                help="limit training queries (a random subset; a BEIR query brings all its positives)")
        parser.add_argument("--max-queries", dest="test_queries", type=positive, default=None,
                            help="evaluation queries, a seeded random subset (all passages stay); default: "
                                 f"{EmbedConfig.test_queries} of the plays', every query of a BEIR folder")
        parser.add_argument("--ignore-identical-ids", action="store_true", default=None,
                            help="BEIR folder: never retrieve a document whose id is the query's own (BEIR's "
                                 "default; MTEB's for ArguAna and Quora, whose queries are in the corpus)")
    elif task == "rerank":
        if not evaluating:
            parser.add_argument("--reranker", choices=("cross", "generative"), default=None,
                                help="default: cross for an encoder, generative otherwise")
            parser.add_argument("--n-negatives", type=positive, default=None,
                                help=f"negatives per query (default {RerankConfig.n_negatives})")
            parser.add_argument("--negatives", choices=("first-stage", "random"), default="first-stage",
                                help="training negatives: the first stage's top-ranked wrong documents, or random "
                                     "ones (cheaper, and better for the small body measured in the README)")
            parser.add_argument("--train-queries", type=positive, default=None, help="limit training queries")
        parser.add_argument("--first-stage", default=None,
                            help="bi-encoder run for the candidates (default: the model itself, mean-pooled)")
        parser.add_argument("--candidates", type=positive, default=None,
                            help=f"first-stage candidates (default {RerankConfig.candidates})")
        parser.add_argument("--rerank-queries", dest="rerank_queries", type=positive, default=None,
                            help=f"evaluation queries (default {RerankConfig.test_queries})")
    elif task == "tag":
        parser.add_argument("--window-chars", type=positive, default=None,
                            help="the plays' windows, in characters (default: what fits the model's context)")
        if not evaluating:
            parser.add_argument("--read-out", dest="read_out", choices=READ_OUTS, default=None,
                                help="where a word's tag is read: its last token (default; a causal reader has "
                                     "then read the whole word) or its first (HF's convention)")
            parser.add_argument("--train-windows", type=positive, default=None,
                                help=f"training windows of the plays (default {TagConfig.train_windows})")
        parser.add_argument("--eval-windows", dest="test_windows", type=positive, default=None,
                            help=f"evaluation windows of the plays (default {TagConfig.test_windows})")
    elif task == "seq2seq":
        parser.add_argument("--hide-speakers", action="store_true", default=None,
                            help="remove speaker lines from the source")
        parser.add_argument("--mid-speech", action="store_true", default=None,
                            help="open each passage inside a speech, its speaker line left out (compare's "
                                 "read-then-write task): the answer is never the source's first line")
        parser.add_argument("--max-chars", type=positive, default=None,
                            help="longest source in characters (default: what fits the model's context)")
        parser.add_argument("--num-beams", type=positive, default=None, help="beam width (default 1: greedy)")
        parser.add_argument("--eval-limit", dest="test_passages", type=positive, default=None,
                            help=f"evaluation passages (default {Seq2SeqConfig.test_passages})")
        if not evaluating:
            parser.add_argument("--max-target-len", type=positive, default=None,
                                help=f"target tokens (default {Seq2SeqConfig.max_target_len})")
            parser.add_argument("--rename-speakers", type=probability, default=None,
                                help="fraction of training draws whose speakers get random names, so that "
                                     "copying them from the source is the only way to answer (embedded data)")


def config_from_flags(config_cls, args, **values):
    """The task config the command's flags give: every field whose flag was given (a dest of that
    name, not None), ``values``, and the config's own defaults for the rest."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)
             if getattr(args, f.name, None) is not None}
    return config_cls(**{**given, **values})


def rerank_config(args, **values) -> RerankConfig:
    """The reranker's config from the flags: ``--rerank-queries`` (its own dest, beside retrieval's
    ``--max-queries`` on evaluate's one parser) sets its test queries."""
    queries = {} if args.rerank_queries is None else {"test_queries": args.rerank_queries}
    return config_from_flags(RerankConfig, args, **queries, **values)
