"""``maskwise finetune seq2seq`` and ``maskwise evaluate`` for seq2seq: the command line's adapter of
``tasks.seq2seq``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torch import nn

from maskwise.cli.task_flags import (
    config_from_flags,
    finetune_config,
    positive,
    probability,
)
from maskwise.cli.task_inputs import task_rows
from maskwise.data.task_files import seq2seq_from_file
from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.interop.folders import FineTune
from maskwise.tasks.generate import GenerationConfig
from maskwise.tasks.registry import TASKS
from maskwise.tasks.seq2seq import PLAYS_SEQ2SEQ, VERSE, Seq2Seq, Seq2SeqConfig, evaluate_seq2seq
from maskwise.tasks.seq2seq_scores import Seq2SeqRecord

TASK = TASKS[Seq2Seq.kind]


def flags(parser: argparse.ArgumentParser, evaluating: bool) -> None:
    parser.add_argument(
        "--hide-speakers", action="store_true", default=None, help="remove speaker lines from the source"
    )
    parser.add_argument(
        "--mid-speech",
        action="store_true",
        default=None,
        help="open each passage inside a speech, its speaker line left out (compare's "
        "read-then-write task): the answer is never the source's first line",
    )
    parser.add_argument(
        "--max-chars",
        type=positive,
        default=None,
        help="longest source in characters (default: what fits the model's context)",
    )
    parser.add_argument("--num-beams", type=positive, default=None, help="beam width (default 1: greedy)")
    parser.add_argument(
        "--eval-limit",
        dest="test_passages",
        type=positive,
        default=None,
        help=f"evaluation passages (default {Seq2SeqConfig.test_passages})",
    )
    if not evaluating:  # evaluate reads the plays' task its fine-tune was (its --plays-task is classify's)
        parser.add_argument(
            "--plays-task",
            choices=PLAYS_SEQ2SEQ,
            default=None,
            help="without --data: passages -> their speakers, or a few lines of verse printed as prose -> the same "
            f"words in their lines (verse); default {Seq2SeqConfig.plays_task}",
        )
        parser.add_argument(
            "--max-target-len",
            type=positive,
            default=None,
            help=f"target tokens (default {Seq2SeqConfig.max_target_len})",
        )
        parser.add_argument(
            "--rename-speakers",
            type=probability,
            default=None,
            help="fraction of training draws whose speakers get random names, so that "
            "copying them from the source is the only way to answer (embedded data)",
        )


def finetune(
    args: argparse.Namespace,
    model: nn.Module,
    tokenizer: Tokenizer,
    run: Callable[..., tuple[nn.Module, Seq2SeqRecord]],
) -> tuple[dict[str, Any], Seq2SeqRecord, dict[str, Any], nn.Module, nn.Module | None]:

    cfg = finetune_config(Seq2SeqConfig, args)
    if cfg.rename_speakers and args.data is not None:
        raise UserError("--rename-speakers renames the plays' speakers: it needs the embedded passages, not --data")
    if cfg.plays_task != Seq2SeqConfig.plays_task and args.data is not None:
        raise UserError("--plays-task names the plays' rows: it reads no --data")
    train, test = task_rows(args, TASK, cfg, model, seq2seq_from_file, training=True)
    trained, record = run(cfg, (train, test))
    task, trained, _ = TASK.kept(trained, record, cfg)
    if args.data is None:  # what the plays' passages were
        task.update(
            plays_task=cfg.plays_task,
            hide_speakers=cfg.hide_speakers,
            mid_speech=cfg.mid_speech,
            rename_speakers=cfg.rename_speakers,
        )
        record = replace(record, plays_task=cfg.plays_task, hide_speakers=cfg.hide_speakers, mid_speech=cfg.mid_speech)
    return task, record, {}, trained, None


def evaluate(args, model, tokenizer, fine_tune: FineTune) -> Seq2SeqRecord:

    saved = fine_tune.task
    # the fine-tune's own target room and passages, unless a flag says otherwise
    own = {
        k: saved[k]
        for k in ("max_target_len", "plays_task", "hide_speakers", "mid_speech", "source_edges")
        if k in saved and getattr(args, k, None) is None
    }
    cfg = config_from_flags(Seq2SeqConfig, args, **own)
    _, test = task_rows(args, TASK, cfg, model, seq2seq_from_file, args.split, training=False)
    generation = GenerationConfig(max_new_tokens=cfg.max_target_len + 1, num_beams=cfg.num_beams)
    plays = args.data is None
    return evaluate_seq2seq(
        model,
        tokenizer,
        test,
        generation,
        cfg.max_target_len,
        args.progress,
        cfg.source_edges,
        hide_speakers=cfg.hide_speakers if plays else None,
        mid_speech=cfg.mid_speech if plays else None,
        plays_task=cfg.plays_task if plays else None,
        # the verse rules are chosen between on the training rows, as the fine-tune chose
        verse_train=TASK.plays(cfg, model, "test", True)[0] if plays and cfg.plays_task == VERSE else None,
    )
