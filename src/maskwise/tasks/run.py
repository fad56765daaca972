"""``run_task``: fine-tune a model on one task, evaluate it, return a record. One way for the CLI,
``compare``, every ablation and the benchmarks.

The task is the type of its config (``ClassifyConfig``, ``EmbedConfig``, ``RerankConfig``,
``Seq2SeqConfig``, ``TagConfig``): each holds its fine-tuning settings and, for a run given no rows of
its own, which slice of the plays it trains and is tested on (``plays_rows``). Adding a task is its
config, one function here and one entry of ``TASKS``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from maskwise.data.beir import GradedRetrievalSet
from maskwise.data.tagging import punctuation_examples
from maskwise.data.tasks import (
    ict_retrieval,
    rename_speakers,
    speaker_examples,
)
from maskwise.errors import UserError
from maskwise.runtime import Runtime
from maskwise.tasks.classify import (
    PLAYS_TASKS,
    ClassifyConfig,
    evaluate_classifier,
    settings_of,
    train_classifier,
)
from maskwise.tasks.embed import EmbedConfig, Embedder, train_bi_encoder
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.generate import GenerationConfig
from maskwise.tasks.rerank import (
    RerankConfig,
    cross_encoder_scorer,
    default_reranker,
    evaluate_reranker,
    generative_scorer,
    hard_negatives,
    train_cross_encoder,
    train_generative_reranker,
)
from maskwise.tasks.retrieve import (
    bm25_ranking,
    evaluate_graded_retrieval,
    evaluate_retrieval,
)
from maskwise.tasks.seq2seq import (
    Seq2SeqConfig,
    evaluate_seq2seq,
    lead_words,
    train_seq2seq,
)
from maskwise.tasks.tag import TagConfig, evaluate_tagger, tag_counts, train_tagger


@dataclass
class TaskResult:
    record: dict  # the evaluation, plus finetune_s
    model: nn.Module  # what fine-tuning produced (classifier, bi-encoder, reranker, tagger, or the model itself)
    test: Any  # the rows it was evaluated on


# ---- the plays' rows of each task -----------------------------------------------------------------


def tag_window_chars(cfg: TagConfig, model: nn.Module) -> int:
    """The config's window, else what fits the context: a character a token at worst, and [CLS]."""
    return cfg.window_chars or max(20, model.cfg.max_seq_len - 1)


def source_chars(cfg: Seq2SeqConfig, model: nn.Module) -> int:
    """The config's longest source, else one that fits whatever the tokenizer: a character per token at
    worst, less the target's room for a decoder, which reads source and target in one sequence."""
    if cfg.max_chars is not None:
        return cfg.max_chars
    room = model.cfg.max_seq_len if model.cfg.kind.two_stacks else model.cfg.max_seq_len - (cfg.max_target_len + 2)
    return max(32, room)


def plays_rows(cfg: FinetuneConfig, model: nn.Module, split: str = "test", training: bool = True):
    """(training rows, or None when not ``training``; the ``split`` rows to evaluate on) of the plays
    for the task ``cfg`` configures: its slice, drawn with ``cfg.data_seed`` and ``cfg.test_seed``."""
    if isinstance(cfg, ClassifyConfig):
        examples = PLAYS_TASKS[cfg.plays_task]
        train = examples("train", cfg.train_per_label, seed=cfg.data_seed) if training else None
        return train, examples(split, cfg.test_per_label, seed=cfg.test_seed)
    if isinstance(cfg, EmbedConfig):
        train = None
        if training:  # a random subset of every train speech's pair
            pairs = ict_retrieval("train", seed=cfg.data_seed).pairs()
            count = len(pairs) if cfg.train_pairs is None else min(cfg.train_pairs, len(pairs))
            train = random.Random(cfg.data_seed).sample(pairs, count)
        return train, ict_retrieval(split, max_queries=cfg.test_queries, max_docs=cfg.test_docs, seed=cfg.test_seed)
    if isinstance(cfg, RerankConfig):
        train = ict_retrieval("train", max_queries=cfg.train_queries, seed=cfg.data_seed) if training else None
        return train, ict_retrieval(split, max_queries=cfg.test_queries, seed=cfg.test_seed)
    if isinstance(cfg, Seq2SeqConfig):
        options = {"max_chars": source_chars(cfg, model), "hide_speakers": cfg.hide_speakers,
                   "mid_speech": cfg.mid_speech}
        train = (speaker_examples("train", limit=cfg.train_passages, seed=cfg.data_seed, **options)
                 if training else None)
        return train, speaker_examples(split, limit=cfg.test_passages, seed=cfg.test_seed, **options)
    if isinstance(cfg, TagConfig):
        chars = tag_window_chars(cfg, model)
        train = punctuation_examples("train", chars, limit=cfg.train_windows, seed=cfg.data_seed) if training else None
        return train, punctuation_examples(split, chars, limit=cfg.test_windows, seed=cfg.test_seed)
    raise UserError(f"no task is configured by {type(cfg).__name__}")


# ---- fine-tune, then a function that evaluates ------------------------------------------------------


def _classify(model, tokenizer, cfg: ClassifyConfig, runtime: Runtime, data, label: str):
    train, test = data or plays_rows(cfg, model)
    classifier = train_classifier(model, tokenizer, train, cfg, runtime=runtime)
    return classifier, lambda: evaluate_classifier(classifier, tokenizer, test, [e.label for e in train],
                                                   **settings_of(cfg)), test


def _embed(model, tokenizer, cfg: EmbedConfig, runtime: Runtime, data, label: str):
    pairs, test = data or plays_rows(cfg, model)
    encoder = train_bi_encoder(model, tokenizer, pairs, cfg, runtime)
    embedder = Embedder(encoder, tokenizer, max_len=cfg.max_len, progress=cfg.progress)

    def evaluate() -> dict:
        name = f"{label} ({encoder.pooling} pooling)"
        if isinstance(test, GradedRetrievalSet):  # a BEIR folder's graded judgements
            record = evaluate_graded_retrieval(embedder, test, name=name, ignore_identical_ids=cfg.ignore_identical_ids)
        else:
            record = evaluate_retrieval(embedder, test, name=name)
        return {**record, "pooling": encoder.pooling, "train_pairs": len(pairs), "max_len": cfg.max_len,
                "temperature": cfg.temperature}

    return encoder, evaluate, test


def _seq2seq(model, tokenizer, cfg: Seq2SeqConfig, runtime: Runtime, data, label: str):
    train, test = data or plays_rows(cfg, model)
    train_seq2seq(model, tokenizer, train, cfg, augment=rename_speakers, augment_prob=cfg.rename_speakers,
                  runtime=runtime)
    generation = GenerationConfig(max_new_tokens=cfg.max_target_len + 1, num_beams=cfg.num_beams)  # target, [EOS]
    lead = None if data is None else lead_words(train)  # a user's rows: the lead baseline, not the first speaker
    return model, lambda: evaluate_seq2seq(model, tokenizer, test, generation, max_target_len=cfg.max_target_len,
                                           progress=cfg.progress, source_edges=cfg.source_edges, lead=lead,
                                           train_examples=len(train)), test


def _rerank(model, tokenizer, cfg: RerankConfig, runtime: Runtime, data, label: str):
    if data is not None:
        train, negatives, test, candidates = data
    else:  # the plays' ICT queries with BM25 as the first stage, and its near misses as negatives
        train, test = plays_rows(cfg, model)
        negatives = hard_negatives(bm25_ranking(train, cfg.n_negatives + 1), train.relevant, cfg.n_negatives)
        candidates = bm25_ranking(test, cfg.candidates)
    kind = cfg.reranker or default_reranker(model.cfg.family)
    if kind == "cross":
        trained = train_cross_encoder(model, tokenizer, train, negatives, cfg, runtime)
        score = cross_encoder_scorer(trained, tokenizer, cfg.max_len, cfg.score_batch)
    else:
        trained = train_generative_reranker(model, tokenizer, train, negatives, cfg, runtime)
        score = generative_scorer(trained, tokenizer, cfg.max_len, cfg.score_batch)
    return trained, lambda: {**evaluate_reranker(score, test, candidates, label, cfg.progress, cfg.seed),
                             "kind": kind, "max_len": cfg.max_len}, (test, candidates)


def _tag(model, tokenizer, cfg: TagConfig, runtime: Runtime, data, label: str):
    train, test = data or plays_rows(cfg, model)
    tagger = train_tagger(model, tokenizer, train, cfg, runtime=runtime)
    counts = tag_counts(train)
    return tagger, lambda: {**evaluate_tagger(tagger, tokenizer, test, counts, cfg.max_len),
                            "train_counts": counts}, test


# The tasks by name (the CLI's ``finetune <task>``, a recipe's ``tasks``), and what runs each config type:
# (model, tokenizer, config, runtime, the caller's rows or None, label) -> (trained, evaluate, test).
CONFIGS: dict[str, type[FinetuneConfig]] = {"classify": ClassifyConfig, "embed": EmbedConfig, "rerank": RerankConfig,
                                            "seq2seq": Seq2SeqConfig, "tag": TagConfig}
TASKS: dict[type, Callable] = {ClassifyConfig: _classify, EmbedConfig: _embed, RerankConfig: _rerank,
                               Seq2SeqConfig: _seq2seq, TagConfig: _tag}


def run_task(cfg: FinetuneConfig, model: nn.Module, tokenizer, runtime: Runtime, data: Sequence | None = None,
             label: str = "model") -> TaskResult:
    """Fine-tune ``model`` (moved to ``runtime``'s device, trained under its precision) on the task
    ``cfg`` configures and evaluate it. ``data``: the caller's rows instead of the plays' (classify:
    ``LabelledText`` lists ``(train, test)``; embed: query/passage pairs and a ``RetrievalSet``;
    seq2seq: ``Seq2SeqExample`` lists; tag: ``TaggedText`` lists; rerank: ``(train set, its negatives,
    test set, its first-stage candidates)``); ``label`` names the model in the record."""
    if type(cfg) not in TASKS:
        raise UserError(f"no task is configured by {type(cfg).__name__}; known: "
                        f"{', '.join(t.__name__ for t in TASKS)}")
    cfg.validate()  # before any rows are drawn from its settings
    model.to(runtime.torch_device)
    started = time.perf_counter()
    trained, evaluate, test = TASKS[type(cfg)](model, tokenizer, cfg, runtime, data, label)
    seconds = time.perf_counter() - started
    with runtime.inference().autocast():  # as `maskwise evaluate` will score the saved model
        record = evaluate()
    return TaskResult({**record, "finetune_s": seconds}, trained, test)
