"""``maskwise finetune <task>``: fine-tune a run or HF model on a downstream task, write a run folder.

A fine-tuned model is written as a run folder (``config.json`` with the model config and a ``task``
record, ``tokenizer.json``, ``model.safetensors`` with the body or whole model, ``head.safetensors``
when the task added a head) plus ``results.json`` and ``summary.txt``, so every other command (and
``maskwise.load``) opens it like any run. Results go to JSON files; stdout gets a short summary.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from maskwise.cli.commands import adapter_of
from maskwise.cli.runtime import runtime_of
from maskwise.cli.summary import summarize
from maskwise.cli.task_flags import add_common_flags
from maskwise.cli.task_inputs import is_beir_folder, open_model
from maskwise.errors import UserError
from maskwise.runs import prepare_folder, write_json
from maskwise.tasks.finetune import BODIES, FINE_TUNING, C
from maskwise.tasks.registry import TASKS, in_cli_order, save_fine_tune
from maskwise.tasks.run import run_task

RESULTS_FILE, SUMMARY_FILE = "results.json", "summary.txt"


def positive_float(text: str) -> float:
    """argparse type for a positive number (argparse turns the error into one line)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def by_the_rule(args: argparse.Namespace, cfg: C, rows: int, pretrained: bool) -> C:
    """``cfg`` under the fine-tuning rule (``finetune.FINE_TUNING``) at ``--epochs`` over ``rows`` training rows,
    for a body of this origin; a flag given (--steps, --batch-size, --lr, --head-lr) wins over the rule's value."""
    rule = replace(FINE_TUNING, epochs=args.epochs)
    cfg = rule.rates(cfg, pretrained)
    given = {name: getattr(args, name) for name in ("batch_size", "lr", "head_lr") if getattr(args, name) is not None}
    cfg = replace(cfg, **given)
    steps = args.steps if args.steps is not None else rule.steps(rows, cfg.batch_size)
    return replace(cfg, steps=steps, warmup=rule.warmup, weight_decay=rule.weight_decay)


def register(subparsers) -> None:
    finetune = subparsers.add_parser("finetune", help="fine-tune a run or HF model on a downstream task")
    tasks = finetune.add_subparsers(dest="task", required=True, parser_class=type(finetune))
    for declared in in_cli_order():  # built per call: a task registered in TASKS gets its command
        task = declared.kind
        parser = tasks.add_parser(task, help=f"fine-tune for {task}")
        parser.add_argument("model", help="run folder or HF model folder")
        parser.add_argument("--out", required=True, help="folder for the fine-tuned run")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out run folder")
        parser.add_argument(
            "--epochs",
            type=positive_float,
            default=FINE_TUNING.epochs,
            help=f"passes over the training rows (default {FINE_TUNING.epochs:g}: the fine-tuning rule compare uses)",
        )
        parser.add_argument(
            "--body",
            choices=BODIES,
            default=None,
            help="the batch and rates of a body pretrained elsewhere or here from scratch (default: an HF folder "
            "pretrained, a maskwise run scratch)",
        )
        parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: --epochs' worth)")
        parser.add_argument("--batch-size", type=int, default=None, help="default: by --body")
        parser.add_argument("--lr", type=float, default=None, help="body learning rate (default: by --body)")
        parser.add_argument("--head-lr", type=float, default=None, help="fresh head learning rate (default: by --body)")
        parser.add_argument("--bf16", action="store_true", default=None, help="alias of --precision bf16")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--data",
            default=None,
            help="your own .jsonl/.csv/.tsv training rows instead of the plays" + declared.data_help,
        )
        parser.add_argument(
            "--eval-data",
            "--val-data",
            dest="eval_data",
            default=None,
            help="your own evaluation rows (default: a random 10%% of --data, seed 0)",
        )
        adapter_of(declared).flags(parser, False)
        add_common_flags(parser)
        parser.set_defaults(handler=run_finetune)


def run_finetune(args) -> int:
    if args.eval_data is not None and args.data is None:
        raise UserError("--eval-data needs --data (the plays come with their own evaluation split)")
    if getattr(args, "ignore_identical_ids", False) and not is_beir_folder(args.data):
        raise UserError(
            "--ignore-identical-ids compares a BEIR folder's query and document ids: it needs --data FOLDER"
        )
    model, tokenizer, config = open_model(args.model, args)
    pretrained = args.body == "pretrained" if args.body else "model_type" in config
    out = prepare_folder(Path(args.out).expanduser(), args.overwrite, replace=False)
    tuning: dict = {}

    def run(cfg, data, label: str = "model"):
        """(what fine-tuning produced, its evaluation record): ``run_task`` on the command's runtime, ``cfg`` under
        the fine-tuning rule where no flag set its steps, batch or rates."""
        task = TASKS[args.task]
        rows = task.rows_in(data if data is not None else task.plays(cfg, model, "test", True))
        cfg = by_the_rule(args, cfg, rows, pretrained)
        tuning.update(
            rows=rows,
            epochs=cfg.steps * cfg.batch_size / rows,
            steps=cfg.steps,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            head_lr=cfg.head_lr,
            body="pretrained" if pretrained else "scratch",
        )
        result = run_task(cfg, model, tokenizer, runtime_of(args), data=data, label=label)
        print(
            f"fine-tuned: {cfg.steps:,} steps at batch {cfg.batch_size} over {rows:,} training rows "
            f"({tuning['epochs']:.3g} epochs), lr {cfg.lr:g}, head lr {cfg.head_lr:g} (a body "
            + ("pretrained elsewhere)" if pretrained else "pretrained here from scratch)"),
            file=sys.stderr,
        )
        return result.model, result.record

    task, record, beside, trained, head = adapter_of(TASKS[args.task]).finetune(args, model, tokenizer, run)
    prepare_folder(out, args.overwrite)  # --overwrite replaces the old run only now that the new one is trained
    task = {"kind": args.task, "base": str(args.model), **task}
    results = {"base": str(args.model), **beside, **record.to_json(), "fine_tuning": tuning}
    save_fine_tune(out, trained, tokenizer, task, head)
    write_json(out / RESULTS_FILE, results)
    summary = summarize(results)
    (out / SUMMARY_FILE).write_text(summary + "\n", encoding="utf-8")
    print(summary)
    print(f"run folder: {out} (results: {out / RESULTS_FILE})")
    return 0
