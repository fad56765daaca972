"""``maskwise evaluate``: score a (fine-tuned) run or HF model on a task, results to JSON."""

from __future__ import annotations

from pathlib import Path

from maskwise.cli.runtime import in_runtime
from maskwise.cli.summary import summarize
from maskwise.cli.task_flags import (
    add_common_flags,
    add_task_flags,
    config_from_flags,
    rerank_config,
)
from maskwise.cli.task_inputs import (
    beir_data,
    classify_data,
    embedder_of,
    is_beir_folder,
    open_model,
    retrieval_data,
    task_rows,
)
from maskwise.errors import UserError
from maskwise.interop.folders import FineTune, fine_tune_of
from maskwise.runs import load_weights_into, write_json
from maskwise.tasks.classify import (
    ClassifyConfig,
    SequenceClassifier,
    classification_results,
    evaluate_classifier,
    zero_shot_classify,
)
from maskwise.tasks.embed import EmbedConfig
from maskwise.tasks.generate import GenerationConfig
from maskwise.tasks.rerank import (
    CrossEncoder,
    cross_encoder_scorer,
    evaluate_reranker,
    generative_scorer,
)
from maskwise.tasks.retrieve import evaluate_graded_retrieval, evaluate_retrieval, rank
from maskwise.tasks.seq2seq import Seq2SeqConfig, evaluate_seq2seq
from maskwise.tasks.tag import TagConfig, TokenTagger, evaluate_tagger, tag_counts

EVAL_TASKS = ("classify", "retrieve", "rerank", "seq2seq", "tag")
PLAY_SPLITS = ("val", "test")  # the plays' held-out splits (train is what fine-tuning reads)


def register(subparsers) -> None:
    evaluate = subparsers.add_parser("evaluate", help="evaluate a (fine-tuned) run on a task")
    evaluate.add_argument("model", help="run folder or HF model folder")
    evaluate.add_argument("--task", choices=EVAL_TASKS, default=None,
                          help="default: the task the run was fine-tuned for")
    evaluate.add_argument("--split", default="test",
                          help="the plays' val or test split; with a BEIR folder, its qrels/<split>.tsv (dev, test...)")
    evaluate.add_argument("--data", default=None,
                          help="your own .jsonl/.csv/.tsv evaluation rows instead of the plays, or (--task retrieve) "
                               "a BEIR/MTEB folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv")
    evaluate.add_argument("--results", default=None, help="write the JSON results here")
    for task in EVAL_TASKS:
        add_task_flags(evaluate, task, evaluating=True)
    add_common_flags(evaluate)
    evaluate.set_defaults(handler=in_runtime(run_evaluate))


def run_evaluate(args) -> int:
    beir = is_beir_folder(args.data)
    if not beir and args.split not in PLAY_SPLITS:
        raise UserError(f"--split {args.split}: the plays and task files have {' and '.join(PLAY_SPLITS)}; "
                        f"other splits name a BEIR folder's qrels (--data FOLDER)")
    if args.ignore_identical_ids and not beir:
        raise UserError("--ignore-identical-ids compares a BEIR folder's query and document ids: it needs --data FOLDER")
    model, tokenizer, _ = open_model(args.model, args)
    fine_tune = fine_tune_of(args.model)
    saved = fine_tune.task
    task = args.task or {"classify": "classify", "embed": "retrieve", "rerank": "rerank",
                         "seq2seq": "seq2seq", "tag": "tag"}.get(saved.get("kind"))
    if task is None:
        raise UserError(f"{args.model} was not fine-tuned for a task: say which with --task")
    if task == "classify":
        results = _evaluate_classify(args, model, tokenizer, fine_tune)
    elif task == "retrieve" and beir:
        test = beir_data(args, args.split)
        embedder, name = embedder_of(args.model, args, args.progress, args.pooling)
        results = evaluate_graded_retrieval(embedder, test, name=name,
                                            ignore_identical_ids=bool(args.ignore_identical_ids))
    elif task == "retrieve":
        embedder, name = embedder_of(args.model, args, args.progress, args.pooling)
        test = retrieval_data(args, config_from_flags(EmbedConfig, args), args.split)
        results = evaluate_retrieval(embedder, test, name=name)
    elif task == "rerank":
        results = _evaluate_rerank(args, model, tokenizer, fine_tune)
    elif task == "tag":
        results = _evaluate_tag(args, model, tokenizer, fine_tune)
    else:
        # the fine-tune's own target room and passages, unless a flag says otherwise
        own = {k: saved[k] for k in ("max_target_len", "hide_speakers", "mid_speech", "source_edges")
               if k in saved and getattr(args, k, None) is None}
        cfg = config_from_flags(Seq2SeqConfig, args, **own)
        _, test = task_rows(args, cfg, model, args.split, training=False)
        generation = GenerationConfig(max_new_tokens=cfg.max_target_len + 1, num_beams=cfg.num_beams)
        plays = {"hide_speakers": cfg.hide_speakers, "mid_speech": cfg.mid_speech} if args.data is None else {}
        results = evaluate_seq2seq(model, tokenizer, test, generation, cfg.max_target_len, args.progress,
                                   cfg.source_edges, **plays)
    where = {"data": str(args.data), "split": args.split} if beir else {
        "split": args.split if args.data is None else args.data}
    results = {"model": str(args.model), **where, **results}
    name = f"{task}-{Path(args.data).name}-{args.split}" if beir else f"{task}-{args.split}"  # one file per benchmark
    path = Path(args.results) if args.results else Path(args.model).expanduser() / f"results-{name}.json"
    write_json(path, results)
    print(summarize(results))
    print(f"results: {path}")
    return 0


def _evaluate_classify(args, model, tokenizer, fine_tune: FineTune) -> dict:
    saved = fine_tune.task
    trained_on = {"plays_task": saved["plays_task"]} if args.plays_task is None and "plays_task" in saved else {}
    _, test = classify_data(args, config_from_flags(ClassifyConfig, args, **trained_on), args.split, training=False)
    if saved.get("kind") == "classify":
        classifier = SequenceClassifier.from_fine_tune(model, saved, fine_tune.head, args.model)
        if not {e.label for e in test} & set(classifier.labels):
            raise UserError(f"the evaluation rows' labels ({', '.join(sorted({e.label for e in test}))}) are none of "
                            f"the classifier's ({', '.join(classifier.labels)})")
        # An HF-fine-tuned folder records no training labels: the baseline is the test set's majority (stricter).
        return evaluate_classifier(classifier, tokenizer, test, saved.get("train_labels") or [e.label for e in test])
    if model.cfg.kind.encoder_only:
        raise UserError("an encoder classifies through a trained head: run `maskwise finetune classify` first "
                        "(zero-shot prompting needs a decoder or encoder-decoder)")
    gold = [e.label for e in test]
    predicted = zero_shot_classify(model, tokenizer, [e.text for e in test], sorted(set(gold)))
    # No training set: the baseline predicts the evaluation set's own majority label (a stricter bar).
    return classification_results(predicted, gold, gold, mode="zero-shot", family=model.cfg.family)


def _evaluate_tag(args, model, tokenizer, fine_tune: FineTune) -> dict:
    saved = fine_tune.task
    if saved.get("kind") != "tag":
        raise UserError(f"{args.model} has no tagging head: run `maskwise finetune tag` first")
    _, test = task_rows(args, config_from_flags(TagConfig, args), model, args.split, training=False)
    tagger = TokenTagger.from_fine_tune(model, saved, fine_tune.head, args.model)
    # An HF-fine-tuned folder records no training counts: the baselines are drawn from the test set's.
    return evaluate_tagger(tagger, tokenizer, test, saved.get("train_counts") or tag_counts(test))


def _evaluate_rerank(args, model, tokenizer, fine_tune: FineTune) -> dict:
    saved = fine_tune.task
    kind = saved.get("reranker") if saved.get("kind") == "rerank" else None
    if kind is None and model.cfg.kind.encoder_only:
        raise UserError("an encoder reranks through a trained head: run `maskwise finetune rerank` first")
    if kind == "cross":
        reranker = CrossEncoder(model)
        load_weights_into(reranker.head, fine_tune.head or {}, f"cross-encoder head of {args.model}")
        score = cross_encoder_scorer(reranker, tokenizer, saved.get("max_len"))
    else:
        score = generative_scorer(model, tokenizer, saved.get("max_len"))
        kind = kind or "generative (zero-shot)"
    first_stage = args.first_stage or saved.get("first_stage") or args.model
    embedder, name = embedder_of(first_stage, args, args.progress)
    cfg = rerank_config(args)
    test = retrieval_data(args, cfg, args.split)
    candidates, _ = rank(embedder, test, k=cfg.candidates)
    results = evaluate_reranker(score, test, candidates, f"{kind} reranker", args.progress)
    results["first_stage"] = name
    return results
