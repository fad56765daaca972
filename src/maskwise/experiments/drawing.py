"""What every report's figures and tables share: pyplot on no screen, one colour per family, file-safe names, and a
Markdown table."""

from __future__ import annotations

import re
from types import ModuleType


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (no screen), imported when a plot is drawn."""
    import matplotlib  # deferred: heavy (about 0.5 s), and only reports draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: as above

    return plt


# One colour per family (and compare's hybrid column) in every plot; other groups take matplotlib's cycle.
COLOURS = {"encoder": "#4c72b0", "decoder": "#dd8452", "encoder-decoder": "#55a868", "hybrid": "#8172b3"}


def ordered(names) -> list[str]:
    """The families first, in one order (``COLOURS``'), then any other group in the order given."""
    names = list(names)
    return [n for n in COLOURS if n in names] + [n for n in names if n not in COLOURS]


def slug(name: str) -> str:
    """A file-name-safe form of a row name: "fill a blank (token accuracy)" -> "fill_a_blank_token_accuracy"."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "metric"


def markdown_table(columns: list[str], rows: list[list]) -> list[str]:
    """A Markdown table's lines: its header, the rule under it, one line a row."""
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]
