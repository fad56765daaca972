"""``maskwise finetune classify`` and ``maskwise evaluate`` for classify: the command line's adapter of
``tasks.classify``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torch import nn

from maskwise.cli.task_flags import config_from_flags, finetune_config, positive
from maskwise.cli.task_inputs import classify_data
from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.interop.folders import FineTune
from maskwise.tasks.classify import (
    PLAYS_CLASSIFICATIONS,
    Classify,
    ClassifyConfig,
    ClassifyRecord,
    SequenceClassifier,
    classification_results,
    evaluate_classifier,
    zero_shot_classify,
)
from maskwise.tasks.registry import TASKS

TASK = TASKS[Classify.kind]


def flags(parser: argparse.ArgumentParser, evaluating: bool) -> None:
    parser.add_argument(
        "--pooling",
        choices=("cls", "mean", "last"),
        default=None,
        help="retrieval embedding pooling (a fine-tuned classifier keeps its own)"
        if evaluating
        else "default: cls (encoder), last (decoder), mean (encoder-decoder)",
    )
    if not evaluating:
        parser.add_argument("--freeze", action="store_true", default=None, help="linear probe: train the head only")
        parser.add_argument(
            "--per-label",
            dest="train_per_label",
            type=positive,
            default=None,
            help=f"the plays' training texts per label (default {ClassifyConfig.train_per_label})",
        )
    parser.add_argument(
        "--plays-task",
        choices=tuple(PLAYS_CLASSIFICATIONS),
        default=None,
        help="without --data: the plays' genre windows, line-order pairs (two consecutive "
        "lines, in order or swapped), lines as written or with their words after the first "
        "shuffled (word-order), or sentences without their marks (statement, question or "
        "exclamation); default "
        + ClassifyConfig.plays_task
        + (", or the one the classifier was fine-tuned on" if evaluating else ""),
    )
    parser.add_argument(
        "--eval-per-label",
        dest="test_per_label",
        type=positive,
        default=None,
        help=f"the plays' evaluation texts per label (default {ClassifyConfig.test_per_label})",
    )
    parser.add_argument(
        "--text-column", default="text", help="--data's column (CSV, TSV) or field (JSONL) holding the text"
    )
    parser.add_argument(
        "--label-column",
        default="label",
        help="--data's column or field holding the label (any text; ids follow sorted order)",
    )


def finetune(
    args: argparse.Namespace,
    model: nn.Module,
    tokenizer: Tokenizer,
    run: Callable[..., tuple[nn.Module, ClassifyRecord]],
) -> tuple[dict[str, Any], ClassifyRecord, dict[str, Any], nn.Module, nn.Module | None]:

    cfg = finetune_config(ClassifyConfig, args)
    train, test = classify_data(args, cfg, training=True)
    classifier, record = run(cfg, (train, test))
    task, body, head = TASK.kept(classifier, record, cfg)
    task.update(train_labels=[e.label for e in train], **({"plays_task": cfg.plays_task} if args.data is None else {}))
    return task, record, {}, body, head


def evaluate(args, model, tokenizer, fine_tune: FineTune) -> ClassifyRecord:

    saved = fine_tune.task
    trained_on = {"plays_task": saved["plays_task"]} if args.plays_task is None and "plays_task" in saved else {}
    _, test = classify_data(args, config_from_flags(ClassifyConfig, args, **trained_on), args.split, training=False)
    if saved.get("kind") == "classify":
        classifier = SequenceClassifier.from_fine_tune(model, saved, fine_tune.head, args.model)
        if not {e.label for e in test} & set(classifier.labels):
            raise UserError(
                f"the evaluation rows' labels ({', '.join(sorted({e.label for e in test}))}) are none of "
                f"the classifier's ({', '.join(classifier.labels)})"
            )
        # An HF-fine-tuned folder records no training labels: the baseline is the test set's majority (stricter).
        return evaluate_classifier(classifier, tokenizer, test, saved.get("train_labels") or [e.label for e in test])
    if model.cfg.kind.encoder_only:
        raise UserError(
            "an encoder classifies through a trained head: run `maskwise finetune classify` first "
            "(zero-shot prompting needs a decoder or encoder-decoder)"
        )
    gold = [e.label for e in test]
    predicted = zero_shot_classify(model, tokenizer, [e.text for e in test], sorted(set(gold)))
    # No training set: the baseline predicts the evaluation set's own majority label (a stricter bar).
    return classification_results(predicted, gold, gold, mode="zero-shot", family=model.cfg.family)
