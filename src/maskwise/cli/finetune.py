"""``maskwise finetune <task>``: fine-tune a run or HF model on a downstream task, write a run folder.

A fine-tuned model is written as a run folder (``config.json`` with the model config and a ``task``
record, ``tokenizer.json``, ``model.safetensors`` with the body or whole model, ``head.safetensors``
when the task added a head) plus ``results.json`` and ``summary.txt``, so every other command (and
``maskwise.load``) opens it like any run. Results go to JSON files; stdout gets a short summary.
"""

from __future__ import annotations

from pathlib import Path

from maskwise.cli.commands import adapter_of
from maskwise.cli.runtime import runtime_of
from maskwise.cli.summary import summarize
from maskwise.cli.task_flags import add_common_flags
from maskwise.cli.task_inputs import is_beir_folder, open_model
from maskwise.errors import UserError
from maskwise.runs import prepare_folder, write_json
from maskwise.tasks.registry import TASKS, in_cli_order, save_fine_tune
from maskwise.tasks.run import run_task

RESULTS_FILE, SUMMARY_FILE = "results.json", "summary.txt"


def register(subparsers) -> None:
    finetune = subparsers.add_parser("finetune", help="fine-tune a run or HF model on a downstream task")
    tasks = finetune.add_subparsers(dest="task", required=True, parser_class=type(finetune))
    for declared in in_cli_order():  # built per call: a task registered in TASKS gets its command
        task = declared.kind
        parser = tasks.add_parser(task, help=f"fine-tune for {task}")
        parser.add_argument("model", help="run folder or HF model folder")
        parser.add_argument("--out", required=True, help="folder for the fine-tuned run")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out run folder")
        parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the task's)")
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--lr", type=float, default=None, help="body learning rate (default: the task's)")
        parser.add_argument(
            "--head-lr", type=float, default=None, help="fresh head learning rate (default: the task's)"
        )
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
    model, tokenizer, _ = open_model(args.model, args)
    out = prepare_folder(Path(args.out).expanduser(), args.overwrite, replace=False)

    def run(cfg, data, label: str = "model"):
        """(what fine-tuning produced, its evaluation record): ``run_task`` on the command's runtime."""
        result = run_task(cfg, model, tokenizer, runtime_of(args), data=data, label=label)
        return result.model, result.record

    task, record, beside, trained, head = adapter_of(TASKS[args.task]).finetune(args, model, tokenizer, run)
    prepare_folder(out, args.overwrite)  # --overwrite replaces the old run only now that the new one is trained
    task = {"kind": args.task, "base": str(args.model), **task}
    results = {"base": str(args.model), **beside, **record.to_json()}
    save_fine_tune(out, trained, tokenizer, task, head)
    write_json(out / RESULTS_FILE, results)
    summary = summarize(results)
    (out / SUMMARY_FILE).write_text(summary + "\n", encoding="utf-8")
    print(summary)
    print(f"run folder: {out} (results: {out / RESULTS_FILE})")
    return 0
