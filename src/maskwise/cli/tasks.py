"""``maskwise finetune|evaluate|search|generate|fill-mask|break``: the downstream tasks.

A fine-tuned model is written as a run folder (``config.json`` with the model config and a ``task``
record, ``tokenizer.json``, ``model.safetensors`` with the body or whole model, ``head.safetensors``
when the task added a head) plus ``results.json`` and ``summary.txt``, so every other command (and
``maskwise.load``) opens it like any run. Results go to JSON files; stdout gets a short summary.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from maskwise.cli.runtime import runtime_flags, runtime_of

TASKS = ("classify", "embed", "rerank", "seq2seq")
EVAL_TASKS = ("classify", "retrieve", "rerank", "seq2seq")
RESULTS_FILE, SUMMARY_FILE, HEAD_FILE = "results.json", "summary.txt", "head.safetensors"


# ---- parsers -----------------------------------------------------------------------------------


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


def _common(parser: argparse.ArgumentParser) -> None:
    runtime_flags(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def register(subparsers) -> None:
    finetune = subparsers.add_parser("finetune", help="fine-tune a run or HF model on a downstream task")
    tasks = finetune.add_subparsers(dest="task", required=True, parser_class=type(finetune))
    for task in TASKS:
        parser = tasks.add_parser(task, help=f"fine-tune for {task}")
        parser.add_argument("model", help="run folder or HF model folder")
        parser.add_argument("--out", required=True, help="folder for the fine-tuned run")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out run folder")
        parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the task's)")
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--lr", type=float, default=None, help="body learning rate (default: the task's)")
        parser.add_argument("--head-lr", type=float, default=None, help="fresh head learning rate (default 1e-3)")
        parser.add_argument("--bf16", action="store_true", help="alias of --precision bf16")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--data", default=None, help="your own .jsonl/.csv training rows instead of the plays")
        parser.add_argument("--eval-data", default=None,
                            help="your own evaluation rows (default: the last 10%% of --data)")
        _task_flags(parser, task)
        _common(parser)
        parser.set_defaults(handler=run_finetune)

    evaluate = subparsers.add_parser("evaluate", help="evaluate a (fine-tuned) run on a task")
    evaluate.add_argument("model", help="run folder or HF model folder")
    evaluate.add_argument("--task", choices=EVAL_TASKS, default=None,
                          help="default: the task the run was fine-tuned for")
    evaluate.add_argument("--split", choices=("val", "test"), default="test")
    evaluate.add_argument("--data", default=None, help="your own .jsonl/.csv evaluation rows instead of the plays")
    evaluate.add_argument("--results", default=None, help="write the JSON results here")
    for task in EVAL_TASKS:
        _task_flags(evaluate, task, evaluating=True)
    _common(evaluate)
    evaluate.set_defaults(handler=in_runtime(run_evaluate))

    search = subparsers.add_parser("search", help="nearest passages to a query (exact search)")
    search.add_argument("model", help="run folder (an embed fine-tune, or any body) or HF model folder")
    search.add_argument("--query", required=True)
    search.add_argument("--k", type=positive, default=10)
    search.add_argument("--collection", default=None,
                        help="text file (one passage per line) or .jsonl/.csv with 'text'; default: the ICT collection")
    search.add_argument("--split", choices=("train", "val", "test"), default="test")
    search.add_argument("--pooling", choices=("cls", "mean", "last"), default=None)
    _common(search)
    search.set_defaults(handler=in_runtime(run_search))

    generate = subparsers.add_parser("generate", help="continue a prompt (decoder) or map a source (encoder-decoder)")
    generate.add_argument("model", help="run folder or HF model folder")
    generate.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    generate.add_argument("--max-new-tokens", type=positive, default=100)
    _sampling_flags(generate)
    generate.add_argument("--num-beams", type=positive, default=1)
    generate.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    generate.add_argument("--no-cache", dest="use_cache", action="store_false", help="decode without the KV cache")
    _common(generate)
    generate.set_defaults(handler=in_runtime(run_generate))

    fill = subparsers.add_parser("fill-mask", help="top tokens for each [MASK] (encoder)")
    fill.add_argument("model", help="run folder or HF model folder")
    fill.add_argument("text", help='text with one or more "[MASK]"')
    fill.add_argument("--top-k", type=int, default=5)
    _common(fill)
    fill.set_defaults(handler=in_runtime(run_fill_mask))

    brk = subparsers.add_parser("break", help="make an MLM encoder generate, beside a decoder, with both losses")
    brk.add_argument("encoder", help="encoder run folder")
    brk.add_argument("decoder", help="decoder run folder")
    brk.add_argument("--prompt", default=None, help="default: the start of the held-out text")
    brk.add_argument("--max-new-tokens", type=positive, default=100)
    brk.add_argument("--held-out-chars", type=positive, default=1000, help="characters of a test play to score")
    _sampling_flags(brk)
    brk.add_argument("--results", default=None, help="write the JSON results here")
    _common(brk)
    brk.set_defaults(handler=in_runtime(run_break))


def _sampling_flags(parser) -> None:
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)


def _task_flags(parser, task: str, evaluating: bool = False) -> None:
    if task == "classify":
        parser.add_argument("--pooling", choices=("cls", "mean", "last"), default=None,
                            help="retrieval embedding pooling (a fine-tuned classifier keeps its own)"
                            if evaluating else "default: cls (encoder), last (decoder), mean (encoder-decoder)")
        if not evaluating:
            parser.add_argument("--freeze", action="store_true", help="linear probe: train the head only")
            parser.add_argument("--per-genre", type=positive, default=300, help="training windows per genre")
        parser.add_argument("--eval-per-genre", type=positive, default=100, help="evaluation windows per genre")
    elif task in ("embed", "retrieve"):
        if not evaluating:
            parser.add_argument("--pooling", choices=("cls", "mean", "last"), default=None,
                                help="default: mean (last for a decoder)")
            parser.add_argument("--temperature", type=float, default=0.05, help="InfoNCE temperature")
            parser.add_argument("--train-queries", type=positive, default=None, help="limit training pairs")
        parser.add_argument("--max-queries", type=positive, default=300, help="evaluation queries (all passages stay)")
    elif task == "rerank":
        if not evaluating:
            parser.add_argument("--reranker", choices=("cross", "generative"), default=None,
                                help="default: cross for an encoder, generative otherwise")
            parser.add_argument("--n-negatives", type=positive, default=7)
            parser.add_argument("--negatives", choices=("first-stage", "random"), default="first-stage",
                                help="training negatives: the first stage's top-ranked wrong documents, or random "
                                     "ones (cheaper, and better for the small body measured in the README)")
            parser.add_argument("--train-queries", type=positive, default=None, help="limit training queries")
        parser.add_argument("--first-stage", default=None,
                            help="bi-encoder run for the candidates (default: the model itself, mean-pooled)")
        parser.add_argument("--candidates", type=positive, default=100)
        parser.add_argument("--rerank-queries", type=positive, default=100, help="evaluation queries")
    elif task == "seq2seq":
        parser.add_argument("--hide-speakers", action="store_true", help="remove speaker lines from the source")
        parser.add_argument("--max-chars", type=positive, default=None,
                            help="longest source in characters (default: what fits the model's context)")
        parser.add_argument("--num-beams", type=positive, default=1)
        parser.add_argument("--eval-limit", type=positive, default=300, help="evaluation passages")
        if not evaluating:
            parser.add_argument("--max-target-len", type=positive, default=64, help="target tokens")
            parser.add_argument("--rename-speakers", type=probability, default=0.0,
                                help="fraction of training draws whose speakers get random names, so that "
                                     "copying them from the source is the only way to answer (embedded data)")


# ---- loading and saving ----------------------------------------------------------------------


def in_runtime(handler):
    """Run an inference command's handler under its precision's autocast."""
    def run(args) -> int:
        with runtime_of(args).autocast():
            return handler(args)
    return run


def _open(path: str, args):
    """(model, tokenizer, config dict) of a run folder or an HF model folder, on ``args``' device."""
    from maskwise.errors import UserError
    from maskwise.interop.hf import load
    from maskwise.train.checkpoint import CONFIG_FILE, read_json

    runtime = runtime_of(args)
    model, tokenizer = load(path)
    if tokenizer is None:
        raise UserError(f"{path}: no tokenizer.json, and tasks need a tokenizer")
    return model.to(runtime.torch_device), tokenizer, read_json(Path(path).expanduser() / CONFIG_FILE)


def _prepare_out(out: str, overwrite: bool) -> Path:
    from maskwise.errors import UserError
    from maskwise.train.checkpoint import CONFIG_FILE

    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise UserError(f"--out {path} already exists; use --overwrite to replace it")
        if not (path / CONFIG_FILE).is_file():
            raise UserError(f"refusing to --overwrite {path}: it is not a maskwise run folder")
        shutil.rmtree(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create --out {path} ({error.strerror or error})") from None
    return path


def _save_run(out: Path, model, tokenizer, task: dict, head=None) -> None:
    from maskwise.train.checkpoint import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, save_weights, write_json

    save_weights(model, out / MODEL_FILE)
    if head is not None:
        save_weights(head, out / HEAD_FILE)
    tokenizer.save(out / TOKENIZER_FILE)
    write_json(out / CONFIG_FILE, {"model": model.cfg.to_dict(), "task": task})


def _load_head(run: str, head, what: str) -> None:
    from maskwise.train.checkpoint import load_weights_into, read_safetensors

    path = Path(run).expanduser() / HEAD_FILE
    load_weights_into(head, read_safetensors(path), f"{what} head {path}")


def _write_results(results: dict, path: Path) -> None:
    from maskwise.train.checkpoint import write_json

    write_json(path, results)


# ---- summaries -------------------------------------------------------------------------------


def summarize(r: dict) -> str:
    """A few lines a person reads: the headline metric beside its baseline."""
    base = r.get("baseline", {})
    task = r["task"]
    if task == "classify":
        how = "zero-shot prompting" if r.get("mode") == "zero-shot" else f"{r['mode']}, {r['pooling']} pooling"
        return (f"classify ({how}) on {r['n_test']} examples: accuracy {r['accuracy']:.3f} "
                f"(majority class {base['accuracy']:.3f}), macro-F1 {r['macro_f1']:.3f} ({base['macro_f1']:.3f})")
    if task == "retrieve":
        return (f"retrieve ({r['embedder']}) {r['n_queries']} queries over {r['n_docs']} passages: "
                f"nDCG@10 {r['ndcg@10']:.3f} (random {base['ndcg@10']:.3f}), MRR {r['mrr']:.3f} "
                f"({base['mrr']:.3f}), recall@100 {r['recall@100']:.3f} ({base['recall@100']:.3f})")
    if task == "rerank":
        from maskwise.tasks.rerank import gain_summary

        lat = r["latency"]
        return (f"rerank ({r['reranker']}) {r['n_queries']} queries x {r['candidates_per_query']} candidates: "
                f"nDCG@10 {r['ndcg@10']:.3f} (first stage {base['ndcg@10']:.3f}, random order "
                f"{r['random_order']['ndcg@10']:.3f}), MRR {r['mrr']:.3f} ({base['mrr']:.3f}); "
                f"latency p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms per query\n{gain_summary(r)}")
    if task == "seq2seq":
        return (f"seq2seq ({r['family']}, {r['decoding']}) on {r['n_test']} passages: exact match "
                f"{r['exact_match']:.3f} (copy first line {base['exact_match']:.3f}), speakers F1 "
                f"{r['speakers_f1']:.3f} ({base['speakers_f1']:.3f}), token F1 {r['token_f1']:.3f} "
                f"({base['token_f1']:.3f})")
    if task == "break":
        enc, dec = r["encoder"], r["decoder"]
        return "\n".join([
            f"encoder (append [MASK], {enc['params']:,} params): {enc['sample']!r}",
            f"decoder ({dec['params']:,} params): {dec['sample']!r}",
            f"bits/char on {r['held_out_chars']} held-out chars: encoder both sides "
            f"{enc['loss_both_sides']['bits_per_char']:.3f}, encoder left only "
            f"{enc['loss_left_only']['bits_per_char']:.3f}, decoder left only "
            f"{dec['loss_left_only']['bits_per_char']:.3f}",
        ])
    return json.dumps(r)


# ---- finetune ----------------------------------------------------------------------------------


def _finetune_settings(args, cls):
    """The task's config with the flags that were given; the task's own defaults otherwise."""
    import dataclasses

    values = {"seed": args.seed, "progress": args.progress, "precision": args.precision, "bf16": args.bf16}
    for flag in ("steps", "batch_size", "lr", "head_lr"):
        if getattr(args, flag) is not None:
            values[flag] = getattr(args, flag)
    names = {f.name for f in dataclasses.fields(cls)}
    for flag in ("pooling", "freeze", "temperature", "n_negatives", "max_target_len"):
        if flag in names and hasattr(args, flag):
            values[flag] = getattr(args, flag)
    return cls(**values).validate()


def _user_rows(args, reader):
    """(train rows, eval rows) from --data / --eval-data."""
    from maskwise.data.tasks import hold_out

    rows = reader(args.data)
    if args.eval_data is not None:
        return rows, reader(args.eval_data)
    return hold_out(rows)


def run_finetune(args) -> int:
    from maskwise.errors import UserError

    if args.eval_data is not None and args.data is None:
        raise UserError("--eval-data needs --data (the plays come with their own evaluation split)")
    model, tokenizer, _ = _open(args.model, args)
    out = _prepare_out(args.out, args.overwrite)
    handler = {"classify": _finetune_classify, "embed": _finetune_embed, "rerank": _finetune_rerank,
               "seq2seq": _finetune_seq2seq}[args.task]
    task, results, trained, head = handler(args, model, tokenizer)
    task = {"kind": args.task, "base": str(args.model), **task}
    results = {"base": str(args.model), **results}
    _save_run(out, trained, tokenizer, task, head)
    _write_results(results, out / RESULTS_FILE)
    summary = summarize(results)
    (out / SUMMARY_FILE).write_text(summary + "\n", encoding="utf-8")
    print(summary)
    print(f"run folder: {out} (results: {out / RESULTS_FILE})")
    return 0


def _classify_data(args, split: str, training: bool):
    """(training examples, or None when only evaluating; evaluation examples)."""
    from maskwise.data.tasks import genre_examples, labelled_texts_from_file

    if args.data is not None:
        if training:
            return _user_rows(args, labelled_texts_from_file)
        return None, labelled_texts_from_file(args.data)
    train = genre_examples("train", per_genre=args.per_genre, seed=args.seed) if training else None
    return train, genre_examples(split, per_genre=args.eval_per_genre)


def _finetune_classify(args, model, tokenizer):
    from maskwise.tasks.classify import ClassifyConfig, evaluate_classifier, settings_of, train_classifier

    cfg = _finetune_settings(args, ClassifyConfig)
    train, test = _classify_data(args, "test", training=True)
    classifier = train_classifier(model, tokenizer, train, cfg)
    train_labels = [e.label for e in train]
    results = evaluate_classifier(classifier, tokenizer, test, train_labels, **settings_of(cfg))
    task = {"labels": classifier.labels, "pooling": classifier.pooling, "freeze": cfg.freeze,
            "train_labels": train_labels}
    return task, results, classifier.body, classifier.head


def _retrieval_data(split: str, args, max_queries: int | None):
    from maskwise.data.tasks import ict_retrieval, retrieval_from_file

    if args.data is not None:
        return retrieval_from_file(args.data)
    return ict_retrieval(split, max_queries=max_queries)


def _user_retrieval(args):
    """(train, eval) retrieval sets from --data / --eval-data; held-out queries search the whole
    collection (their passages must be in it)."""
    from maskwise.data.tasks import RetrievalSet, hold_out, retrieval_from_file

    data = retrieval_from_file(args.data)
    if args.eval_data is not None:
        return data, retrieval_from_file(args.eval_data)
    train_rows, eval_rows = hold_out(range(len(data.queries)))

    def subset(rows):
        return RetrievalSet(tuple(data.queries[i] for i in rows), data.docs, tuple(data.relevant[i] for i in rows))

    return subset(train_rows), subset(eval_rows)


def _finetune_embed(args, model, tokenizer):
    from maskwise.data.tasks import ict_retrieval
    from maskwise.tasks.embed import EmbedConfig, Embedder, train_bi_encoder
    from maskwise.tasks.retrieve import evaluate_retrieval

    cfg = _finetune_settings(args, EmbedConfig)
    if args.data is not None:
        train, test = _user_retrieval(args)
    else:
        train = ict_retrieval("train", max_queries=args.train_queries, seed=args.seed)
        test = ict_retrieval("test", max_queries=args.max_queries)
    pairs = train.pairs()
    bi_encoder = train_bi_encoder(model, tokenizer, pairs, cfg)
    embedder = Embedder(bi_encoder, tokenizer, max_len=cfg.max_len, progress=args.progress)
    results = evaluate_retrieval(embedder, test, name=f"fine-tuned bi-encoder ({bi_encoder.pooling} pooling)")
    results["train_pairs"] = len(pairs)
    task = {"pooling": bi_encoder.pooling, "normalize": True, "max_len": cfg.max_len,
            "temperature": cfg.temperature}
    return task, results, bi_encoder.body, None


def _embedder_of(path: str, args, progress: bool, pooling: str | None = None):
    """An ``Embedder`` for a run: an embed fine-tune's own pooling, else ``pooling``/the default."""
    from maskwise.tasks.embed import BiEncoder, Embedder

    model, tokenizer, config = _open(path, args)
    task = config.get("task", {})
    if task.get("kind") == "embed" and pooling is None:
        return Embedder(BiEncoder(model, task["pooling"], task["normalize"]), tokenizer,
                        max_len=task.get("max_len"), progress=progress), f"{path} ({task['pooling']} pooling)"
    bi = BiEncoder(model, pooling)
    return Embedder(bi, tokenizer, progress=progress), f"{path} ({bi.pooling} pooling, zero-shot)"


def _finetune_rerank(args, model, tokenizer):
    from maskwise.tasks.rerank import (RerankConfig, cross_encoder_scorer, evaluate_reranker, generative_scorer,
                                       train_cross_encoder, train_generative_reranker, training_negatives)
    from maskwise.tasks.retrieve import rank

    cfg = _finetune_settings(args, RerankConfig)
    kind = args.reranker or ("cross" if model.cfg.family == "encoder" else "generative")
    first_stage_path = args.first_stage or args.model
    embedder, first_stage = _embedder_of(first_stage_path, args, args.progress)
    if args.data is not None:
        train, test = _user_retrieval(args)
    else:
        from maskwise.data.tasks import ict_retrieval

        train = ict_retrieval("train", max_queries=args.train_queries, seed=args.seed)
        test = ict_retrieval("test", max_queries=args.rerank_queries)
    negatives = training_negatives(train, cfg.n_negatives, args.negatives, embedder, args.seed)
    if kind == "cross":
        reranker = train_cross_encoder(model, tokenizer, train, negatives, cfg)
        score, trained, head = cross_encoder_scorer(reranker, tokenizer, cfg.max_len), reranker.body, reranker.head
    else:
        trained = train_generative_reranker(model, tokenizer, train, negatives, cfg)
        score, head = generative_scorer(trained, tokenizer, cfg.max_len), None
    candidates, _ = rank(embedder, test, k=args.candidates)
    results = evaluate_reranker(score, test, candidates, f"{kind} reranker", args.progress)
    results["first_stage"] = first_stage
    task = {"reranker": kind, "first_stage": str(first_stage_path), "negatives": args.negatives, "max_len": cfg.max_len}
    return task, results, trained, head


def _speaker_data(args, split: str, model, training: bool):
    """(training examples, or None when only evaluating; evaluation examples)."""
    from maskwise.data.tasks import seq2seq_from_file, speaker_examples

    if args.data is not None:
        if training:
            return _user_rows(args, seq2seq_from_file)
        return None, seq2seq_from_file(args.data)
    max_chars = args.max_chars or _default_max_chars(model)
    options = dict(max_chars=max_chars, hide_speakers=args.hide_speakers)
    train = speaker_examples("train", seed=args.seed, **options) if training else None
    return train, speaker_examples(split, limit=args.eval_limit, **options)


def _default_max_chars(model) -> int:
    """Sources that fit the context whatever the tokenizer: a character per token at worst, less the
    target's room for a decoder, which reads source and target in one sequence."""
    room = model.cfg.max_seq_len if model.cfg.family == "encoder-decoder" else model.cfg.max_seq_len - 66
    return max(32, room)


def _finetune_seq2seq(args, model, tokenizer):
    from maskwise.data.tasks import rename_speakers
    from maskwise.errors import UserError
    from maskwise.tasks.generate import GenerationConfig
    from maskwise.tasks.seq2seq import Seq2SeqConfig, evaluate_seq2seq, train_seq2seq

    cfg = _finetune_settings(args, Seq2SeqConfig)
    if args.rename_speakers and args.data is not None:
        raise UserError("--rename-speakers renames the plays' speakers: it needs the embedded passages, not --data")
    train, test = _speaker_data(args, "test", model, training=True)
    trained = train_seq2seq(model, tokenizer, train, cfg, augment=rename_speakers, augment_prob=args.rename_speakers)
    gen = GenerationConfig(max_new_tokens=cfg.max_target_len + 1, num_beams=args.num_beams)
    results = evaluate_seq2seq(trained, tokenizer, test, gen, cfg.max_target_len, args.progress,
                               hide_speakers=args.hide_speakers, train_examples=len(train))
    task = {"max_target_len": cfg.max_target_len, "hide_speakers": args.hide_speakers,
            "rename_speakers": args.rename_speakers}
    return task, results, trained, None


# ---- evaluate ----------------------------------------------------------------------------------


def run_evaluate(args) -> int:
    from maskwise.errors import UserError

    model, tokenizer, config = _open(args.model, args)
    saved = config.get("task", {})
    task = args.task or {"classify": "classify", "embed": "retrieve", "rerank": "rerank",
                         "seq2seq": "seq2seq"}.get(saved.get("kind"))
    if task is None:
        raise UserError(f"{args.model} was not fine-tuned for a task: say which with --task")
    if task == "classify":
        results = _evaluate_classify(args, model, tokenizer, saved)
    elif task == "retrieve":
        from maskwise.tasks.retrieve import evaluate_retrieval

        embedder, name = _embedder_of(args.model, args, args.progress, args.pooling)
        results = evaluate_retrieval(embedder, _retrieval_data(args.split, args, args.max_queries), name=name)
    elif task == "rerank":
        results = _evaluate_rerank(args, model, tokenizer, saved)
    else:
        from maskwise.tasks.generate import GenerationConfig
        from maskwise.tasks.seq2seq import evaluate_seq2seq

        max_target_len = saved.get("max_target_len", 64)
        _, test = _speaker_data(args, args.split, model, training=False)
        results = evaluate_seq2seq(model, tokenizer, test, GenerationConfig(max_new_tokens=max_target_len + 1,
                                                                           num_beams=args.num_beams),
                                   max_target_len, args.progress, hide_speakers=args.hide_speakers)
    results = {"model": str(args.model), "split": args.split if args.data is None else args.data, **results}
    path = Path(args.results) if args.results else Path(args.model).expanduser() / f"results-{task}-{args.split}.json"
    _write_results(results, path)
    print(summarize(results))
    print(f"results: {path}")
    return 0


def _evaluate_classify(args, model, tokenizer, saved: dict) -> dict:
    from maskwise.errors import UserError
    from maskwise.tasks.classify import (SequenceClassifier, classification_results, evaluate_classifier,
                                         zero_shot_classify)

    _, test = _classify_data(args, args.split, training=False)
    if saved.get("kind") == "classify":
        classifier = SequenceClassifier(model, saved["labels"], saved["pooling"], saved["freeze"])
        _load_head(args.model, classifier.head, "classifier")
        return evaluate_classifier(classifier, tokenizer, test, saved["train_labels"])
    if model.cfg.family == "encoder":
        raise UserError("an encoder classifies through a trained head: run `maskwise finetune classify` first "
                        "(zero-shot prompting needs a decoder or encoder-decoder)")
    gold = [e.label for e in test]
    predicted = zero_shot_classify(model, tokenizer, [e.text for e in test], sorted(set(gold)))
    # No training set: the baseline predicts the evaluation set's own majority label (a stricter bar).
    return classification_results(predicted, gold, gold, mode="zero-shot", family=model.cfg.family)


def _evaluate_rerank(args, model, tokenizer, saved: dict) -> dict:
    from maskwise.errors import UserError
    from maskwise.tasks.rerank import CrossEncoder, cross_encoder_scorer, evaluate_reranker, generative_scorer
    from maskwise.tasks.retrieve import rank

    kind = saved.get("reranker") if saved.get("kind") == "rerank" else None
    if kind is None and model.cfg.family == "encoder":
        raise UserError("an encoder reranks through a trained head: run `maskwise finetune rerank` first")
    if kind == "cross":
        reranker = CrossEncoder(model)
        _load_head(args.model, reranker.head, "cross-encoder")
        score = cross_encoder_scorer(reranker, tokenizer, saved.get("max_len"))
    else:
        score = generative_scorer(model, tokenizer, saved.get("max_len"))
        kind = kind or "generative (zero-shot)"
    first_stage = args.first_stage or saved.get("first_stage") or args.model
    embedder, name = _embedder_of(first_stage, args, args.progress)
    test = _retrieval_data(args.split, args, args.rerank_queries)
    candidates, _ = rank(embedder, test, k=args.candidates)
    results = evaluate_reranker(score, test, candidates, f"{kind} reranker", args.progress)
    results["first_stage"] = name
    return results


# ---- search, generate, fill-mask, break --------------------------------------------------------


def run_search(args) -> int:
    from maskwise.data.tasks import collection_from_file, ict_retrieval
    from maskwise.errors import UserError
    from maskwise.tasks.retrieve import search

    if not args.query.strip():
        raise UserError("--query is empty")
    embedder, name = _embedder_of(args.model, args, args.progress, args.pooling)
    docs = collection_from_file(args.collection) if args.collection else ict_retrieval(args.split).docs
    scores, indices = search(embedder([args.query]), embedder(list(docs)), args.k)
    print(f"{len(docs)} passages, embedder {name}")
    for rank, (score, index) in enumerate(zip(scores[0].tolist(), indices[0].tolist()), start=1):
        first_line = docs[index].split("\n", 1)[0]
        print(f"{rank:>3}. {score:.4f}  #{index}  {first_line[:100]}")
    return 0


def _generation_config(args, max_new_tokens: int, **extra):
    from maskwise.tasks.generate import GenerationConfig

    return GenerationConfig(max_new_tokens=max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                            top_p=args.top_p, repetition_penalty=args.repetition_penalty, **extra).validate()


def run_generate(args) -> int:
    import torch

    from maskwise.tasks import device_of
    from maskwise.tasks.generate import check_generative, generate_text

    model, tokenizer, _ = _open(args.model, args)
    check_generative(model)
    cfg = _generation_config(args, args.max_new_tokens, num_beams=args.num_beams, use_cache=args.use_cache)
    generator = torch.Generator(device=device_of(model)).manual_seed(args.seed)
    texts = generate_text(model, tokenizer, args.prompt, cfg, generator, args.stop)
    for prompt, text in zip(args.prompt, texts):
        if model.cfg.family == "decoder":
            print(prompt + text)
        else:
            print(text)
        if len(texts) > 1:
            print("-" * 40)
    return 0


def run_fill_mask(args) -> int:
    from maskwise.tasks.fill_mask import fill_mask

    model, tokenizer, _ = _open(args.model, args)
    for i, candidates in enumerate(fill_mask(model, tokenizer, args.text, args.top_k), start=1):
        shown = ", ".join(f"{token!r} {prob:.3f}" for token, prob in candidates)
        print(f"[MASK] {i}: {shown}")
    return 0


def run_break(args) -> int:
    from maskwise.data.corpus import render_play, split_plays
    from maskwise.errors import UserError
    from maskwise.tasks.fill_mask import break_exercise

    if args.held_out_chars < 10:
        raise UserError(f"--held-out-chars must be at least 10, got {args.held_out_chars}")
    encoder, enc_tok, _ = _open(args.encoder, args)
    decoder, dec_tok, _ = _open(args.decoder, args)
    if encoder.cfg.family != "encoder":
        raise UserError(f"{args.encoder} is a {encoder.cfg.family}, not an encoder")
    if decoder.cfg.family != "decoder":
        raise UserError(f"{args.decoder} is a {decoder.cfg.family}, not a decoder")
    play = split_plays()["test"][0]  # test plays are never pretrained on
    text = render_play(play)
    held_out = text[len(play.title):].lstrip()[:args.held_out_chars]
    prompt = args.prompt if args.prompt is not None else held_out.split("\n\n", 1)[0] + "\n\n"
    cfg = _generation_config(args, args.max_new_tokens)
    results = break_exercise(encoder, enc_tok, decoder, dec_tok, prompt, held_out, args.max_new_tokens, cfg,
                             args.seed)
    results["held_out_from"] = play.slug
    if args.results:
        _write_results(results, Path(args.results))
    print(summarize(results))
    if not args.results:
        print(json.dumps(results, indent=2), file=sys.stdout)
    return 0
