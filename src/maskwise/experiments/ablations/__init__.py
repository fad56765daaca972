"""``maskwise ablate NAME``: change one design choice, hold the rest, and let a coded rule judge a prediction.

Every ablation pretrains tiny models (the GPT-2 block for every family, as ``compare`` does, so only
the attention mask, the loss or the one knob under study differs; d 64, 2 layers, a 2048-token BPE,
block 128) for several seeds, fine-tunes them identically, and writes ``results.json`` plus the
report of ``report.py``. Each arm is measured on two axes, always both:

* **equal tokens**: every arm pretrains with the budget ``tokens=N`` (encoder plus decoder tokens
  read), so each has seen the same amount of text;
* **equal wall-clock**: for each seed, the arm that needed the least training time T keeps its run,
  and every other arm is pretrained again from scratch with the budget ``seconds=T`` (its own
  complete learning-rate schedule, not a truncated one); everything downstream is measured again
  on those runs. Wall-clock is training time only, on a shared machine, so it carries the noise of
  whatever else ran at the time; the tokens/s rows show how large the speed gap was.

A prediction is judged by a rule coded in each module's ``judge`` function that reads nothing but the per-seed
numbers in ``results["metrics"]``. Comparisons use ``verdict.compare`` (paired by seed: the 95%
t-interval of the per-seed differences; one that includes zero is "within noise", with the seeds it
would take to resolve). The rule runs on each axis; the verdict is
their common outcome, and ``inconclusive`` when the axes disagree (a claim that holds at equal
tokens but not at equal time is not established). ``metrics`` holds exactly what the rules read
(it is also what the bar charts show); the table holds those and everything else measured.

Scales (``recipes.SCALES``, ``scale=`` here, ``--scale`` on the command line): ``default`` is sized
for about 15 minutes on 2 CPU cores, ``quick`` for a few (much of it fixed cost: every pretraining
run tokenizes the corpus, and there are up to nine), and ``smoke`` is a few steps that only check
the plumbing (the tests use it); its reports say so in the title, and its numbers mean nothing.

Each ablation is one module that declares a ``framework.Ablation`` (arms, what it measures, its
rule, its summary sentence) and one line of ``ABLATIONS`` below; ``framework.conduct`` runs it.

Finished steps are cached by ``Experiment``, so an interrupted ablation continues where it stopped;
an output folder remembers its recipe (ablation, scale, model and fine-tuning settings) and refuses
to mix in another.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from maskwise.errors import UserError
from maskwise.experiments.ablations import (
    electra,
    embedder,
    mask_ratio,
    pooling,
    reranker,
    seq2seq,
    shift_bug,
)
from maskwise.experiments.ablations.framework import Ablation, Setup, conduct
from maskwise.experiments.report import render, write_results
from maskwise.experiments.runner import Experiment, machine_info
from maskwise.recipes import FINETUNE, MODEL, SCALES
from maskwise.runtime import Runtime

ABLATIONS: dict[str, Ablation] = {
    "embedder": embedder.ABLATION,
    "mask-ratio": mask_ratio.ABLATION,
    "shift-bug": shift_bug.ABLATION,
    "seq2seq": seq2seq.ABLATION,
    "electra": electra.ABLATION,
    "pooling": pooling.ABLATION,
    "reranker": reranker.ABLATION,
}


def run_ablation(name: str, out: str | Path | None = None, scale: str = "default", seeds: int = 3,
                 overwrite: bool = False, progress: bool = False, runtime: Runtime | None = None,
                 **options) -> Path:
    """Run (or continue) ablation ``name`` at ``scale`` (a name in ``recipes.SCALES``) in ``out``
    (default ``runs/ablate-<name>``), write its results.json and render the report; returns the
    folder. ``options``: the ablation's own (``ratios`` for mask-ratio)."""
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
    chosen = SCALES[scale]
    exp = Experiment(out or f"runs/ablate-{name}", overwrite, runtime)
    recipe = {"ablation": name, "scale": dataclasses.asdict(chosen), "model": MODEL, "finetune": FINETUNE}
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
    results.update(kind="ablation", machine=machine_info(exp.runtime), wall_s=exp.elapsed(),
                   settings={**recipe, "seeds": list(range(seeds)), **options})
    write_results(exp.out, results)
    render(exp.out)
    return exp.out
