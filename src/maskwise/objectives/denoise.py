"""BART denoising: corrupt a document; the decoder rewrites the whole original.

Unlike span corruption, the target is the entire document, kept tokens included: the loss is
teacher-forced CLM over the original, p(x | noised x), so the decoder also learns where deleted
tokens were and in which order shuffled sentences belong.

The five transformations of the BART paper, with the semantics of fairseq's ``DenoisingDataset``,
are pure functions on 1-D token tensors in which every position may be noised (callers keep BOS
and EOS outside):

- token masking, ``token_masking``: ceil(ratio * n) distinct tokens become ``<mask>``;
- token deletion, ``token_deletion``: ceil(ratio * n) distinct tokens are removed;
- text infilling, ``text_infilling``: span lengths drawn from Poisson(lambda = 3.5) until they cover
  ceil(ratio * n) tokens; each span becomes a single ``<mask>`` (``replace_length=1``), one mask per
  token (-1) or nothing (0); a span of length 0 inserts a ``<mask>``;
- sentence permutation, ``permute_sentences``: sentences shuffled;
- document rotation, ``rotate_document``: the document starts at a random token and wraps around.

All masking goes through ``mask_spans`` (token masking and deletion are spans of length 1);
``insert_tokens`` is fairseq's insertion noise, which also places the zero-length infilling spans.
A ``Noiser`` applies them in fairseq's order (permute, mask, insert, rotate) as a ``DenoiseConfig``
says; the defaults are BART-large's pretraining.

Sentence boundaries: a token ends a sentence when its text ends in ".", "!" or "?" (closing quotes
and brackets after them allowed), see ``sentence_end_lookup``. A newline is not a boundary: in the
Shakespeare corpus it ends a verse line, not a sentence. (BART's own data had one sentence per line,
and fairseq splits at EOS tokens between them.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from maskwise.config import from_dict
from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.base import LossParts, Objective
from maskwise.objectives.mlm import special_lookup
from maskwise.objectives.span import Seq2SeqObjective, decoder_start_id, shift_right
from maskwise.padding import pad

SENTENCE_ENDERS = (".", "!", "?")
_CLOSERS = " \t\r\n\"')]}\u2019\u201d"  # may follow the punctuation inside a sentence-ending token


def _draw(random_ids: torch.Tensor | None, count: int, generator) -> torch.Tensor:
    """``count`` ids drawn uniformly from ``random_ids`` (the ordinary, non-special tokens)."""
    if random_ids is None:
        raise ValueError("p_random > 0 needs random_ids, the ids that random replacements are drawn from")
    return random_ids[torch.randint(len(random_ids), (count,), generator=generator)]


def _cover(starts: torch.Tensor, ends: torch.Tensor, n: int) -> torch.Tensor:
    """(n,) bool: True inside any half-open range [starts[i], ends[i]) (a difference array)."""
    depth = torch.zeros(n + 1, dtype=torch.long)
    depth.index_add_(0, starts, torch.ones_like(starts))
    depth.index_add_(0, ends, -torch.ones_like(ends))
    return depth.cumsum(0)[:n] > 0


def mask_spans(
    ids: torch.Tensor,
    lengths: torch.Tensor,
    replace_length: int,
    generator,
    mask_id: int | None = None,
    p_random: float = 0.0,
    random_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Noise spans of the given ``lengths`` (all >= 1) starting at distinct random positions.

    A span runs right from its start and stops at the end of ``ids``; spans may overlap. Then:

    - ``replace_length=1``: each span becomes one ``mask_id`` at its start and the rest of it is
      deleted; a span start that falls inside another span's tail is deleted with that tail, so
      overlapping spans merge into one mask (adjacent ones give two);
    - ``replace_length=-1``: every covered token becomes ``mask_id``;
    - ``replace_length=0``: every covered token is deleted (no ``mask_id`` needed).

    Each span is "random" with probability ``p_random``: its mask tokens are then drawn from
    ``random_ids`` instead (BART's ``mask_random``). Returns the noised 1-D tensor.
    """
    if replace_length not in (-1, 0, 1):
        raise UserError(f"replace_length must be -1, 0 or 1, got {replace_length}")
    n, k = ids.numel(), lengths.numel()
    if k > n:
        raise ValueError(f"{k} spans cannot start at distinct positions of {n} tokens")
    if replace_length != 0 and mask_id is None:
        raise ValueError(f"replace_length {replace_length} needs a mask_id")
    starts = torch.randperm(n, generator=generator)[:k]  # (k,)
    ends = (starts + lengths).clamp(max=n)  # (k,)
    is_random = torch.rand(k, generator=generator) < p_random  # (k,)
    covered = _cover(starts, ends, n)  # (n,)
    if replace_length == 0:
        return ids[~covered]
    assert mask_id is not None  # refused above for any replace_length but 0
    out = ids.clone()
    if replace_length == 1:
        replacement = torch.full_like(starts, mask_id)  # (k,) what each span's one token becomes
        if is_random.any():
            replacement[is_random] = _draw(random_ids, int(is_random.sum()), generator)
        out[starts] = replacement
        tails = _cover(starts + 1, ends, n)  # covered, past the start of the span that covers it
        return out[~tails]
    out[covered] = mask_id
    random_cover = _cover(starts[is_random], ends[is_random], n)
    if random_cover.any():
        out[random_cover] = _draw(random_ids, int(random_cover.sum()), generator)
    return out


def insert_tokens(
    ids: torch.Tensor,
    count: int,
    mask_id: int,
    generator,
    p_random: float = 0.0,
    random_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Insert ``count`` new tokens at random places: ``mask_id``, except ceil(count * p_random) of
    them drawn from ``random_ids`` (fairseq's insertion noise). Returns n + count tokens, the old
    ones in their order."""
    total = ids.numel() + count
    slots = torch.randperm(total, generator=generator)[:count]  # (count,) positions of the new tokens
    is_new = torch.zeros(total, dtype=torch.bool)
    is_new[slots] = True
    out = torch.empty(total, dtype=ids.dtype)
    out[~is_new] = ids
    out[slots] = mask_id
    n_random = math.ceil(count * p_random)
    if n_random:
        out[slots[:n_random]] = _draw(random_ids, n_random, generator)
    return out


def poisson_span_lengths(n_tokens: int, poisson_lambda: float, generator) -> torch.Tensor:
    """Span lengths ~ Poisson(``poisson_lambda``), drawn until they cover ``n_tokens``; the last is cut
    so that they sum to exactly ``n_tokens``. Zero lengths are kept (they become insertions)."""
    if poisson_lambda <= 0:
        raise UserError(f"poisson_lambda must be positive, got {poisson_lambda}")
    lengths = torch.zeros(0, dtype=torch.long)
    while int(lengths.sum()) < n_tokens:
        draws = torch.poisson(torch.full((n_tokens,), float(poisson_lambda)), generator=generator)
        lengths = torch.cat([lengths, draws.long()])
    if n_tokens == 0:
        return lengths
    total = lengths.cumsum(0)
    last = int(torch.searchsorted(total, n_tokens))  # the first span to reach n_tokens
    lengths = lengths[: last + 1].clone()
    lengths[last] = n_tokens - (int(total[last - 1]) if last else 0)
    return lengths


def token_masking(
    ids: torch.Tensor,
    ratio: float,
    mask_id: int,
    generator,
    p_random: float = 0.0,
    random_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """ceil(ratio * n) distinct tokens become ``mask_id`` (a ``p_random`` share random tokens)."""
    count = math.ceil(ids.numel() * ratio)
    return mask_spans(ids, torch.ones(count, dtype=torch.long), 1, generator, mask_id, p_random, random_ids)


def token_deletion(ids: torch.Tensor, ratio: float, generator) -> torch.Tensor:
    """ceil(ratio * n) distinct tokens are removed; the rest keep their order."""
    count = math.ceil(ids.numel() * ratio)
    return mask_spans(ids, torch.ones(count, dtype=torch.long), 0, generator)


def text_infilling(
    ids: torch.Tensor,
    ratio: float,
    mask_id: int,
    generator,
    poisson_lambda: float = 3.5,
    replace_length: int = 1,
    p_random: float = 0.0,
    random_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Spans with Poisson lengths covering ceil(ratio * n) tokens (before overlaps) are masked as
    ``mask_spans`` says; each zero-length span inserts one ``mask_id`` at a random place."""
    lengths = poisson_span_lengths(math.ceil(ids.numel() * ratio), poisson_lambda, generator)
    out = mask_spans(ids, lengths[lengths > 0], replace_length, generator, mask_id, p_random, random_ids)
    return insert_tokens(out, int((lengths == 0).sum()), mask_id, generator, p_random, random_ids)


def permute_sentences(ids: torch.Tensor, ends: torch.Tensor, ratio: float, generator) -> torch.Tensor:
    """Shuffle ceil(ratio * m) of the m sentences among their own places; the others stay put.

    ``ends``: (n,) bool, True at sentence-ending tokens. A sentence ends at the last token of a run
    of ending tokens (so "?!" stays whole); text after the last ending token is a sentence too.
    Every sentence keeps its internal order.
    """
    n = ids.numel()
    if n == 0:
        return ids.clone()
    last_of_run = ends & ~torch.cat([ends[1:], ends.new_zeros(1)])  # (n,)
    bounds = (last_of_run.nonzero().squeeze(1) + 1).tolist()
    if not bounds or bounds[-1] != n:
        bounds.append(n)
    starts = [0] + bounds[:-1]
    m = len(bounds)
    chosen = torch.randperm(m, generator=generator)[: math.ceil(m * ratio)]
    order = torch.arange(m)
    order[chosen] = chosen[torch.randperm(len(chosen), generator=generator)]
    return torch.cat([ids[starts[i] : bounds[i]] for i in order.tolist()])


def rotate_document(ids: torch.Tensor, generator) -> torch.Tensor:
    """Start the document at a token chosen uniformly among positions 1..n-1 and wrap around:
    a rotation that is never the identity (for n >= 2)."""
    n = ids.numel()
    if n < 2:
        return ids.clone()
    offset = int(torch.randint(1, n, (1,), generator=generator))
    return torch.cat([ids[offset:], ids[:offset]])


@dataclass
class DenoiseConfig:
    """BART's noise settings, with fairseq's names; the defaults are BART-large's pretraining.

    The paper's five transformations as settings: text infilling = ``mask_length="span-poisson"``
    (the default); token masking = ``mask_length="token"``; token deletion = ``mask_length="token"``
    with ``replace_length=0``; sentence permutation = ``permute_sentences``; document rotation =
    ``rotate``. Setting a rate to 0 switches that noise off.
    """

    mask: float = 0.3  # fraction of tokens to mask: ceil(mask * n)
    mask_random: float = 0.1  # share of masked spans (and inserts) that get a random token instead
    mask_length: str = "span-poisson"  # "span-poisson" (text infilling) or "token" (single tokens)
    poisson_lambda: float = 3.5  # mean span length for text infilling
    replace_length: int = 1  # 1: one <mask> per span; -1: one per token; 0: delete the span
    permute_sentences: float = 1.0  # fraction of sentences shuffled
    rotate: float = 0.0  # probability of rotating the document
    insert: float = 0.0  # extra <mask> tokens inserted, as a fraction of the document

    def validate(self) -> DenoiseConfig:
        for name in ("mask", "mask_random", "permute_sentences", "rotate", "insert"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UserError(f"denoising: {name} must be in [0, 1], got {getattr(self, name)}")
        if self.mask_length not in ("span-poisson", "token"):
            raise UserError(f"denoising: mask_length must be span-poisson or token, got {self.mask_length!r}")
        if self.replace_length not in (-1, 0, 1):
            raise UserError(f"denoising: replace_length must be -1, 0 or 1, got {self.replace_length}")
        if self.poisson_lambda <= 0:
            raise UserError(f"denoising: poisson_lambda must be positive, got {self.poisson_lambda}")
        return self


def sentence_end_lookup(tokenizer, vocab_size: int, enders: tuple[str, ...] = SENTENCE_ENDERS) -> torch.Tensor:
    """(V,) bool: True for tokens that end a sentence.

    A token ends a sentence when its decoded text, after dropping trailing whitespace, quotes and
    closing brackets, ends with one of ``enders``: ".", "!", "?" by default, which also catches
    subword merges such as '?"' or '.)'. Special tokens never do. For text with one sentence per
    line, pass ``enders=(".", "!", "?", "\\n")``: a token that ends with a newline then counts too.
    """
    lookup = torch.zeros(vocab_size, dtype=torch.bool)
    special = set(tokenizer.special_ids)
    for i in range(vocab_size):
        if i in special:
            continue
        text = tokenizer.decode([i])
        lookup[i] = text.endswith(enders) or text.rstrip(_CLOSERS).endswith(enders)
    return lookup


@dataclass
class Noiser:
    """The noise of a ``DenoiseConfig`` applied to one (n,) document, with everything else bound:
    the mask id, the (V,) sentence-end lookup and the ids random replacements are drawn from.
    The order is fairseq's: permute sentences, mask, insert, rotate."""

    cfg: DenoiseConfig
    mask_id: int
    is_sentence_end: torch.Tensor  # (V,) bool
    random_ids: torch.Tensor  # (V_ordinary,) the non-special ids

    @classmethod
    def build(cls, tokenizer, vocab_size: int, sentence_end_ids=None, **options) -> Noiser:
        """``tokenizer``: a maskwise ``Tokenizer`` or a ``collators.SpecialIds`` (``mask_id``,
        ``special_ids``, and ``decode`` unless ``sentence_end_ids`` are given); ``options``:
        ``DenoiseConfig`` fields, unknown names rejected."""
        cfg = from_dict(DenoiseConfig, options, "denoising options").validate()
        if sentence_end_ids is not None:
            is_sentence_end = torch.zeros(vocab_size, dtype=torch.bool)
            is_sentence_end[list(sentence_end_ids)] = True
        elif getattr(tokenizer, "decode", None) is None:
            raise ValueError("no decode to find sentence ends with: pass sentence_end_ids")
        else:
            is_sentence_end = sentence_end_lookup(tokenizer, vocab_size)
        random_ids = (~special_lookup(tokenizer, vocab_size)).nonzero().squeeze(1)
        return cls(cfg, tokenizer.mask_id, is_sentence_end, random_ids)

    def __call__(self, ids: torch.Tensor, generator) -> torch.Tensor:
        cfg = self.cfg
        if cfg.permute_sentences > 0:
            ids = permute_sentences(ids, self.is_sentence_end[ids], cfg.permute_sentences, generator)
        if cfg.mask > 0:
            if cfg.mask_length == "span-poisson":
                ids = text_infilling(
                    ids,
                    cfg.mask,
                    self.mask_id,
                    generator,
                    cfg.poisson_lambda,
                    cfg.replace_length,
                    cfg.mask_random,
                    self.random_ids,
                )
            elif cfg.replace_length == 0:
                ids = token_deletion(ids, cfg.mask, generator)
            else:
                ids = token_masking(ids, cfg.mask, self.mask_id, generator, cfg.mask_random, self.random_ids)
        if cfg.insert > 0:
            ids = insert_tokens(
                ids, math.ceil(ids.numel() * cfg.insert), self.mask_id, generator, cfg.mask_random, self.random_ids
            )
        if cfg.rotate > 0 and float(torch.rand(1, generator=generator)) < cfg.rotate:
            ids = rotate_document(ids, generator)
        return ids


class Denoising(Seq2SeqObjective):
    """BART pretraining on raw windows: the encoder reads ``noise(window) + [EOS]`` (padded to the
    batch's longest, with an attention mask), the decoder rewrites ``window + [EOS]`` starting from
    ``decoder_start_id`` (pad). The noised input can be longer than the window (insertions, or
    zero-length infilling spans), so leave the model's ``max_seq_len`` some room when inserting.

    ``sentence_end_ids``: the ids that end a sentence; default ``sentence_end_lookup(tokenizer)``.
    ``noise``: ``DenoiseConfig`` fields (unknown names are rejected); defaults are BART-large's.
    """

    name = "denoise"

    def __init__(self, tokenizer, vocab_size: int, sentence_end_ids=None, **noise):
        self.noise = Noiser.build(tokenizer, vocab_size, sentence_end_ids, **noise)
        self.eos_id, self.pad_id = tokenizer.eos_id, tokenizer.pad_id
        self.start_id = decoder_start_id(tokenizer)

    def raw_length(self, block_size: int) -> int:
        return block_size - 1  # one position goes to EOS

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        eos = windows.new_full((windows.shape[0], 1), self.eos_id)
        labels = torch.cat([windows, eos], dim=1)  # (B, T) the original, which the decoder rewrites
        noised = [torch.cat([self.noise(w, generator), eos[0]]) for w in windows]
        input_ids, attention_mask = pad(
            [row.tolist() for row in noised], self.pad_id, "right", windows.device
        )  # (B, S)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": shift_right(labels, self.start_id, self.pad_id),
            "labels": labels,
        }


class PromptDenoising(Objective):
    """BART denoising for a decoder-only model: one causal sequence ``noise(window) [SEP] window [EOS]``
    with the loss on the rewrite only. It is the layout in which a decoder reads a read-then-write task
    (``tasks.seq2seq``), so that a decoder and an encoder-decoder pretrained by the same noise differ in
    structure alone; Wang et al. (2022) train their decoder-only models on MLM this way. A noised
    source longer than the window (insertions, zero-length infilling spans) loses its tail."""

    name = "denoise"
    families = ("decoder",)

    def __init__(self, tokenizer, vocab_size: int, sentence_end_ids=None, **noise):
        self.noise = Noiser.build(tokenizer, vocab_size, sentence_end_ids, **noise)
        self.sep_id, self.eos_id, self.pad_id = tokenizer.sep_id, tokenizer.eos_id, tokenizer.pad_id

    def raw_length(self, block_size: int) -> int:
        return (block_size - 1) // 2  # source and rewrite of a window each, [SEP], [EOS], less the shift's one

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        sep, eos = windows.new_tensor([self.sep_id]), windows.new_tensor([self.eos_id])
        inputs, labels = [], []
        for window in windows:
            source = self.noise(window, generator)[: window.numel()]
            sequence = torch.cat([source, sep, window, eos])  # (n + T + 2,)
            inputs.append(sequence[:-1].tolist())
            # position t predicts token t + 1: the source's own tokens and [SEP] carry no loss
            labels.append([IGNORE_INDEX] * source.numel() + sequence[source.numel() + 1 :].tolist())
        input_ids, attention_mask = pad(inputs, self.pad_id, "right", windows.device)  # (B, L)
        label_ids, _ = pad(labels, IGNORE_INDEX, "right", windows.device)  # (B, L)
        # right padding under a causal mask: no real position sees a pad, so the model needs no mask
        return {"input_ids": input_ids, "labels": label_ids, "attention_mask": attention_mask}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        out = model(batch["input_ids"], labels=batch["labels"], return_logits=False)  # only the loss is used
        return LossParts(out.loss_sum, out.n_loss_positions, decoder_tokens=int(batch["attention_mask"].sum()))
