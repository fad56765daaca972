"""Text to train on: the Shakespeare plays (``data.plays``) or the user's own data (``data.sources``),
reduced by ``load_corpus`` to a ``Corpus`` of train/val documents, the only thing pretraining and
tokenizer training look at.

A corpus never holds its documents: each part is a range of a re-readable source, so a corpus larger
than memory is read (hashed once, sampled for the tokenizer, tokenized once) rather than held. The
``train``/``val`` tuples remain for small corpora (the plays, tests).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice

from maskwise.data.plays import render_play, split_plays
from maskwise.data.sources import DocumentSource, in_memory, open_data
from maskwise.errors import UserError

SHAKESPEARE = "shakespeare"

# nanoGPT's convention for a single text: the last 10% (of characters, or of documents) validates.
VAL_FRACTION = 0.1


@dataclass(frozen=True)
class CorpusPart:
    """Documents ``start`` to ``stop`` of ``source``: the train or the val part of a corpus.

    ``source_digest`` and ``source_chars`` describe the whole source (one streaming pass gives them
    before the split is known): the digest identifies the text, the size bounds the part's.
    """

    source: DocumentSource
    start: int
    stop: int
    source_digest: str
    source_chars: int

    def __iter__(self) -> Iterator[str]:
        return islice(iter(self.source), self.start, self.stop)

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Corpus:
    """Documents to pretrain on (``iter_train``) and to measure held-out loss on (``iter_val``).

    ``fingerprint`` is a sha256 of the documents and the split alone (not of where they came from),
    so that any artefact derived from the text — a trained tokenizer, a token file — can be keyed by it.
    """

    name: str
    train_part: CorpusPart
    val_part: CorpusPart
    fingerprint: str

    def iter_train(self) -> Iterator[str]:
        return iter(self.train_part)

    def iter_val(self) -> Iterator[str]:
        return iter(self.val_part)

    @property
    def train(self) -> tuple[str, ...]:
        """Every train document in memory: for small corpora only."""
        return tuple(self.train_part)

    @property
    def val(self) -> tuple[str, ...]:
        return tuple(self.val_part)

    def train_text(self) -> str:
        return "\n\n".join(self.train_part)

    def val_text(self) -> str:
        return "\n\n".join(self.val_part)

    def iter_all(self) -> Iterator[str]:
        return chain(self.train_part, self.val_part)

    def sample_train(self, max_chars: int) -> Iterator[str]:
        """Train documents spread over the whole part, about ``max_chars`` of text at most: every
        k-th document, k from the source's size, stopping at the budget; all of them for a corpus
        within it. Tokenizer training reads this, so it costs a bounded memory on any corpus."""
        stride = max(1, -(-self.train_part.source_chars // max_chars))
        taken = 0
        for document in islice(self.train_part, 0, None, stride):
            if taken and taken + len(document) > max_chars:
                return
            taken += len(document)
            yield document


def make_corpus(name: str, train: Iterable[str], val: Iterable[str]) -> Corpus:
    """A ``Corpus`` over documents in memory; UserError if either part has no text."""
    parts = []
    for label, documents in (("train", tuple(train)), ("val", tuple(val))):
        if not any(document.strip() for document in documents):
            raise UserError(f"corpus {name}: the {label} part is empty")
        parts.append(_whole(in_memory(f"{name} [{label}]", documents)))
    return _corpus(name, *parts)


def load_corpus(data: str = SHAKESPEARE, val_data: str | None = None, text_field: str = "text") -> Corpus:
    """Load a corpus from "shakespeare" or anything ``sources.open_data`` reads.

    * "shakespeare": one document per play; train and val plays from ``split_plays`` (the test plays
      stay out of pretraining so that downstream tasks evaluate on unseen text).
    * an HF dataset (a ``save_to_disk`` folder or a name) with a "validation" (else "test") split:
      its "train" split trains, that split validates.
    * anything else: the last 10% of documents (at least one) validate; a single document (a text
      file) is split by position, the first 90% of characters for train.
    * ``val_data``, if given, is loaded the same way (its own validation split if it has one, else
      all of it) and validates; ``data`` then trains whole.
    """
    val: CorpusPart | None  # None when ``data`` has no validation split: then ``val_data`` gives it
    if data == SHAKESPEARE:
        train, val = _plays("train"), _plays("val")
    else:
        source, own_val = open_data(data, text_field)
        if val_data is None and own_val is None:
            return _split(str(data), source)
        train, val = _whole(source), (_whole(own_val) if own_val is not None else None)
    if val_data is None:
        assert val is not None  # a ``data`` without a validation split was split above
        return _corpus(str(data), train, val)
    if val_data == SHAKESPEARE:
        val = _plays("val")
    else:
        source, own_val = open_data(val_data, text_field)
        val = _whole(own_val if own_val is not None else source)
    return _corpus(f"{data} (val: {val_data})", train, val)


def _plays(split: str) -> CorpusPart:
    return _whole(in_memory(f"shakespeare [{split}]", (render_play(play) for play in split_plays()[split])))


def _scan(source: DocumentSource) -> tuple[int, str, int]:
    """(documents, sha256, characters) of ``source`` in one streaming pass; reading it whole also
    raises any problem inside the data now rather than halfway through tokenizing."""
    digest = hashlib.sha256()
    count = characters = 0
    for document in source:
        encoded = document.encode("utf-8")
        digest.update(f"{len(encoded)}\n".encode())  # length prefix: ("ab","c") != ("a","bc")
        digest.update(encoded)
        count += 1
        characters += len(document)
    return count, digest.hexdigest(), characters


def _whole(source: DocumentSource) -> CorpusPart:
    count, digest, characters = _scan(source)
    return CorpusPart(source, 0, count, digest, characters)


def _split(name: str, source: DocumentSource) -> Corpus:
    count, digest, characters = _scan(source)
    if count == 1:
        text = next(iter(source))
        cut = int(len(text) * (1 - VAL_FRACTION))
        return make_corpus(name, (text[:cut],), (text[cut:],))
    n_val = max(1, int(count * VAL_FRACTION))
    return _corpus(
        name,
        CorpusPart(source, 0, count - n_val, digest, characters),
        CorpusPart(source, count - n_val, count, digest, characters),
    )


def _corpus(name: str, train: CorpusPart, val: CorpusPart) -> Corpus:
    description = "".join(
        f"{label} {part.source_digest} [{part.start}:{part.stop}]\n" for label, part in (("train", train), ("val", val))
    )
    return Corpus(name, train, val, hashlib.sha256(description.encode()).hexdigest())
