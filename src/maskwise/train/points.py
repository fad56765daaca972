"""Shorter runs branched off a longer one: the compute ladder's points.

A run with ``schedule = "wsd"`` and ``points`` keeps, for each fraction f, a checkpoint (weights, optimizer state,
random-number states, counters) where its stable phase reaches ``(1 - cooldown) x f`` of its budget
(``runs.point_root``, never pruned). ``branch`` makes a new run folder of that checkpoint with f of the budget, so
that resuming it runs the cooldown a run of f alone would have run: a shorter run of the same recipe for the price
of its cooldown (Hägele et al. 2024 find such a branch matches a cosine run of its length;
benchmarks/bench_wsd_point.py measures it here).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from maskwise import runs
from maskwise.errors import UserError
from maskwise.train.budget import Budget


def shorter_budget(settings: dict[str, Any], fraction: float) -> dict[str, Any]:
    """``settings`` (a run's flat settings) for ``fraction`` of its length: its budget, or its steps without one, and
    no branch points of its own."""
    budget = Budget.parse(settings["budget"])
    if budget is None:
        return {**settings, "steps": max(1, round(fraction * settings["steps"])), "points": ""}
    amount = fraction * budget.amount
    shorter = f"{budget.kind}={round(amount) if budget.kind == 'tokens' else amount:g}"
    return {**settings, "budget": shorter, "points": ""}


def branch(run_dir: str | Path, fraction: float, out: str | Path) -> dict[str, Any]:
    """Make ``out`` a run folder that continues ``run_dir``'s checkpoint at point ``fraction`` as a run of that
    fraction of its budget (its config, tokenizer, the point's checkpoint, and its metrics, which resuming cuts at the
    point); returns the flat settings to resume it with (``train.pretrain``, ``resume = True``)."""
    run_dir, out = Path(run_dir), Path(out)
    point = runs.newest_intact(runs.point_root(run_dir, fraction))
    if point is None:
        raise UserError(f"{run_dir} kept no intact checkpoint at point {fraction:g} (its settings' points)")
    config = runs.read_json(run_dir / runs.CONFIG_FILE)
    settings = {**shorter_budget(config["settings"], fraction), "out": str(out)}
    shutil.rmtree(out, ignore_errors=True)
    (out / runs.CHECKPOINTS).mkdir(parents=True)
    shutil.copytree(point, out / runs.CHECKPOINTS / point.name)
    shutil.copyfile(run_dir / runs.TOKENIZER_FILE, out / runs.TOKENIZER_FILE)
    shutil.copyfile(run_dir / runs.METRICS_FILE, out / runs.METRICS_FILE)  # resuming cuts it at the point's step
    branched = {"run": str(run_dir), "point": fraction}
    runs.write_json(out / runs.CONFIG_FILE, {**config, "settings": settings, "branched_from": branched})
    return settings
