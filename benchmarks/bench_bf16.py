"""Does bf16 autocast train as well as fp32? Validation loss after a fixed number of steps, both ways.

    python benchmarks/bench_bf16.py [--steps 150] [--objectives mlm,clm] [--device auto]

For each objective, two runs from the same initial weights and the same batches (same seeds):
``TrainConfig(precision="fp32")`` and ``precision="bf16"``, on the embedded plays with the issue-7 shapes (4 layers,
d_model 256, 4 heads, FFN 1024, vocab 8192, sequence 128, batch 16). The validation loss at the
end must agree within 2% (the issue's bar); the speed of the same runs is printed too, but the
throughput comparison proper is ``bench_train.py``'s (alternating, against HF).

It runs only where the device runs bf16 fast (where ``maskwise.runtime.resolve(device, "auto")``
picks bf16): on a CPU without native bf16 a bf16 run is emulated, ~90x slower than fp32, and the
check is skipped with one line saying so (exit status 0).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from bench_train import PRESET, maskwise_objective

TOLERANCE = 0.02


def run(objective: str, bf16: bool, args) -> dict:
    from maskwise.config import preset
    from maskwise.model.transformer import build_model
    from maskwise.train.loop import Trainer
    from maskwise.train.settings import TrainConfig

    tokenizer, train, val = common.shakespeare(args.vocab)
    torch.manual_seed(0)
    model = build_model(
        preset(PRESET[objective], vocab_size=args.vocab, d_model=256, n_layers=4, n_heads=4, d_ff=1024, max_seq_len=128)
    ).to(args.device)
    cfg = TrainConfig(
        steps=args.steps,
        batch_size=16,
        block_size=128,
        lr=args.lr,
        warmup=args.steps // 10,
        eval_every=args.steps,
        eval_batches=args.eval_batches,
        device=args.device,
        precision="bf16" if bf16 else "fp32",
        progress=False,
        seed=0,
    )
    trainer = Trainer(model, maskwise_objective(objective, tokenizer, args.vocab), train, val, cfg)
    record = trainer.fit()[-1]
    return {"val_loss": record["val_loss"], "tokens_per_s": record["tokens_seen"] / record["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--objectives", default="mlm,clm")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-batches", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--device", default="auto", help="auto (default: CUDA if present, else the CPU), cpu, cuda")
    parser.add_argument("--json", help="also write the table to this file (run_all.py)")
    args = parser.parse_args()
    runtime = common.device_runtime(args.device)
    args.device = runtime.device
    header = [
        f"machine: {common.machine(runtime)}",
        f"command: python benchmarks/bench_bf16.py {' '.join(sys.argv[1:])}",
    ]
    if not common.bf16_fast(runtime):
        common.emit([], header, args.json, skipped=[common.skipped_line("the bf16 quality check", runtime)])
        return
    lines = [
        (
            "| objective | steps | fp32 val loss | bf16 val loss | relative difference | within 2% | "
            "fp32 tokens/s | bf16 tokens/s |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    ok = True
    for objective in args.objectives.split(","):
        fp32, bf16 = run(objective, False, args), run(objective, True, args)
        diff = (bf16["val_loss"] - fp32["val_loss"]) / fp32["val_loss"]
        ok &= abs(diff) <= TOLERANCE
        lines.append(
            f"| {objective} | {args.steps} | {fp32['val_loss']:.4f} | {bf16['val_loss']:.4f} | {diff:+.2%} | "
            f"{'yes' if abs(diff) <= TOLERANCE else 'NO'} | {fp32['tokens_per_s']:,.0f} | "
            f"{bf16['tokens_per_s']:,.0f} |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    common.emit([], header, args.json, ["\n".join(lines)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
