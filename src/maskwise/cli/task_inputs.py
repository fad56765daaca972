"""What the task commands read: a model folder, its embedder, and a task's data (the plays or --data)."""

from __future__ import annotations

from pathlib import Path

from maskwise.cli.runtime import runtime_of
from maskwise.data.beir import beir_splits, open_beir
from maskwise.data.task_files import labelled_texts_from_file, retrieval_from_file
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError
from maskwise.interop.folders import load, model_folder
from maskwise.runs import CONFIG_FILE, read_json
from maskwise.tasks.classify import Classify, ClassifyConfig
from maskwise.tasks.embed import BiEncoder, EmbedConfig, Embedder
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.registry import TASKS
from maskwise.tasks.rerank import RerankConfig
from maskwise.tasks.run import plays_rows
from maskwise.tasks.unit import Task

# ---- models ----------------------------------------------------------------------------------


def open_model(path: str, args):
    """(model, tokenizer, config dict) of a run folder or an HF model folder, on ``args``' device."""
    runtime = runtime_of(args)
    folder = model_folder(path)  # resolved once: a name (all-MiniLM-L6-v2, org/name) or a folder
    model, tokenizer = load(folder)
    if tokenizer is None:
        raise UserError(f"{path}: no tokenizer.json, and tasks need a tokenizer")
    return model.to(runtime.torch_device), tokenizer, read_json(folder / CONFIG_FILE)


def embedder_of(path: str, args, progress: bool, pooling: str | None = None):
    """An ``Embedder`` for a run: an embed fine-tune's own pooling, else ``pooling``/the default."""
    model, tokenizer, config = open_model(path, args)
    task = config.get("task", {})
    if task.get("kind") == "embed" and pooling is None:
        return Embedder(
            BiEncoder(model, task["pooling"], task["normalize"]),
            tokenizer,
            max_len=task.get("max_len"),
            progress=progress,
        ), f"{path} ({task['pooling']} pooling)"
    bi = BiEncoder(model, pooling)
    return Embedder(bi, tokenizer, progress=progress), f"{path} ({bi.pooling} pooling, zero-shot)"


# ---- data ------------------------------------------------------------------------------------


def user_task(args, task: Task) -> UserTask:
    """--data (and --eval-data) read by ``task``'s own reader, the one ``compare --task`` reads the same files with."""
    return task.read(
        TaskSpec(
            task.kind,
            task.kind,
            args.data,
            args.eval_data,
            text=getattr(args, "text_column", "text"),
            label=getattr(args, "label_column", "label"),
        )
    )


def classify_data(args, cfg: ClassifyConfig, split: str = "test", training: bool = True):
    """(training examples, or None when only evaluating; evaluation examples): the plays' (genre
    windows, line-order pairs or sentence marks: --plays-task), or the rows of --data (--eval-data)
    read through --text-column / --label-column."""
    if args.data is None:
        return plays_rows(cfg, None, split, training)
    if not training:
        return None, labelled_texts_from_file(args.data, (args.text_column, args.label_column))
    task = user_task(args, TASKS[Classify.kind])
    return task.train, task.test


def is_beir_folder(data: str | None) -> bool:
    """--data names a folder: a BEIR/MTEB retrieval set (task data files are single files)."""
    return data is not None and Path(data).expanduser().is_dir()


def retrieval_data(args, cfg: EmbedConfig | RerankConfig, split: str = "test"):
    """The retrieval set to evaluate on: --data, else the ICT split of the plays."""
    if args.data is not None:
        return retrieval_from_file(args.data)
    return plays_rows(cfg, None, split, training=False)[1]


def beir_data(args, split: str):
    """The queries and graded judgements of --data's ``qrels/<split>.tsv``, --max-queries of them."""
    return open_beir(args.data, (split,)).split(split, args.test_queries)


def beir_finetune_data(args, cfg: EmbedConfig):
    """(train set, evaluation set, its split) of a BEIR folder: its train qrels, then its test qrels
    (else dev) to score the fine-tune on, as the benchmark's own held-out judgements."""
    if args.eval_data is not None:
        raise UserError("--eval-data: a BEIR folder is evaluated on its own test (or dev) qrels")
    splits = beir_splits(args.data)
    if "train" not in splits:
        raise UserError(
            f"BEIR folder {args.data} has no qrels/train.tsv to fine-tune on (splits with qrels: {', '.join(splits)})"
        )
    held_out = next((s for s in ("test", "dev") if s in splits), None)
    if held_out is None:
        raise UserError(f"BEIR folder {args.data} has no qrels/test.tsv or qrels/dev.tsv to evaluate the fine-tune on")
    folder = open_beir(args.data, ("train", held_out))
    return folder.split("train", args.train_queries, args.seed), folder.split(held_out, args.test_queries), held_out


def task_rows(args, task: Task, cfg: FinetuneConfig, model, read, split: str = "test", training: bool = True):
    """(training rows, or None when only evaluating; evaluation rows): the plays' slice ``cfg`` names
    (passages -> speakers, punctuation windows), or --data's rows as ``task`` reads them (``read`` reads one file
    to evaluate on)."""
    if args.data is None:
        return plays_rows(cfg, model, split, training)
    if training:
        rows = user_task(args, task)
        return rows.train, rows.test
    return None, read(args.data)
