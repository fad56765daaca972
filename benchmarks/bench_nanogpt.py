"""nanoGPT's recipe on the plays: ``maskwise pretrain`` against a minimal plain-PyTorch GPT
(``minimal_gpt.py``, what nanoGPT is), back to back in one process, seed by seed.

    OMP_NUM_THREADS=1 python benchmarks/bench_nanogpt.py                  # 3 seeds x 2000 iterations
    OMP_NUM_THREADS=1 python benchmarks/bench_nanogpt.py --seeds 1 --iters 200 --json out.json

The recipe (nanoGPT's CPU settings): 4 layers, 4 heads, d_model 128, block 64, batch 12, dropout 0,
AdamW lr 1e-3 with beta2 0.99 and weight decay 0.1, 100 warmup steps, cosine to 1e-4, clipping at 1.0,
characters as tokens. maskwise's model is its ``nanogpt`` preset, nanoGPT's own (GPT-2's layout without
biases, exact GELU); ``--preset gpt2`` times GPT-2's layout instead (biases, tanh GELU). Both sides read
exactly the same tokens: the reference takes its train and validation streams from the functions
``maskwise pretrain`` builds its own with (corpus, char tokenizer, token file), and draws its batches as
nanoGPT does (uniform random windows). Both are scored by one function, ``validation_loss``: mean
cross-entropy in fp32 over the same fixed validation windows. maskwise runs at ``--precision fp32`` and at
``auto`` (bf16 on a CPU with native bf16 that the probe finds faster); the reference runs fp32, as nanoGPT
does on a CPU.

Time is the training loop's wall clock, evaluation excluded: the reference's whole loop, and for
maskwise its loop up to the final evaluation (the record's ``elapsed_s``: batches, schedule, step,
bookkeeping; ``wall_s``, its steps alone, is reported too). The order of the sides rotates from seed
to seed so that neither always runs first on a machine whose speed drifts. maskwise's trainer sets
glibc to keep freed memory (``maskwise.kernels.memory``); the setting is process-wide, so it is made
once here before any run and applies to both sides alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import minimal_gpt

from maskwise.data.stream import TokenStream
from maskwise.data.token_file import encode_documents
from maskwise.kernels.memory import retain_freed_memory
from maskwise.runtime import machine_line, resolve
from maskwise.train.optim import parameter_groups
from maskwise.train.pretrain import (
    PretrainConfig,
    new_tokenizer,
    pretrain,
    read_corpus,
    untrained,
)

RECIPE = minimal_gpt.Recipe()
# The reference as nanoGPT (``nanogpt``) and with maskwise's model choices, one at a time or all together:
# name -> (GPTShape fields, Recipe fields); "padded" stands for the vocabulary padded as maskwise pads it.
REFERENCE_VARIANTS = {
    "nanogpt": ({}, {}),
    "bias": ({"bias": True}, {}),
    "gelu-tanh": ({"gelu_tanh": True}, {}),
    "padded-vocab": ({"vocab_size": "padded"}, {}),
    "embeddings-undecayed": ({}, {"decay_embeddings": False}),
    "maskwise-like": ({"bias": True, "gelu_tanh": True, "vocab_size": "padded"}, {"decay_embeddings": False}),
}
FIRST_SEED = 1337  # nanoGPT's seed; seed i of a run is FIRST_SEED + i on both sides
VALIDATION_WINDOWS, VALIDATION_SEED = 200, 0


def maskwise_settings(seed: int, iters: int, precision: str, out: str, preset: str = "nanogpt") -> dict:
    """The flat ``maskwise pretrain`` settings of nanoGPT's recipe (evaluating once, at the end)."""
    return {
        "family": "decoder",
        "preset": preset,
        "objective": "clm",
        "data": "shakespeare",
        "tokenizer": "char",
        "layers": 4,
        "heads": 4,
        "d_model": 128,
        "dropout": 0.0,
        "steps": iters,
        "batch_size": RECIPE.batch_size,
        "block_size": RECIPE.block_size,
        "lr": RECIPE.lr,
        "min_lr_ratio": RECIPE.min_lr / RECIPE.lr,
        "warmup": RECIPE.warmup,
        "weight_decay": RECIPE.weight_decay,
        "beta2": RECIPE.beta2,
        "grad_clip": RECIPE.grad_clip,
        "eval_every": iters,
        "eval_batches": 40,
        "progress": False,
        "precision": precision,
        "seed": seed,
        "out": out,
        "overwrite": True,
    }


def as_long_tensor(stream: TokenStream) -> torch.Tensor:
    """A token stream's ids (a tensor, or a memory-mapped token file) as one int64 tensor."""
    if isinstance(stream.ids, torch.Tensor):
        return stream.ids.long()
    return torch.from_numpy(np.asarray(stream.ids, dtype=np.int64))


def maskwise_token_streams(settings: PretrainConfig):
    """(train ids, validation ids, tokenizer, corpus) exactly as ``maskwise pretrain`` builds them for
    ``settings``: the same corpus split, tokenizer and cached token files (the same cache keys)."""
    corpus = read_corpus(settings)
    tokenizer = new_tokenizer(settings, corpus)
    train = TokenStream.from_texts(corpus.train_part, tokenizer, cache_key=f"{corpus.fingerprint}/train")
    val = TokenStream.from_texts(corpus.val_part, tokenizer, cache_key=f"{corpus.fingerprint}/val")
    return as_long_tensor(train), as_long_tensor(val), tokenizer, corpus


def validation_windows(val_ids: torch.Tensor, count: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` fixed windows of the validation stream, inputs and next-token targets (count, length)
    each: the same windows for every model and seed, so the scores differ by the models alone."""
    return minimal_gpt.random_windows(val_ids, count, length, torch.Generator().manual_seed(seed))


@torch.no_grad()
def validation_loss(logits_of, inputs: torch.Tensor, targets: torch.Tensor, batch: int = 50) -> float:
    """Mean cross-entropy (fp32, no autocast) over every position of the validation windows;
    ``logits_of`` maps (B, T) ids to (B, T, V) logits. One function scores both sides."""
    total = 0.0
    for start in range(0, len(inputs), batch):
        logits = logits_of(inputs[start : start + batch]).float()
        total += float(F.cross_entropy(logits.flatten(0, 1), targets[start : start + batch].flatten(), reduction="sum"))
    return total / targets.numel()


def maskwise_logits(model):
    """maskwise's decoder as ``validation_loss`` reads it: eval mode, full (B, T, V) logits."""
    model.eval()
    return lambda ids: model(ids).logits


def reference_logits(model: minimal_gpt.MinimalGPT):
    """The reference as ``validation_loss`` reads it: eval mode (its forward already gives logits)."""
    model.eval()
    return model


def run_maskwise(seed: int, iters: int, precision: str, out: Path, windows, preset: str) -> dict:
    """One ``maskwise pretrain`` run of the recipe; its loop time, its own and the shared val loss."""
    result = pretrain(PretrainConfig.from_flat(maskwise_settings(seed, iters, precision, str(out), preset)))
    last = result["records"][-1]
    return {
        "side": f"maskwise-{precision}",
        "seed": seed,
        "steps": last["step"],
        "loop_s": last["elapsed_s"],
        "steps_s": last["wall_s"],
        "val_loss": validation_loss(maskwise_logits(result["model"]), *windows),
        "own_val_loss": last["val_loss"],
        "parameters": sum(p.numel() for p in result["model"].parameters()),
        "model": result["model"],
        "tokenizer": result["tokenizer"],
    }


def reference_side(variant: str) -> str:
    """The name a variant's runs carry: plain "reference" for nanoGPT itself, which ratios are taken to."""
    return "reference" if variant == "nanogpt" else f"reference-{variant}"


def run_reference(
    seed: int, iters: int, train_ids: torch.Tensor, vocab_size: int, windows, variant: str = "nanogpt"
) -> dict:
    """One run of the minimal GPT (as ``variant`` of ``REFERENCE_VARIANTS``) on the same tokens,
    seeded like maskwise (init, then batches)."""
    shape_fields, recipe_fields = REFERENCE_VARIANTS[variant]
    padded = -(-vocab_size // 64) * 64  # as maskwise.train.pretrain.model_config pads it
    shape_fields = {k: padded if v == "padded" else v for k, v in shape_fields.items()}
    torch.manual_seed(seed)
    shape = minimal_gpt.GPTShape(**{"vocab_size": vocab_size, "block_size": RECIPE.block_size, **shape_fields})
    model = minimal_gpt.MinimalGPT(shape)
    recipe = minimal_gpt.Recipe(iters=iters, **recipe_fields)
    trained = minimal_gpt.train(model, train_ids, recipe, seed)
    return {
        "side": reference_side(variant),
        "seed": seed,
        "steps": iters,
        "loop_s": trained.seconds,
        "steps_s": trained.seconds,
        "val_loss": validation_loss(reference_logits(model), *windows),
        "own_val_loss": None,
        "parameters": sum(p.numel() for p in model.parameters()),
        "optimizer": trained.optimizer,
        "model": model,
    }


def decayed_names(model, rule) -> set[str]:
    """Names of the parameters ``rule(name, param)`` decays (the tied matrix counted once)."""
    return {name for name, param in model.named_parameters() if rule(name, param)}


def model_differences(maskwise_model, reference_model: minimal_gpt.MinimalGPT) -> list[str]:
    """What differs between the two models and their optimisers, read off the built objects."""
    cfg = maskwise_model.cfg
    ref = reference_model.shape
    lines = [
        (
            f"parameters: maskwise {sum(p.numel() for p in maskwise_model.parameters()):,}, "
            f"reference {sum(p.numel() for p in reference_model.parameters()):,}"
        )
    ]
    if cfg.vocab_size != ref.vocab_size:
        lines.append(
            f"vocabulary rows: maskwise {cfg.vocab_size} (the tokenizer's {ref.vocab_size} padded to a "
            f"multiple of 64; the extra rows are never targets but take softmax mass), reference "
            f"{ref.vocab_size}"
        )
    if cfg.bias != ref.bias:
        lines.append(
            f"biases in linear layers and LayerNorms: maskwise {cfg.bias}, reference {ref.bias} "
            "(nanoGPT's training script defaults to bias=False)"
        )
    if cfg.activation != "gelu":
        lines.append(f"MLP activation: maskwise {cfg.activation}, reference gelu (exact erf, nanoGPT's nn.GELU())")
    if not cfg.tie_embeddings:
        lines.append("weight tying: maskwise untied, reference tied")
    if cfg.d_ff != 4 * ref.d_model:
        lines.append(f"FFN width: maskwise {cfg.d_ff}, reference {4 * ref.d_model}")
    decays = {
        id(p)
        for group in parameter_groups(maskwise_model, 1.0, RECIPE.weight_decay)
        if group["weight_decay"] > 0
        for p in group["params"]
    }
    maskwise_decayed = decayed_names(maskwise_model, lambda _, p: id(p) in decays)
    rule_decayed = decayed_names(maskwise_model, lambda _, p: p.dim() >= 2)
    if maskwise_decayed != rule_decayed:
        lines.append(
            "weight decay: maskwise does not decay "
            + ", ".join(sorted(rule_decayed - maskwise_decayed))
            + " (embeddings excluded; with tying that is also the LM head), which nanoGPT's rule "
            "(every >= 2-D parameter) decays"
        )
    return lines


def spread(values: list[float]) -> str:
    """mean ± standard deviation (0 for one value), with the range."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {sd:.4f} [{min(values):.4f}, {max(values):.4f}]"


def summarise(runs: list[dict], precisions: list[str]) -> dict:
    """Per side: val loss mean ± spread, its gap to the reference's of the same seed (mean and range:
    the seed's batches are the same on both sides), and mean loop seconds; per maskwise precision: the
    speed ratio reference / maskwise of each seed (runs next to each other in time), mean and range."""
    by_side: dict[str, list[dict]] = {}
    for run in runs:
        by_side.setdefault(run["side"], []).append(run)
    summary = {
        side: {
            "val_loss": spread([r["val_loss"] for r in rs]),
            "loop_s_mean": round(statistics.mean(r["loop_s"] for r in rs), 2),
        }
        for side, rs in by_side.items()
    }
    reference_loss = {r["seed"]: r["val_loss"] for r in by_side["reference"]}
    for side, rs in by_side.items():
        if side != "reference":
            gaps = [r["val_loss"] - reference_loss[r["seed"]] for r in rs]
            summary[side]["val_loss_minus_reference"] = (
                f"{statistics.mean(gaps):+.4f} [{min(gaps):+.4f}, {max(gaps):+.4f}]"
            )
    reference_s = {r["seed"]: r["loop_s"] for r in by_side["reference"]}
    for precision in precisions:
        ratios = [reference_s[r["seed"]] / r["loop_s"] for r in by_side[f"maskwise-{precision}"]]
        summary[f"maskwise-{precision}"]["speed_ratio"] = (
            f"{statistics.mean(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] (reference s / maskwise s)"
        )
    return summary


def printable(run: dict) -> dict:
    """A run's record without the model objects, numbers rounded."""
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in run.items() if k not in ("model", "tokenizer")}


def check_same_tokens(tokenizer, corpus, val_ids: torch.Tensor) -> None:
    """Refuse to compare unless maskwise's run tokenizer encodes the validation text into the very ids
    the reference is scored on (the train stream comes from the same function and tokenizer)."""
    if encode_documents(corpus.val_part, tokenizer) != val_ids.tolist():
        raise SystemExit("error: maskwise's tokenizer encodes the validation text differently from the reference's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per side (1337, 1338, ...)")
    parser.add_argument("--iters", type=int, default=RECIPE.iters, help="training steps per run")
    parser.add_argument(
        "--precisions",
        nargs="*",
        default=["fp32", "auto"],
        choices=["fp32", "auto", "bf16"],
        help="maskwise's precisions (none: the reference and its --variants alone; the reference runs fp32)",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        default=[],
        choices=[v for v in REFERENCE_VARIANTS if v != "nanogpt"],
        help="also run the reference with these of maskwise's model choices (see REFERENCE_VARIANTS)",
    )
    parser.add_argument(
        "--preset",
        default="nanogpt",
        choices=["nanogpt", "gpt2"],
        help="maskwise's model: nanoGPT's layout (default) or GPT-2's (biases, tanh GELU)",
    )
    parser.add_argument(
        "--out", default=None, help="keep maskwise's run folders here (default: a temporary folder, removed at the end)"
    )
    parser.add_argument("--json", default=None, help="write runs, summary and model differences here")
    args = parser.parse_args()
    retain_freed_memory("cpu")
    out = Path(args.out or tempfile.mkdtemp(prefix="maskwise-nanogpt-"))
    settings = PretrainConfig.from_flat(
        maskwise_settings(FIRST_SEED, args.iters, "fp32", str(out), args.preset)
    ).resolved()
    train_ids, val_ids, tokenizer, corpus = maskwise_token_streams(settings)
    windows = validation_windows(val_ids, VALIDATION_WINDOWS, RECIPE.block_size, VALIDATION_SEED)
    auto = resolve("cpu", "auto")
    load_before = os.getloadavg()[0]
    print(machine_line(auto))
    print(
        f"tokens: train {len(train_ids):,}, validation {len(val_ids):,}, vocabulary {tokenizer.vocab_size}; "
        f"{args.iters} iterations, {args.seeds} seed(s), {torch.get_num_threads()} thread(s), preset "
        f"{args.preset}, "
        f"load average {load_before:.2f} at start"
    )
    runs: list[dict] = []
    sides = ["nanogpt", *args.precisions, *args.variants]
    for index in range(args.seeds):
        seed = FIRST_SEED + index
        for side in sides[index % len(sides) :] + sides[: index % len(sides)]:
            if side in REFERENCE_VARIANTS:
                run = run_reference(seed, args.iters, train_ids, tokenizer.vocab_size, windows, side)
            else:
                run = run_maskwise(seed, args.iters, side, out / f"{side}-{seed}", windows, args.preset)
                if all(r["side"].startswith("reference") for r in runs):  # the first maskwise run
                    check_same_tokens(run["tokenizer"], corpus, val_ids)
            runs.append(run)
            print(json.dumps(printable(run)), flush=True)
    reference = next(r for r in runs if r["side"] == "reference")
    differences = model_differences(untrained(settings)[0], reference["model"])
    if args.out is None:
        shutil.rmtree(out)
    summary = summarise(runs, args.precisions)
    load_after = os.getloadavg()[0]
    print(
        f"summary over {args.seeds} seed(s) of {args.iters} iterations (val loss: shared fp32 evaluation on "
        f"{VALIDATION_WINDOWS} fixed windows of {RECIPE.block_size}); load average {load_after:.2f} at the end; "
        f"auto = {auto.precision}; reference AdamW: {reference['optimizer']}"
    )
    for side, numbers in summary.items():
        print(f"  {side:16s} {json.dumps(numbers, ensure_ascii=False)}")
    print("model differences (maskwise vs reference):")
    for line in differences:
        print(f"  - {line}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": machine_line(auto),
                    "auto_precision": auto.precision,
                    "iters": args.iters,
                    "seeds": args.seeds,
                    "preset": args.preset,
                    "threads": torch.get_num_threads(),
                    "load_average": [load_before, load_after],
                    "runs": [printable(r) for r in runs],
                    "summary": summary,
                    "model_differences": differences,
                },
                indent=2,
                ensure_ascii=False,
            )
        )


if __name__ == "__main__":
    main()
