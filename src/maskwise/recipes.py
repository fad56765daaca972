"""Recipes: one way to do each experiment step, for ``compare``, every ablation, the benchmarks and the CLI.

* the named scales: ``CompareSettings`` (``compare``'s ``default``, ``QUICK``, ``GPU``, and the
  tests' ``SMOKE``: the block, the task slices, the fine-tuning) and ``Scale`` (an ablation's: a
  token budget per arm on one of those recipes); each turns into flat pretraining settings through
  ``pretrain_settings`` and into ``TaskSettings`` through its ``task`` method;
* ``run_task``: fine-tune a model on one task, evaluate it, and return a ``TaskResult`` (the
  record, the trained model or head to save, and the test rows). The task's data is the plays'
  slice the settings choose, or the caller's own rows.

Adding a task is one function and one line of ``TASKS``; a default lives in one place here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from maskwise.families import family_of
from maskwise.runtime import Runtime

# ---- the named scales --------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSettings:
    """One fine-tuning run and which slice of the plays it trains and is tested on."""

    steps: int
    train_examples: int  # classify: windows per genre; retrieve: query/passage pairs; extract: passages
    test_examples: int  # classify: windows per genre; retrieve: queries; extract: passages
    batch_size: int = 32
    lr: float = 1e-3
    head_lr: float = 1e-3  # classify: the fresh head's
    pooling: str | None = None  # classify, retrieve; None = the family's default
    freeze: bool = False  # classify: a linear probe (only the head trains)
    max_len: int | None = None  # classify, retrieve: tokens read per text; None = the task's own default
    max_chars: int = 600  # extract: passage characters; tag: window characters
    max_target_len: int = 32  # extract: target tokens
    data_seed: int = 0  # which windows, pairs and passages
    sample_pairs: bool = False  # retrieve: draw the pairs among every train speech, not among capped queries
    test_docs: int | None = None  # retrieve: collection size (None: every eligible speech of the test plays)
    rename_speakers: float = 0.0  # extract: fraction of training passages drawn with the cast renamed
    temperature: float | None = None  # retrieve: InfoNCE temperature; None = EmbedConfig's own
    ignore_identical_ids: bool = False  # retrieve on a BEIR set: never return the query's own id
    num_beams: int = 1  # extract: beam width of the evaluation's decoding
    reranker: str | None = None  # rerank: "cross" or "generative"; None = cross for an encoder, else generative
    candidates: int = 100  # rerank: first-stage candidates per test query
    negatives: int = 7  # rerank: training negatives per query
    seed: int = 0
    progress: bool = False


@dataclass(frozen=True)
class CompareSettings:
    """``compare``'s scale: three families at one wall-clock budget, then every task each can do."""

    name: str = "default"
    seconds: float = 120.0  # pretraining wall-clock per family
    # Llama's block for every family: with rotary positions a character MLM encoder leaves its
    # unigram plateau in about a hundred steps, with learned ones in minutes (docs/results.md).
    preset: str = "modern"
    d_model: int = 128
    heads: int = 4
    layers: int = 4  # the encoder-decoder splits them, layers // 2 + layers // 2
    block_size: int = 256
    batch_size: int = 16
    tokenizer: str = "char"
    vocab_size: int = 4096  # for tokenizer = "bpe" or "wordpiece"
    lr: float = 2e-3
    warmup: int = 30
    encoder_objective: str = "mlm"
    decoder_objective: str = "clm"
    # BART's denoising rather than T5's span corruption: reconstructing its whole input teaches the
    # encoder-decoder to copy from the source, which passage -> speakers needs (docs/results.md).
    encoder_decoder_objective: str = "denoise"
    min_steps: int = 200  # fewer optimizer steps than this in any family: the report opens with a warning
    classify_steps: int = 100
    retrieve_steps: int = 100
    extract_steps: int = 150
    genre_per_class: int = 250  # training windows per genre; the train plays hold at least 527
    # Test windows per genre (the test plays hold at least 239): 1,200 in all, accuracy to about ±0.023.
    genre_test_per_class: int = 200
    retrieval_pairs: int = 3000
    retrieval_queries: int = 500  # one per speech of the collection below: all of them
    # The collection: 500 of the test plays' ~2,000 speeches; in all of them one relevant speech is a
    # needle a minutes-old model does not find.
    retrieval_docs: int | None = 500
    extraction_train: int = 2000
    extraction_test: int = 200
    extraction_chars: int = 180  # passage characters: with the target, they fit a decoder's context whole
    extraction_target: int = 64  # target tokens (characters): room for five or six names
    rename_speakers: float = 0.5  # fraction of fine-tuning passages with the cast renamed (copy, not recall)
    tag_steps: int = 150
    tag_train_windows: int = 4000
    tag_test_windows: int = 1000  # from the six test plays, about 21,000 words
    tag_window_chars: int = 200  # whole words, within a 256-character context with room for [CLS]
    rerank_steps: int = 100  # the reranker ablation (compare has no reranking row)
    rerank_train_queries: int = 1000
    # Each over its BM25 top 100: the reranker ablation reads 60 x 100 pairs three ways per seed,
    # what fits its 30 minutes on 2 CPU cores.
    rerank_test_queries: int = 60
    held_out_chars: int = 1500
    held_out_blocks: int = 30  # pieces of the held-out text an interval resamples
    fill_positions: int = 300
    ttft_repeats: int = 30  # time to first token: timed prompts per family

    def model(self) -> dict:
        return {"preset": self.preset, "tokenizer": self.tokenizer, "vocab_size": self.vocab_size,
                "d_model": self.d_model, "heads": self.heads, "layers": self.layers, "block_size": self.block_size,
                "batch_size": self.batch_size, "lr": self.lr}

    def schedule(self, values: dict, budget: str) -> dict:
        return {"steps": 100_000, "warmup": self.warmup, "budget": budget or f"seconds={self.seconds}",
                "eval_every": 50, "eval_batches": 8}

    def objective(self, family: str) -> str:
        return {"encoder": self.encoder_objective, "decoder": self.decoder_objective,
                "encoder-decoder": self.encoder_decoder_objective}[family]

    def family_arm(self, family: str, data: str) -> dict:
        """A family with this scale's objective for it, on ``data``."""
        return {"family": family, "objective": self.objective(family), "data": data}

    def shape(self, family: str) -> dict:
        """The same block for every family; the encoder-decoder splits the layers between its two
        stacks and narrows its FFN to pay for cross-attention, so the three have equal parameters."""
        if not family_of(family).two_stacks:
            return {}
        half = max(1, self.layers // 2)
        return {"layers": half, "decoder_layers": half, "cross_rope": True,
                "d_ff": matched_ffn_width(self.preset, self.d_model, self.layers)}

    def task(self, name: str, family: str, seed: int) -> TaskSettings:
        """Every experiment's fine-tuning (``FINETUNE``) on this scale's slice of the plays."""
        common = {**FINETUNE[name], "seed": seed, "data_seed": seed}
        if name == "classify":
            return TaskSettings(steps=self.classify_steps, train_examples=self.genre_per_class,
                                test_examples=self.genre_test_per_class,
                                pooling=family_of(family).embed_pooling, **common)  # as it embeds: mean, a decoder's last
        if name == "retrieve":
            return TaskSettings(steps=self.retrieve_steps, train_examples=self.retrieval_pairs,
                                test_examples=self.retrieval_queries, test_docs=self.retrieval_docs,
                                sample_pairs=True, **common)
        if name == "tag":
            return TaskSettings(steps=self.tag_steps, train_examples=self.tag_train_windows,
                                test_examples=self.tag_test_windows, max_chars=self.tag_window_chars, **common)
        if name == "rerank":
            return TaskSettings(steps=self.rerank_steps, train_examples=self.rerank_train_queries,
                                test_examples=self.rerank_test_queries, **common)
        return TaskSettings(steps=self.extract_steps, train_examples=self.extraction_train,
                            test_examples=self.extraction_test, max_chars=self.extraction_chars,
                            rename_speakers=self.rename_speakers, **{**common, "max_target_len": self.extraction_target})


def matched_ffn_width(preset_name: str, d_model: int, layers: int) -> int:
    """The encoder-decoder's FFN width that gives ``layers // 2 + layers // 2`` layers (the decoder's
    with cross-attention, 4d^2 more each) the weights of ``layers`` decoder-only layers at the
    preset's own width: per layer attention 4d^2 and an FFN of k * d * width (k = 3 gated, 2 plain)."""
    from maskwise.config import preset

    own = preset(preset_name, d_model=d_model)
    k = 3 if own.gated_ffn else 2
    half = max(1, layers // 2)
    # layers * (4d^2 + k d f0) = half * (4d^2 + k d f) + half * (8d^2 + k d f)
    width = (layers * (4 * d_model + k * own.d_ff) - half * 12 * d_model) / (2 * half * k)
    return max(1, round(width))


QUICK = CompareSettings(name="quick", seconds=15.0, d_model=64, min_steps=40, classify_steps=30, retrieve_steps=30,
                        extract_steps=30, genre_per_class=60, genre_test_per_class=40, retrieval_pairs=600,
                        tag_steps=60, tag_train_windows=1000, tag_test_windows=300,
                        retrieval_queries=150, retrieval_docs=300, extraction_train=400, extraction_test=60, held_out_chars=600,
                        held_out_blocks=10, fill_positions=100, ttft_repeats=10)

# One modern GPU for about 15 minutes (sized, not yet run on one: README, the main job). Byte-level
# BPE rather than WordPiece, whose normaliser turns the newline after a speaker's name into a space.
GPU = CompareSettings(name="gpu", seconds=180.0, d_model=384, heads=6, layers=6, block_size=512, batch_size=64,
                      tokenizer="bpe", vocab_size=4096, lr=1e-3, warmup=100, min_steps=1500,
                      classify_steps=400, retrieve_steps=400, extract_steps=600, genre_per_class=500,
                      genre_test_per_class=230, tag_steps=400, tag_train_windows=8000, tag_test_windows=2000,
                      tag_window_chars=400,
                      retrieval_pairs=8000, extraction_train=6000, extraction_chars=400, extraction_target=48,
                      held_out_chars=8000)

COMPARE_SCALES = {"default": CompareSettings(), "quick": QUICK, "gpu": GPU}

# A few steps of everything, for the tests' plumbing checks (the ablations' smoke scale).
SMOKE = CompareSettings(name="smoke", seconds=2.0, d_model=32, heads=2, layers=2, block_size=64, batch_size=8,
                        min_steps=1, classify_steps=2, retrieve_steps=2, extract_steps=2, rerank_steps=2,
                        genre_per_class=4, genre_test_per_class=4, retrieval_pairs=24, retrieval_queries=24,
                        retrieval_docs=48, extraction_train=24, extraction_test=24, extraction_chars=40,
                        extraction_target=16, rerank_train_queries=24, rerank_test_queries=8, held_out_chars=200,
                        held_out_blocks=2, fill_positions=10, ttft_repeats=2, tag_steps=2, tag_train_windows=16,
                        tag_test_windows=8, tag_window_chars=50)

# Every experiment's fine-tuning (compare's and the ablations'): these tiny bodies need lr 1e-3
# (at 3e-4 classification stayed near chance on a quick-scale encoder).
FINETUNE = {"classify": {"batch_size": 32, "lr": 1e-3, "head_lr": 3e-3},
                "retrieve": {"batch_size": 32, "lr": 1e-3},
                "extract": {"batch_size": 16, "lr": 1e-3, "max_target_len": 32},
                "tag": {"batch_size": 16, "lr": 1e-3, "head_lr": 3e-3},
                # 8 queries x 3 negatives x 192 tokens: a third of RerankConfig's 7 x 256, which these
                # bodies learned no more from (docs/results.md).
                "rerank": {"batch_size": 8, "lr": 1e-3, "head_lr": 3e-3, "negatives": 3, "max_len": 192}}


@dataclass(frozen=True)
class Scale:
    """An ablation scale: a token budget per arm on one of compare's recipes (its block, its task
    slices and fine-tuning), so that an ablation and the main job measure the same things."""

    name: str
    tokens: int  # pretraining budget per arm (equal tokens; the wall-clock axis follows from it)
    recipe: CompareSettings
    evals: int  # validation points on each pretraining curve
    eval_batches: int
    held_out_chars: int  # text scored for next-token loss (shift-bug)

    def model(self) -> dict:
        return self.recipe.model()

    def shape(self, family: str) -> dict:
        return self.recipe.shape(family)

    def objective(self, family: str) -> str:
        return self.recipe.objective(family)

    def schedule(self, values: dict, budget: str) -> dict:
        """The budget ends every run; ``steps`` is only the schedule's length, set to twice what the
        token budget allows so that it never binds first (an encoder-decoder reads more than batch x
        block tokens a step), with warmup 10% of it (5% of the run)."""
        steps = 2 * -(-self.tokens // (values["batch_size"] * values["block_size"]))
        return {"steps": steps, "warmup": steps // 10, "eval_every": max(1, steps // (2 * self.evals)),
                "eval_batches": self.eval_batches, "budget": budget or f"tokens={self.tokens}"}

    def task(self, name: str, family: str, seed: int, pooling: str | None = None,
             progress: bool = False) -> TaskSettings:
        """The recipe's fine-tuning of ``name``; ``pooling`` replaces the family's default."""
        settings = self.recipe.task(name, family, seed)
        return replace(settings, pooling=pooling or settings.pooling, progress=progress)


# Default: about the tokens compare's 120 s per family read on 2 AVX2 cores in fp32 (below that the
# MLM encoder's retrieval stops clearing random: docs/results.md). gpu: sized for one GPU, not yet run.
SCALES = {
    "default": Scale("default", tokens=1_400_000, recipe=CompareSettings(), evals=8, eval_batches=8,
                     held_out_chars=3000),
    "quick": Scale("quick", tokens=200_000, recipe=QUICK, evals=4, eval_batches=4, held_out_chars=1000),
    "smoke": Scale("smoke", tokens=4096, recipe=SMOKE, evals=1, eval_batches=1, held_out_chars=200),
    "gpu": Scale("gpu", tokens=20_000_000, recipe=GPU, evals=8, eval_batches=16, held_out_chars=8000),
}


def pretrain_settings(scale: CompareSettings | Scale, arm: dict, seed: int, budget: str = "") -> dict:
    """Flat pretraining settings (``PretrainConfig.from_flat``) of ``arm`` (its family and whatever it
    changes) at ``scale``: the scale's block, its objective for the family unless the arm names one,
    the encoder-decoder's equal-size shape; ``budget`` replaces the scale's own."""
    family = arm["family"]
    values = {**scale.model(), "objective": scale.objective(family), **scale.shape(family), **arm}
    return {**values, "seed": seed, **scale.schedule(values, budget)}


# ---- fine-tune, evaluate, return a record --------------------------------------------------------


@dataclass
class TaskResult:
    record: dict  # the evaluation, plus finetune_s
    model: nn.Module  # what fine-tuning produced (classifier, bi-encoder, or the seq2seq model itself)
    test: Any  # the rows it was evaluated on


def _classify(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.tasks import genre_examples
    from maskwise.tasks.classify import (
        ClassifyConfig,
        evaluate_classifier,
        settings_of,
        train_classifier,
    )

    train, test = data or (genre_examples("train", per_genre=s.train_examples, seed=s.data_seed),
                           genre_examples("test", per_genre=s.test_examples, seed=s.data_seed))
    cfg = ClassifyConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, head_lr=s.head_lr, pooling=s.pooling,
                         freeze=s.freeze, max_len=s.max_len, seed=s.seed, progress=s.progress,
                         precision=runtime.precision)
    classifier = train_classifier(model, tokenizer, train, cfg)
    return classifier, lambda: evaluate_classifier(classifier, tokenizer, test, [e.label for e in train],
                                                   **settings_of(cfg)), test


def _retrieve(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.beir import GradedRetrievalSet
    from maskwise.data.tasks import ict_retrieval
    from maskwise.tasks.embed import EmbedConfig, Embedder, train_bi_encoder
    from maskwise.tasks.retrieve import evaluate_graded_retrieval, evaluate_retrieval

    if data is not None:
        pairs, test = data
    elif s.sample_pairs:
        pairs = ict_retrieval("train", seed=s.data_seed).pairs()
        pairs = random.Random(s.data_seed).sample(pairs, min(s.train_examples, len(pairs)))
    else:
        pairs = ict_retrieval("train", max_queries=s.train_examples, seed=s.data_seed).pairs()
    if data is None:
        test = ict_retrieval("test", max_queries=s.test_examples, max_docs=s.test_docs, seed=s.data_seed)
    own = {key: value for key, value in (("max_len", s.max_len), ("temperature", s.temperature))
           if value is not None}  # None: EmbedConfig's own
    cfg = EmbedConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, pooling=s.pooling, seed=s.seed,
                      progress=s.progress, precision=runtime.precision, **own)
    encoder = train_bi_encoder(model, tokenizer, pairs, cfg)
    embedder = Embedder(encoder, tokenizer, max_len=s.max_len, progress=s.progress)  # None: the whole context

    def evaluate() -> dict:
        name = f"{label} ({encoder.pooling} pooling)"
        if isinstance(test, GradedRetrievalSet):  # a BEIR folder's graded judgements
            record = evaluate_graded_retrieval(embedder, test, name=name, ignore_identical_ids=s.ignore_identical_ids)
        else:
            record = evaluate_retrieval(embedder, test, name=name)
        return {**record, "pooling": encoder.pooling, "train_pairs": len(pairs), "max_len": cfg.max_len,
                "temperature": cfg.temperature}

    return encoder, evaluate, test


def _extract(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.tasks import rename_speakers, speaker_examples
    from maskwise.tasks.generate import GenerationConfig
    from maskwise.tasks.seq2seq import Seq2SeqConfig, evaluate_seq2seq, train_seq2seq

    train, test = data or (
        speaker_examples("train", max_chars=s.max_chars, limit=s.train_examples, seed=s.data_seed),
        speaker_examples("test", max_chars=s.max_chars, limit=s.test_examples, seed=s.data_seed))
    cfg = Seq2SeqConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, max_target_len=s.max_target_len,
                        seed=s.seed, progress=s.progress, precision=runtime.precision)
    train_seq2seq(model, tokenizer, train, cfg, augment=rename_speakers, augment_prob=s.rename_speakers)
    generation = GenerationConfig(max_new_tokens=s.max_target_len + 1, num_beams=s.num_beams)  # target, [EOS]
    return model, lambda: evaluate_seq2seq(model, tokenizer, test, generation, max_target_len=s.max_target_len,
                                           progress=s.progress, train_examples=len(train)), test


def _rerank(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.tasks import ict_retrieval
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
    from maskwise.tasks.retrieve import bm25_ranking

    if data is not None:
        train, negatives, test, candidates = data
    else:  # the plays' ICT queries with BM25 as the first stage, and its near misses as negatives
        train = ict_retrieval("train", max_queries=s.train_examples, seed=s.data_seed)
        test = ict_retrieval("test", max_queries=s.test_examples, seed=s.data_seed)
        negatives = hard_negatives(bm25_ranking(train, s.negatives + 1), train.relevant, s.negatives)
        candidates = bm25_ranking(test, s.candidates)
    length = {} if s.max_len is None else {"max_len": s.max_len}  # None: RerankConfig's own
    cfg = RerankConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, head_lr=s.head_lr, n_negatives=s.negatives,
                       seed=s.seed, progress=s.progress, precision=runtime.precision, **length)
    kind = s.reranker or default_reranker(model.cfg.family)
    if kind == "cross":
        trained = train_cross_encoder(model, tokenizer, train, negatives, cfg)
        score = cross_encoder_scorer(trained, tokenizer, cfg.max_len, cfg.score_batch)
    else:
        trained = train_generative_reranker(model, tokenizer, train, negatives, cfg)
        score = generative_scorer(trained, tokenizer, cfg.max_len, cfg.score_batch)
    return trained, lambda: {**evaluate_reranker(score, test, candidates, label, s.progress, s.seed),
                             "kind": kind, "max_len": cfg.max_len}, (test, candidates)


def _tag(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.tagging import punctuation_examples
    from maskwise.tasks.tag import TagConfig, evaluate_tagger, tag_counts, train_tagger

    train, test = data or (
        punctuation_examples("train", max_chars=s.max_chars, limit=s.train_examples, seed=s.data_seed),
        punctuation_examples("test", max_chars=s.max_chars, limit=s.test_examples, seed=s.data_seed))
    cfg = TagConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, head_lr=s.head_lr, max_len=s.max_len,
                    seed=s.seed, progress=s.progress, precision=runtime.precision)
    tagger = train_tagger(model, tokenizer, train, cfg)
    counts = tag_counts(train)
    return tagger, lambda: {**evaluate_tagger(tagger, tokenizer, test, counts, cfg.max_len), "train_counts": counts}, test


# name -> (model, tokenizer, settings, runtime, the caller's rows or None, label) -> (trained, evaluate, test)
TASKS: dict[str, Callable] = {"classify": _classify, "retrieve": _retrieve, "extract": _extract, "rerank": _rerank,
                              "tag": _tag}


def run_task(task: str, model: nn.Module, tokenizer, settings: TaskSettings, runtime: Runtime,
             data: tuple[Sequence, Any] | None = None, label: str = "model") -> TaskResult:
    """Fine-tune ``model`` (moved to ``runtime``'s device) on ``task`` and evaluate it. ``data``:
    the caller's rows instead of the plays' (classify: ``LabelledText`` lists ``(train, test)``;
    retrieve: query/passage pairs and a ``RetrievalSet``; extract: ``Seq2SeqExample`` lists; tag:
    ``TaggedText`` lists; rerank: ``(train set, its negatives, test set, its first-stage candidates)``); ``label`` names
    the model in the record."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    model.to(runtime.torch_device)
    started = time.perf_counter()
    trained, evaluate, test = TASKS[task](model, tokenizer, settings, runtime, data, label)
    seconds = time.perf_counter() - started
    with runtime.inference().autocast():  # as `maskwise evaluate` will score the saved model
        record = evaluate()
    return TaskResult({**record, "finetune_s": seconds}, trained, test)
