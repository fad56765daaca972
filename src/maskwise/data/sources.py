"""Where documents come from: one reader per kind of ``--data``, each yielding one document at a
time, so that hashing, sampling and tokenizing a corpus larger than memory never holds it whole.

A ``DocumentSource`` is re-readable: every ``iter`` reads it again from the start. Text files (one
document each), JSONL, Parquet (a file, a folder, a glob; read in record batches), a folder written
by HF ``datasets``' ``save_to_disk`` (Arrow, memory-mapped) and a dataset name that
``datasets.load_dataset`` resolves (offline: from its local cache) all end as one. Documents that
are null or only whitespace carry nothing to learn and are skipped.
"""

from __future__ import annotations

import codecs
import glob
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from maskwise.data.jsonl import jsonl_rows
from maskwise.errors import UserError

# Rows decoded at a time from Parquet and Arrow: a few MB of text, whatever the file's row groups.
BATCH_ROWS = 1024
DATASET_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes at a folder's top
VAL_SPLITS = ("validation", "test")  # an HF dataset's own held-out split, in order of preference
STRUCTURED_SUFFIXES = (".jsonl", ".parquet")  # files of many documents, each in the text field
_GLOB_CHARACTERS = frozenset("*?[")
# NAME, OWNER/NAME, optionally :CONFIG; a path-like string with a file suffix is never a name.
_DATASET_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?(:[\w.-]+)?")
_FILE_SUFFIXES = frozenset({".txt", ".md", ".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv"})


@dataclass(frozen=True)
class DocumentSource:
    """Documents read afresh by every ``iter``; ``name`` is what error messages call the source."""

    name: str
    read: Callable[[], Iterable[str]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.read())


def in_memory(name: str, documents: Iterable[str]) -> DocumentSource:
    """A source over documents already in memory (the plays, a test's texts), kept as given."""
    documents = tuple(documents)
    return DocumentSource(name, lambda: documents)


def open_data(data: str, text_field: str = "text") -> tuple[DocumentSource, DocumentSource | None]:
    """The documents ``data`` names, and its own validation documents where it carries them (an HF
    dataset with a "validation" or "test" split), else None.

    Format problems a file's header shows (a Parquet file without ``text_field``) are raised here;
    those inside the data (a bad JSONL line) when it is first read.
    """
    path = Path(data).expanduser()
    if path.is_dir():
        return _open_folder(path, text_field)
    if path.is_file():
        return _open_files(str(path), [path], text_field), None
    if _GLOB_CHARACTERS & set(data):
        files = [match for match in sorted(glob.glob(str(path), recursive=True)) if Path(match).is_file()]
        if not files:
            raise UserError(f"corpus: {data} matches no files")
        return _open_files(data, [Path(file) for file in files], text_field), None
    if path.suffix.lower() not in _FILE_SUFFIXES and _DATASET_NAME.fullmatch(data):
        return _open_hub_dataset(data, text_field)
    raise UserError(f"corpus: no such file or folder: {path}")


def _open_folder(path: Path, text_field: str) -> tuple[DocumentSource, DocumentSource | None]:
    if any((path / marker).is_file() for marker in DATASET_MARKERS):
        return _open_saved_dataset(path, text_field)
    found = {
        suffix: sorted((file for file in path.rglob(f"*{suffix}") if file.is_file()), key=Path.as_posix)
        for suffix in (".txt", ".parquet")
    }
    if found[".txt"] and found[".parquet"]:
        raise UserError(
            f"corpus: folder {path} holds both .txt and .parquet files; "
            f"name one kind with a glob, e.g. '{path}/**/*.parquet'"
        )
    files = found[".parquet"] or found[".txt"]
    if not files:
        raise UserError(f"corpus: no .txt files (nor .parquet files) in folder {path}")
    return _open_files(str(path), files, text_field), None


def _open_files(name: str, files: list[Path], text_field: str) -> DocumentSource:
    """The documents of ``files`` in order: Parquet rows, JSONL lines, or one per text file."""
    readers = [_file_reader(file, text_field) for file in files]  # checks every Parquet header now
    if any(file.suffix.lower() in STRUCTURED_SUFFIXES for file in files):
        empty = f"corpus: {name} has no documents in field {text_field!r}"
    else:
        empty = f"corpus: {name} is empty" if len(files) == 1 else f"corpus: every file in {name} is empty"
    return DocumentSource(name, lambda: _non_blank(chain.from_iterable(read() for read in readers), empty))


def _file_reader(file: Path, text_field: str) -> Callable[[], Iterable[str | None]]:
    suffix = file.suffix.lower()
    if suffix == ".parquet":
        return _parquet_reader(file, text_field)
    if suffix == ".jsonl":
        return lambda: _jsonl_documents(file, text_field)
    return lambda: (read_text(file),)


def _non_blank(documents: Iterable[str | None], empty_message: str) -> Iterator[str]:
    found = False
    for document in documents:
        if document and not document.isspace():
            found = True
            yield document
    if not found:
        raise UserError(empty_message)


def read_text(path: Path) -> str:
    """Read a UTF-8 text file whole; UserError naming the offset of the first byte that is not text."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"corpus: cannot read {path}: {error.strerror}") from None
    return _decode(raw, path, 0)


def _decode(raw: bytes, path: Path, offset: int) -> str:
    """``raw``, the bytes of ``path`` from ``offset`` on, as text; a BOM is dropped at the file's start."""
    start = len(codecs.BOM_UTF8) if offset == 0 and raw.startswith(codecs.BOM_UTF8) else 0
    try:
        text = raw[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        invalid = start + error.start
    else:
        invalid = len(raw)
    # NUL decodes as UTF-8 but no text file contains one; report whichever problem comes first.
    nul = raw.find(b"\0", start, invalid)
    if nul != -1:
        raise UserError(f"corpus: {path} is binary, not text (NUL byte at offset {offset + nul})")
    if invalid < len(raw):
        raise UserError(f"corpus: {path} is not UTF-8 text (invalid byte at offset {offset + invalid})")
    return text


def _jsonl_documents(path: Path, text_field: str) -> Iterator[str]:
    """The ``text_field`` of every line, read a line at a time."""
    try:
        handle = path.open("rb")
    except OSError as error:
        raise UserError(f"corpus: cannot read {path}: {error.strerror}") from None
    with handle:
        for number, record in jsonl_rows(path, _decoded_lines(handle, path), "corpus", f"need field {text_field!r}"):
            if not isinstance(record.get(text_field), str):
                problem = "has no" if text_field not in record else "has a non-string"
                raise UserError(f"corpus: {path} line {number} {problem} field {text_field!r}")
            yield record[text_field]


def _decoded_lines(handle, path: Path) -> Iterator[str]:
    """The lines of binary ``handle`` as text, each checked where it starts (a UTF-8 sequence never holds a
    newline), so an error gives the file's byte offset."""
    offset = 0
    for raw in handle:
        yield _decode(raw, path, offset)
        offset += len(raw)


def _require_text_column(where: str, columns: list[str], text_field: str, non_text_type: str | None) -> None:
    if text_field not in columns:
        raise UserError(
            f"corpus: {where} has no column {text_field!r} (columns: {', '.join(columns) or 'none'}; "
            "choose one with --text-field)"
        )
    if non_text_type is not None:
        raise UserError(f"corpus: {where} column {text_field!r} holds {non_text_type}, not strings")


def _parquet_reader(file: Path, text_field: str) -> Callable[[], Iterator[str | None]]:
    # optional dependency: pyarrow (maskwise[data]), only for Parquet corpora
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(file)
    except (pa.ArrowException, OSError) as error:
        raise UserError(f"corpus: {file} is not a Parquet file ({_first_line(error)})") from None
    column_type = schema.field(text_field).type if text_field in schema.names else None
    is_text = column_type is not None and (
        pa.types.is_string(column_type) or pa.types.is_large_string(column_type) or pa.types.is_string_view(column_type)
    )
    _require_text_column(str(file), list(schema.names), text_field, None if is_text else str(column_type))

    def read() -> Iterator[str | None]:
        try:
            for batch in pq.ParquetFile(file).iter_batches(batch_size=BATCH_ROWS, columns=[text_field]):
                yield from batch.column(0).to_pylist()
        except (pa.ArrowException, OSError) as error:
            raise UserError(f"corpus: cannot read {file}: {_first_line(error)}") from None

    return read


def _open_saved_dataset(path: Path, text_field: str) -> tuple[DocumentSource, DocumentSource | None]:
    import datasets  # optional dependency: datasets (maskwise[data])

    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError) as error:
        raise UserError(f"corpus: cannot load the datasets folder {path}: {_first_line(error)}") from None
    return _dataset_sources(str(path), loaded, text_field)


def _open_hub_dataset(data: str, text_field: str) -> tuple[DocumentSource, DocumentSource | None]:
    """``datasets.load_dataset(NAME[, CONFIG])``: the Hub online, the local cache when offline."""
    import datasets  # optional dependency: datasets (maskwise[data])

    name, _, config = data.partition(":")
    try:
        loaded = datasets.load_dataset(name, config or None)
    except (OSError, ValueError) as error:  # offline: ConnectionError; online: DatasetNotFoundError
        raise UserError(
            f"corpus: {data} is no file or folder, and datasets cannot load a dataset of that name: "
            f"{_first_line(error)}"
        ) from None
    return _dataset_sources(data, loaded, text_field)


def _dataset_sources(name: str, loaded, text_field: str) -> tuple[DocumentSource, DocumentSource | None]:
    """A Dataset whole, or a DatasetDict's "train" split with its "validation" (else "test") split."""
    import datasets  # optional dependency: datasets (maskwise[data])

    if not isinstance(loaded, datasets.DatasetDict):
        return _dataset_documents(name, loaded, text_field), None
    if "train" not in loaded:
        raise UserError(f"corpus: {name} has no 'train' split (splits: {', '.join(loaded)})")
    train = _dataset_documents(f"{name} [train]", loaded["train"], text_field)
    val_split = next((split for split in VAL_SPLITS if split in loaded), None)
    val = _dataset_documents(f"{name} [{val_split}]", loaded[val_split], text_field) if val_split else None
    return train, val


def _dataset_documents(name: str, dataset, text_field: str) -> DocumentSource:
    import datasets  # optional dependency: datasets (maskwise[data])

    feature = dataset.features.get(text_field)
    is_text = isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")
    _require_text_column(name, list(dataset.column_names), text_field, None if is_text else str(feature))
    column = dataset.select_columns([text_field])

    def read() -> Iterator[str | None]:
        for batch in column.iter(batch_size=BATCH_ROWS):
            yield from batch[text_field]

    empty = f"corpus: {name} has no documents in field {text_field!r}"
    return DocumentSource(name, lambda: _non_blank(read(), empty))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
