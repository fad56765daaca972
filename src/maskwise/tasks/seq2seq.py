"""Read-then-write: fine-tune on source -> target and evaluate by generating.

Two ways to cast the same task:

* encoder-decoder: the encoder reads the source once; the decoder is trained with teacher forcing
  (input ``[BOS] target``, labels ``target [EOS]``) and cross-attends to every source position;
* decoder-only: one sequence ``source [SEP] target [EOS]`` under a causal mask, with the loss on the
  target (and [EOS]) only — the source is context, not something to learn to write.

Evaluation generates (greedy or beam) and scores exact match, F1 over the set of comma-separated
items (the speakers, on the plays) and token F1, overall and bucketed by source length (in
characters), beside the baseline of copying the source's first line (the first speaker, when
speakers are shown).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn
from tqdm import tqdm

from maskwise.data.tasks import Seq2SeqExample, first_speaker_baseline
from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.span import decoder_start_id
from maskwise.padding import pad
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.generate import GenerationConfig, check_generative, generate
from maskwise.tasks.metrics import bucketed, exact_match, set_f1, token_f1
from maskwise.tasks.reading import batches, device_of

# Source length buckets in characters (the speakers passages run up to ~600 by default).
SOURCE_EDGES = (0, 150, 300, 450, 600)


@dataclass
class Seq2SeqConfig(FinetuneConfig):
    lr: float = 1e-4  # no fresh head: the whole model learns a new output format
    max_target_len: int = 64  # tokens; longer targets are cut
    num_beams: int = 1  # the evaluation's decoding
    # The plays' passage -> speakers rows (``tasks.run.plays_rows``).
    train_passages: int | None = None  # None: every passage
    test_passages: int = 300
    max_chars: int | None = None  # longest source; None: what fits the model's context
    hide_speakers: bool = False  # speaker lines removed from the source
    mid_speech: bool = False  # each passage opens inside a speech (``data.tasks.speaker_examples``)
    rename_speakers: float = 0.0  # fraction of training draws with the cast renamed (copy, not recall)
    source_edges: tuple[int, ...] = SOURCE_EDGES  # quality by source length: the buckets' lower edges, chars


def _source_room(model: nn.Module, max_target_len: int) -> int:
    """Source tokens that fit: all of the context for an encoder-decoder's encoder; for a decoder,
    what is left after [SEP], the target and [EOS]."""
    if model.cfg.kind.two_stacks:
        return model.cfg.max_seq_len
    room = model.cfg.max_seq_len - max_target_len - 2
    if room < 1:
        raise UserError(f"max target length {max_target_len} leaves no room for the source in a context "
                        f"of {model.cfg.max_seq_len}")
    return room


def source_ids(model: nn.Module, tokenizer, source: str, max_target_len: int) -> list[int]:
    """The source as the model reads it: cut to fit (from the end: the passage's first speakers are
    the first targets), plus [SEP] for a decoder, whose target follows in the same sequence."""
    ids = tokenizer.encode(source)[:_source_room(model, max_target_len)]
    return ids + [tokenizer.sep_id] if model.cfg.kind.causal else ids


def seq2seq_batch(model: nn.Module, tokenizer, examples: Sequence[Seq2SeqExample],
                  max_target_len: int) -> dict[str, torch.Tensor]:
    """Teacher-forcing inputs and labels for either family (see the module docstring)."""
    device, eos = device_of(model), tokenizer.eos_id
    sources = [source_ids(model, tokenizer, e.source, max_target_len) for e in examples]
    targets = [ids[:max_target_len] + [eos] for ids in tokenizer.encode_batch([e.target for e in examples])]
    if model.cfg.kind.two_stacks:
        ids, mask = pad(sources, tokenizer.pad_id, "right", device)
        dec, dec_mask = pad([[decoder_start_id(tokenizer), *t[:-1]] for t in targets], tokenizer.pad_id,
                            "right", device)
        labels, _ = pad(targets, IGNORE_INDEX, "right", device)
        return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec,
                "decoder_attention_mask": dec_mask, "labels": labels}
    # decoder: position t predicts token t+1; only predictions of target tokens carry a loss
    seqs = [s + t for s, t in zip(sources, targets)]
    label_seqs = [[IGNORE_INDEX] * (len(s) - 1) + t + [IGNORE_INDEX] for s, t in zip(sources, targets)]
    ids, mask = pad(seqs, tokenizer.pad_id, "right", device)
    labels, _ = pad(label_seqs, IGNORE_INDEX, "right", device)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train_seq2seq(model: nn.Module, tokenizer, train: Sequence[Seq2SeqExample], cfg: Seq2SeqConfig,
                  augment: Callable[[Seq2SeqExample, random.Random], Seq2SeqExample] | None = None,
                  augment_prob: float = 0.0, runtime: Runtime | None = None) -> nn.Module:
    """Teacher-forced fine-tuning on random batches of ``train``; each drawn example is replaced by
    ``augment(example, rng)`` with probability ``augment_prob`` (a fresh variant every draw, e.g.
    ``data.tasks.rename_speakers``)."""
    check_generative(model)
    if not train:
        raise UserError("no training examples")

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = [train[rng.randrange(len(train))] for _ in range(cfg.batch_size)]
        if augment is not None and augment_prob > 0:  # no draws otherwise: batches stay as without one
            chosen = [augment(e, rng) if rng.random() < augment_prob else e for e in chosen]
        return model(**seq2seq_batch(model, tokenizer, chosen, cfg.max_target_len)).loss

    fine_tune(model, step_loss, cfg, desc="seq2seq", runtime=runtime)
    return model


def predict_seq2seq(model: nn.Module, tokenizer, sources: Sequence[str], gen: GenerationConfig,
                    max_target_len: int = 64, batch_size: int = 32, progress: bool = True) -> list[str]:
    """Generate a target for each source (greedy or beam, as ``gen`` says; at most
    ``max_target_len`` tokens plus [EOS])."""
    check_generative(model)
    gen = replace(gen, max_new_tokens=min(gen.max_new_tokens, max_target_len + 1))
    outputs = []
    chunks = batches(len(sources), batch_size)
    for chunk in tqdm(chunks, desc="generate", unit="batch", leave=False, disable=not progress or len(chunks) < 2):
        prompts = [source_ids(model, tokenizer, sources[i], max_target_len) for i in chunk]
        result = generate(model, prompts, gen, tokenizer.eos_id, tokenizer.pad_id, decoder_start_id(tokenizer))
        outputs.extend(tokenizer.decode(tokens) for tokens in result.tokens)
    return outputs


def generation_scores(predicted: Sequence[str], examples: Sequence[Seq2SeqExample],
                      source_edges: Sequence[int]) -> dict:
    """Exact match, F1 over the set of comma-separated items (on the plays: the speakers) and token F1:
    overall, per example and by source length."""
    per_example = {
        "exact_match": [exact_match(p, e.target) for p, e in zip(predicted, examples)],
        "items_f1": [set_f1(p, e.target) for p, e in zip(predicted, examples)],  # the speakers, on the plays
        "token_f1": [token_f1(p, e.target) for p, e in zip(predicted, examples)],
    }
    n = max(len(examples), 1)
    return {
        **{name: sum(values) / n for name, values in per_example.items()},
        "per_example": per_example,
        "by_source_chars": bucketed([len(e.source) for e in examples], per_example, source_edges),
    }


def lead_words(train: Sequence[Seq2SeqExample]) -> int:
    """How many of the source's first words the lead baseline copies: the training targets' mean word count."""
    return max(1, round(sum(len(e.target.split()) for e in train) / max(len(train), 1)))


def evaluate_seq2seq(model: nn.Module, tokenizer, test: Sequence[Seq2SeqExample], gen: GenerationConfig,
                     max_target_len: int = 64, progress: bool = True, source_edges: Sequence[int] = SOURCE_EDGES,
                     lead: int | None = None, **settings) -> dict:
    """Generate each test target and score it beside a baseline: the source's first ``lead`` words (a user's
    rows: the lead of a summary, the classic floor), else its first line (the plays: the first speaker)."""
    predicted = predict_seq2seq(model, tokenizer, [e.source for e in test], gen, max_target_len,
                                progress=progress)
    if lead is None:
        baseline, baseline_name = [first_speaker_baseline(e.source) for e in test], "copy the first line of the source"
    else:
        baseline, baseline_name = [" ".join(e.source.split()[:lead]) for e in test], f"the source's first {lead} words"
    return {
        "task": "seq2seq",
        "family": model.cfg.family,
        "decoding": f"beam {gen.num_beams}" if gen.num_beams > 1 else "greedy",
        **settings,
        "n_test": len(test),
        "source_chars": [len(e.source) for e in test],  # each item's, for rows by source length
        **generation_scores(predicted, test, source_edges),
        "baseline": {"name": baseline_name, **generation_scores(baseline, test, source_edges)},
        "examples": [{"source": e.source, "target": e.target, "predicted": p}
                     for e, p in list(zip(test, predicted))[:5]],
    }
