"""The first pretraining losses of MLM, CLM and span corruption on a GPU against the CPU: same
seed, same weights, same batches, so the two columns differ only by the device's arithmetic.

    python benchmarks/gpu_losses.py [--steps 20] [--objectives mlm,clm,span] [--device cuda] [--precision fp32]

Each run is the library's own loop (``Trainer.fit``, warmup + cosine, clipping, AdamW) on a tiny
model of the objective's family (BERT / GPT-2 / T5 presets, 2 layers, d_model 64) over the embedded
plays with the character tokenizer; the weights are drawn on the CPU from one seed and the batches
from the loop's own CPU generator, so both devices see identical inputs. The table lists each
step's training loss on the CPU (fp32) and on ``--device`` (at ``--precision``, fp32 by default)
with their relative difference, and one line per objective gives the largest difference against
the tolerance (1e-3 in fp32, where only the order of floating-point sums differs; 5e-2 under bf16 or
fp16 autocast). Exit status 1 if an objective exceeds it.

Without CUDA it says so in one line and prints the CPU column alone (exit status 0), so the script
can be checked anywhere.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

FAMILY = {"mlm": ("encoder", "bert"), "clm": ("decoder", "gpt2"), "span": ("encoder-decoder", "t5")}
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 5e-2}


def data():
    """(tokenizer, train stream, val stream) of the plays with the character tokenizer."""
    from maskwise.data.corpus import load_corpus
    from maskwise.data.stream import TokenStream
    from maskwise.data.tokenizers import build_tokenizer

    corpus = load_corpus("shakespeare")
    tokenizer = build_tokenizer("char", corpus)
    train = TokenStream.from_texts(corpus.train, tokenizer, "training data", cache_key=f"{corpus.fingerprint}/train")
    val = TokenStream.from_texts(corpus.val, tokenizer, "validation data", cache_key=f"{corpus.fingerprint}/val")
    return tokenizer, train, val


def losses(objective_name: str, device: str, precision: str, args, tokenizer, train, val) -> tuple[list[float], float]:
    """The training loss of each of the first ``args.steps`` steps, and the seconds they took."""
    from maskwise.config import preset
    from maskwise.model.transformer import build_model
    from maskwise.objectives.registry import build_objective
    from maskwise.train.loop import Trainer
    from maskwise.train.settings import TrainConfig

    family, name = FAMILY[objective_name]
    vocab = -(-tokenizer.vocab_size // 64) * 64
    objective = build_objective(objective_name, family, tokenizer, vocab)
    torch.manual_seed(0)
    model = build_model(
        preset(name, family=family, vocab_size=vocab, d_model=64, n_layers=2, n_heads=4, max_seq_len=args.block)
    )  # drawn on the CPU: the same weights for every device
    cfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch,
        block_size=args.block,
        lr=3e-3,
        warmup=5,
        eval_every=1,
        eval_batches=1,
        seed=0,
        device=device,
        precision=precision,
        progress=False,
    )
    start = time.perf_counter()
    records = Trainer(model, objective, train, val, cfg).fit()
    return [r["train_loss"] for r in records], time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--objectives", default="mlm,clm,span")
    parser.add_argument("--device", default="cuda", help="the device compared with the CPU (default cuda)")
    parser.add_argument("--precision", default="fp32", help="the precision on --device (the CPU runs fp32)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=64)
    args = parser.parse_args()

    from maskwise.errors import UserError
    from maskwise.runtime import machine_line, resolve

    try:
        runtime = resolve(args.device, args.precision)
    except UserError as error:
        print(f"CUDA is absent ({error}): the CPU column only")
        runtime = None
    print(f"machine: {machine_line(runtime)}")
    objectives = args.objectives.split(",")
    tokenizer, train, val = data()
    columns: dict[str, dict[str, list[float]]] = {}
    exit_status = 0
    summary = []
    for name in objectives:
        cpu, cpu_s = losses(name, "cpu", "fp32", args, tokenizer, train, val)
        columns[name] = {"cpu": cpu}
        line = f"{name}: CPU fp32 {cpu_s:.1f} s"
        if runtime is not None:
            dev, dev_s = losses(name, runtime.device, runtime.precision, args, tokenizer, train, val)
            columns[name]["dev"] = dev
            worst = max(abs(a - b) / abs(b) for a, b in zip(dev, cpu))
            tolerance = TOLERANCE[runtime.precision]
            ok = worst <= tolerance
            exit_status |= 0 if ok else 1
            line += (
                f", {runtime.device} {runtime.precision} {dev_s:.1f} s; max relative difference {worst:.2e} "
                f"over {len(cpu)} steps (tolerance {tolerance:g}): {'ok' if ok else 'TOO LARGE'}"
            )
        summary.append(line)
        print(f"  {line}", file=sys.stderr, flush=True)

    where = f"{runtime.device} {runtime.precision}" if runtime is not None else None
    head, rule = ["step"], ["---"]
    for name in objectives:
        head.append(f"{name} CPU fp32")
        if where:
            head += [f"{name} {where}", f"{name} rel. diff"]
    rule = ["---"] * len(head)
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(rule) + "|")
    for step in range(args.steps):
        cells = [str(step + 1)]
        for name in objectives:
            cpu = columns[name]["cpu"]
            if step >= len(cpu):
                cells += [""] * (3 if where else 1)
                continue
            cells.append(f"{cpu[step]:.6f}")
            if where:
                dev = columns[name]["dev"][step]
                cells += [f"{dev:.6f}", f"{abs(dev - cpu[step]) / abs(cpu[step]):.2e}"]
        print("| " + " | ".join(cells) + " |")
    print()
    for line in summary:
        print(line)
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
