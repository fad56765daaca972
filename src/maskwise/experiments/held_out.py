"""What every compare run is measured on without fine-tuning: the held-out text (the first test play, or the
corpus' validation part), its next-token loss per character beside the unigram's, a blank to fill, and a sample.
The ablations read the same text and baselines (``ablations.jobs``, ``ablations.shift_bug``)."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import torch

from maskwise.data.corpus import SHAKESPEARE, load_corpus
from maskwise.data.plays import load_plays, render_play, split_plays
from maskwise.experiments.runner import Experiment
from maskwise.objectives.span import decoder_start_id
from maskwise.padding import pad
from maskwise.recipes import CompareSettings
from maskwise.tasks.fill_mask import mlm_continue, nats_per_char_blocks, per_char_blocks
from maskwise.tasks.generate import GenerationConfig, generate_text
from maskwise.tasks.reading import (
    config_of,
    device_of,
    frame,
    frame_extra,
    seeded_generator,
)

COUNTED_CHARS = 2_000_000  # of a user's training text, for the unigram baseline (plenty for its frequencies)


def opening(documents, chars: int) -> str:
    """The first ``chars`` characters of ``documents`` joined by blank lines, reading no more of them than that."""
    parts, read = [], 0
    for document in documents:
        parts.append(document)
        read += len(document)
        if read >= chars:
            break
    return "\n\n".join(parts)[:chars]


def pretraining_text(data: str, chars: int) -> str:
    """The first ``chars`` characters of the corpus' training part."""
    return opening(load_corpus(data).iter_train(), chars)


def held_out_text(chars: int, data: str = SHAKESPEARE) -> str:
    """The opening of text no model saw in pretraining: the first test-split play, or the corpus' validation part."""
    if data == SHAKESPEARE:
        return render_play(split_plays(load_plays())["test"][0])[:chars]
    return opening(load_corpus(data).iter_val(), chars)


def train_token_counts(tokenizer, data: str = SHAKESPEARE) -> Counter[int]:
    """How often each token occurs in the training text (the train plays, or the first ``COUNTED_CHARS`` of
    the corpus' training part): the trivial baselines' only knowledge."""
    counts: Counter[int] = Counter()
    if data == SHAKESPEARE:
        for play in split_plays(load_plays())["train"]:
            counts.update(tokenizer.encode(render_play(play)))
        return counts
    counts.update(tokenizer.encode(pretraining_text(data, COUNTED_CHARS)))
    return counts


def sample_prompts(data: str, text: str) -> tuple[str, str]:
    """(a prompt to continue, the text after a blank that follows it): the plays' soliloquy, or the held-out
    text's opening words, so that no user's sample is asked about Hamlet."""
    if data == SHAKESPEARE:
        return "HAMLET\nTo be, or not to be,", "is the question:"
    words = text.split(" ")
    prompt = " ".join(words[:6])
    return prompt, " ".join(words[7:12])


def unigram_nats_per_char(tokenizer, counts: Counter[int], text: str, blocks: int) -> list[float]:
    """The unigram model's (``counts``, add-one) nats per character of ``text`` in ``blocks``
    pieces, cut as every model's are (``fill_mask.per_char_blocks``)."""

    total, vocab = sum(counts.values()), tokenizer.vocab_size
    ids = tokenizer.encode(text)
    return per_char_blocks(tokenizer, ids, [-math.log((counts[t] + 1) / (total + vocab)) for t in ids[1:]], blocks)


@torch.no_grad()
def blank_filling(
    model, tokenizer, text: str, n_positions: int, seed: int, baseline_token: int, objective: str
) -> dict:
    """Hide one token at a time and predict it; each position's 0/1 and the most-frequent-token guess's.

    A stack that fills masks (``Family.fills_masks``): ``[MASK]`` in its place, both sides visible, read
    as tasks read it, answered at the ``[MASK]`` (an encoder) or from the position before it (a hybrid
    decoder, as it trained); a decoder: only what is left of it (its next-token prediction from the
    previous position); encoder-decoder in the format it was pretrained in: T5's (the token replaced by
    sentinel 0, the decoder asked for the span after ``<extra_id_0>``) or BART's (``[MASK]`` in the
    source, the decoder rewriting the source up to the blank and predicting the next token).
    """

    kind, context, device = model.cfg.kind, model.cfg.max_seq_len - 2, device_of(model)
    model.eval()
    ids = tokenizer.encode(text)
    rng = random.Random(seed)
    ordinary = [p for p in range(1, len(ids)) if ids[p] not in tokenizer.special_ids]
    positions = sorted(rng.sample(ordinary, min(n_positions, len(ordinary))))
    windows = [(max(0, p - context // 2), p) for p in positions]
    correct: list[int] = []
    for chunk in range(0, len(windows), 64):
        batch = windows[chunk : chunk + 64]
        if kind.fills_masks:
            family = model.cfg.family
            seqs = [
                frame(tokenizer, [*ids[s:p], tokenizer.mask_id, *ids[p + 1 : s + context]], family) for s, p in batch
            ]
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            logits = model.lm_head.logits(model.read(x, mask))  # (B, T, V)
            shift = int(kind.causal)  # a causal stack's output at position t predicts token t + 1
            where = torch.tensor([frame_extra(family) + p - s - shift for s, p in batch], device=device)
            predicted = logits[torch.arange(len(batch), device=device), where].argmax(-1).cpu()
        elif kind.causal:
            seqs = [ids[max(0, p - context) : p] for _, p in batch]  # left side only, ends just before p
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            logits = model(x, mask).logits  # (B, T, V)
            last = mask.sum(1) - 1
            predicted = logits[torch.arange(len(batch), device=device), last].argmax(-1).cpu()
        elif objective == "denoise":
            seqs = [[*ids[s:p], tokenizer.mask_id, *ids[p + 1 : s + context]] for s, p in batch]
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            rewritten, written = pad(
                [[decoder_start_id(tokenizer), *ids[s:p]] for s, p in batch], tokenizer.pad_id, "right", device
            )
            logits = model(x, mask, decoder_input_ids=rewritten, decoder_attention_mask=written).logits  # (B, T, V)
            last = written.sum(1) - 1
            predicted = logits[torch.arange(len(batch), device=device), last].argmax(-1).cpu()
        else:
            sentinel = tokenizer.sentinel_ids[0]
            seqs = [[*ids[s:p], sentinel, *ids[p + 1 : s + context]] for s, p in batch]
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            start = torch.tensor([[decoder_start_id(tokenizer), sentinel]] * len(batch), device=device)
            logits = model(x, mask, decoder_input_ids=start).logits  # (B, 2, V)
            predicted = logits[:, 1].argmax(-1).cpu()
        targets = torch.tensor([ids[p] for _, p in batch])
        correct.extend((predicted == targets).int().tolist())
    return {
        "accuracy": sum(correct) / max(len(correct), 1),
        "n": len(correct),
        "correct": correct,
        "baseline": {
            "name": "the most frequent token",
            "token": tokenizer.id_to_token(baseline_token),
            "correct": [int(ids[p] == baseline_token) for p in positions],
        },
    }


def language_modelling(exp: Experiment, run: str, s: CompareSettings, seed: int, data: str) -> dict:
    """Run ``run`` on the held-out text: its next-token loss where its family has one, a blank, a sample."""
    loaded = exp.load(run)
    model, tok, objective = loaded.model, loaded.tokenizer, loaded.config["objective"]
    text = held_out_text(s.held_out_chars, data)
    sampling = GenerationConfig(max_new_tokens=48, temperature=0.8, top_k=40)
    g = seeded_generator(model, seed)
    prompt, after = sample_prompts(data, text)
    counts = train_token_counts(tok, data)
    most_frequent = next(t for t, _ in counts.most_common() if t not in tok.special_ids)
    result = {
        "blank_filling": blank_filling(model, tok, text, s.fill_positions, seed, most_frequent, objective),
        "unigram_blocks": unigram_nats_per_char(tok, counts, text, s.held_out_blocks),
    }
    kind = config_of(model).kind
    if kind.causal:
        result["nats_blocks"] = nats_per_char_blocks(model, tok, text, s.held_out_blocks)
        result["sample"] = prompt + generate_text(model, tok, [prompt], sampling, g)[0]
    elif kind.encoder_only:
        result["nats_blocks"] = nats_per_char_blocks(model, tok, text, s.held_out_blocks, both_sides=False)
        result["both_sides_blocks"] = nats_per_char_blocks(model, tok, text, s.held_out_blocks, both_sides=True)
        result["sample"] = prompt + mlm_continue(model, tok, prompt, 48, sampling, g)
    else:
        blank = tok.id_to_token(tok.mask_id if objective == "denoise" else tok.sentinel_ids[0])
        source = f"{prompt} {blank} {after}"
        room = len(tok.encode(source)) + 8 if objective == "denoise" else 48  # a rewrite of the source, or a span
        written = generate_text(model, tok, [source], replace(sampling, max_new_tokens=room), g)[0]
        result["sample"] = f"{source}\n  -> {written if objective == 'denoise' else f'{blank}: {written}'}"
    return result
