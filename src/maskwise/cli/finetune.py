"""``maskwise finetune <task>``: fine-tune a run or HF model on a downstream task, write a run folder.

A fine-tuned model is written as a run folder (``config.json`` with the model config and a ``task``
record, ``tokenizer.json``, ``model.safetensors`` with the body or whole model, ``head.safetensors``
when the task added a head) plus ``results.json`` and ``summary.txt``, so every other command (and
``maskwise.load``) opens it like any run. Results go to JSON files; stdout gets a short summary.
"""

from __future__ import annotations

from pathlib import Path

from maskwise.cli.runtime import runtime_of
from maskwise.cli.summary import summarize
from maskwise.cli.task_flags import (
    add_common_flags,
    add_task_flags,
    config_from_flags,
    rerank_config,
)
from maskwise.cli.task_inputs import (
    beir_finetune_data,
    classify_data,
    embedder_of,
    is_beir_folder,
    open_model,
    task_rows,
    user_retrieval,
)
from maskwise.errors import UserError
from maskwise.runs import prepare_folder, write_json
from maskwise.tasks.registry import TASKS, save_fine_tune
from maskwise.tasks.rerank import default_reranker, training_negatives
from maskwise.tasks.retrieve import rank
from maskwise.tasks.run import CONFIGS, plays_rows, run_task

RESULTS_FILE, SUMMARY_FILE = "results.json", "summary.txt"


def register(subparsers) -> None:
    finetune = subparsers.add_parser("finetune", help="fine-tune a run or HF model on a downstream task")
    tasks = finetune.add_subparsers(dest="task", required=True, parser_class=type(finetune))
    for task in CONFIGS:
        parser = tasks.add_parser(task, help=f"fine-tune for {task}")
        parser.add_argument("model", help="run folder or HF model folder")
        parser.add_argument("--out", required=True, help="folder for the fine-tuned run")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out run folder")
        parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the task's)")
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--lr", type=float, default=None, help="body learning rate (default: the task's)")
        parser.add_argument("--head-lr", type=float, default=None, help="fresh head learning rate (default: the task's)")
        parser.add_argument("--bf16", action="store_true", default=None, help="alias of --precision bf16")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--data", default=None,
                            help="your own .jsonl/.csv/.tsv training rows instead of the plays" + (
                                ", or a BEIR folder with qrels/train.tsv" if task == "embed" else ""))
        parser.add_argument("--eval-data", "--val-data", dest="eval_data", default=None,
                            help="your own evaluation rows (default: the last 10%% of --data)")
        add_task_flags(parser, task)
        add_common_flags(parser)
        parser.set_defaults(handler=run_finetune)


def run_finetune(args) -> int:
    if args.eval_data is not None and args.data is None:
        raise UserError("--eval-data needs --data (the plays come with their own evaluation split)")
    if getattr(args, "ignore_identical_ids", False) and not is_beir_folder(args.data):
        raise UserError("--ignore-identical-ids compares a BEIR folder's query and document ids: it needs --data FOLDER")
    model, tokenizer, _ = open_model(args.model, args)
    out = prepare_folder(Path(args.out).expanduser(), args.overwrite, replace=False)
    handler = {"classify": _finetune_classify, "embed": _finetune_embed, "rerank": _finetune_rerank,
               "seq2seq": _finetune_seq2seq, "tag": _finetune_tag}[args.task]
    task, results, trained, head = handler(args, model, tokenizer)
    prepare_folder(out, args.overwrite)  # --overwrite replaces the old run only now that the new one is trained
    task = {"kind": args.task, "base": str(args.model), **task}
    results = {"base": str(args.model), **results}
    save_fine_tune(out, trained, tokenizer, task, head)
    write_json(out / RESULTS_FILE, results)
    summary = summarize(results)
    (out / SUMMARY_FILE).write_text(summary + "\n", encoding="utf-8")
    print(summary)
    print(f"run folder: {out} (results: {out / RESULTS_FILE})")
    return 0


def _config(args, task: str, **values):
    """The task's config from the flags given; the training draw follows --seed, the test draw stays fixed."""
    return config_from_flags(CONFIGS[task], args, data_seed=args.seed, **values)


def _run(args, cfg, model, tokenizer, data, label: str = "model"):
    """(what fine-tuning produced, its evaluation record): ``run_task`` on the command's runtime."""
    result = run_task(cfg, model, tokenizer, runtime_of(args), data=data, label=label)
    return result.model, result.record


def _finetune_classify(args, model, tokenizer):
    cfg = _config(args, "classify")
    train, test = classify_data(args, cfg, training=True)
    classifier, record = _run(args, cfg, model, tokenizer, (train, test))
    task, body, head = TASKS["classify"].kept(classifier, record, cfg)
    task.update(train_labels=[e.label for e in train], **({"plays_task": cfg.plays_task} if args.data is None else {}))
    return task, record, body, head


def _finetune_embed(args, model, tokenizer):
    cfg = _config(args, "embed", train_pairs=args.train_queries)  # on the plays one pair a query
    beir, split = is_beir_folder(args.data), None
    if beir:
        train, test, split = beir_finetune_data(args, cfg)
        data = (train.pairs(), test)
    elif args.data is not None:
        train, test = user_retrieval(args)
        data = (train.pairs(), test)
    else:
        data = plays_rows(cfg, model)
    bi_encoder, record = _run(args, cfg, model, tokenizer, data, "fine-tuned bi-encoder")
    results = {"data": str(args.data), "split": split, **record} if beir else record
    task, body, head = TASKS["embed"].kept(bi_encoder, record, cfg)
    return task, results, body, head


def _finetune_rerank(args, model, tokenizer):
    cfg = rerank_config(args, data_seed=args.seed)
    kind = cfg.reranker or default_reranker(model.cfg.family)
    first_stage_path = args.first_stage or args.model
    embedder, first_stage = embedder_of(first_stage_path, args, args.progress)
    train, test = user_retrieval(args) if args.data is not None else plays_rows(cfg, model)
    negatives = training_negatives(train, cfg.n_negatives, args.negatives, embedder, args.seed)
    candidates, _ = rank(embedder, test, k=cfg.candidates)
    reranker, record = _run(args, cfg, model, tokenizer, (train, negatives, test, candidates), f"{kind} reranker")
    task, trained, head = TASKS["rerank"].kept(reranker, record, cfg)
    task.update(first_stage=str(first_stage_path), negatives=args.negatives)  # this command's own first stage
    return task, {**record, "first_stage": first_stage}, trained, head


def _finetune_seq2seq(args, model, tokenizer):
    cfg = _config(args, "seq2seq")
    if cfg.rename_speakers and args.data is not None:
        raise UserError("--rename-speakers renames the plays' speakers: it needs the embedded passages, not --data")
    train, test = task_rows(args, cfg, model, training=True)
    trained, record = _run(args, cfg, model, tokenizer, (train, test))
    task, trained, _ = TASKS["seq2seq"].kept(trained, record, cfg)
    if args.data is None:  # what the plays' passages were
        task.update(hide_speakers=cfg.hide_speakers, mid_speech=cfg.mid_speech, rename_speakers=cfg.rename_speakers)
        record = {**record, "hide_speakers": cfg.hide_speakers, "mid_speech": cfg.mid_speech}
    return task, record, trained, None


def _finetune_tag(args, model, tokenizer):
    cfg = _config(args, "tag")
    train, test = task_rows(args, cfg, model, training=True)
    tagger, record = _run(args, cfg, model, tokenizer, (train, test))
    task, body, head = TASKS["tag"].kept(tagger, record, cfg)
    return task, record, body, head
