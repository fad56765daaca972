"""A user's own tasks for ``maskwise compare``: ``--task NAME=KIND:PATH[,test=PATH][,text=COL][,label=COL]``
(or ``[[task]]`` tables of a ``--config`` file) read into checked train and test rows before anything runs.

Every file is read whole and checked here, so a bad row is one line naming its file, line and field
within seconds of starting, and a compare that would fail after pretraining is refused before it.
With no ``test``, a random ``task_files.HOLD_OUT`` of the rows are the test split, the rule
``maskwise finetune`` uses too; compare refuses one of fewer than ``task_files.MIN_TEST_ITEMS`` items. What each
kind reads and checks is ``tasks.registry``'s; this module only parses the flag and describes the data for the
report.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from maskwise.data.task_files import HOLD_OUT, HOLD_OUT_SEED
from maskwise.errors import UserError

OPTIONS = ("test", "text", "label")  # what may follow the path, as key=value
# compare's own steps and rows (``compare``, ``compare --model``): no task or model may take one of these names.
RESERVED = (
    "lm",
    "export",
    "ttft",
    "next_token",
    "fill",
    "pretrain",
    "measures",
    "compare",
    "compare-models",
    "costs",
    "model",
)


@dataclass(frozen=True)
class TaskSpec:
    """One ``--task``: a name for the report's row, its kind (``tasks.registry.TASKS``), its files and columns."""

    name: str
    kind: str
    data: str
    test: str | None = None
    text: str = "text"  # a classification file's text and label columns (GLUE's are sentence and label)
    label: str = "label"

    def flag(self) -> str:
        """The spec as the ``--task`` value that gives it back (for the report and the folder's record)."""
        extra = [
            f"{name}={getattr(self, name)}"
            for name in OPTIONS
            if getattr(self, name) != next(f.default for f in fields(self) if f.name == name)
        ]
        return f"{self.name}={self.kind}:{','.join([self.data, *extra])}"


def parse_task(value: str, kinds: tuple[str, ...]) -> TaskSpec:
    """``NAME=KIND:PATH[,test=PATH][,text=COL][,label=COL]`` -> a ``TaskSpec``; a malformed value is one line."""
    usage = "--task NAME=KIND:PATH[,test=PATH][,text=COLUMN][,label=COLUMN]"
    name, equals, rest = value.partition("=")
    kind, colon, paths = rest.partition(":")
    if not (equals and colon and name.strip() and paths.strip()):
        raise UserError(f"--task {value!r}: expected {usage}, e.g. --task topics=classify:news.jsonl,test=test.jsonl")
    data, *pairs = paths.split(",")
    options: dict[str, str] = {}
    for pair in pairs:
        key, eq, setting = pair.partition("=")
        if not eq or key not in OPTIONS or not setting:
            raise UserError(f"--task {value!r}: {pair!r} is not one of {', '.join(o + '=...' for o in OPTIONS)}")
        options[key] = setting
    return checked_spec({"name": name, "kind": kind, "data": data, **options}, kinds, f"--task {value!r}")


def checked_spec(values: dict[str, Any], kinds: tuple[str, ...], what: str) -> TaskSpec:
    """A ``TaskSpec`` from a flag's or a ``[[task]]`` table's values, its name and kind checked."""
    known = {f.name for f in fields(TaskSpec)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"{what}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    missing = [key for key in ("name", "kind", "data") if not values.get(key)]
    if missing or not all(isinstance(v, str) for v in values.values()):
        raise UserError(
            f"{what}: needs name, kind and data as text (missing or not text: "
            f"{', '.join(missing) or ', '.join(k for k, v in values.items() if not isinstance(v, str))})"
        )
    spec = TaskSpec(**values)
    if spec.kind not in kinds:
        raise UserError(f"{what}: unknown task kind {spec.kind!r}; known: {', '.join(kinds)}")
    if not spec.name.replace("-", "").replace("_", "").isalnum():
        raise UserError(f"{what}: the name {spec.name!r} must be letters, digits, '-' or '_' (it names files)")
    if spec.name in RESERVED:
        raise UserError(f"{what}: the name {spec.name!r} is one of compare's own measures; choose another")
    return spec


def fingerprint(path: str | Path) -> str:
    """The first 12 hex digits of a file's (or a folder's files') sha256: which data a report read."""
    path = Path(path).expanduser()
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def distribution(labels: list[str], top: int = 8) -> str:
    """ "a 60%, b 40%": the most frequent ``top`` labels' shares, and how many more there are."""
    counts = Counter(labels)
    shown = ", ".join(f"{label} {n / len(labels):.0%}" for label, n in counts.most_common(top))
    return shown + (f" (+{len(counts) - top} more)" if len(counts) > top else "")


@dataclass(frozen=True)
class UserTask:
    """A spec with its rows read and checked: what ``compare`` fine-tunes and tests on."""

    spec: TaskSpec
    train: Any  # the kind's training rows (``tasks.registry``)
    test: Any  # its test rows
    train_rows: int
    test_rows: int
    labels: str = ""  # the label or tag distribution, where the kind has one
    details: dict[str, Any] = field(default_factory=dict)  # what else the kind read (a test split's rule...)
    too_few: str | None = None  # why its test split cannot separate anything whatever its size (one label present)

    @property
    def held_out(self) -> bool:
        """Whether its test split was drawn from its training file (no test file, and no BEIR folder's own qrels)."""
        return self.spec.test is None and "beir_split" not in self.details

    def describe(self) -> dict[str, Any]:
        """What the report names: files, fingerprints, rows per split, labels, the split's rule."""
        files = [self.spec.data] + ([self.spec.test] if self.spec.test else [])
        return {
            "name": self.spec.name,
            "kind": self.spec.kind,
            "flag": self.spec.flag(),
            "files": {f: fingerprint(f) for f in files},
            "train_rows": self.train_rows,
            "test_rows": self.test_rows,
            "split": (
                f"a random {HOLD_OUT:.0%} of the rows held out (seed {HOLD_OUT_SEED})" if self.held_out else "given"
            ),
            **({"labels": self.labels} if self.labels else {}),
            **self.details,
        }
