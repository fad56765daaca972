"""``maskwise evaluate``: score a (fine-tuned) run or HF model on a task, results to JSON."""

from __future__ import annotations

from pathlib import Path

from maskwise.cli.commands import adapter_of
from maskwise.cli.runtime import in_runtime
from maskwise.cli.summary import summarize
from maskwise.cli.task_flags import add_common_flags
from maskwise.cli.task_inputs import is_beir_folder, open_model
from maskwise.errors import UserError
from maskwise.interop.folders import fine_tune_of
from maskwise.runs import write_json
from maskwise.tasks.registry import TASKS, by_evaluate_name

PLAY_SPLITS = ("val", "test")  # the plays' held-out splits (train is what fine-tuning reads)


def register(subparsers) -> None:
    evaluate = subparsers.add_parser("evaluate", help="evaluate a (fine-tuned) run on a task")
    evaluate.add_argument("model", help="run folder or HF model folder")
    tasks = by_evaluate_name()  # built per call: a task registered in TASKS gets its name and flags
    evaluate.add_argument(
        "--task", choices=tuple(tasks), default=None, help="default: the task the run was fine-tuned for"
    )
    evaluate.add_argument(
        "--split",
        default="test",
        help="the plays' val or test split; with a BEIR folder, its qrels/<split>.tsv (dev, test...)",
    )
    evaluate.add_argument(
        "--data",
        default=None,
        help="your own .jsonl/.csv/.tsv evaluation rows instead of the plays, or (--task retrieve) "
        "a BEIR/MTEB folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv",
    )
    evaluate.add_argument(
        "--results",
        default=None,
        help="write the JSON results here (default: results-TASK-SPLIT.json in the model's folder, "
        "or in the current folder for a model given by name)",
    )
    for task in tasks.values():
        adapter_of(task).flags(evaluate, True)
    add_common_flags(evaluate)
    evaluate.set_defaults(handler=in_runtime(run_evaluate))


def run_evaluate(args) -> int:
    beir = is_beir_folder(args.data)
    if not beir and args.split not in PLAY_SPLITS:
        raise UserError(
            f"--split {args.split}: the plays and task files have {' and '.join(PLAY_SPLITS)}; "
            f"other splits name a BEIR folder's qrels (--data FOLDER)"
        )
    if args.ignore_identical_ids and not beir:
        raise UserError(
            "--ignore-identical-ids compares a BEIR folder's query and document ids: it needs --data FOLDER"
        )
    model, tokenizer, _ = open_model(args.model, args)
    fine_tune = fine_tune_of(args.model)
    kind = fine_tune.task.get("kind")
    task = args.task or (TASKS[kind].evaluate_name if kind in TASKS else None)
    if task is None:
        raise UserError(f"{args.model} was not fine-tuned for a task: say which with --task")
    record = adapter_of(by_evaluate_name()[task]).evaluate(args, model, tokenizer, fine_tune)
    where = (
        {"data": str(args.data), "split": args.split}
        if beir
        else {"split": args.split if args.data is None else args.data}
    )
    results = {"model": str(args.model), **where, **record.to_json()}
    name = f"{task}-{Path(args.data).name}-{args.split}" if beir else f"{task}-{args.split}"  # one file per benchmark
    given = Path(args.model).expanduser()  # a model named (all-MiniLM-L6-v2, org/name) is not written into
    path = Path(args.results) if args.results else (given if given.is_dir() else Path.cwd()) / f"results-{name}.json"
    write_json(path, results)
    print(summarize(results))
    print(f"results: {path}")
    return 0
