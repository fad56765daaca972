"""What an MLM encoder can do (fill masks) and what it cannot (generate): the "break" exercise.

``fill_mask`` gives the top-k tokens, with probabilities, for each ``[MASK]`` in a text: the
question MLM pretraining trained, p(token | everything else).

``mlm_continue`` makes an encoder generate anyway, the naive way: append ``[MASK]``, predict it,
keep the prediction, repeat. Each prediction sees only the left side, which MLM never trained on
(a masked position always had text on both sides), so samples degrade. ``char_losses`` puts a number
on it: on held-out text, the encoder's per-character loss with both sides visible (the
pseudo-log-likelihood: each token masked in turn) against its loss with the left side only (each
token predicted from ``[CLS] left [MASK]``, exactly how ``mlm_continue`` generates), beside a
same-size decoder's ordinary left-to-right loss. The encoder looks good on the first and bad on the
second; the decoder was trained for the second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from maskwise.errors import UserError
from maskwise.padding import pad
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.reading import (
    batches,
    device_of,
    frame,
    frame_extra,
    seeded_generator,
)
from maskwise.tasks.sampling import choose_next

MASK_TEXT = "[MASK]"


def check_encoder(model, what: str) -> None:
    if not model.cfg.kind.encoder_only:
        raise UserError(f"{what} needs an encoder (an MLM model), got a {model.cfg.family}")


def _special_mask(tokenizer, vocab: int, device) -> torch.Tensor:
    special = torch.zeros(vocab, dtype=torch.bool, device=device)
    special[[i for i in tokenizer.special_ids if i < vocab]] = True
    return special


def _mask_logits(model, tokenizer, seqs: Sequence[Sequence[int]], where: Sequence[Sequence[int]]) -> torch.Tensor:
    """Logits at the given positions of each sequence, special tokens excluded (an MLM head should
    not answer "[PAD]"): (sum of len(where[i]), V), in order."""
    ids, mask = pad(seqs, tokenizer.pad_id, "right", device_of(model))
    h = model.read(ids, mask)  # (B, T, d)
    rows = torch.tensor([r for r, ps in enumerate(where) for _ in ps], device=ids.device)
    cols = torch.tensor([p for ps in where for p in ps], device=ids.device)
    logits = model.lm_head.logits(h[rows, cols]).float()  # (N, V)
    return logits.masked_fill(_special_mask(tokenizer, logits.shape[-1], logits.device), float("-inf"))


@torch.no_grad()
def fill_mask(model, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each ``[MASK]`` in ``text``, in order: the ``top_k`` tokens and their probabilities. An
    encoder answers at the [MASK]; a hybrid decoder from the position before it, as it trained."""
    if not model.cfg.kind.fills_masks:
        raise UserError(
            f"fill-mask needs an MLM encoder or a hybrid decoder (--objective hybrid), not this {model.cfg.family}"
        )
    if top_k <= 0:
        raise UserError(f"top-k must be positive, got {top_k}")
    pieces = text.split(MASK_TEXT)
    if len(pieces) == 1:
        raise UserError(f"no {MASK_TEXT} in the text: write {MASK_TEXT} where a token should be predicted")
    ids = []
    for i, piece in enumerate(pieces):
        ids += tokenizer.encode(piece)
        if i < len(pieces) - 1:
            ids.append(tokenizer.mask_id)
    ids = frame(tokenizer, ids, model.cfg.family)
    if len(ids) > model.cfg.max_seq_len:
        raise UserError(f"the text is {len(ids)} tokens, longer than the model's context of {model.cfg.max_seq_len}")
    model.eval()
    shift = int(model.cfg.kind.causal)  # a causal stack's output at position p predicts token p + 1
    positions = [p - shift for p, token in enumerate(ids) if token == tokenizer.mask_id]
    if positions[0] < 0:
        raise UserError(
            f"a hybrid decoder predicts each token from the one before it: write text before the first {MASK_TEXT}"
        )
    probs = _mask_logits(model, tokenizer, [ids], [positions]).softmax(dim=-1)  # (n_masks, V)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    return [
        [(tokenizer.decode([i], skip_special=False), float(p)) for p, i in zip(values.tolist(), index.tolist())]
        for values, index in zip(top.values, top.indices)
    ]


@torch.no_grad()
def mlm_continue(
    model,
    tokenizer,
    prompt: str,
    max_new_tokens: int,
    cfg: GenerationConfig | None = None,
    generator: torch.Generator | None = None,
) -> str:
    """Generate with an encoder by appending ``[MASK]`` and predicting it, ``max_new_tokens`` times.
    ``cfg`` chooses greedy or sampling (temperature, top-k, top-p) as for a decoder."""
    check_encoder(model, "MLM generation")
    cfg = (cfg or GenerationConfig()).validate()
    model.eval()
    ids = tokenizer.encode(prompt)
    room = model.cfg.max_seq_len - frame_extra("encoder") - 1  # room for the left side and [MASK]
    seen = torch.zeros(1, model.cfg.vocab_size, dtype=torch.bool, device=device_of(model))
    new = []
    for _ in range(max_new_tokens):
        left = ids[-room:] if room > 0 else []
        seq = frame(tokenizer, [*left, tokenizer.mask_id], "encoder")
        logits = _mask_logits(model, tokenizer, [seq], [[len(seq) - 1]])  # (1, V)
        token = int(choose_next(logits, seen, cfg, generator)[0])
        seen[0, token] = True
        ids.append(token)
        new.append(token)
    return tokenizer.decode(new)


# ---- per-character losses ------------------------------------------------------------------------


def _scored_chars(tokenizer, ids: Sequence[int]) -> int:
    return max(1, len(tokenizer.decode(ids[1:])))


@torch.no_grad()
def encoder_token_nats(model, tokenizer, ids: Sequence[int], both_sides: bool, batch_size: int = 64) -> list[float]:
    """The negative log-likelihood of every token of ``ids`` but the first (so that every scored
    token has context, as for the decoder), each token masked in turn.

    ``both_sides``: the context is split around the token (the pseudo-log-likelihood, what MLM
    trains); otherwise only the left side, as when generating by appending ``[MASK]``."""
    check_encoder(model, "MLM scoring")
    model.eval()
    room = model.cfg.max_seq_len - frame_extra("encoder") - 1
    seqs, positions = [], []
    for t in range(1, len(ids)):
        if both_sides:
            left = ids[max(0, t - room // 2) : t]
            right = ids[t + 1 : t + 1 + room - len(left)]
        else:
            left, right = ids[max(0, t - room) : t], []
        seqs.append(frame(tokenizer, [*left, tokenizer.mask_id, *right], "encoder"))
        positions.append(len(left) + frame_extra("encoder"))
    nats: list[float] = []
    for chunk in batches(len(seqs), batch_size):
        logits = _mask_logits(model, tokenizer, [seqs[i] for i in chunk], [[positions[i]] for i in chunk])
        targets = torch.tensor([ids[i + 1] for i in chunk], device=logits.device)
        nats.extend((-logits.log_softmax(dim=-1).gather(1, targets[:, None])).squeeze(1).tolist())
    return nats


@torch.no_grad()
def decoder_token_nats(model, tokenizer, ids: Sequence[int]) -> list[float]:
    """A decoder's negative log-likelihood of every token of ``ids`` but the first, in windows of
    the context length overlapping by half so every token but the first window's has at least half
    a context behind it."""
    if not model.cfg.kind.causal:
        raise UserError(f"left-to-right scoring needs a decoder, got a {model.cfg.family}")
    model.eval()
    window, device = model.cfg.max_seq_len, device_of(model)
    stride = max(1, window // 2)
    nats: list[float] = []
    scored_until, start = 1, 0  # tokens before ``scored_until`` are done
    while scored_until < len(ids):
        chunk = ids[start : start + window]
        first = max(scored_until, start + 1)  # the first token of this window still to score
        logits = model(torch.tensor([chunk], device=device)).logits[0]  # (T, V)
        targets = torch.tensor(chunk[first - start :], device=device)  # tokens first .. end of chunk
        log_probs = logits[first - start - 1 : len(chunk) - 1].float().log_softmax(dim=-1)  # position t-1 predicts t
        nats.extend((-log_probs.gather(1, targets[:, None])).squeeze(1).tolist())
        scored_until = start + len(chunk)
        start += stride
    return nats


def _held_out_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.encode(text)
    if len(ids) < 2:
        raise UserError("held-out text needs at least two tokens")
    return ids


def encoder_nats_per_char(model, tokenizer, text: str, both_sides: bool, batch_size: int = 64) -> float:
    """``encoder_token_nats`` of ``text``, summed over its characters."""
    ids = _held_out_ids(tokenizer, text)
    return sum(encoder_token_nats(model, tokenizer, ids, both_sides, batch_size)) / _scored_chars(tokenizer, ids)


def decoder_nats_per_char(model, tokenizer, text: str) -> float:
    """``decoder_token_nats`` of ``text``, summed over its characters."""
    ids = _held_out_ids(tokenizer, text)
    return sum(decoder_token_nats(model, tokenizer, ids)) / _scored_chars(tokenizer, ids)


def nats_per_char_blocks(model, tokenizer, text: str, blocks: int, both_sides: bool = False) -> list[float]:
    """Nats per character of ``text`` in ``blocks`` contiguous pieces of its tokens (each scored
    with its whole context): the items an interval over held-out text resamples. Decoders score
    left to right; encoders by ``[MASK]``, ``both_sides`` or from the left only."""
    ids = _held_out_ids(tokenizer, text)
    if model.cfg.kind.causal:
        nats = decoder_token_nats(model, tokenizer, ids)
    else:
        nats = encoder_token_nats(model, tokenizer, ids, both_sides)
    return per_char_blocks(tokenizer, ids, nats, blocks)


def per_char_blocks(tokenizer, ids: Sequence[int], nats: Sequence[float], blocks: int) -> list[float]:
    """``nats[i]`` (the cost of ``ids[i + 1]``) summed over ``blocks`` contiguous pieces, each per
    character: one cut for every scorer of the same text, so that their blocks pair."""
    size = -(-len(nats) // blocks)  # tokens per block
    return [
        sum(nats[start : start + size]) / max(1, len(tokenizer.decode(ids[start + 1 : start + 1 + size])))
        for start in range(0, len(nats), size)
    ]


def break_exercise(
    encoder,
    encoder_tokenizer,
    decoder,
    decoder_tokenizer,
    prompt: str,
    held_out: str,
    max_new_tokens: int = 100,
    cfg: GenerationConfig | None = None,
    seed: int = 0,
) -> dict:
    """Both models continue ``prompt`` (the encoder by appending [MASK]) with the same settings and
    seed, and both are scored on ``held_out`` in nats and bits per character."""
    cfg = (cfg or GenerationConfig(max_new_tokens=max_new_tokens)).validate()
    encoder_sample = mlm_continue(
        encoder, encoder_tokenizer, prompt, max_new_tokens, cfg, seeded_generator(encoder, seed)
    )
    output = generate(
        decoder,
        [decoder_tokenizer.encode(prompt)],
        replace(cfg, max_new_tokens=max_new_tokens),
        None,
        decoder_tokenizer.pad_id,
        generator=seeded_generator(decoder, seed),
    )
    both = encoder_nats_per_char(encoder, encoder_tokenizer, held_out, both_sides=True)
    left = encoder_nats_per_char(encoder, encoder_tokenizer, held_out, both_sides=False)
    causal = decoder_nats_per_char(decoder, decoder_tokenizer, held_out)

    def loss(nats: float) -> dict:
        return {"nats_per_char": nats, "bits_per_char": nats / math.log(2)}

    return {
        "task": "break",
        "prompt": prompt,
        "held_out_chars": len(held_out),
        "decoding": "greedy" if cfg.temperature == 0 else f"sample T={cfg.temperature}",
        "encoder": {
            "sample": encoder_sample,
            "params": encoder.num_parameters(),
            "loss_both_sides": loss(both),
            "loss_left_only": loss(left),
        },
        "decoder": {
            "sample": decoder_tokenizer.decode(output.tokens[0]),
            "params": decoder.num_parameters(),
            "loss_left_only": loss(causal),
        },
    }
