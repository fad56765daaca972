"""Text to train on: the Shakespeare plays (``data.plays``) or the user's own files, reduced by
``load_corpus`` to a ``Corpus`` of plain-text train/val documents, the only thing pretraining and
tokenizer training look at.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from maskwise.data.plays import render_play, split_plays
from maskwise.errors import UserError

SHAKESPEARE = "shakespeare"

# nanoGPT's convention for a single text: the last 10% (of characters, or of documents) validates.
VAL_FRACTION = 0.1


@dataclass(frozen=True)
class Corpus:
    """Plain-text documents to pretrain on (``train``) and to measure held-out loss on (``val``).

    ``fingerprint`` is a sha256 of the documents alone (not of where they came from), so that any
    artefact derived from the text — a trained tokenizer, a tokenised cache — can be keyed by it.
    """

    name: str
    train: tuple[str, ...]
    val: tuple[str, ...]
    fingerprint: str

    def train_text(self) -> str:
        return "\n\n".join(self.train)

    def val_text(self) -> str:
        return "\n\n".join(self.val)


def make_corpus(name: str, train: Iterable[str], val: Iterable[str]) -> Corpus:
    """Build a ``Corpus`` with its fingerprint; UserError if either part has no text."""
    train, val = tuple(train), tuple(val)
    for part, documents in (("train", train), ("val", val)):
        if not any(document.strip() for document in documents):
            raise UserError(f"corpus {name}: the {part} part is empty")
    digest = hashlib.sha256()
    for part, documents in (("train", train), ("val", val)):
        digest.update(f"{part}:{len(documents)}\n".encode())
        for document in documents:
            encoded = document.encode("utf-8")
            digest.update(f"{len(encoded)}\n".encode())  # length prefix: ("ab","c") != ("a","bc")
            digest.update(encoded)
    return Corpus(name=name, train=train, val=val, fingerprint=digest.hexdigest())


def load_corpus(data: str = SHAKESPEARE, val_data: str | None = None, text_field: str = "text") -> Corpus:
    """Load a corpus from "shakespeare", a text file, a folder of ``*.txt`` files or a ``.jsonl`` file.

    * "shakespeare": one document per play; train and val plays from ``split_plays`` (the test plays
      stay out of pretraining so that downstream tasks evaluate on unseen text).
    * a text file: one document, split by position, the first 90% of characters for train.
    * a folder: every ``*.txt`` below it, sorted by path; a ``.jsonl`` file: the ``text_field`` of
      every line. The last 10% of documents (at least one) validate; a single document is split by
      position like a file. Whitespace-only documents carry nothing to learn and are skipped.
    * ``val_data``, if given, is loaded the same way and used whole as val; ``data`` then trains whole.
    """
    if data == SHAKESPEARE:
        splits = split_plays()
        train = tuple(render_play(play) for play in splits["train"])
        val = tuple(render_play(play) for play in splits["val"])
    else:
        documents = _read_documents(data, text_field)
        train, val = (documents, ()) if val_data is not None else _split_documents(documents)
    if val_data is None:
        return make_corpus(str(data), train, val)
    if val_data == SHAKESPEARE:
        val = tuple(render_play(play) for play in split_plays()["val"])
    else:
        val = _read_documents(val_data, text_field)
    return make_corpus(f"{data} (val: {val_data})", train, val)


def _split_documents(documents: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if len(documents) == 1:
        text = documents[0]
        cut = int(len(text) * (1 - VAL_FRACTION))
        return (text[:cut],), (text[cut:],)
    n_val = max(1, int(len(documents) * VAL_FRACTION))
    return documents[:-n_val], documents[-n_val:]


def _read_documents(source: str, text_field: str) -> tuple[str, ...]:
    path = Path(source).expanduser()
    if not path.exists():
        raise UserError(f"corpus: no such file or folder: {path}")
    if path.is_dir():
        files = sorted((file for file in path.rglob("*.txt") if file.is_file()), key=lambda f: f.as_posix())
        if not files:
            raise UserError(f"corpus: no .txt files in folder {path}")
        documents = tuple(text for file in files if (text := _read_text(file)).strip())
        if not documents:
            raise UserError(f"corpus: every .txt file in {path} is empty")
        return documents
    if path.suffix.lower() == ".jsonl":
        return _read_jsonl(path, text_field)
    text = _read_text(path)
    if not text.strip():
        raise UserError(f"corpus: {path} is empty")
    return (text,)


def _read_text(path: Path) -> str:
    """Read a UTF-8 text file; UserError naming the offset of the first byte that is not text."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"corpus: cannot read {path}: {error.strerror}") from None
    start = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        text = raw[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        invalid = start + error.start
    else:
        invalid = len(raw)
    # NUL decodes as UTF-8 but no text file contains one; report whichever problem comes first.
    nul = raw.find(b"\0", start, invalid)
    if nul != -1:
        raise UserError(f"corpus: {path} is binary, not text (NUL byte at offset {nul})")
    if invalid < len(raw):
        raise UserError(f"corpus: {path} is not UTF-8 text (invalid byte at offset {invalid})")
    return text


def _read_jsonl(path: Path, text_field: str) -> tuple[str, ...]:
    documents = []
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise UserError(f"corpus: {path} line {number} is not valid JSON") from None
        if not isinstance(record, dict):
            raise UserError(f"corpus: {path} line {number} is not a JSON object (need field {text_field!r})")
        if not isinstance(record.get(text_field), str):
            problem = "has no" if text_field not in record else "has a non-string"
            raise UserError(f"corpus: {path} line {number} {problem} field {text_field!r}")
        if record[text_field].strip():
            documents.append(record[text_field])
    if not documents:
        raise UserError(f"corpus: {path} has no documents in field {text_field!r}")
    return tuple(documents)
