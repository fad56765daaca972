"""Generation: greedy, sampling (temperature, top-k, top-p), repetition penalty, stop sequences and
beam search, for decoders and encoder-decoders, with a static KV cache or without one.

Sampling filters live in ``tasks.sampling``, the beam search loop in ``tasks.beam``, scoring given
continuations in ``tasks.scoring``.

A decoder continues a prompt; an encoder-decoder reads the prompt as its source once and writes a
target from its start token. Both are driven through one small "state" per family that answers two
questions: the logits after the prompt (``first``), and the logits after one more token per row
(``step``). The cached state keeps keys/values in a static ``KVCache`` (the encoder's cross-attention
keys/values are computed on the first step and reused); the uncached state re-reads the whole
sequence every step. They compute the same thing, which the tests hold them to (tokens and logits,
greedy and seeded sampling, left-padded batches).

Batched decoder prompts are padded on the LEFT so that every row's newest token is in the last
column; positions count real tokens only (``positions_from_mask``), so padding does not shift a
row's positions and a batched row generates what it would alone.

Context limit (``cfg.max_seq_len``): a prompt that leaves no room for one new token is truncated from
the left to its last ``max_seq_len - 1`` tokens, with a warning (the end of a prompt is what the
continuation depends on most); a row stops when its prompt plus continuation reaches ``max_seq_len``
(for an encoder-decoder: when start token plus target does; an over-long source keeps its last
``max_seq_len`` tokens, also with a warning).

An encoder cannot generate: its MLM training fits p(token | both sides), which says nothing about
the next token given only the left; ``tasks.fill_mask.mlm_continue`` shows what happens if one tries.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from maskwise.errors import UserError
from maskwise.model.layout import decoding_layout
from maskwise.model.positions import positions_from_mask
from maskwise.objectives.span import decoder_start_id
from maskwise.padding import pad
from maskwise.tasks.beam import search_beams
from maskwise.tasks.reading import device_of
from maskwise.tasks.sampling import choose_next, seen_tokens_mask


@dataclass
class GenerationConfig:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy (argmax); > 0 = sample from softmax(logits / temperature)
    top_k: int = 0  # sample among the k most likely tokens only; 0 = all
    top_p: float = 1.0  # sample from the smallest set holding this probability mass; 1 = all
    repetition_penalty: float = 1.0  # CTRL's: logits of seen tokens divided (> 0) or multiplied by it
    num_beams: int = 1  # > 1 = beam search (deterministic: no sampling)
    length_penalty: float = 1.0  # beam scores are log-prob / length ** length_penalty
    stop: tuple[tuple[int, ...], ...] = ()  # token sequences that end a row ([EOS] always does)
    use_cache: bool = True

    def validate(self) -> GenerationConfig:
        if self.max_new_tokens <= 0:
            raise UserError(f"max-new-tokens must be positive, got {self.max_new_tokens}")
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise UserError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise UserError(f"top-k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top-p must be in (0, 1], got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise UserError(f"repetition-penalty must be positive (1 = off), got {self.repetition_penalty}")
        if self.num_beams < 1:
            raise UserError(f"num-beams must be >= 1, got {self.num_beams}")
        sampling_knobs = self.top_k > 0 or self.top_p < 1.0
        if self.temperature == 0 and sampling_knobs:
            raise UserError("top-k and top-p only apply when sampling: set a temperature > 0")
        if self.num_beams > 1 and (self.temperature > 0 or sampling_knobs):
            raise UserError("beam search does not sample: drop temperature/top-k/top-p or use num-beams 1")
        if self.num_beams > 1 and self.stop:
            raise UserError("stop sequences are not supported with beam search (beams end at [EOS])")
        if any(len(s) == 0 for s in self.stop):
            raise UserError("a stop sequence must not be empty")
        return self


@dataclass
class GenerationOutput:
    """``tokens[b]``: the new tokens of row b, up to and including the [EOS] or stop sequence that
    ended it. ``logits``: ``(B, steps, V)`` raw model logits at each step (before any processing),
    when asked for; ``None`` for beam search. ``prompt_lengths``: after any truncation."""

    tokens: list[list[int]]
    prompt_lengths: list[int]
    logits: torch.Tensor | None = None
    scores: list[float] = field(default_factory=list)  # beam search: each returned hypothesis's score


# ---- the two families' decoding states ----------------------------------------------------------


def _padding_only(mask: torch.Tensor) -> torch.Tensor | None:
    """``mask`` (B, L) if it marks any padding, else None: the model then builds no mask tensor and
    attention takes SDPA's mask-free path (``is_causal``, or no mask for one new token per step)."""
    return None if bool(mask.all()) else mask


def _append_to_mask(mask: torch.Tensor | None, length: int, real: torch.Tensor | None) -> torch.Tensor | None:
    """The (B, length + 1) key mask after one more token per row; ``real``: (B,) False where the
    token is padding (a finished row), or None when every row's token is real. None (no padding so
    far) stays None while every token is real; the first padding token materialises it."""
    if real is None:
        return None if mask is None else torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
    if mask is None:
        if bool(real.all()):
            return None
        mask = torch.ones(real.shape[0], length, dtype=torch.long, device=real.device)
    return torch.cat([mask, real[:, None].long()], dim=1)


class _DecoderState:
    """A decoder reading left-padded prompts, with or without a KV cache."""

    def __init__(self, model, ids: torch.Tensor, mask: torch.Tensor, steps: int, use_cache: bool):
        self.model, self.max_pos = model, model.cfg.max_seq_len - 1
        self.ids, self.mask = ids, _padding_only(mask)  # (B, L): everything fed so far; mask or None
        self.positions = positions_from_mask(mask)  # (B, L)
        self.cache = model.make_cache(ids.shape[0], ids.shape[1] + steps) if use_cache else None

    def _logits(self, ids, mask, positions) -> torch.Tensor:
        """The next token's logits (B, V) after ``ids`` (B, T); of T > 1 positions (a prompt's, or every one
        without a cache) the last layer computes the last alone (``Stack``'s ``read_at``)."""
        B, T = ids.shape
        last = torch.full((B, 1), T - 1, device=ids.device) if T > 1 else None  # (B, 1)
        h = self.model.hidden_states(ids, mask, positions=positions, cache=self.cache, read_at=last)  # (B, 1, d)
        return self.model.lm_head.logits(h[:, -1])  # (B, V)

    def first(self) -> torch.Tensor:
        return self._logits(self.ids, self.mask, self.positions)

    def step(self, tokens: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
        """tokens: (B,) the chosen tokens; real: (B,) False for rows already finished (their token
        is padding, masked out as a key), or None when no row has finished."""
        new_pos = (self.positions[:, -1:] + 1).clamp(max=self.max_pos)  # (B, 1)
        self.mask = _append_to_mask(self.mask, self.ids.shape[1], real)
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        self.positions = torch.cat([self.positions, new_pos], dim=1)
        if self.cache is not None:
            return self._logits(tokens[:, None], self.mask, new_pos)
        return self._logits(self.ids, self.mask, self.positions)

    def reorder(self, index: torch.Tensor) -> None:
        self.ids, self.positions = self.ids[index], self.positions[index]
        self.mask = self.mask[index] if self.mask is not None else None
        if self.cache is not None:
            self.cache.reorder(index)


class _EncoderDecoderState:
    """An encoder-decoder: the source is encoded once; the decoder starts from ``start_id``.
    Source and target masks are None while they mark no padding (see ``_padding_only``)."""

    def __init__(self, model, src: torch.Tensor, src_mask: torch.Tensor, start_id: int, steps: int, use_cache: bool):
        self.model, self.src, self.src_mask = model, src, _padding_only(src_mask)
        self.dec = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)  # (B, 1)
        self.dec_mask: torch.Tensor | None = None  # the start token is real in every row
        self.cache = model.make_cache(src.shape[0], steps) if use_cache else None

    def first(self) -> torch.Tensor:
        if self.cache is None:
            return self._uncached()
        encoded = self.model.encode(self.src, self.src_mask)  # (B, S, d); K/V cached on this call
        h = self.model.decode(self.dec, encoded, self.src_mask, self.dec_mask, cache=self.cache)
        return self.model.lm_head.logits(h[:, -1])

    def _uncached(self) -> torch.Tensor:
        encoded = self.model.encode(self.src, self.src_mask)  # re-read each step: the reference path
        h = self.model.decode(self.dec, encoded, self.src_mask, self.dec_mask)  # (B, T, d)
        return self.model.lm_head.logits(h[:, -1])

    def step(self, tokens: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
        self.dec_mask = _append_to_mask(self.dec_mask, self.dec.shape[1], real)
        self.dec = torch.cat([self.dec, tokens[:, None]], dim=1)
        if self.cache is None:
            return self._uncached()
        h = self.model.decode(tokens[:, None], None, self.src_mask, self.dec_mask, cache=self.cache)
        return self.model.lm_head.logits(h[:, -1])

    def reorder(self, index: torch.Tensor) -> None:
        self.src, self.dec = self.src[index], self.dec[index]
        self.src_mask = self.src_mask[index] if self.src_mask is not None else None
        self.dec_mask = self.dec_mask[index] if self.dec_mask is not None else None
        if self.cache is not None:
            self.cache.reorder(index)


def check_generative(model) -> None:
    if not model.cfg.kind.writes:
        raise UserError(
            "an encoder cannot generate: MLM fits p(token | both sides), not p(next token | "
            "left side); use a decoder or encoder-decoder, or see `maskwise break` for what "
            "happens when an encoder is made to generate"
        )


def _truncate(prompts: Sequence[Sequence[int]], keep: int, what: str) -> list[list[int]]:
    result = []
    for prompt in prompts:
        if len(prompt) == 0:
            raise UserError(f"empty {what}: give at least one token of text")
        if len(prompt) > keep:
            warnings.warn(
                f"{what} of {len(prompt)} tokens is longer than the model's context allows; "
                f"keeping its last {keep} tokens",
                stacklevel=4,
            )
            prompt = prompt[-keep:]
        result.append(list(prompt))
    return result


def _start(model, prompts, cfg: GenerationConfig, pad_id: int, start_id: int | None, expand: int):
    """Truncate, pad and wrap prompts in the family's state; rows repeated ``expand`` times (beams).

    Returns (state, per-row limit on new tokens (B*expand,), number of steps, prompt lengths,
    the ids whose repetition is penalised from the start (B*expand lists))."""
    check_generative(model)
    device, limit = device_of(model), model.cfg.max_seq_len
    if model.cfg.kind.causal:
        prompts = _truncate(prompts, limit - 1, "prompt")
        room = [limit - len(p) for p in prompts]
        seen = prompts
    else:
        if start_id is None:
            raise UserError("an encoder-decoder needs a decoder start token id")
        prompts = _truncate(prompts, limit, "source")
        room = [limit - 1] * len(prompts)  # the start token takes one decoder position
        seen = [[] for _ in prompts]
    lengths = [len(p) for p in prompts]
    steps = min(cfg.max_new_tokens, max(room))
    rows = [i for i in range(len(prompts)) for _ in range(expand)]
    state: _DecoderState | _EncoderDecoderState
    if model.cfg.kind.causal:
        ids, mask = pad([prompts[i] for i in rows], pad_id, "left", device)
        state = _DecoderState(model, ids, mask, steps, cfg.use_cache)
    else:
        ids, mask = pad([prompts[i] for i in rows], pad_id, "right", device)
        assert start_id is not None  # an encoder-decoder without one was refused above
        state = _EncoderDecoderState(model, ids, mask, start_id, steps, cfg.use_cache)
    row_limit = torch.tensor([min(cfg.max_new_tokens, room[i]) for i in rows], device=device)
    return state, row_limit, steps, lengths, [seen[i] for i in rows]


def _ends_with_stop(row: list[int], stop: tuple[tuple[int, ...], ...]) -> bool:
    return any(len(row) >= len(s) and tuple(row[-len(s) :]) == s for s in stop)


# ---- greedy and sampling -------------------------------------------------------------------------


def generate(
    model,
    prompts: Sequence[Sequence[int]],
    cfg: GenerationConfig,
    eos_id: int | None,
    pad_id: int,
    start_id: int | None = None,
    generator: torch.Generator | None = None,
    output_logits: bool = False,
) -> GenerationOutput:
    """Continue each prompt (decoder) or write a target for each source (encoder-decoder).

    ``start_id``: the encoder-decoder's decoder start token (``objectives.span.decoder_start_id``,
    the one rule pretraining used). ``generator`` seeds sampling: the same seed gives the same
    tokens with and without the cache. ``output_logits`` keeps each step's raw logits.

    Runs under ``torch.inference_mode``, not ``no_grad``: a step is a few hundred small operators, and
    skipping autograd's view and version bookkeeping made batch-1 decoding 9.5% faster (docs/results.md,
    2026-12-06 fifth session). The logits it returns are cloned out of it, so they are ordinary tensors."""
    cfg.validate()
    with torch.inference_mode(), decoding_layout(model):
        if cfg.num_beams > 1:
            output = beam_search(model, prompts, cfg, eos_id, pad_id, start_id)
        else:
            output = _sample(model, prompts, cfg, eos_id, pad_id, start_id, generator, output_logits)
    if output.logits is not None:
        output.logits = output.logits.clone()
    return output


def _sample(
    model, prompts, cfg: GenerationConfig, eos_id, pad_id, start_id, generator, output_logits: bool
) -> GenerationOutput:
    """Greedy decoding or sampling, one token per row per step (see ``generate``)."""
    model.eval()
    state, row_limit, steps, lengths, seen_ids = _start(model, prompts, cfg, pad_id, start_id, expand=1)
    B, device = len(lengths), row_limit.device
    # Per-row bookkeeping lives in Python lists, read from one ``tolist()`` per step: at batch 1
    # a decoding step is a few milliseconds, and every extra small tensor op costs microseconds.
    limits = row_limit.tolist()
    finished = [False] * B
    penalise = cfg.repetition_penalty != 1.0
    seen = seen_tokens_mask(seen_ids, model.cfg.vocab_size, device) if penalise else None  # (B, V)
    out: list[list[int]] = [[] for _ in range(B)]
    all_logits = []
    logits = state.first()
    for t in range(steps):
        if output_logits:
            all_logits.append(logits.float())
        tokens = choose_next(logits, seen, cfg, generator)
        if any(finished):  # a finished row's token is padding from now on
            tokens = tokens.masked_fill(torch.tensor(finished, device=device), pad_id)
        chosen = tokens.tolist()
        active = [not done for done in finished]
        for row in range(B):
            if not active[row]:
                continue
            out[row].append(chosen[row])
            if seen is not None:
                seen[row, chosen[row]] = True
            if (
                (eos_id is not None and chosen[row] == eos_id)
                or len(out[row]) >= limits[row]
                or _ends_with_stop(out[row], cfg.stop)
            ):
                finished[row] = True
        if all(finished) or t == steps - 1:
            break
        logits = state.step(tokens, None if all(active) else torch.tensor(active, device=device))
    stacked = torch.stack(all_logits, dim=1) if output_logits else None  # (B, steps, V)
    return GenerationOutput(out, lengths, stacked)


@torch.inference_mode()
def beam_search(
    model,
    prompts: Sequence[Sequence[int]],
    cfg: GenerationConfig,
    eos_id: int | None,
    pad_id: int,
    start_id: int | None = None,
) -> GenerationOutput:
    """Beam search (``tasks.beam.search_beams``) from prompts: the entry ``generate`` takes for
    ``num_beams`` > 1, callable with one beam too (then it is greedy decoding)."""
    cfg.validate()
    model.eval()
    state, row_limit, steps, lengths, seen_ids = _start(model, prompts, cfg, pad_id, start_id, expand=cfg.num_beams)
    seen = seen_tokens_mask(seen_ids, model.cfg.vocab_size, row_limit.device)  # (B*K, V)
    tokens, scores = search_beams(state, row_limit, steps, seen, cfg, eos_id, pad_id)
    return GenerationOutput(tokens, lengths, None, scores)


# ---- text in, text out ---------------------------------------------------------------------------


def encode_stop(tokenizer, stops: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    encoded = tuple(tuple(tokenizer.encode(s)) for s in stops)
    if any(not s for s in encoded):
        raise UserError("a stop string encodes to no tokens")
    return encoded


def generate_text(
    model,
    tokenizer,
    prompts: Sequence[str],
    cfg: GenerationConfig,
    generator: torch.Generator | None = None,
    stop_strings: Sequence[str] = (),
) -> list[str]:
    """Encode prompts, generate, decode; the text is cut before the first stop string."""
    cfg = replace(cfg, stop=cfg.stop + encode_stop(tokenizer, stop_strings))
    output = generate(
        model,
        [tokenizer.encode(p) for p in prompts],
        cfg,
        tokenizer.eos_id,
        tokenizer.pad_id,
        decoder_start_id(tokenizer),
        generator,
    )
    texts = []
    for tokens in output.tokens:
        text = tokenizer.decode(tokens)
        for stop in stop_strings:
            text = text.split(stop, 1)[0]
        texts.append(text)
    return texts
