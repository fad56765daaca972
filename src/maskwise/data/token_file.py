"""A tokenized corpus on disk, the idea of nanoGPT's ``train.bin``: every token id of every
document, ``[EOS]`` after each, as one flat array of the smallest unsigned integer dtype that holds
the vocabulary, memory-mapped when read so that a corpus larger than RAM never has to fit in it.

Documents stream in chunks through ``encode_batch`` and are appended to the file, so preparing it
costs one chunk's memory. A JSON sidecar records the format, dtype, length, tokenizer hash and
corpus fingerprint. The file and the sidecar are each written under a temporary name and renamed,
the sidecar last, and a file is trusted only when its sidecar matches and its size agrees: a killed
preparation leaves nothing that a later run believes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sized
from pathlib import Path

import numpy as np
from tqdm import tqdm

from maskwise.errors import UserError
from maskwise.runs import atomic_write, fsync_dir

FORMAT = 1
TOKEN_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))
# A chunk ends at whichever comes first; the characters bound the memory of one encode_batch.
CHUNK_DOCUMENTS = 2048
CHUNK_CHARS = 4_000_000


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids ``0 .. vocab_size - 1``."""
    for dtype in TOKEN_DTYPES:
        if vocab_size <= np.iinfo(dtype).max + 1:
            return dtype
    raise UserError(f"token file: a vocabulary of {vocab_size} ids does not fit in 32 bits")


def tokenizer_hash(tokenizer) -> str:
    return hashlib.sha256(tokenizer.backend.to_str().encode()).hexdigest()


def encode_documents(documents: Iterable[str], tokenizer) -> list[int]:
    """The ids of ``documents`` joined into one stream, ``[EOS]`` after each (where the tokenizer has one)."""
    eos = tokenizer.eos_id
    ids: list[int] = []
    for encoded in tokenizer.encode_batch(documents):
        ids.extend(encoded)
        if eos is not None:
            ids.append(eos)
    return ids


def cached_tokens(
    fingerprint: str, documents: Iterable[str], tokenizer, cache_root: Path, progress: bool = False
) -> np.ndarray:
    """The token file of ``documents`` (whose fingerprint is ``fingerprint``) under ``cache_root``,
    memory-mapped: the one already there for this text and tokenizer, else written now."""
    header = {"format": FORMAT, "fingerprint": fingerprint, "tokenizer": tokenizer_hash(tokenizer)}
    name = hashlib.sha256(f"{fingerprint}\n{header['tokenizer']}".encode()).hexdigest()[:24]
    path = cache_root / "streams" / f"{name}.bin"
    found = read_token_file(path, header)
    if found is not None:
        return found
    return write_token_file(path, documents, tokenizer, header, progress)


def sidecar_path(path: Path) -> Path:
    return path.with_suffix(".json")


def read_token_file(path: Path, header: dict) -> np.ndarray | None:
    """The ids in ``path``, memory-mapped read-only; None unless the sidecar matches ``header`` and
    the file has exactly the size it records (anything else is rebuilt, never trusted)."""
    try:
        info = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
        dtype, length = np.dtype(info["dtype"]), int(info["length"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if any(info.get(key) != value for key, value in header.items()) or dtype not in TOKEN_DTYPES or length < 0:
        return None
    try:
        if path.stat().st_size != length * dtype.itemsize:
            return None
    except OSError:
        return None
    if length == 0:
        return np.zeros(0, dtype=dtype)  # an empty file cannot be mapped
    return np.memmap(path, dtype=dtype, mode="r", shape=(length,))


def write_token_file(
    path: Path, documents: Iterable[str], tokenizer, header: dict, progress: bool = False
) -> np.ndarray:
    """Tokenize ``documents`` chunk by chunk into ``path``; returns the finished file, memory-mapped."""
    dtype = token_dtype(tokenizer.vocab_size)
    total = len(documents) if isinstance(documents, Sized) else None
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    length = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with (
            open(temporary, "wb") as handle,
            tqdm(
                total=total,
                unit="doc",
                desc=f"tokenizing into {path.name}",
                file=sys.stderr,
                disable=None if progress else True,
            ) as bar,
        ):
            for chunk in _chunks(documents):
                ids = np.asarray(encode_documents(chunk, tokenizer), dtype=dtype)
                handle.write(ids.tobytes())
                length += len(ids)
                bar.update(len(chunk))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise UserError(f"token file: cannot write {path}: {error.strerror or error}") from None
    finally:
        temporary.unlink(missing_ok=True)
    fsync_dir(path.parent)
    info = {**header, "dtype": dtype.name, "length": length, "vocab_size": tokenizer.vocab_size}
    atomic_write(sidecar_path(path), json.dumps(info, indent=1).encode())
    written = read_token_file(path, header)
    if written is None:
        raise UserError(f"token file: {path} changed while it was being written")
    return written


def _chunks(documents: Iterable[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    characters = 0
    for document in documents:
        chunk.append(document)
        characters += len(document)
        if len(chunk) >= CHUNK_DOCUMENTS or characters >= CHUNK_CHARS:
            yield chunk
            chunk, characters = [], 0
    if chunk:
        yield chunk
