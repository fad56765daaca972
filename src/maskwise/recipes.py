"""Recipes: one way to do each experiment step, for ``compare``, every ablation, the benchmarks and the CLI.

* the named scales: ``CompareSettings`` (``compare``'s default, and ``QUICK``) and ``Scale``
  (the ablations' ``default``, ``quick`` and ``smoke``, on the shared ``MODEL`` block); each turns
  into flat pretraining settings through ``pretrain_settings`` and into ``TaskSettings``
  through its ``task`` method;
* ``run_task``: fine-tune a model on one task, evaluate it, and return a ``TaskResult`` (the
  record, the trained model or head to save, and the test rows). The task's data is the plays'
  slice the settings choose, or the caller's own rows.

Adding a task is one function and one line of ``TASKS``; a default lives in one place here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from maskwise.runtime import Runtime

FAMILY_OBJECTIVE = {"encoder": "mlm", "decoder": "clm", "encoder-decoder": "span"}


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
    max_chars: int = 600  # extract: passage characters
    max_target_len: int = 32  # extract: target tokens
    data_seed: int = 0  # which windows, pairs and passages
    sample_pairs: bool = False  # retrieve: draw the pairs among every train speech, not among capped queries
    seed: int = 0
    progress: bool = False


@dataclass(frozen=True)
class CompareSettings:
    """``compare``'s scale: three families at one wall-clock budget."""

    seconds: float = 90.0  # pretraining wall-clock per family
    d_model: int = 128
    heads: int = 4
    block_size: int = 256
    batch_size: int = 32
    # Characters: at a budget of minutes a subword model spends its steps on a large embedding
    # table and barely leaves the unigram plateau, while a character model is already writing words.
    tokenizer: str = "char"
    vocab_size: int = 4096  # for tokenizer = "bpe" or "wordpiece"
    lr: float = 2e-3
    finetune_steps: int = 100
    genre_per_class: int = 250  # training windows per genre (test: a third of it)
    retrieval_pairs: int = 3000
    retrieval_queries: int = 300
    extraction_train: int = 2000
    extraction_test: int = 100
    extraction_chars: int = 180  # passage characters: with the target, they fit a decoder's context whole
    extraction_target: int = 64  # target tokens (characters): room for five or six names
    held_out_chars: int = 1500
    fill_positions: int = 300

    def model(self) -> dict:
        return {"preset": "gpt2", "tokenizer": self.tokenizer, "vocab_size": self.vocab_size, "d_model": self.d_model,
                "heads": self.heads, "layers": 4, "block_size": self.block_size, "batch_size": self.batch_size,
                "lr": self.lr}

    def schedule(self, values: dict, budget: str) -> dict:
        return {"steps": 100_000, "warmup": 30, "budget": budget or f"seconds={self.seconds}", "eval_every": 50,
                    "eval_batches": 8}

    def family_arm(self, family: str, data: str) -> dict:
        """The same layout for every family; the encoder-decoder gets 2 + 2 layers with a 3d FFN."""
        arm = {"family": family, "objective": FAMILY_OBJECTIVE[family], "data": data}
        if family == "encoder-decoder":
            arm.update(layers=2, decoder_layers=2, d_ff=3 * self.d_model)
        return arm

    def task(self, name: str, family: str, seed: int) -> TaskSettings:
        common = {"steps": self.finetune_steps, "batch_size": 32, "seed": seed, "data_seed": seed}
        if name == "classify":
            return TaskSettings(train_examples=self.genre_per_class, test_examples=max(20, self.genre_per_class // 3),
                                lr=3e-4, head_lr=1e-3, pooling="last" if family == "decoder" else "mean", **common)
        if name == "retrieve":
            return TaskSettings(train_examples=self.retrieval_pairs, test_examples=self.retrieval_queries, lr=3e-4,
                                sample_pairs=True, **common)
        return TaskSettings(train_examples=self.extraction_train, test_examples=self.extraction_test, lr=1e-3,
                            max_chars=self.extraction_chars, max_target_len=self.extraction_target, **common)


QUICK = CompareSettings(seconds=15.0, d_model=64, batch_size=32, finetune_steps=30, genre_per_class=60,
                        retrieval_pairs=600, retrieval_queries=150, extraction_train=400, extraction_test=60,
                        held_out_chars=400, fill_positions=100)

# The block every ablation arm shares unless the ablation changes it (compare's choice: GPT-2's
# pre-norm block for every family, so that only the mask and the loss differ between families).
MODEL = {"preset": "gpt2", "tokenizer": "bpe", "vocab_size": 2048, "d_model": 64, "heads": 2, "layers": 2,
             "block_size": 128, "batch_size": 16, "lr": 2e-3}

# The ablations' fine-tuning. Learning rates chosen on a quick-scale encoder: these tiny bodies need
# 1e-3 (at 3e-4, or with [CLS] pooling, 150 classification steps stayed near chance; mean pooling at
# 1e-3 reached 0.29).
FINETUNE = {"classify": {"batch_size": 32, "lr": 1e-3, "head_lr": 3e-3},
                "retrieve": {"batch_size": 32, "lr": 1e-3},
                "extract": {"batch_size": 16, "lr": 1e-3, "max_target_len": 32}}


@dataclass(frozen=True)
class Scale:
    """An ablation scale: a token budget per arm and the size of every fine-tuning."""

    name: str
    tokens: int  # pretraining budget per arm
    finetune_steps: int
    train_examples: int  # fine-tuning windows, pairs or passages
    eval_examples: int  # test windows, queries or passages
    evals: int  # validation points on each pretraining curve
    eval_batches: int
    held_out_chars: int  # text scored for next-token loss (shift-bug)

    def model(self) -> dict:
        return dict(MODEL)

    def schedule(self, values: dict, budget: str) -> dict:
        """The budget ends every run; ``steps`` is only the schedule's length, set to twice what the
        token budget allows so that it never binds first (an encoder-decoder reads more than batch x
        block tokens a step), with warmup 10% of it (5% of the run)."""
        steps = 2 * -(-self.tokens // (values["batch_size"] * values["block_size"]))
        return {"steps": steps, "warmup": steps // 10, "eval_every": max(1, steps // (2 * self.evals)),
                    "eval_batches": self.eval_batches, "budget": budget or f"tokens={self.tokens}"}

    def task(self, name: str, seed: int, pooling: str | None = None, progress: bool = False) -> TaskSettings:
        from maskwise.data.plays import GENRES

        per = len(GENRES) if name == "classify" else 1  # classify counts windows per genre
        return TaskSettings(steps=self.finetune_steps, train_examples=self.train_examples // per,
                            test_examples=self.eval_examples // per, pooling=pooling, seed=seed, progress=progress,
                            **FINETUNE[name])


SCALES = {
    "default": Scale("default", tokens=1_000_000, finetune_steps=150, train_examples=1800, eval_examples=600,
                     evals=8, eval_batches=8, held_out_chars=3000),
    "quick": Scale("quick", tokens=100_000, finetune_steps=30, train_examples=480, eval_examples=240,
                   evals=4, eval_batches=4, held_out_chars=1000),
    "smoke": Scale("smoke", tokens=4096, finetune_steps=2, train_examples=24, eval_examples=24,
                   evals=1, eval_batches=1, held_out_chars=200),
}


def pretrain_settings(scale: CompareSettings | Scale, arm: dict, seed: int, budget: str = "") -> dict:
    """Flat pretraining settings (``PretrainConfig.from_flat``) of ``arm`` (family, objective and
    whatever it changes) at ``scale``; ``budget`` replaces the scale's own."""
    values = {**scale.model(), **arm}
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
        train_classifier,
    )

    train, test = data or (genre_examples("train", per_genre=s.train_examples, seed=s.data_seed),
                           genre_examples("test", per_genre=s.test_examples, seed=s.data_seed))
    cfg = ClassifyConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, head_lr=s.head_lr, pooling=s.pooling,
                         freeze=s.freeze, max_len=s.max_len, seed=s.seed, progress=s.progress,
                         precision=runtime.precision)
    classifier = train_classifier(model, tokenizer, train, cfg)
    return classifier, lambda: evaluate_classifier(classifier, tokenizer, test, [e.label for e in train]), test


def _retrieve(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.tasks import ict_retrieval
    from maskwise.tasks.embed import EmbedConfig, Embedder, train_bi_encoder
    from maskwise.tasks.retrieve import evaluate_retrieval

    if data is not None:
        pairs, test = data
    elif s.sample_pairs:
        pairs = ict_retrieval("train", seed=s.data_seed).pairs()
        pairs = random.Random(s.data_seed).sample(pairs, min(s.train_examples, len(pairs)))
    else:
        pairs = ict_retrieval("train", max_queries=s.train_examples, seed=s.data_seed).pairs()
    if data is None:
        test = ict_retrieval("test", max_queries=s.test_examples, seed=s.data_seed)
    length = {} if s.max_len is None else {"max_len": s.max_len}  # None: EmbedConfig's own
    cfg = EmbedConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, pooling=s.pooling, seed=s.seed,
                      progress=s.progress, precision=runtime.precision, **length)
    encoder = train_bi_encoder(model, tokenizer, pairs, cfg)
    embedder = Embedder(encoder, tokenizer, max_len=s.max_len)
    return encoder, lambda: {
        **evaluate_retrieval(embedder, test, name=f"{label} ({encoder.pooling} pooling)"),
        "pooling": encoder.pooling}, test


def _extract(model, tokenizer, s: TaskSettings, runtime: Runtime, data, label: str):
    from maskwise.data.tasks import speaker_examples
    from maskwise.tasks.generate import GenerationConfig
    from maskwise.tasks.seq2seq import Seq2SeqConfig, evaluate_seq2seq, train_seq2seq

    train, test = data or (
        speaker_examples("train", max_chars=s.max_chars, limit=s.train_examples, seed=s.data_seed),
        speaker_examples("test", max_chars=s.max_chars, limit=s.test_examples, seed=s.data_seed))
    cfg = Seq2SeqConfig(steps=s.steps, batch_size=s.batch_size, lr=s.lr, max_target_len=s.max_target_len,
                        seed=s.seed, progress=s.progress, precision=runtime.precision)
    train_seq2seq(model, tokenizer, train, cfg)
    generation = GenerationConfig(max_new_tokens=s.max_target_len + 1)  # the target, then [EOS]
    return model, lambda: evaluate_seq2seq(model, tokenizer, test, generation, max_target_len=s.max_target_len,
                                           progress=False), test


# name -> (model, tokenizer, settings, runtime, (train, test) or None, label) -> (trained, evaluate, test)
TASKS: dict[str, Callable] = {"classify": _classify, "retrieve": _retrieve, "extract": _extract}


def run_task(task: str, model: nn.Module, tokenizer, settings: TaskSettings, runtime: Runtime,
             data: tuple[Sequence, Any] | None = None, label: str = "model") -> TaskResult:
    """Fine-tune ``model`` (moved to ``runtime``'s device) on ``task`` and evaluate it. ``data``:
    the caller's ``(train, test)`` rows instead of the plays' (classify: ``LabelledText`` lists;
    retrieve: query/passage pairs and a ``RetrievalSet``; extract: ``Seq2SeqExample`` lists);
    ``label`` names the model in the record."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    model.to(runtime.torch_device)
    started = time.perf_counter()
    trained, evaluate, test = TASKS[task](model, tokenizer, settings, runtime, data, label)
    seconds = time.perf_counter() - started
    return TaskResult({**evaluate(), "finetune_s": seconds}, trained, test)
