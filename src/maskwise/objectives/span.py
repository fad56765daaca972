"""T5 span corruption: drop ~15% of the tokens in short spans; the decoder writes back what was dropped.

The loss is teacher-forced CLM over the *target* only, p(dropped spans | text with holes), so the
decoder is short (about a fifth of the input) and every position it reads carries a loss.

Three pure functions do the work, as in T5's ``random_spans_helper`` and its preprocessors:

- ``span_lengths`` / ``compute_input_and_target_lengths``: the length arithmetic, i.e. how many raw
  tokens make an encoder input of exactly the block size, and how long the target then is;
- ``random_span_mask``: which raw tokens are noise;
- ``corrupt_spans``: the encoder input and the decoder target.

Example, sentinels written <0>, <1>, EOS written </s>; raw ``a b c d e f g h`` with noise ``c d`` and
``g h``::

    input:  a b <0> e f <1> </s>
    target: <0> c d <1> g h </s>

This is exactly what T5's code produces (``noise_span_to_unique_sentinel`` on the inputs, and on the
targets with the mask inverted): each dropped span is introduced by its sentinel, sentinel i for the
i-th span (sentinel 0 first), and EOS ends both sequences. ``random_span_mask`` always starts with
kept text and ends with a noise span, so the target holds noise + spans + 1 tokens, which is what
the length arithmetic counts (512 -> 114). When a mask ends with kept text instead, that trailing
kept text also gets a sentinel at the end of the target: the "final sentinel" <Z> of the T5 paper's
Figure 2, "Thank you <X> me to your party <Y> week." -> "<X> for inviting <Y> last <Z>".

The decoder starts from ``decoder_start_id`` (pad, as T5) and reads the target shifted right by one.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.base import LossParts, Objective, correct_predictions


class SpanLengths(NamedTuple):
    noise: int  # noise tokens (dropped from the input, written in the target)
    spans: int  # noise spans; there are as many kept spans, since the two alternate
    inputs: int  # encoder input length: kept tokens + one sentinel per span + EOS
    targets: int  # decoder target length: noise tokens + one sentinel per span + EOS


def span_lengths(raw_length: int, noise_density: float = 0.15, mean_span_length: float = 3.0) -> SpanLengths:
    """The length arithmetic of span corruption for ``raw_length`` raw tokens::

        noise   = round(raw_length * noise_density), kept within [1, raw_length - 1]
        spans   = max(1, round(noise / mean_span_length))
        inputs  = (raw_length - noise) + spans + 1      kept tokens, a sentinel per span, EOS
        targets = noise + spans + 1                     noise tokens, a sentinel per span, EOS

    e.g. 568 raw tokens: noise = round(85.2) = 85, spans = round(28.33) = 28,
    inputs = 483 + 28 + 1 = 512, targets = 85 + 28 + 1 = 114. Python's ``round`` rounds halves to
    even, like T5's ``tf.round``.

    Raises ``ValueError`` (a ``UserError``) when the numbers cannot make a corruption: density
    outside (0, 1), mean span length below 1, or more spans than kept tokens to separate them.
    """
    if not 0.0 < noise_density < 1.0:
        raise UserError(f"noise_density must be in (0, 1), got {noise_density}")
    if mean_span_length < 1.0:
        raise UserError(f"mean_span_length must be at least 1, got {mean_span_length}")
    if raw_length < 2:
        raise UserError(f"span corruption needs at least 2 raw tokens (one kept, one noise), got {raw_length}")
    noise = min(max(round(raw_length * noise_density), 1), raw_length - 1)
    spans = max(round(noise / mean_span_length), 1)
    kept = raw_length - noise
    if spans > kept:
        raise UserError(
            f"{raw_length} raw tokens at noise_density {noise_density}: {noise} noise tokens make "
            f"round({noise} / {mean_span_length}) = {spans} spans, which need {spans} kept spans between "
            f"them, but only {raw_length} - {noise} = {kept} tokens are kept"
        )
    return SpanLengths(noise, spans, kept + spans + 1, noise + spans + 1)


def compute_input_and_target_lengths(
    input_length: int, noise_density: float = 0.15, mean_span_length: float = 3.0
) -> tuple[int, int]:
    """(raw_length, target_length): the longest raw window whose encoder input fits ``input_length``.

    One more raw token adds one kept token (input +1) or one noise token (input +0, or +1 when it
    completes another span), so the input grows in steps of at most one and the raw length found
    gives an input of exactly ``input_length``. e.g. 512 -> (568, 114): 568 raw tokens give
    483 + 28 + 1 = 512 inputs, while 569 would give round(85.35) = 85 noise tokens and 484 + 28 + 1 =
    513; 128 -> (141, 29): 141 raw tokens, 21 noise in 7 spans, 120 + 7 + 1 = 128 and 21 + 7 + 1 = 29.
    (T5's helper also trims one token when noise_density is 0.5; these lengths are always exact.)
    """
    if input_length < 3:
        raise UserError(f"an encoder input of {input_length} tokens cannot hold a kept token, a sentinel and EOS")
    raw = input_length - 1  # input <= raw + 1 always, since spans <= noise
    span_lengths(raw, noise_density, mean_span_length)  # raises for impossible settings
    while span_lengths(raw + 1, noise_density, mean_span_length).inputs <= input_length:
        raw += 1
    return raw, span_lengths(raw, noise_density, mean_span_length).targets


def _random_segmentation(n_items: int, n_segments: int, generator: torch.Generator | None) -> torch.Tensor:
    """(n_segments,) lengths >= 1 summing to ``n_items``, uniform over all such compositions:
    the segment boundaries are n_segments - 1 distinct cuts among the n_items - 1 gaps."""
    cuts = torch.randperm(n_items - 1, generator=generator)[: n_segments - 1] + 1
    bounds = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([n_items])])
    return bounds.diff()


def random_span_mask(
    length: int, noise_density: float, mean_span_length: float, generator: torch.Generator | None
) -> torch.Tensor:
    """(length,) bool, True = noise: exactly ``span_lengths(length).noise`` noise tokens in
    ``spans`` spans, alternating kept/noise and starting with kept text (so ending with noise).

    The noise tokens and the kept tokens are each split into ``spans`` non-empty segments uniformly
    at random; the segments are then interleaved kept, noise, kept, noise, ...
    ``generator=None`` draws from torch's global generator.
    """
    n = span_lengths(length, noise_density, mean_span_length)
    noise = _random_segmentation(n.noise, n.spans, generator)
    kept = _random_segmentation(length - n.noise, n.spans, generator)
    segments = torch.stack([kept, noise], dim=1).flatten()  # (2 * spans,) kept first
    is_noise = torch.arange(2 * n.spans) % 2 == 1
    return is_noise.repeat_interleave(segments)  # (length,)


def corrupt_spans(
    ids: torch.Tensor, noise_mask: torch.Tensor, sentinel_ids, eos_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(L,) ids and (L,) noise mask -> (encoder input, decoder target), both 1-D.

    input: the kept tokens, each noise span replaced by one sentinel (``sentinel_ids[i]`` for the
    i-th span), then EOS. target: each noise span preceded by its sentinel, then, if the text ends
    with kept tokens, one more sentinel standing for them, then EOS. Lengths: kept + spans + 1 and
    noise + spans (+ 1 for trailing kept text) + 1.
    """
    if ids.dim() != 1 or noise_mask.shape != ids.shape:
        raise ValueError(
            f"ids {tuple(ids.shape)} and noise_mask {tuple(noise_mask.shape)} must be 1-D and of equal length"
        )
    noise = noise_mask.bool()
    starts = noise & ~F.pad(noise[:-1], (1, 0), value=False)  # (L,) first token of each noise span
    n_spans = int(starts.sum())
    trailing = ids.numel() > 0 and not bool(noise[-1])
    needed = n_spans + int(trailing)
    if needed > len(sentinel_ids):
        raise ValueError(
            f"{n_spans} noise spans{' + 1 for the trailing kept text' if trailing else ''} need "
            f"{needed} sentinels, but only {len(sentinel_ids)} are given"
        )
    sentinels = torch.tensor(list(sentinel_ids[:needed]), dtype=ids.dtype)
    span = (starts.cumsum(0) - 1).clamp(min=0)  # (L,) index of the span a noise token belongs to
    marker = sentinels[span]  # (L,) the sentinel of each noise token's span
    inputs = torch.where(starts, marker, ids)[~noise | starts]
    # Each noise token, preceded by its span's sentinel when it starts the span.
    pairs = torch.stack([marker, ids], dim=1)  # (L, 2)
    keep = torch.stack([starts, noise], dim=1)  # (L, 2)
    eos = ids.new_tensor([eos_id])
    targets = torch.cat([pairs[keep], sentinels[n_spans:], eos])
    return torch.cat([inputs, eos]), targets


def corrupt_random_spans(
    ids: torch.Tensor,
    noise_density: float,
    mean_span_length: float,
    sentinel_ids,
    eos_id: int,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``corrupt_spans`` of one (L,) row under a fresh ``random_span_mask``."""
    mask = random_span_mask(ids.numel(), noise_density, mean_span_length, generator)
    return corrupt_spans(ids, mask, sentinel_ids, eos_id)


def shift_right(labels: torch.Tensor, start_id: int, pad_id: int) -> torch.Tensor:
    """(B, T) labels -> (B, T) decoder inputs ``[start] + labels[:-1]``, -100 (padding) read as pad.

    Teacher forcing: decoder position t reads the target up to t - 1 and predicts ``labels[t]``.
    The same convention as HF's ``shift_tokens_right``.
    """
    start = labels.new_full((labels.shape[0], 1), start_id)
    shifted = torch.cat([start, labels[:, :-1]], dim=1)
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_id)


def decoder_start_id(tokenizer) -> int:
    """The token a maskwise encoder-decoder's decoder starts from: pad, as T5.

    One rule for every encoder-decoder objective (span corruption and BART denoising alike), so a
    model generates the same way whichever objective pretrained it. (HF BART starts from EOS; the
    collators take the model's own start id for that reason.)
    """
    return tokenizer.pad_id


class Seq2SeqObjective(Objective):
    """What span corruption and denoising share: the loss is the encoder-decoder's teacher-forced
    CLM over ``labels``; encoder tokens are the real (non-padding) inputs, decoder tokens all
    decoder inputs."""

    families = ("encoder-decoder",)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        attention_mask = batch.get("attention_mask")
        evaluating = not model.training  # a training step reports only the loss: no logits, no accuracy
        out = model(
            batch["input_ids"],
            attention_mask=attention_mask,
            decoder_input_ids=batch["decoder_input_ids"],
            labels=batch["labels"],
            return_logits=evaluating,
        )
        metrics = {"correct": correct_predictions(out.logits, batch["labels"])} if evaluating else {}
        encoder_tokens = int(attention_mask.sum()) if attention_mask is not None else batch["input_ids"].numel()
        return LossParts(
            out.loss_sum,
            out.n_loss_positions,
            encoder_tokens=encoder_tokens,
            decoder_tokens=batch["decoder_input_ids"].numel(),
            metrics=metrics,
        )

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return {"token_acc": totals["correct"] / max(totals["n_positions"], 1)}


class SpanCorruption(Seq2SeqObjective):
    """T5 pretraining: each window of ``raw_length(block_size)`` tokens becomes an encoder input of
    exactly ``block_size`` tokens and a target of ``compute_input_and_target_lengths`` tokens; all
    rows have the same lengths, so nothing is padded and no label is -100."""

    name = "span"

    def __init__(self, tokenizer, noise_density: float = 0.15, mean_span_length: float = 3.0):
        self.noise_density, self.mean_span_length = noise_density, mean_span_length
        self.sentinel_ids = tuple(tokenizer.sentinel_ids)
        self.eos_id, self.pad_id = tokenizer.eos_id, tokenizer.pad_id
        self.start_id = decoder_start_id(tokenizer)

    def raw_length(self, block_size: int) -> int:
        return compute_input_and_target_lengths(block_size, self.noise_density, self.mean_span_length)[0]

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        rows = [
            corrupt_random_spans(
                w, self.noise_density, self.mean_span_length, self.sentinel_ids, self.eos_id, generator
            )
            for w in windows
        ]
        input_ids = torch.stack([inputs for inputs, _ in rows])  # (B, S)
        labels = torch.stack([targets for _, targets in rows])  # (B, T)
        return {
            "input_ids": input_ids,
            "decoder_input_ids": shift_right(labels, self.start_id, self.pad_id),
            "labels": labels,
        }
