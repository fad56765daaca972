"""The user's own task data: JSONL, CSV or TSV with ``text``/``label``, ``query``/``positive`` or
``source``/``target`` fields (a classification file may name its own text and label columns, as
GLUE's ``sentence``/``label``), read into the records the plays' tasks use (``data.tasks``); a bad row
is a ``UserError`` naming its line."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from maskwise.data.jsonl import jsonl_rows
from maskwise.data.tasks import LabelledText, RetrievalSet, Seq2SeqExample
from maskwise.errors import UserError

TABLE_SUFFIXES = (".jsonl", ".csv", ".tsv")
HOLD_OUT = 0.1  # the share of a user's rows that evaluate when no test file is given (drawn at random)
HOLD_OUT_SEED = 0  # draws them: a file sorted by label or date still gives a test split like its whole
# A test split needs this many items, in the unit its metric averages over (texts, sentences, queries), before compare
# judges it: at 30, a paired difference of 0/1 items has a 95% half-width near 0.2 at best, the least that says
# anything; below it one right answer against one wrong one would be "held".
MIN_TEST_ITEMS = 30
# The fields of each row format, read by its reader below (a task module reads its files through one): labelled texts
# (a classification file may name its own columns), query/positive pairs, source/target pairs.
LABELLED_FIELDS = ("text", "label")
RETRIEVAL_FIELDS = ("query", "positive")
SEQ2SEQ_FIELDS = ("source", "target")


def read_task_file(path: str | Path, fields: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """Rows of a ``.jsonl``, ``.csv`` or ``.tsv`` file as ``(line number, {field: text})``.

    A ``.tsv`` is read as GLUE writes it: tab-separated, a header row, quotes taken literally
    (its sentences hold unpaired ``"``, which CSV quoting would swallow across lines).

    Every row must have every field as non-empty text (JSON numbers are accepted for labels and
    turned into text); otherwise a ``UserError`` names the file, line and field."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UserError(
            f"task data: {path} is a folder, not a .jsonl, .csv or .tsv file (a BEIR folder serves "
            f"`evaluate --task retrieve` and `finetune embed`)"
        )
    if not path.is_file():
        raise UserError(f"task data: no such file {path}")
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise UserError(f"task data: {path} must be .jsonl, .csv or .tsv (fields: {', '.join(fields)})")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(f"task data: {path} is not UTF-8 text (byte offset {error.start})") from None
    rows = (
        jsonl_rows(path, text.split("\n"), "task data")
        if suffix == ".jsonl"
        else _csv_rows(path, text, fields, suffix == ".tsv")
    )
    result = []
    for line, record in rows:
        values = {}
        for name in fields:
            value = record.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                problem = "has no" if value is None else "has an empty or non-text"
                raise UserError(f"task data: {path} line {line} {problem} field {name!r}")
            values[name] = value
        result.append((line, values))
    if not result:
        raise UserError(f"task data: {path} has no rows")
    return result


def _csv_rows(path: Path, text: str, fields: Sequence[str], tabs: bool = False):
    dialect: dict[str, Any] = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tabs else {}  # DictReader's keywords
    reader = csv.DictReader(io.StringIO(text, newline=""), **dialect)  # lines end at \n or \r only
    missing = [name for name in fields if name not in (reader.fieldnames or ())]
    if missing:
        raise UserError(
            f"task data: {path} line 1 (header) lacks column(s) {', '.join(missing)} "
            f"(columns: {', '.join(reader.fieldnames or ()) or 'none'})"
        )
    try:
        for record in reader:
            if None in record:
                raise UserError(f"task data: {path} line {reader.line_num} has more cells than the header")
            yield reader.line_num, record
    except csv.Error as error:
        raise UserError(f"task data: {path} line {reader.line_num} is not valid CSV ({error})") from None


def labelled_texts_from_file(path: str | Path, fields: tuple[str, str] = LABELLED_FIELDS) -> list[LabelledText]:
    """Rows of the (text, label) ``fields``; the label is kept as text (a GLUE "0"/"1" stays a string)."""
    text, label = fields
    return [LabelledText(r[text], r[label], f"{Path(path).name}:{line}") for line, r in read_task_file(path, fields)]


def retrieval_from_file(path: str | Path) -> RetrievalSet:
    """Query/positive rows -> a retrieval set whose collection is the distinct positives."""
    rows = read_task_file(path, RETRIEVAL_FIELDS)
    doc_index: dict[str, int] = {}
    for _, r in rows:
        doc_index.setdefault(r["positive"], len(doc_index))
    return RetrievalSet(
        tuple(r["query"] for _, r in rows), tuple(doc_index), tuple(doc_index[r["positive"]] for _, r in rows)
    )


def seq2seq_from_file(path: str | Path) -> list[Seq2SeqExample]:
    return [
        Seq2SeqExample(r["source"], r["target"], f"{Path(path).name}:{line}")
        for line, r in read_task_file(path, SEQ2SEQ_FIELDS)
    ]


def collection_from_file(path: str | Path) -> tuple[str, ...]:
    """Documents to search: one per non-empty line of a text file, or the ``text`` field of each
    row of a ``.jsonl``/``.csv``/``.tsv``."""
    path = Path(path).expanduser()
    if path.suffix.lower() in TABLE_SUFFIXES:
        return tuple(r["text"] for _, r in read_task_file(path, ("text",)))
    if not path.is_file():
        raise UserError(f"collection: no such file {path}")
    try:
        docs = tuple(line for line in path.read_text(encoding="utf-8").split("\n") if line.strip())
    except UnicodeDecodeError as error:
        raise UserError(f"collection: {path} is not UTF-8 text (byte offset {error.start})") from None
    if not docs:
        raise UserError(f"collection: {path} has no documents")
    return docs


def hold_out(items: Sequence, fraction: float = HOLD_OUT) -> tuple[list, list]:
    """(train, eval): a random ``fraction`` of the user's rows (at least one; drawn with ``HOLD_OUT_SEED``) evaluate,
    the rest train, each split in the file's order."""
    if len(items) < 2:
        raise UserError(f"task data: need at least 2 rows to hold some out for evaluation, got {len(items)}")
    n_eval = max(1, int(len(items) * fraction))
    held = set(random.Random(HOLD_OUT_SEED).sample(range(len(items)), n_eval))
    return (
        [item for i, item in enumerate(items) if i not in held],
        [item for i, item in enumerate(items) if i in held],
    )


def user_split(read, data: str | Path, test: str | Path | None = None) -> tuple[list, list]:
    """(train, test) rows of a user's files read by ``read``: ``data``'s and ``test``'s, else ``data``'s with its
    last ``HOLD_OUT`` held out."""
    rows = read(data)
    return (rows, read(test)) if test is not None else hold_out(rows)


def retrieval_split(data: str | Path, test: str | Path | None = None) -> tuple[RetrievalSet, RetrievalSet]:
    """(train, test) retrieval sets of query/positive rows: ``test``'s rows, else the last ``HOLD_OUT`` of
    ``data``'s queries, which then search the whole collection (their passages are in it)."""
    rows = retrieval_from_file(data)
    if test is not None:
        return rows, retrieval_from_file(test)
    train_rows, test_rows = hold_out(range(len(rows.queries)))

    def subset(indices: list[int]) -> RetrievalSet:
        return RetrievalSet(
            tuple(rows.queries[i] for i in indices), rows.docs, tuple(rows.relevant[i] for i in indices)
        )

    return subset(train_rows), subset(test_rows)
