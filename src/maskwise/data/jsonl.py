"""The one JSONL reader: ``(line number, object)`` per non-blank line, a bad line a one-line ``UserError``.
The corpus, the user's task files and BEIR's files each check their own fields on top of it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from maskwise.errors import UserError


def jsonl_rows(path: Path, lines: Iterable[str], what: str, need: str = "") -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of ``lines`` (a JSONL file's text split at newlines,
    or the open file itself, read as it goes); ``what`` names the file's role in errors, ``need`` says what an
    object must hold when a line is some other JSON value."""
    for line, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            raise UserError(f"{what}: {path} line {line} is not valid JSON") from None
        if not isinstance(record, dict):
            raise UserError(f"{what}: {path} line {line} is not a JSON object" + (f" ({need})" if need else ""))
        yield line, record
