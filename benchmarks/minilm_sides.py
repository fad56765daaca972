"""The three sides of ``bench_minilm_finetune.py``, each one run of one task at one seed in a fresh process.

Why a process per run: maskwise's fine-tune sets process-wide allocator options (``kernels.memory``) and both
libraries keep caches; a fresh process gives every run the same start, whichever side ran before it.

A run is described by a ``Job`` (plain data, picklable) and returns a dict: the score, each test item's
(right, out of) pair, the seconds between optimizer steps and the run's seconds. The step clock is torch's
global optimizer post-step hook, so the same clock times maskwise's loop and HF Trainer's, whatever drives them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

MINILM = "all-MiniLM-L6-v2"
SIDES = ("maskwise", "hf", "embed-lr")


@dataclass
class Job:
    side: str  # one of SIDES
    task: str  # "classify" or "tag"
    seed: int
    train: list  # LabelledText (classify) or TaggedText (tag) rows
    test: list
    labels: list[str]  # the label (tag) order both fine-tuned sides use
    steps: int  # optimizer steps maskwise takes; HF's own epoch count gives it the same (``max_steps`` if forced)
    epochs: float
    batch: int
    lr: float
    head_lr: float  # maskwise's fresh head only (HF trains its head at ``lr``)
    max_len: int
    threads: int  # torch threads (0: torch's default)
    skip: int  # leading step intervals left out of the per-step time
    force_steps: bool = False  # HF: ``max_steps=steps`` instead of ``epochs``
    hf_overrides: dict[str, Any] = field(default_factory=dict)  # TrainingArguments that differ from its defaults


class StepClock:
    """When each optimizer step ended, from ``register_optimizer_step_post_hook``: one clock for both loops."""

    def __enter__(self) -> Self:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.ends: list[float] = []
        self._handle = register_optimizer_step_post_hook(
            lambda optimizer, args, kwargs: self.ends.append(time.perf_counter())
        )
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    def intervals(self, skip: int) -> list[float]:
        """Seconds between consecutive step ends, the first ``skip`` intervals left out (fewer if the run is short,
        keeping at least one)."""
        gaps = [b - a for a, b in zip(self.ends, self.ends[1:])]
        return gaps[min(skip, max(0, len(gaps) - 1)) :]


def run_job(job: Job) -> dict[str, Any]:
    """One run, in the calling (fresh) process."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.stdout = sys.stderr  # Trainer prints its closing metrics; the parent's stdout holds the report alone
    import torch

    if job.threads:
        torch.set_num_threads(job.threads)
    started = time.perf_counter()
    result = {"maskwise": _maskwise, "hf": _hf, "embed-lr": _embed_lr}[job.side](job)
    result.update(
        side=job.side,
        task=job.task,
        seed=job.seed,
        wall_s=time.perf_counter() - started,
        threads=torch.get_num_threads(),
    )
    return result


def per_text(correct_words: Sequence[int], test: Sequence) -> list[tuple[int, int]]:
    """Flat per-word 0/1 -> per sentence (right, words): the items a tagging interval resamples."""
    items, at = [], 0
    for example in test:
        n = len(example.words)
        items.append((int(sum(correct_words[at : at + n])), n))
        at += n
    if at != len(correct_words):
        raise RuntimeError(f"{len(correct_words)} word scores for {at} test words")
    return items


def _scored(
    job: Job, correct: Sequence[int], clock: StepClock | None, train_s: float | None, **extra
) -> dict[str, Any]:
    items = per_text(correct, job.test) if job.task == "tag" else [(int(c), 1) for c in correct]
    right, total = sum(r for r, _ in items), sum(n for _, n in items)
    out = {"score": right / total, "items": items, "train_s": train_s, **extra}
    if clock is not None:
        gaps = clock.intervals(job.skip)
        out.update(steps_taken=len(clock.ends), step_s=sum(gaps) / len(gaps), step_intervals=len(gaps))
    return out


# ---- maskwise: its library path, run_task -------------------------------------------------------------------


def _maskwise(job: Job) -> dict[str, Any]:
    from maskwise.interop.folders import load, model_folder
    from maskwise.runtime import resolve
    from maskwise.tasks.classify import ClassifyConfig
    from maskwise.tasks.finetune import FINE_TUNING
    from maskwise.tasks.run import run_task
    from maskwise.tasks.tag import TagConfig

    model, tokenizer = load(model_folder(MINILM))
    runtime = resolve("cpu", "fp32")
    common = {
        "steps": job.steps,
        "batch_size": job.batch,
        "lr": job.lr,
        "head_lr": job.head_lr,
        "warmup": FINE_TUNING.warmup,  # the rule's schedule; the HF side gets it through ``hf_overrides``
        "weight_decay": FINE_TUNING.weight_decay,
        "seed": job.seed,
        "progress": False,
        "precision": "fp32",
        "max_len": job.max_len,
    }
    cfg = ClassifyConfig(**common) if job.task == "classify" else TagConfig(**common, read_out="first")
    with StepClock() as clock:
        result = run_task(cfg, model, tokenizer, runtime, data=(job.train, job.test))
    record = result.record
    if job.task == "tag" and list(result.model.tags) != list(job.labels):
        raise RuntimeError(f"maskwise's tag order {result.model.tags} is not the benchmark's {job.labels}")
    extra = {"pooling": record.pooling} if job.task == "classify" else {"unread_words": record.truncated_words}
    return _scored(job, record.correct, clock, record.finetune_s, **extra)


# ---- HF: AutoModelFor* + Trainer at TrainingArguments' defaults ---------------------------------------------


def word_labels(tokenizer, words: Sequence[str], tags: Sequence[int] | None, max_len: int) -> tuple[dict, list[int]]:
    """HF's convention: the words tokenized as split words, each word's label at its FIRST sub-token, -100 on the
    others and on [CLS]/[SEP]; and each word's first position (-1 where truncation cut the word or it has no token)."""
    encoded = tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=max_len)
    first: dict[int, int] = {}
    for position, word in enumerate(encoded.word_ids()):
        if word is not None:
            first.setdefault(word, position)
    positions = [first.get(i, -1) for i in range(len(words))]
    row = dict(encoded)
    if tags is not None:
        labels = [-100] * len(encoded["input_ids"])
        for tag, position in zip(tags, positions):
            if position >= 0:
                labels[position] = tag
        row["labels"] = labels
    return row, positions


def _hf(job: Job) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from maskwise.interop.folders import model_folder

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    folder = str(model_folder(MINILM))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    index = {label: i for i, label in enumerate(job.labels)}
    named = {"num_labels": len(job.labels), "id2label": dict(enumerate(job.labels)), "label2id": index}
    transformers.set_seed(job.seed)  # the fresh head's initialisation, as Trainer(model_init=...) would seed it
    if job.task == "classify":
        model = AutoModelForSequenceClassification.from_pretrained(folder, **named)
        rows = [
            {**tokenizer(e.text, truncation=True, max_length=job.max_len), "labels": index[e.label]} for e in job.train
        ]
        collator = DataCollatorWithPadding(tokenizer)  # pads each batch to its longest row
    else:
        model = AutoModelForTokenClassification.from_pretrained(folder, **named)
        rows = [word_labels(tokenizer, e.words, [index[t] for t in e.tags], job.max_len)[0] for e in job.train]
        collator = DataCollatorForTokenClassification(tokenizer)  # the same, labels padded with -100
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            seed=job.seed,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            **job.hf_overrides,
            **({"max_steps": job.steps} if job.force_steps else {}),
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collator)
        with StepClock() as clock:
            began = time.perf_counter()
            trainer.train()
            train_s = time.perf_counter() - began
        optim = str(args.optim)
    model.eval()
    correct: list[int] = []
    unread = 0
    with torch.no_grad():
        for start in range(0, len(job.test), 64):
            chunk = job.test[start : start + 64]
            if job.task == "classify":
                batch = collator([tokenizer(e.text, truncation=True, max_length=job.max_len) for e in chunk])
                predicted = model(**batch).logits.argmax(-1).tolist()
                correct += [int(job.labels[p] == e.label) for p, e in zip(predicted, chunk)]
                continue
            encoded = [word_labels(tokenizer, e.words, None, job.max_len) for e in chunk]
            best = model(**collator([row for row, _ in encoded])).logits.argmax(-1)  # (B, T)
            fallback = "O" if "O" in job.labels else job.labels[0]  # what maskwise predicts for an unread word
            for row, (example, (_, positions)) in enumerate(zip(chunk, encoded)):
                unread += sum(p < 0 for p in positions)
                predicted = [job.labels[best[row, p]] if p >= 0 else fallback for p in positions]
                correct += [int(p == t) for p, t in zip(predicted, example.tags)]
    return _scored(
        job,
        correct,
        clock,
        train_s,
        optim=optim,
        global_step=trainer.state.global_step,
        **({"unread_words": unread} if job.task == "tag" else {}),
    )


# ---- frozen mean embeddings + logistic regression (classification only) -------------------------------------


def _embed_lr(job: Job) -> dict[str, Any]:
    """maskwise's embedder (``interop.pretrained.embed_texts``: MiniLM's masked mean, L2-normalised, truncated where
    the folder says) under scikit-learn's LogisticRegression(max_iter=1000); no seed enters it."""
    from sklearn.linear_model import LogisticRegression

    from maskwise.interop.folders import model_folder
    from maskwise.interop.pretrained import embed_texts
    from maskwise.interop.sentence_transformers import declared_settings

    began = time.perf_counter()
    train_x = embed_texts(MINILM, [e.text for e in job.train])
    test_x = embed_texts(MINILM, [e.text for e in job.test])
    fit = LogisticRegression(max_iter=1000).fit(train_x, [e.label for e in job.train])
    predicted = fit.predict(test_x)
    train_s = time.perf_counter() - began
    max_len = declared_settings(model_folder(MINILM)).max_len
    return _scored(job, [int(p == e.label) for p, e in zip(predicted, job.test)], None, train_s, embed_max_len=max_len)
