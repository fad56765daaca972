"""``maskwise demo``, ``compare``, ``ablate`` and ``report``: the experiments that show why."""

from __future__ import annotations

import dataclasses
import sys

from maskwise.cli.runtime import runtime_flags, runtime_of
from maskwise.data.corpus import SHAKESPEARE
from maskwise.data.user_tasks import TaskSpec, checked_spec, parse_task
from maskwise.errors import UserError
from maskwise.experiments.ablations.registry import checked, run_ablation
from maskwise.experiments.arms import StudyOptions
from maskwise.experiments.candidates import MODELS
from maskwise.experiments.checkpoints import (
    ModelSpec,
    model_tables,
    open_models,
    parse_model,
)
from maskwise.experiments.compare import COMPARE, columns_of
from maskwise.experiments.compare_plan import ComparePlan, plan_of
from maskwise.experiments.compare_study import CompareStudy, fitted
from maskwise.experiments.compare_study import run_compare as compare_experiment
from maskwise.experiments.demo import BLANK
from maskwise.experiments.demo import run_demo as demo_experiment
from maskwise.experiments.report import RESULTS, ablation_table, render
from maskwise.families import FAMILIES
from maskwise.recipes import COMPARE_SCALES, CompareSettings
from maskwise.runs import read_json
from maskwise.tasks.registry import TASKS
from maskwise.train.pretrain import read_toml


def register(subparsers) -> None:
    demo = subparsers.add_parser("demo", help="train a small decoder and encoder and show what each can do")
    demo.add_argument("--seconds", type=float, default=120.0, help="training seconds per model (default 120)")
    demo.add_argument("--out", default="runs/demo")
    demo.add_argument("--no-progress", dest="progress", action="store_false")
    runtime_flags(demo)
    demo.set_defaults(handler=run_demo)

    compare = subparsers.add_parser(
        "compare", help="the main job: pretrain encoder, decoder and encoder-decoder at one budget, evaluate all"
    )
    compare.add_argument(
        "--scale",
        default=None,
        help="default (about 15 minutes on 2 CPU cores), quick (about 2), or gpu (one modern GPU, about 15)",
    )
    compare.add_argument("--quick", action="store_true", help="the same report in about 2 minutes (= --scale quick)")
    compare.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="seeds per family (default 1; 3 gives intervals over seeds; the time grows with it)",
    )
    compare.add_argument("--seconds", type=float, default=None, help="pretraining seconds per family")
    compare.add_argument(
        "--config", default=None, help="TOML file overriding the experiment's settings (sizes, steps, budgets)"
    )
    compare.add_argument(
        "--data",
        default="shakespeare",
        help="pretraining data: a text, JSONL, CSV or Parquet file, a folder of them, or an HF "
        "dataset folder (default: the plays); its validation part is the held-out text",
    )
    compare.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="NAME=KIND:PATH[,test=PATH]",
        help="a task of your own, repeatable: KIND is classify, tag, embed, rerank or seq2seq; "
        "PATH a .jsonl/.csv/.tsv (tag: CoNLL or .jsonl; embed: or a BEIR folder); "
        "text=COLUMN, label=COLUMN name a classification file's columns; without test= a "
        "random 10%% of the rows test, at least 30 (docs/your-data.md). None: the plays' tasks "
        "on the plays, only the held-out text on a corpus of your own",
    )
    compare.add_argument(
        "--families",
        default=None,
        help="the columns, comma-separated: the three families (the verdicts compare them), "
        "optionally with hybrid (a decoder pretrained by --objective hybrid, GPT-BERT's)",
    )
    compare.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH[,family=F][,body=B]",
        help="a model of your own instead of pretraining, repeatable: a maskwise run folder, an HF "
        "folder maskwise imports (sentence-transformers too) or an org/name in the local HF "
        "cache; family= overrides the family read from it, body=scratch fine-tunes an HF "
        "folder at the scale's rates (docs/your-candidates.md)",
    )
    compare.add_argument(
        "--trend",
        action="store_true",
        help="with --data or --task: measure every task at the scale's ladder of pretraining compute too, each "
        "task's answer as a curve with its trend (the plays always are; it adds to the plan's time, never shortening "
        "pretraining or the tasks)",
    )
    compare.add_argument("--seed", type=int, default=0, help="the first seed")
    compare.add_argument("--out", default="runs/compare")
    compare.add_argument("--overwrite", action="store_true", help="start over instead of continuing")
    compare.add_argument("--no-progress", dest="progress", action="store_false")
    runtime_flags(compare)
    compare.set_defaults(handler=run_compare)

    ablate = subparsers.add_parser(
        "ablate", help="change one design choice, hold the rest, and judge a prediction by a coded rule"
    )
    ablate.add_argument("name", help="the ablation to run (an unknown name lists the known ones)")
    ablate.add_argument(
        "--scale",
        default=None,
        help="default (compare's default recipe at the tokens its 120 s read on 2 CPU cores), "
        "quick, or gpu (compare's gpu recipe, sized for one modern GPU)",
    )
    ablate.add_argument("--quick", action="store_true", help="the same report at a smaller scale (= --scale quick)")
    ablate.add_argument("--seeds", type=int, default=3, help="seeds per arm (default 3, at least 2)")
    ablate.add_argument("--out", default=None, help="output folder (default runs/ablate-NAME)")
    ablate.add_argument("--overwrite", action="store_true", help="start over instead of continuing")
    ablate.add_argument("--ratios", default=None, help="mask-ratio only: comma-separated ratios (default 0.15,0.3)")
    ablate.add_argument(
        "--share",
        default=None,
        help="cross-objective and clm-then-mlm only: the first objective's share of the budget (default 0.75 and 0.5)",
    )
    ablate.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="ROLE=FOLDER",
        help="reranker only: cross=FOLDER (an encoder, or all-MiniLM-L6-v2) and/or generative=FOLDER "
        "start that reranker from a folder instead of pretraining it here",
    )
    ablate.add_argument(
        "--data",
        default="shakespeare",
        help="the corpus every arm pretrains on, as compare's --data (default: the plays)",
    )
    ablate.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="NAME=KIND:PATH[,test=PATH]",
        help="as compare's --task: a user's task replacing the plays' rows in the ablation's job of "
        "that kind (the report names what each job read); repeatable, one of each kind",
    )
    ablate.add_argument("--no-progress", dest="progress", action="store_false")
    runtime_flags(ablate)
    ablate.set_defaults(handler=run_ablate)

    report = subparsers.add_parser("report", help="re-render report.md/.html from an experiment's results.json")
    report.add_argument("run_dir", nargs="+", help="one folder; several ablation folders also print one table of them")
    report.set_defaults(handler=run_report)


def run_demo(args) -> int:
    if not args.seconds > 0:
        raise UserError(f"--seconds must be positive, got {args.seconds}")
    result = demo_experiment(args.out, args.seconds, args.progress, runtime_of(args))
    for family, record in result["final"].items():
        extra = f", masked accuracy {record['val_masked_acc']:.3f}" if "val_masked_acc" in record else ""
        print(
            f"{family}: {record['step']} steps, {record['tokens_seen']:,} tokens in {record['wall_s']:.0f} s, "
            f"validation loss {record['val_loss']:.3f}{extra}"
        )
    print("\n--- the decoder continues a prompt (temperature 0.8, top-k 40) ---")
    print(result["sample"])
    print(f"\n--- the encoder fills a blank: {BLANK} ---")
    print("  ".join(f"{token!r} {p:.2f}" for token, p in result["fill_mask"]))
    print(f"\nloss curves: {result['plot']}")
    return 0


def scale_of(args) -> str:
    """--quick or --scale (compare's and ablate's one vocabulary), refused in one line when they disagree."""
    if args.quick and args.scale not in (None, "quick"):
        raise UserError(f"--quick is --scale quick; it cannot be combined with --scale {args.scale}")
    return "quick" if args.quick else args.scale or "default"


def run_compare(args) -> int:
    scale = scale_of(args)
    if scale not in COMPARE_SCALES:
        raise UserError(f"unknown scale {scale!r}; known: {', '.join(COMPARE_SCALES)}")
    if args.seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {args.seeds}")
    settings, tasks = COMPARE_SCALES[scale], [parse_task(value, tuple(TASKS)) for value in args.task]
    models = [parse_model(value) for value in args.model]
    if args.config:
        values = read_toml(args.config, ("tasks",))
        tasks += task_tables(values.pop("task", []), args.config)
        models += model_tables(values.pop("model", []), args.config)
        settings = settings.overridden(values, f"compare config {args.config}")
    if models:
        return compare_models(args, settings, tasks, models)
    families = columns_of(args.families.split(",") if args.families else FAMILIES)  # its one line before the device's
    if args.seconds is not None:
        if not args.seconds > 0:
            raise UserError(f"--seconds must be positive, got {args.seconds}")
        settings = dataclasses.replace(settings, seconds=args.seconds)
    settings = laddered(settings, bool(tasks) or args.data != SHAKESPEARE, args.trend)
    plan = plan_of(args.data, tasks, settings)  # every task file read and checked: its one line before the device's
    options = StudyOptions(data=args.data, families=families)
    return conduct_compare(args, COMPARE, plan, settings, args.seconds is None, options)


def laddered(settings: CompareSettings, users: bool, trend: bool) -> CompareSettings:
    """The plays measured along the scale's ladder of compute; a user's data or tasks at its final point unless
    ``--trend`` asks for the curve (it adds to the time; docs/your-data.md)."""
    return dataclasses.replace(settings, ladder=(1.0,)) if users and not trend else settings


def compare_models(args, settings, tasks: list[TaskSpec], models: list[ModelSpec]) -> int:
    """``compare --model``: the given models instead of pretraining, every folder and task file checked first."""
    for flag, given in (("--families", args.families), ("--seconds", args.seconds), ("--trend", args.trend or None)):
        if given is not None:
            raise UserError(f"{flag} sets what is pretrained; --model measures the models given instead")
    candidates = open_models(models)  # a folder that does not open: its one line before anything runs
    plan = plan_of(args.data, tasks, settings, candidates)
    return conduct_compare(args, MODELS, plan, settings, False, StudyOptions(candidates=tuple(candidates)))


def conduct_compare(args, study: CompareStudy, plan: ComparePlan, settings, fit: bool, options: StudyOptions) -> int:
    """Either compare (``study``, its ``options``), planned, said and run; its report printed."""
    runtime = runtime_of(args)  # a device that is not there: its one line before the plan's
    print(plan.scope, file=sys.stderr)
    plan, timing = fitted(study, plan, settings, args.seeds, runtime, fit, options)
    print(timing.text([arm.label for arm in study.arms(options)], args.seeds), file=sys.stderr)
    if plan.narrowed:
        print(
            plan.narrowed,
            "; ".join(f"{t['name']}: {t['window']}" for t in plan.described["tasks"] if "window" in t),
            file=sys.stderr,
        )
    out = compare_experiment(
        study, args.out, plan, timing, args.seeds, args.seed, args.overwrite, args.progress, runtime, options
    )
    print((out / "report.md").read_text())
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")
    return 0


def task_tables(tables, path: str) -> list[TaskSpec]:
    """A config file's ``[[task]]`` tables (the ``--task`` flag's keys: name, kind, data, test, text, label)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UserError(f"compare config {path}: task must be an array of tables ([[task]]), got {tables!r}")
    return [checked_spec(table, tuple(TASKS), f"compare config {path}, task {i + 1}") for i, table in enumerate(tables)]


def run_ablate(args) -> int:
    ratios, share = None, None
    if args.ratios is not None:
        try:
            ratios = tuple(float(r) for r in args.ratios.split(","))
        except ValueError:
            raise UserError(f"--ratios must be comma-separated numbers, got {args.ratios!r}") from None
    if args.share is not None:
        try:
            share = float(args.share)
        except ValueError:
            raise UserError(f"--share must be a number, got {args.share!r}") from None
    options = StudyOptions(ratios=ratios, share=share, models=",".join(args.model) if args.model else None)
    scale = scale_of(args)
    tasks = [parse_task(value, tuple(TASKS)) for value in args.task]
    checked(args.name, scale, args.seeds, options, args.data, tasks)  # bad input: its one line before the device's
    out = run_ablation(
        args.name,
        args.out,
        scale,
        args.seeds,
        args.overwrite,
        args.progress,
        runtime_of(args),
        args.data,
        tasks,
        options=options,
    )
    results = read_json(out / RESULTS)
    print(f"report: {out / 'report.md'} and {out / 'report.html'}")
    for verdict in results["verdicts"]:
        print(f"verdict: {verdict['verdict']} — {' '.join(verdict['details'])}")
    return 0


def run_report(args) -> int:
    if len(args.run_dir) > 1:
        table = ablation_table(args.run_dir)  # every folder checked before any is re-rendered
        for folder in args.run_dir:
            render(folder)
        print(table)
        return 0
    print(render(args.run_dir[0]))
    return 0
