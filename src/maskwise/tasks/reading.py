"""How every task reads text: each family's framing of a text as ids, its body's hidden states.

Padding side: encoders and encoder-decoders are padded on the right. Decoders are padded on the
right for reading (the "last" pooling finds the last real token either way) and on the left for
generation (``tasks.generate``), where every row's next token must sit in the same column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from maskwise.config import ModelConfig
from maskwise.data.tokenizers import Tokenizer
from maskwise.families import family_of
from maskwise.model.transformer import Transformer
from maskwise.padding import pad


def frame(tokenizer, ids: Sequence[int], family: str) -> list[int]:
    """One text as the family was pretrained to read it: ``[CLS] x`` for an encoder (MLM frames
    its windows so, and ``interop.hf_export.encoder_framing`` too; [CLS] is also the summary position
    for "cls" pooling); the bare ids for a decoder or an encoder-decoder's encoder."""
    return [tokenizer.cls_id, *ids] if family_of(family).encoder_only else list(ids)


def frame_extra(family: str) -> int:
    """How many ids ``frame`` adds to a text."""
    return 1 if family_of(family).encoder_only else 0


def closing(tokenizer, family: str) -> list[int]:
    """What follows a text a task reads: ``[SEP]`` for an encoder whose tokenizer frames a text ``[CLS] x [SEP]``
    (an imported BERT was pretrained reading that, and HF's fine-tunes read it so); nothing for maskwise's own
    tokenizers (MLM frames ``[CLS] x``) or another family."""
    return [tokenizer.sep_id] if family_of(family).encoder_only and tokenizer.closes_with_sep else []


def text_room(tokenizer, family: str, max_len: int) -> int:
    """How many of a text's ids fit ``max_len`` once framed and closed."""
    return max_len - frame_extra(family) - len(closing(tokenizer, family))


@dataclass(frozen=True)
class Encoded:
    """A text's ids (``Tokenizer.encode``) and where each id's characters end in it (its offsets' ends)."""

    ids: tuple[int, ...]
    ends: tuple[int, ...]
    chars: int  # the text's length

    def chars_read(self, room: int) -> int:
        """How many of the text's characters its first ``room`` ids hold (all of them where every id fits)."""
        return self.chars if len(self.ends) <= room else (self.ends[room - 1] if room > 0 else 0)


class Encodings:
    """The encodings a process keeps, (tokenizer fingerprint, text) -> ``Encoded``, oldest let go first past
    ``tokens_kept`` ids in all (compare's plays tasks read about 3 M at a point, the same at every point)."""

    def __init__(self, tokens_kept: int = 5_000_000):
        self.tokens_kept, self.tokens = tokens_kept, 0
        self.kept: dict[tuple[str, str], Encoded] = {}

    def of(self, tokenizer: Tokenizer, texts: Sequence[str]) -> list[Encoded]:
        """Each text's ``Encoded``, encoding only those not kept."""
        key = tokenizer.fingerprint
        missing = [text for text in dict.fromkeys(texts) if (key, text) not in self.kept]
        for text, (ids, offsets) in zip(missing, tokenizer.encode_batch_offsets(missing) if missing else []):
            self.kept[key, text] = Encoded(tuple(ids), tuple(end for _, end in offsets), len(text))
            self.tokens += len(ids)
        found = [self.kept[key, text] for text in texts]
        while self.tokens > self.tokens_kept:
            self.tokens -= len(self.kept.pop(next(iter(self.kept))).ids)
        return found


ENCODINGS = Encodings()


def encoded(tokenizer: Tokenizer, texts: Sequence[str]) -> list[Encoded]:
    """Each text's ``Encoded``, each text encoded once a process per tokenizer definition (``Tokenizer.fingerprint``):
    a fine-tune draws its rows again every epoch, and compare reads the plays' same rows through the same tokenizer
    for every family at every point (``ENCODINGS``)."""
    return ENCODINGS.of(tokenizer, texts)


def token_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> list[tuple[int, ...]]:
    """Each text's ids (``encoded``: each text encoded once)."""
    return [e.ids for e in encoded(tokenizer, texts)]


def encode_texts(
    tokenizer, texts: Sequence[str], family: str, max_len: int, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize, keep the first ids of each text that fit ``max_len`` framed (the start of a passage says
    most about it), and pad on the right: ``(B, T)`` ids and mask."""
    room, close = text_room(tokenizer, family, max_len), closing(tokenizer, family)
    seqs = [frame(tokenizer, ids[:room], family) + close for ids in token_ids(tokenizer, texts)]
    return pad(seqs, tokenizer.pad_id, "right", device)


def config_of(model: nn.Module) -> ModelConfig:
    """A body's layout. Every body is a ``model.transformer.Transformer``, but callers hold it as an
    nn.Module, whose attributes type as Tensor | Module: the one place that says what ``cfg`` is."""
    return cast(ModelConfig, model.cfg)


def body_of(model: nn.Module) -> Transformer:
    """A body as the ``Transformer`` every body is (``config_of``), where its ``read`` or ``cfg`` is called on it."""
    return cast(Transformer, model)


def context_len(model: nn.Module, max_len: int | None = None) -> int:
    """The length to read texts at: ``max_len`` if given, never beyond the model's context."""
    limit = config_of(model).max_seq_len
    return limit if max_len is None else min(max_len, limit)


def device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def seeded_generator(model: nn.Module, seed: int) -> torch.Generator:
    """A generator on the model's device: sampling draws where the logits are."""
    return torch.Generator(device=device_of(model)).manual_seed(seed)


def batches(n: int, size: int) -> list[range]:
    """Consecutive index ranges covering ``0..n-1`` in chunks of ``size``."""
    return [range(start, min(start + size, n)) for start in range(0, n, size)]
