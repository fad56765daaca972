"""Issue 3's check: every objective pretrains on the embedded plays for a fixed wall-clock and its
validation loss falls, and the result is usable: span/denoise -> `generate`, ELECTRA's
discriminator -> a fine-tuning run (genre classification), MLM -> fill-mask, prefix LM -> generate.

Usage: python benchmarks/objectives_two_minutes.py [--seconds 120] [--out DIR] [--device auto] [--precision auto]

Precision auto is bf16 where the machine runs it fast and fp32 elsewhere (``maskwise.runtime``): on a
CPU without native bf16, bf16 autocast is emulated and trains far fewer tokens in the same seconds.
Prints one JSON line per objective: first and last validation loss, tokens seen, and what the model did.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch

from maskwise.runtime import resolve
from maskwise.tasks.classify import ClassifyConfig
from maskwise.tasks.fill_mask import fill_mask
from maskwise.tasks.generate import GenerationConfig, generate_text
from maskwise.tasks.run import run_task
from maskwise.train.pretrain import PretrainConfig, pretrain

RUNS = [
    ("encoder-decoder", "span"),
    ("encoder-decoder", "denoise"),
    ("encoder", "electra"),
    ("encoder", "mlm"),
    ("decoder", "prefix-lm"),
    ("decoder", "clm"),
]


def use(family: str, objective: str, model, tokenizer, runtime) -> dict:
    model.eval()
    if objective == "electra":
        cfg = ClassifyConfig(
            steps=150, batch_size=32, lr=3e-4, pooling="mean", train_per_label=150, test_per_label=50, progress=False
        )
        result = run_task(cfg, model, tokenizer, runtime).record
        return {"genre_accuracy": round(result.accuracy, 3), "majority_baseline": round(result.baseline.accuracy, 3)}
    if family == "encoder":
        return {"fill_mask": fill_mask(model, tokenizer, "To be, or not to [MASK], that is the question", 3)}
    sentinel = tokenizer.id_to_token(tokenizer.sentinel_ids[0])
    prompt = (
        f"To be, or not to be, {sentinel} is the question"
        if objective == "span"
        else "To be, or not to be, that is the question"
        if family == "encoder-decoder"
        else "HAMLET\nTo be, or not to be,"
    )
    text = generate_text(model, tokenizer, [prompt], GenerationConfig(max_new_tokens=30))[0]
    return {"prompt": prompt, "generated": text}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument(
        "--tokenizer",
        default="char",
        help="char (default: at two minutes a 4096-subword MLM is still on its unigram plateau, "
        "measured 6.42 -> 6.37) or bpe",
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="one objective name")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps")
    parser.add_argument("--precision", default="auto", help="auto (default: bf16 where it is fast), fp32, bf16, fp16")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="maskwise-objectives-")
    runtime = resolve(args.device, args.precision)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.seconds:.0f} s each; {runtime.describe()}"
    )
    for family, objective in RUNS:
        if args.only and objective != args.only:
            continue
        settings = PretrainConfig.from_flat(
            {
                "family": family,
                "objective": objective,
                "tokenizer": args.tokenizer,
                "vocab_size": 4096,
                "d_model": 128,
                "layers": 4,
                "heads": 4,
                "block_size": 128,
                "batch_size": 32,
                "lr": 2e-3,
                "warmup": 30,
                "steps": 100_000,
                "budget": f"seconds={args.seconds}",
                "eval_every": 50,
                "eval_batches": 8,
                "device": args.device,
                "precision": args.precision,
                "progress": False,
                "out": f"{out}/{objective}",
                "overwrite": True,
            }
        )
        result = pretrain(settings)
        records = result["records"]
        print(
            json.dumps(
                {
                    "objective": objective,
                    "family": family,
                    "steps": records[-1]["step"],
                    "tokens_seen": records[-1]["tokens_seen"],
                    "wall_s": round(records[-1]["wall_s"], 1),
                    "val_loss_first": round(records[0]["val_loss"], 3),
                    "val_loss_last": round(records[-1]["val_loss"], 3),
                    "fell": records[-1]["val_loss"] < records[0]["val_loss"],
                    "use": use(family, objective, result["model"], result["tokenizer"], runtime),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
