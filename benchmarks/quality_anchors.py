"""Quality anchors of the foundation issue, measured on the embedded plays.

1. nanoGPT's CPU settings (char tokenizer, 4 layers, 4 heads, d_model 128, block 64, batch 12,
   2000 steps, dropout 0, lr 1e-3 cosine to 1e-4): decoder CLM validation loss, target <= 1.88.
2. Character MLM at ratio 0.15, same model size, batches of 64 x 64 characters, lr 2e-3, 1500 steps:
   fraction of hidden characters recovered on validation text, target >= 0.35, in well under 2 minutes.

Usage: python benchmarks/quality_anchors.py [--only clm|mlm] [--bf16] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time

import torch

from maskwise.train.pretrain import PretrainConfig, pretrain

ANCHORS = {
    "clm": (
        dict(family="decoder", objective="clm", steps=2000, batch_size=12, block_size=64, lr=1e-3),
        "val_loss",
        1.88,
        "<=",
    ),
    "mlm": (
        dict(family="encoder", objective="mlm", steps=1500, batch_size=64, block_size=64, lr=2e-3, mask_ratio=0.15),
        "val_masked_acc",
        0.35,
        ">=",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=tuple(ANCHORS))
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="maskwise-anchors-")
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, bf16={args.bf16}"
    )
    for name, (settings, metric, target, op) in ANCHORS.items():
        if args.only and name != args.only:
            continue
        values = dict(
            data="shakespeare",
            tokenizer="char",
            layers=4,
            heads=4,
            d_model=128,
            dropout=0.0,
            min_lr_ratio=0.1,
            warmup=100,
            eval_every=250,
            eval_batches=40,
            progress=False,
            bf16=args.bf16,
            out=f"{out}/{name}",
            overwrite=True,
            **settings,
        )
        start = time.perf_counter()
        result = pretrain(PretrainConfig.from_flat(values))
        elapsed = time.perf_counter() - start
        last = result["records"][-1]
        value = last[metric]
        ok = value <= target if op == "<=" else value >= target
        print(
            json.dumps(
                {
                    "anchor": name,
                    metric: round(value, 4),
                    "target": f"{op} {target}",
                    "met": ok,
                    "train_wall_s": round(last["wall_s"], 1),
                    "total_s": round(elapsed, 1),
                    "steps": last["step"],
                }
            )
        )


if __name__ == "__main__":
    main()
