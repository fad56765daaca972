"""The ablations by name, and ``run_ablation``: one folder, one scale, its seeds, its report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from maskwise.errors import UserError
from maskwise.experiments.ablations import (
    clm_then_mlm,
    cross_objective,
    electra,
    embedder,
    hybrid,
    mask_ratio,
    pooling,
    reranker,
    seq2seq,
    shift_bug,
)
from maskwise.experiments.arms import Setup
from maskwise.experiments.framework import Study, conduct, write
from maskwise.experiments.runner import Experiment
from maskwise.recipes import SCALES, Scale
from maskwise.runtime import Runtime

ABLATIONS: dict[str, Study] = {
    "embedder": embedder.ABLATION,
    "mask-ratio": mask_ratio.ABLATION,
    "shift-bug": shift_bug.ABLATION,
    "seq2seq": seq2seq.ABLATION,
    "electra": electra.ABLATION,
    "pooling": pooling.ABLATION,
    "reranker": reranker.ABLATION,
    "hybrid": hybrid.ABLATION,
    "cross-objective": cross_objective.ABLATION,
    "clm-then-mlm": clm_then_mlm.ABLATION,
}


def checked(name: str, scale: str, seeds: int, options: dict) -> tuple[Study, Scale]:
    """The ablation and scale named, or a UserError naming what is wrong (before anything runs)."""
    if name not in ABLATIONS:
        raise UserError(f"unknown ablation {name!r}; known: {', '.join(ABLATIONS)}")
    ablation = ABLATIONS[name]
    unknown = sorted(set(options) - set(ablation.options))
    if unknown:
        accepted = ", ".join(ablation.options) or "none"
        raise UserError(f"ablation {name} does not take {', '.join(unknown)} (its options: {accepted})")
    if seeds < 2:
        raise UserError(f"seeds must be at least 2 (a spread needs two values), got {seeds}")
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    ablation.arms(**options)  # its own options (mask ratios) are checked by building its arms
    chosen = SCALES[scale]
    batch = max(1, chosen.recipe.batch_size // ablation.steps_factor)
    recipe = chosen.recipe.retuned(chosen.recipe.name, ablation.tasks, batch_size=batch)
    return ablation, dataclasses.replace(chosen, tokens=round(chosen.tokens * ablation.tokens_factor), recipe=recipe)


def run_ablation(name: str, out: str | Path | None = None, scale: str = "default", seeds: int = 3,
                 overwrite: bool = False, progress: bool = False, runtime: Runtime | None = None,
                 **options) -> Path:
    """Run (or continue) ablation ``name`` at ``scale`` (a name in ``recipes.SCALES``) in ``out``
    (default ``runs/ablate-<name>``), write its results.json and render the report; returns the
    folder. ``options``: the ablation's own (``ratios`` for mask-ratio, ``share`` for cross-objective and
    clm-then-mlm)."""
    ablation, chosen = checked(name, scale, seeds, options)
    exp = Experiment(out or f"runs/ablate-{name}", overwrite, runtime)
    recipe = {"ablation": name, "scale": dataclasses.asdict(chosen)}
    other, created = exp.keep_recipe("ablation", recipe)
    if other is not None:
        raise UserError(f"{exp.out} holds ablation {other['ablation']} at scale {other['scale']['name']} with "
                        f"other settings than {name} at scale {chosen.name} now; use --overwrite or another --out")
    results = conduct(ablation, Setup(exp, chosen, tuple(range(seeds)), progress), **options)
    results["title"] += f" [{chosen.name} scale]"
    if chosen.name == "smoke":
        results["notes"].insert(0, "Smoke scale (--scale smoke): a few steps to check the plumbing; the numbers "
                                   "and the verdict mean nothing.")
    if not created:
        results["notes"].append("This call continued an earlier one in the same folder, reusing its finished steps: "
                                "the total time above adds their recorded time to this call's.")
    return write(exp, results, "ablation", {**recipe, "seeds": list(range(seeds)), **options})
