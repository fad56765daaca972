"""Size the ablations' default scale: tagging F1 of MLM encoders by pretraining tokens and fine-tuning steps.

    python benchmarks/ablation_budget.py --tokens 0,1400000,2800000 --steps 150,400 --seeds 0,1,2 [--out DIR]

Each seed pretrains an MLM encoder of the ablations' default recipe (``recipes.SCALES["default"]``) on each
token budget (0: the block as pretraining starts it, never trained, the ablations' control), then fine-tunes
the recipe's tagging task with each step count (nothing else changed) and prints micro F1 beside the verse
rule's, with the seconds each part took. A budget is large enough when the encoder clears both the rule and
the untrained body at every seed; finished runs are reused from ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from maskwise.experiments.runner import Experiment
from maskwise.recipes import SCALES, pretrain_settings
from maskwise.tasks.run import run_task
from maskwise.train.pretrain import PretrainConfig, untrained

ENCODER = {"family": "encoder", "objective": "mlm"}


def body(exp: Experiment, tokens: int, seed: int):
    """A fresh copy of an MLM encoder after ``tokens`` (0: never trained), its tokenizer and its pretraining
    seconds: fine-tuning changes the body it is given, so every fine-tune needs its own."""
    scale = SCALES["default"]
    if tokens == 0:
        model, tokenizer = untrained(PretrainConfig.from_flat(pretrain_settings(scale, ENCODER, seed)))
        return model.to(exp.runtime.torch_device), tokenizer, 0.0
    name = f"mlm-{tokens}-seed{seed}"
    run = exp.pretrain(name, **pretrain_settings(scale, ENCODER, seed, f"tokens={tokens}"))
    loaded = exp.load(name)
    return loaded.model, loaded.tokenizer, run["curve"][-1]["wall_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="0,1400000,2800000", help="comma-separated pretraining budgets")
    parser.add_argument("--steps", default="150,400", help="comma-separated tagging fine-tuning steps")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default="runs/ablation-budget")
    args = parser.parse_args()
    exp = Experiment(args.out)
    recipe = SCALES["default"].recipe
    for seed in map(int, args.seeds.split(",")):
        for tokens in map(int, args.tokens.split(",")):
            for steps in map(int, args.steps.split(",")):
                model, tokenizer, pretrain_s = body(exp, tokens, seed)
                started = time.perf_counter()
                record = run_task(
                    replace(recipe.task("tag", seed), steps=steps),
                    model,
                    tokenizer,
                    exp.runtime,
                    label=f"{tokens} tokens",
                ).record
                print(
                    json.dumps(
                        {
                            "seed": seed,
                            "tokens": tokens,
                            "steps": steps,
                            "f1": round(record.micro.f1, 3),
                            "verse_rule": round(record.line_break_rule.micro.f1, 3),
                            "pretrain_s": round(pretrain_s, 1),
                            "finetune_s": round(time.perf_counter() - started, 1),
                        }
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
