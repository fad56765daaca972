"""The typed record a task's evaluation returns: a frozen dataclass per task (``ClassifyRecord``, ...), so that
compare's rows, the ablations and the CLI read named fields, not string paths into nested dicts.

Its JSON (a ``results.json``, a compare's cached measures) is ``to_json``: the fields by name, a nested record as an
object; ``from_json`` reads it back, rebuilding the nested records its type hints name. A field whose JSON key is no
identifier (``ndcg@10``) says its key in ``metadata={"key": ...}``.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Fields")


def key(name: str) -> dict[str, str]:
    """A field's metadata naming its JSON key: ``field(metadata=key("ndcg@10"))``."""
    return {"key": name}


@dataclass(frozen=True)
class Fields:
    """A frozen dataclass that writes itself as JSON and reads itself back: a record, or a part of one (a baseline's
    numbers)."""

    def to_json(self) -> dict[str, Any]:
        """Its fields by their JSON keys; an optional field left at its default None is left out (a retrieval record
        of one relevant passage a query has no graded metrics: its file does not list them as null)."""
        return {
            f.metadata.get("key", f.name): _to_json(value)
            for f in fields(self)
            if (value := getattr(self, f.name)) is not None or f.default is not None
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> typing.Self:
        """The record ``to_json`` wrote. Keys that are none of its fields are what a caller kept beside it (a
        compare's fine-tune folder) and are left to that caller; a missing field without a default is a TypeError."""
        hints = typing.get_type_hints(cls)
        values = {
            f.name: _from_json(hints[f.name], data[f.metadata.get("key", f.name)])
            for f in fields(cls)
            if f.metadata.get("key", f.name) in data
        }
        return cls(**values)


@dataclass(frozen=True)
class Record(Fields):
    """What every task's evaluation records; ``finetune_s`` is set by ``tasks.run.run_task`` (None when the record
    scores a model that was not fine-tuned there: ``maskwise evaluate``, a zero-shot prompt). Its JSON leads with
    ``task``, what it was scored as (``Task.evaluate_name``)."""

    task: ClassVar[str]
    finetune_s: float | None = field(default=None, kw_only=True)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, **super().to_json()}

    def timed(self, seconds: float) -> typing.Self:
        return replace(self, finetune_s=seconds)


def _to_json(value: Any) -> Any:
    if isinstance(value, Fields):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    return value


def _from_json(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` says: a nested ``Fields`` (also as ``X | None``, or the values of a ``dict[str, X]`` or
    items of a ``list[X]``, either of them also ``| None``) rebuilt, anything else as read."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, Fields):
        return hint.from_json(value)
    if origin in (types.UnionType, typing.Union) and len(given := [a for a in args if a is not type(None)]) == 1:
        return _from_json(given[0], value)  # X | None, not None here: read as X
    if origin in (types.UnionType, typing.Union):
        records = [a for a in args if isinstance(a, type) and issubclass(a, Fields)]
        return records[0].from_json(value) if records and isinstance(value, dict) else value
    if origin is dict and len(args) == 2:
        return {k: _from_json(args[1], v) for k, v in value.items()}
    if origin in (list, tuple) and args:
        return [_from_json(args[0], v) for v in value]
    return value
