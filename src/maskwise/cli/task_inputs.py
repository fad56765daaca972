"""What the task commands read: a model folder, its embedder, and a task's data (the plays or --data)."""

from __future__ import annotations

from pathlib import Path

from maskwise.cli.runtime import runtime_of
from maskwise.errors import UserError

HEAD_FILE = "head.safetensors"  # the head a fine-tune added, beside the body's model.safetensors


# ---- models ----------------------------------------------------------------------------------


def open_model(path: str, args):
    """(model, tokenizer, config dict) of a run folder or an HF model folder, on ``args``' device."""
    from maskwise.interop.folders import load
    from maskwise.runs import CONFIG_FILE, read_json

    runtime = runtime_of(args)
    model, tokenizer = load(path)
    if tokenizer is None:
        raise UserError(f"{path}: no tokenizer.json, and tasks need a tokenizer")
    return model.to(runtime.torch_device), tokenizer, read_json(Path(path).expanduser() / CONFIG_FILE)


def embedder_of(path: str, args, progress: bool, pooling: str | None = None):
    """An ``Embedder`` for a run: an embed fine-tune's own pooling, else ``pooling``/the default."""
    from maskwise.tasks.embed import BiEncoder, Embedder

    model, tokenizer, config = open_model(path, args)
    task = config.get("task", {})
    if task.get("kind") == "embed" and pooling is None:
        return Embedder(BiEncoder(model, task["pooling"], task["normalize"]), tokenizer,
                        max_len=task.get("max_len"), progress=progress), f"{path} ({task['pooling']} pooling)"
    bi = BiEncoder(model, pooling)
    return Embedder(bi, tokenizer, progress=progress), f"{path} ({bi.pooling} pooling, zero-shot)"


# ---- data ------------------------------------------------------------------------------------


def _user_rows(args, reader):
    """(train rows, eval rows) from --data / --eval-data."""
    from maskwise.data.tasks import hold_out

    rows = reader(args.data)
    if args.eval_data is not None:
        return rows, reader(args.eval_data)
    return hold_out(rows)


def classify_data(args, split: str, training: bool):
    """(training examples, or None when only evaluating; evaluation examples): the plays' genre
    windows, or the rows of --data (--eval-data) read through --text-column / --label-column."""
    from maskwise.data.tasks import genre_examples, labelled_texts_from_file

    if args.data is not None:
        def read(path):
            return labelled_texts_from_file(path, (args.text_column, args.label_column))

        if not training:
            return None, read(args.data)
        train, test = _user_rows(args, read)
        classes = sorted({e.label for e in train})
        if len(classes) < 2:
            raise UserError(f"{args.data}: the training rows' {args.label_column!r} column holds one class "
                            f"({classes[0]!r}); classification needs at least 2")
        return train, test
    train = genre_examples("train", per_genre=args.per_genre, seed=args.seed) if training else None
    return train, genre_examples(split, per_genre=args.eval_per_genre)


PLAYS_EVAL_QUERIES = 300  # --max-queries' default on the plays (a BEIR folder's default: all)


def is_beir_folder(data: str | None) -> bool:
    """--data names a folder: a BEIR/MTEB retrieval set (task data files are single files)."""
    return data is not None and Path(data).expanduser().is_dir()


def retrieval_data(split: str, args, max_queries: int | None):
    """The retrieval set to evaluate on: --data, else the ICT split of the plays."""
    from maskwise.data.tasks import ict_retrieval, retrieval_from_file

    if args.data is not None:
        return retrieval_from_file(args.data)
    return ict_retrieval(split, max_queries=PLAYS_EVAL_QUERIES if max_queries is None else max_queries)


def beir_data(args, split: str):
    """The queries and graded judgements of --data's ``qrels/<split>.tsv``, --max-queries of them."""
    from maskwise.data.beir import open_beir

    return open_beir(args.data, (split,)).split(split, args.max_queries)


def beir_finetune_data(args):
    """(train set, evaluation set, its split) of a BEIR folder: its train qrels, then its test qrels
    (else dev) to score the fine-tune on, as the benchmark's own held-out judgements."""
    from maskwise.data.beir import beir_splits, open_beir

    if args.eval_data is not None:
        raise UserError("--eval-data: a BEIR folder is evaluated on its own test (or dev) qrels")
    splits = beir_splits(args.data)
    if "train" not in splits:
        raise UserError(f"BEIR folder {args.data} has no qrels/train.tsv to fine-tune on "
                        f"(splits with qrels: {', '.join(splits)})")
    held_out = next((s for s in ("test", "dev") if s in splits), None)
    if held_out is None:
        raise UserError(f"BEIR folder {args.data} has no qrels/test.tsv or qrels/dev.tsv to evaluate the fine-tune on")
    folder = open_beir(args.data, ("train", held_out))
    return folder.split("train", args.train_queries, args.seed), folder.split(held_out, args.max_queries), held_out


def speaker_data(args, split: str, model, training: bool):
    """(training examples, or None when only evaluating; evaluation examples)."""
    from maskwise.data.tasks import seq2seq_from_file, speaker_examples

    if args.data is not None:
        if training:
            return _user_rows(args, seq2seq_from_file)
        return None, seq2seq_from_file(args.data)
    max_chars = args.max_chars or _default_max_chars(model)
    options = {"max_chars": max_chars, "hide_speakers": args.hide_speakers}
    train = speaker_examples("train", seed=args.seed, **options) if training else None
    return train, speaker_examples(split, limit=args.eval_limit, **options)


def tag_data(args, split: str, model, training: bool):
    """(training sentences, or None when only evaluating; evaluation sentences): the plays'
    punctuation windows, or the sentences of --data (--eval-data), CoNLL or JSONL."""
    from maskwise.data.tagging import punctuation_examples, tagged_from_file

    if args.data is not None:
        if training:
            return _user_rows(args, tagged_from_file)
        return None, tagged_from_file(args.data)
    chars = args.window_chars or max(20, model.cfg.max_seq_len - 1)  # a character a token at worst, and [CLS]
    train = punctuation_examples("train", chars, limit=args.train_windows, seed=args.seed) if training else None
    return train, punctuation_examples(split, chars, limit=args.eval_windows)  # one test sample whatever the seed


def _default_max_chars(model) -> int:
    """Sources that fit the context whatever the tokenizer: a character per token at worst, less the
    target's room for a decoder, which reads source and target in one sequence."""
    room = model.cfg.max_seq_len if model.cfg.kind.two_stacks else model.cfg.max_seq_len - 66
    return max(32, room)
