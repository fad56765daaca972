"""The corruptions as collators: ``data_collator`` for HF's ``Trainer``, ``collate_fn`` for a DataLoader.

A collator takes a list of examples, dicts with ``input_ids`` (as HF datasets give them; other keys
are ignored and recomputed) or plain id lists/tensors, and returns HF-style tensors: right-padded
``input_ids`` and ``attention_mask``, ``labels`` with -100 where no loss is taken, and for the
encoder-decoder collators ``decoder_input_ids``: the labels shifted right behind the model's
``decoder_start_token_id`` (0 = pad for HF T5; 2 = EOS for HF BART), -100 read as pad, as HF's
``shift_tokens_right`` does.

The corruption is done by the objectives' pure functions; nothing here repeats it. Labels follow HF's
conventions, which differ from maskwise's objectives in one place: HF causal LMs shift the labels
themselves, so ``PrefixLMCollator`` returns labels aligned with ``input_ids``.

Special ids come from ``SpecialIds.of(tokenizer)``: an HF tokenizer (``PreTrainedTokenizerFast``;
T5's sentinels are its ``<extra_id_N>`` tokens), a maskwise ``Tokenizer``, or ids given explicitly
as a ``SpecialIds`` (which also stands in for a tokenizer wherever an objective takes one).

Randomness: ``seed=None`` draws from torch's global generator, which DataLoader workers and HF's
``Trainer`` seed (each worker differently); an int gives the collator a generator of its own,
reproducible in one process (but every DataLoader worker would then repeat the same draws).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.denoise import Noiser
from maskwise.objectives.electra import MASK_RATIO, P_MASK, P_RANDOM
from maskwise.objectives.mlm import check_ratio, mask_tokens, special_lookup
from maskwise.objectives.prefix_lm import hide_prefix, sample_prefix_lengths
from maskwise.objectives.span import corrupt_random_spans, shift_right
from maskwise.padding import pad


@dataclass(frozen=True)
class SpecialIds:
    """The ids a corruption needs, with maskwise ``Tokenizer``'s attribute names.

    ``special_ids`` always includes the named ids and the sentinels (``sentinel_ids[i]`` replaces
    the i-th span). ``decode`` (ids -> text) is only needed to find sentence ends for denoising.
    """

    vocab_size: int
    pad_id: int | None = None
    mask_id: int | None = None
    cls_id: int | None = None
    sep_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    sentinel_ids: tuple[int, ...] = ()
    special_ids: frozenset[int] = frozenset()
    decode: Callable[[list[int]], str] | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        named = {
            i for i in (self.pad_id, self.mask_id, self.cls_id, self.sep_id, self.bos_id, self.eos_id) if i is not None
        }
        object.__setattr__(self, "sentinel_ids", tuple(self.sentinel_ids))
        object.__setattr__(self, "special_ids", frozenset(self.special_ids) | named | set(self.sentinel_ids))

    @classmethod
    def of(cls, tokenizer, **overrides) -> SpecialIds:
        """Read the ids from an HF tokenizer, a maskwise ``Tokenizer`` or a ``SpecialIds``;
        ``overrides`` replace any of them (e.g. ``pad_id=`` for a tokenizer without one)."""
        if isinstance(tokenizer, SpecialIds):
            found = tokenizer
        elif hasattr(tokenizer, "all_special_ids"):  # HF transformers
            vocab = tokenizer.get_vocab()
            sentinels: list[int] = []
            while f"<extra_id_{len(sentinels)}>" in vocab:
                sentinels.append(vocab[f"<extra_id_{len(sentinels)}>"])
            found = cls(
                len(tokenizer),
                tokenizer.pad_token_id,
                tokenizer.mask_token_id,
                tokenizer.cls_token_id,
                tokenizer.sep_token_id,
                tokenizer.bos_token_id,
                tokenizer.eos_token_id,
                tuple(sentinels),
                frozenset(tokenizer.all_special_ids),
                tokenizer.decode,
            )
        else:  # maskwise Tokenizer
            found = cls(
                tokenizer.vocab_size,
                tokenizer.pad_id,
                tokenizer.mask_id,
                tokenizer.cls_id,
                tokenizer.sep_id,
                tokenizer.bos_id,
                tokenizer.eos_id,
                tokenizer.sentinel_ids,
                tokenizer.special_ids,
                tokenizer.decode,
            )
        return dataclasses.replace(found, **overrides) if overrides else found

    def need(self, *names: str) -> SpecialIds:
        """Raise a ValueError naming the first of ``names`` this tokenizer lacks; returns self."""
        for name in names:
            if getattr(self, name) in (None, ()):
                raise ValueError(
                    f"the tokenizer has no {name}; give it explicitly: SpecialIds.of(tokenizer, {name}=...)"
                )
        return self


def example_rows(examples) -> list[torch.Tensor]:
    """Each example's ids as a 1-D long tensor: ``example["input_ids"]`` for mappings, else the
    example itself."""
    return [
        torch.as_tensor(ex["input_ids"] if isinstance(ex, Mapping) else ex, dtype=torch.long).reshape(-1)
        for ex in examples
    ]


def split_ends(ids: torch.Tensor, bos_id: int | None, eos_id: int | None):
    """(head, body, tail): a leading BOS and a trailing EOS, where present (tokenizers add them),
    split off the (n,) ids so that noise never touches them."""
    start = int(ids.numel() > 0 and bos_id is not None and int(ids[0]) == bos_id)
    end = ids.numel() - int(ids.numel() > start and eos_id is not None and int(ids[-1]) == eos_id)
    return ids[:start], ids[start:end], ids[end:]


def _generator(seed: int | None) -> torch.Generator | None:
    return torch.Generator().manual_seed(seed) if seed is not None else None


class MLMCollator:
    """BERT's masking (``mlm.mask_tokens``) over the padded examples: special tokens (e.g. the
    tokenizer's [CLS]/[SEP]) and padding are never chosen. Returns input_ids, attention_mask, labels."""

    def __init__(
        self, tokenizer, mask_ratio: float = 0.15, p_mask: float = 0.8, p_random: float = 0.1, seed: int | None = None
    ):
        self.ids = SpecialIds.of(tokenizer).need("pad_id", "mask_id")
        self.is_special = special_lookup(self.ids, self.ids.vocab_size)
        self.ratio, self.p_mask, self.p_random = check_ratio("mask_ratio", mask_ratio), p_mask, p_random
        self.generator = _generator(seed)

    def __call__(self, examples) -> dict[str, torch.Tensor]:
        assert self.ids.pad_id is not None and self.ids.mask_id is not None  # ``need`` refused their absence
        rows = [row.tolist() for row in example_rows(examples)]
        input_ids, attention_mask = pad(rows, self.ids.pad_id)  # (B, T)
        inputs, labels = mask_tokens(
            input_ids,
            self.is_special,
            self.ids.mask_id,
            self.generator,
            self.ratio,
            self.p_mask,
            self.p_random,
            attention_mask,
        )
        return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels}


class ElectraCollator(MLMCollator):
    """ELECTRA's masking (15% chosen, 85% of those [MASK], the rest unchanged): the generator's
    MLM batch; the sampling and the discriminator live in the model."""

    def __init__(
        self,
        tokenizer,
        mask_ratio: float = MASK_RATIO,
        p_mask: float = P_MASK,
        p_random: float = P_RANDOM,
        seed: int | None = None,
    ):
        super().__init__(tokenizer, mask_ratio, p_mask, p_random, seed)


class SpanCorruptionCollator:
    """T5 span corruption of each example (``span.corrupt_random_spans``). A leading BOS and a
    trailing EOS, if the tokenizer added them, are dropped first: the corruption appends its own
    EOS. Returns input_ids, attention_mask, labels (the targets) and decoder_input_ids."""

    def __init__(
        self,
        tokenizer,
        decoder_start_token_id: int,
        noise_density: float = 0.15,
        mean_span_length: float = 3.0,
        seed: int | None = None,
    ):
        self.ids = SpecialIds.of(tokenizer).need("pad_id", "eos_id", "sentinel_ids")
        self.start_id = decoder_start_token_id
        self.noise_density, self.mean_span_length = noise_density, mean_span_length
        self.generator = _generator(seed)

    def __call__(self, examples) -> dict[str, torch.Tensor]:
        ids = self.ids
        assert ids.pad_id is not None and ids.eos_id is not None  # ``need`` refused their absence
        pairs = [
            corrupt_random_spans(
                split_ends(row, ids.bos_id, ids.eos_id)[1],
                self.noise_density,
                self.mean_span_length,
                ids.sentinel_ids,
                ids.eos_id,
                self.generator,
            )
            for row in example_rows(examples)
        ]
        input_ids, attention_mask = pad([inputs.tolist() for inputs, _ in pairs], ids.pad_id)  # (B, S)
        labels, _ = pad([targets.tolist() for _, targets in pairs], IGNORE_INDEX)  # (B, T)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "decoder_input_ids": shift_right(labels, self.start_id, ids.pad_id),
        }


class DenoisingCollator:
    """BART denoising of each example (``denoise.Noiser``); a leading BOS and a trailing EOS stay in
    place. labels = the example as given, input_ids = its noised version, plus decoder_input_ids.

    ``sentence_end_ids``: default found by decoding every id (``sentence_end_lookup``); ``noise``:
    ``DenoiseConfig`` fields, BART-large's by default.
    """

    def __init__(self, tokenizer, decoder_start_token_id: int, sentence_end_ids=None, seed: int | None = None, **noise):
        self.ids = SpecialIds.of(tokenizer).need("pad_id", "mask_id")
        self.noise = Noiser.build(self.ids, self.ids.vocab_size, sentence_end_ids, **noise)
        self.start_id = decoder_start_token_id
        self.generator = _generator(seed)

    def __call__(self, examples) -> dict[str, torch.Tensor]:
        assert self.ids.pad_id is not None  # ``need`` refused its absence
        rows = example_rows(examples)
        noised = []
        for row in rows:
            head, body, tail = split_ends(row, self.ids.bos_id, self.ids.eos_id)
            noised.append(torch.cat([head, self.noise(body, self.generator), tail]))
        input_ids, attention_mask = pad([row.tolist() for row in noised], self.ids.pad_id)  # (B, S)
        labels, _ = pad([row.tolist() for row in rows], IGNORE_INDEX)  # (B, T)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "decoder_input_ids": shift_right(labels, self.start_id, self.ids.pad_id),
        }


class PrefixLMCollator:
    """Prefix-LM batches for HF causal LMs: each example gets a prefix length p uniform in
    [1, length - 1]; labels = input_ids with the prefix and padding at -100, aligned with input_ids
    (HF shifts them), so the loss covers tokens p .. length - 1.

    HF's causal models cannot attend bidirectionally over the prefix, so with them this is "CLM with
    the loss on the continuation". ``return_prefix_lengths=True`` adds ``prefix_lengths`` (B,) for a
    model that takes them (a maskwise ``Decoder``, whose labels ``PrefixLM.prepare`` shifts itself).
    """

    def __init__(self, tokenizer, return_prefix_lengths: bool = False, seed: int | None = None):
        self.ids = SpecialIds.of(tokenizer).need("pad_id")
        self.return_prefix_lengths = return_prefix_lengths
        self.generator = _generator(seed)

    def __call__(self, examples) -> dict[str, torch.Tensor]:
        assert self.ids.pad_id is not None  # ``need`` refused its absence
        rows = [row.tolist() for row in example_rows(examples)]
        input_ids, attention_mask = pad(rows, self.ids.pad_id)  # (B, T)
        prefix_lengths = sample_prefix_lengths(attention_mask.sum(1), self.generator)  # (B,)
        labels = hide_prefix(input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX), prefix_lengths)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if self.return_prefix_lengths:
            batch["prefix_lengths"] = prefix_lengths
        return batch
