"""Token-classification data: words with one tag each, from the plays or a user's file.

The plays' task is punctuation restoration: a speech with ``, . ; : ! ?`` removed, each word tagged
with the mark that followed it (``O`` for none). Whether a mark follows a word depends on what comes
after it, which a bidirectional encoder sees and a causal decoder does not: the structural claim a
tagging row tests. Line breaks are kept (verse ends its lines on marks more often than not), and the
split is by play, so the test words come from plays no model saw.

A user's file is CoNLL (one ``word ... tag`` per line, the tag in the last column, a blank line
between sentences, a ``-DOCSTART-`` line opening a document) or JSONL (``{"tokens": [...], "tags": [...]}``,
the layout of HF token-classification datasets with string tags).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from maskwise.data.jsonl import jsonl_rows
from maskwise.data.plays import drawn_once, split_plays
from maskwise.errors import UserError

T = TypeVar("T")
OUTSIDE = "O"  # the tag of a word that carries nothing (no mark follows it, no entity)
MARKS = ",.;:!?"
# A word, the marks after it, what closes it after them (quotes, dashes: kept), the whitespace after it.
_WORD = re.compile(r"(\S+?)([" + re.escape(MARKS) + r"]*)([-'\")\]]*)(\s+|$)")


@dataclass(frozen=True)
class TaggedText:
    """Words, one tag each, and the whitespace after each word (spaces unless the source had line breaks)."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    separators: tuple[str, ...]
    source: str = ""
    # The document it belongs to, where its file marks them (CoNLL-2003's ``-DOCSTART-`` line): an interval redraws a
    # document's sentences together. Empty: none marked.
    document: str = ""

    @property
    def text(self) -> str:
        return "".join(w + s for w, s in zip(self.words, self.separators)).rstrip()

    def word_ends(self) -> list[int]:
        """The character offset just past each word in ``text``."""
        ends, at = [], 0
        for word, separator in zip(self.words, self.separators):
            at += len(word)
            ends.append(at)
            at += len(separator)
        return ends


def windows_of(examples: list[TaggedText], chars: int) -> list[TaggedText]:
    """Each text cut at word boundaries into pieces of at most ``chars`` characters (a longer word alone), so
    that every word is read and tagged by a model whose context holds ``chars`` (a character a token at worst)."""
    pieces = []
    for e in examples:
        start, length = 0, 0
        for i, (word, separator) in enumerate(zip(e.words, e.separators)):
            if i > start and length + len(word) > chars:
                pieces.append(
                    replace(e, words=e.words[start:i], tags=e.tags[start:i], separators=e.separators[start:i])
                )
                start, length = i, 0
            length += len(word) + len(separator)
        pieces.append(replace(e, words=e.words[start:], tags=e.tags[start:], separators=e.separators[start:]))
    return pieces


def rejoined(texts: Sequence[TaggedText], windows: Sequence[Sequence[T]]) -> list[list[T]]:
    """Each of ``texts``' values (a tag a word) from its windows' (``windows_of(texts, ...)``, in order): what a
    text is scored on, whatever window it was read in."""
    joined, at = [], 0
    for text in texts:
        words: list[T] = []
        while len(words) < len(text.words):
            words.extend(windows[at])
            at += 1
        joined.append(words)
    return joined


def punctuated_words(text: str) -> tuple[list[str], list[str], list[str]]:
    """(words without their trailing marks, each word's tag: its first mark or ``O``, the whitespace after it)."""
    words, tags, separators = [], [], []
    for match in _WORD.finditer(text):
        word, marks, closing, space = match.groups()
        if not word.strip(MARKS):  # a lone mark ("?!") has no word to attach to
            continue
        words.append(word + closing)
        tags.append(marks[0] if marks else OUTSIDE)
        separators.append("\n" if "\n" in space else " ")
    return words, tags, separators


@drawn_once
def punctuation_examples(split: str, max_chars: int = 200, limit: int | None = None, seed: int = 0) -> list[TaggedText]:
    """Windows of whole words of the ``split`` plays' speeches, at most ``max_chars`` characters each
    (punctuation removed), ``limit`` of them drawn with ``seed`` (all, in play order, when None)."""
    if max_chars < 20:
        raise UserError(f"tagging windows need at least 20 characters, got {max_chars}")
    windows = []
    for play in split_plays()[split]:
        for number, speech in enumerate(play.speeches):
            words, tags, separators = punctuated_words(speech.text)
            start = 0
            while start < len(words):
                end, length = start, 0
                while end < len(words) and length + len(words[end]) <= max_chars:
                    length += len(words[end]) + 1
                    end += 1
                end = max(end, start + 1)  # a word longer than the window stands alone
                windows.append(
                    TaggedText(
                        tuple(words[start:end]),
                        tuple(tags[start:end]),
                        tuple(separators[start:end]),
                        f"{play.slug}:{number}",
                    )
                )
                start = end
    if limit is not None and limit < len(windows):
        windows = random.Random(seed).sample(windows, limit)
    return windows


def tagged_from_file(path: str | Path) -> list[TaggedText]:
    """The sentences of a CoNLL file (``.conll``, ``.txt``, ``.tsv``) or a ``.jsonl`` of tokens and tags."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"tagging data: no such file {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(f"tagging data: {path} is not UTF-8 text (byte offset {error.start})") from None
    rows = _jsonl(path, text) if path.suffix.lower() == ".jsonl" else _conll(path, text)
    if not rows:
        raise UserError(f"tagging data: {path} has no sentences")
    return rows


def _example(words: list[str], tags: list[str], source: str, document: str = "") -> TaggedText:
    return TaggedText(tuple(words), tuple(tags), (" ",) * len(words), source, document)


def _conll(path: Path, text: str) -> list[TaggedText]:
    """Sentences of 'word ... tag' lines (the tag last), blank lines between them; every line as many
    columns as the first (a line that differs is a broken file, whose tag column would be misread). A
    ``-DOCSTART-`` line opens a document, which each sentence after it names."""
    words: list[str]
    tags: list[str]
    rows, words, tags, first, width, document = [], [], [], 0, None, ""
    for number, line in enumerate(text.split("\n"), start=1):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if words:
                rows.append(_example(words, tags, f"{path.name}:{first}", document))
            words, tags = [], []
            if columns:
                document = f"{path.name}:{number}"
            continue
        if len(columns) < 2:
            raise UserError(f"tagging data: {path} line {number} has one column; CoNLL lines are 'word ... tag'")
        width = width or (len(columns), number)
        if len(columns) != width[0]:
            raise UserError(
                f"tagging data: {path} line {number} has {len(columns)} columns, line {width[1]} has "
                f"{width[0]}; every CoNLL line needs the same columns, the tag last"
            )
        if not words:
            first = number
        words.append(columns[0])
        tags.append(columns[-1])
    if words:
        rows.append(_example(words, tags, f"{path.name}:{first}", document))
    return rows


def _jsonl(path: Path, text: str) -> list[TaggedText]:
    rows = []
    for number, record in jsonl_rows(path, text.split("\n"), "tagging data", "need 'tokens' and 'tags'"):
        words, tags = record.get("tokens"), record.get("tags")
        if not (
            isinstance(words, list)
            and isinstance(tags, list)
            and words
            and all(isinstance(x, str) and x.strip() and not any(c.isspace() for c in x) for x in words)
            and all(isinstance(x, str) and x for x in tags)
        ):
            raise UserError(
                f"tagging data: {path} line {number} needs 'tokens' and 'tags': lists of non-empty "
                f"strings (tokens without spaces)"
            )
        if len(words) != len(tags):
            raise UserError(f"tagging data: {path} line {number} has {len(words)} tokens but {len(tags)} tags")
        rows.append(_example(words, tags, f"{path.name}:{number}"))
    return rows
