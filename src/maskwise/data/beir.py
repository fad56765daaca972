"""Retrieval benchmarks in the BEIR / MTEB folder format, so a model is scored on the sets papers report.

A folder holds ``corpus.jsonl`` (``{"_id", "title", "text"}`` per line), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``, ``score``: graded
integer relevance, several judged documents per query, 0 = judged not relevant). Read the way
BEIR's loader reads it:

* a document is embedded as its title and text joined by a space (the text alone without a title);
* a split's queries are those its qrels name, in the order they first appear; a query whose
  judgements are all 0 has nothing to find and is left out (``without_relevant`` counts them), so
  every metric averages over the queries with at least one relevant document;
* the qrels' first line is skipped when its score cell is not an integer (BEIR writes a header);
  TSV cells are taken literally (no CSV quoting), like BEIR's reader.

Bad input (a missing file or split, a qrels row naming an unknown query or document, conflicting
grades for one pair) is a one-line ``UserError`` naming the file and line.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from maskwise.data.jsonl import jsonl_rows
from maskwise.errors import UserError

CORPUS_FILE, QUERIES_FILE, QRELS_FOLDER = "corpus.jsonl", "queries.jsonl", "qrels"


@dataclass(frozen=True)
class GradedRetrievalSet:
    """Queries, a collection, and each query's judged documents with their grades (> 0 only).

    Queries and documents keep their BEIR ids, so per-query numbers can be matched to other tools'
    and a query can be kept from retrieving its own id (``ignore_identical_ids``)."""

    query_ids: tuple[str, ...]
    queries: tuple[str, ...]
    doc_ids: tuple[str, ...]
    docs: tuple[str, ...]
    qrels: tuple[dict[int, int], ...]  # per query: document index -> grade
    without_relevant: int = 0  # queries the qrels name whose every judgement is 0 (left out)

    def pairs(self) -> list[tuple[str, str]]:
        """(query, relevant document) for every judgement above 0: a bi-encoder's training pairs."""
        return [(query, self.docs[doc]) for query, grades in zip(self.queries, self.qrels) for doc in grades]


def beir_splits(folder: str | Path) -> tuple[str, ...]:
    """The splits a BEIR folder has qrels for (``qrels/<split>.tsv``), sorted."""
    qrels = _folder(folder) / QRELS_FOLDER
    splits = tuple(sorted(p.stem for p in qrels.glob("*.tsv"))) if qrels.is_dir() else ()
    if not splits:
        raise UserError(f"BEIR folder {folder} has no qrels/<split>.tsv (relevance judgements to score against)")
    return splits


@dataclass(frozen=True)
class BeirFolder:
    """A BEIR folder's collection and queries, read once; each split's qrels read on demand."""

    path: Path
    doc_ids: tuple[str, ...]
    docs: tuple[str, ...]
    queries: dict[str, str]  # id -> text

    def split(self, name: str, max_queries: int | None = None, seed: int = 0) -> GradedRetrievalSet:
        """The queries and judgements of ``qrels/<name>.tsv``; ``max_queries`` keeps a seeded random
        subset of the queries (the collection stays whole, so the task does not get easier)."""
        doc_index = {doc_id: i for i, doc_id in enumerate(self.doc_ids)}
        judged = _read_qrels(_qrels_path(self.path, name), self.queries, doc_index)
        relevant = {query: grades for query, grades in judged.items() if any(g > 0 for g in grades.values())}
        ids = list(relevant)
        if not ids:
            raise UserError(f"BEIR qrels: {_qrels_path(self.path, name)} grades no document above 0 (nothing to find)")
        if max_queries is not None and max_queries < len(ids):
            keep = sorted(random.Random(f"beir/{name}/{seed}").sample(range(len(ids)), max_queries))
            ids = [ids[i] for i in keep]
        return GradedRetrievalSet(
            query_ids=tuple(ids),
            queries=tuple(self.queries[q] for q in ids),
            doc_ids=self.doc_ids,
            docs=self.docs,
            qrels=tuple({doc: g for doc, g in relevant[q].items() if g > 0} for q in ids),
            without_relevant=len(judged) - len(relevant),
        )


def open_beir(folder: str | Path, splits: tuple[str, ...]) -> BeirFolder:
    """Check that ``folder`` is a BEIR folder with qrels for each of ``splits`` (before reading a
    possibly large collection), then read its corpus and queries."""
    path = _folder(folder)
    for split in splits:
        _qrels_path(path, split)
    docs = {
        doc_id: f"{r['title']} {r['text']}".strip() if r["title"] else r["text"].strip()
        for doc_id, r in _by_id(path / CORPUS_FILE, ("_id", "text"), optional=("title",)).items()
    }
    queries = {query_id: r["text"] for query_id, r in _by_id(path / QUERIES_FILE, ("_id", "text")).items()}
    return BeirFolder(path, tuple(docs), tuple(docs.values()), queries)


def _folder(folder: str | Path) -> Path:
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise UserError(f"BEIR folder {folder}: no such folder")
    missing = [name for name in (CORPUS_FILE, QUERIES_FILE) if not (path / name).is_file()]
    if missing:
        raise UserError(
            f"BEIR folder {folder} has no {' or '.join(missing)} (expected corpus.jsonl, "
            f"queries.jsonl and qrels/<split>.tsv)"
        )
    return path


def _qrels_path(path: Path, split: str) -> Path:
    qrels = path / QRELS_FOLDER / f"{split}.tsv"
    if not qrels.is_file():
        raise UserError(
            f"BEIR folder {path} has no qrels/{split}.tsv (splits with qrels: {', '.join(beir_splits(path))})"
        )
    return qrels


def _by_id(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, dict]:
    """The records of a BEIR JSONL file by ``_id``, in file order; an id given twice is an error."""
    records: dict[str, dict] = {}
    for line, record in _records(path, required, optional):
        if records.setdefault(record["_id"], record) is not record:
            raise UserError(f"BEIR {path.stem}: {path} line {line} repeats _id {record['_id']!r}")
    return records


def _records(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Iterator[tuple[int, dict]]:
    """``(line, record)`` of a BEIR JSONL file, read as it goes: numeric ids turned into text, every
    ``required`` field text, an ``optional`` one text or, when absent or null, empty."""
    what = f"BEIR {path.stem}"
    try:
        with path.open(encoding="utf-8-sig") as lines:
            for line, record in jsonl_rows(path, lines, what):
                if isinstance(record.get("_id"), int) and not isinstance(record["_id"], bool):
                    record["_id"] = str(record["_id"])
                for name in optional:
                    record[name] = "" if record.get(name) is None else record[name]  # absent or null: none
                for name in (*required, *optional):
                    if not isinstance(record.get(name), str):
                        problem = "has no" if name not in record else "has a non-text"
                        raise UserError(f"{what}: {path} line {line} {problem} field {name!r}")
                yield line, record
    except UnicodeDecodeError as error:
        raise UserError(f"{what}: {path} is not UTF-8 text (byte offset {error.start})") from None


def _read_qrels(path: Path, queries: dict[str, str], doc_index: dict[str, int]) -> dict[str, dict[int, int]]:
    """query id -> {document index: grade} of one qrels file, every id checked against the folder's."""
    judged: dict[str, dict[int, int]] = {}
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            for line, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
                if not row or not any(cell.strip() for cell in row):
                    continue
                if len(row) != 3:
                    raise UserError(
                        f"BEIR qrels: {path} line {line} has {len(row)} cells, expected 3 (query-id, corpus-id, score)"
                    )
                query, doc, score = (cell.strip() for cell in row)
                try:
                    grade = int(score)
                except ValueError:
                    if line == 1:
                        continue  # the header
                    raise UserError(f"BEIR qrels: {path} line {line} has score {score!r}, not an integer") from None
                if query not in queries:
                    raise UserError(f"BEIR qrels: {path} line {line} names query {query!r}, not in {QUERIES_FILE}")
                if doc not in doc_index:
                    raise UserError(f"BEIR qrels: {path} line {line} names document {doc!r}, not in {CORPUS_FILE}")
                grades = judged.setdefault(query, {})
                if grades.setdefault(doc_index[doc], grade) != grade:
                    raise UserError(
                        f"BEIR qrels: {path} line {line} grades ({query!r}, {doc!r}) {grade}, "
                        f"after {grades[doc_index[doc]]} earlier"
                    )
    except UnicodeDecodeError as error:
        raise UserError(f"BEIR qrels: {path} is not UTF-8 text (byte offset {error.start})") from None
    except csv.Error as error:
        raise UserError(f"BEIR qrels: {path} is not tab-separated text ({error})") from None
    if not judged:
        raise UserError(f"BEIR qrels: {path} has no judgements")
    return judged
