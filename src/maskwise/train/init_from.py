"""``--init-from RUN``: a finished pretraining run's final weights start a new run, whose family and
objective may differ (Ettin's cross-objective continued training, CLM then MLM), so that the phases'
tokens and seconds add up.

The new run keeps ``init_from`` in its ``config.json`` (the source's path, family, objective, its own
``tokens_seen`` / ``wall_s`` and their totals over every earlier phase, and the source's own
``init_from``), and its metrics records carry ``tokens_seen_total`` / ``wall_s_total``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maskwise import runs
from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError

# Record keys a continued run also reports as ``<key>_total``: this phase's value plus every earlier phase's.
TOTALS = ("tokens_seen", "wall_s")
SOURCE_SETTINGS = ("tokenizer", "vocab_size", "preset", "d_model")  # what the new run reads of the source's settings


@dataclass
class Source:
    """A finished run opened to start another one."""

    path: str
    tokenizer: Tokenizer
    weights: Path  # its final weights (read when loaded, so that they are not held through training)
    settings: dict[str, Any]  # its pretraining settings (flat keys)
    record: dict[str, Any]  # what the new run's config.json keeps as "init_from"

    @property
    def label(self) -> str:
        """How weight mismatches name the source: with the layout the new run must repeat."""
        return f"--init-from {self.path} (preset {self.settings['preset']}, d-model {self.settings['d_model']})"


def open_source(path: str) -> Source:
    """The run folder ``path`` if it is a finished pretraining run; anything else is one line."""
    folder, name = Path(path), f"--init-from {path}"
    if not (folder / runs.CONFIG_FILE).is_file():
        raise UserError(f"{name}: not a maskwise run folder (no {runs.CONFIG_FILE})")
    config = runs.read_json(folder / runs.CONFIG_FILE)
    records = runs.read_metrics(folder)
    settings = config.get("settings") if isinstance(config, dict) else None
    if not isinstance(settings, dict) or not records:
        raise UserError(f"{name}: not a pretraining run (no settings or no metrics records)")
    if not (
        all(isinstance(config.get(key), str) for key in ("family", "objective"))
        and all(key in settings for key in SOURCE_SETTINGS)
    ):
        raise UserError(
            f"{name}: its {runs.CONFIG_FILE} lacks what a pretraining run's holds (family, objective, "
            f"settings {', '.join(SOURCE_SETTINGS)})"
        )
    if not (folder / runs.MODEL_FILE).is_file():
        raise UserError(
            f"{name}: the run has not finished (no {runs.MODEL_FILE}); "
            f"finish it with maskwise pretrain --out {path} --resume"
        )
    last = records[-1]
    spent = [last.get(key) for key in TOTALS] + [last.get(f"{key}_total", 0) for key in TOTALS]
    if not all(isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 for value in spent):
        raise UserError(f"{name}: its last metrics record does not give {' and '.join(TOTALS)} as numbers")
    record = {
        "path": str(path),
        "family": config["family"],
        "objective": config["objective"],
        **{key: last[key] for key in TOTALS},
        **{f"{key}_total": last.get(f"{key}_total", last[key]) for key in TOTALS},
    }
    if "init_from" in config:
        record["init_from"] = config["init_from"]
    return Source(
        str(path), Tokenizer.load(folder / runs.TOKENIZER_FILE), folder / runs.MODEL_FILE, config["settings"], record
    )


def earlier_totals(record: dict[str, Any]) -> dict[str, float]:
    """What every phase before this run spent, from its config's ``init_from`` record (for ``Trainer``)."""
    return {key: record[f"{key}_total"] for key in TOTALS}
