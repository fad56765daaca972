"""``maskwise pretrain``: flags generated from ``PretrainConfig`` so that flags and TOML keys are
one set (``--block-size`` is ``block_size``); a ``--config`` file gives defaults the flags override."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from maskwise.cli.runtime import DEVICE_HELP, PRECISION_HELP
from maskwise.train.pretrain import PretrainConfig, pretrain, read_toml
from maskwise.train.settings import TrainConfig

HELP = {
    "family": "encoder, decoder or encoder-decoder",
    "objective": "mlm, clm, span, denoise, electra, prefix-lm, hybrid (default: the family's classic one)",
    "data": "shakespeare (embedded); a .txt, .jsonl or .parquet file; a folder of .txt or .parquet files; "
    "a quoted glob ('shards/*.parquet'); a datasets save_to_disk folder; or an HF dataset NAME[:CONFIG] "
    "(offline: from the local cache)",
    "text_field": "the text field of JSONL records, Parquet files and HF datasets",
    "val_data": "validation data (default: last 10%% of --data)",
    "tokenizer": "char, wordpiece, bpe, or a path to a tokenizer.json (with --init-from: that run's)",
    "preset": "bert, electra, gpt2, nanogpt, t5, t5.1.1, bart, modern (default by family)",
    "budget": "stop at tokens=N, seconds=S or flops=F (the LR schedule follows it; with --init-from it "
    "counts this run's phase only)",
    "no_shift": "CLM without the shift: predict the current token (the shift-bug ablation)",
    "causal_fraction": "hybrid: the fraction of batches that are causal; the others are masked, read bidirectionally",
    "out": "run folder (default runs/<family>-<objective>)",
    "device": DEVICE_HELP + "; cuda:LOCAL_RANK under torchrun",
    "precision": PRECISION_HELP,
    "bf16": "alias of --precision bf16",
    "compile": "torch.compile the model (compiles for tens of seconds first; docs/results.md, Performance)",
    "resume": "continue from the newest intact checkpoint; only --device, --precision, --compile, --steps, "
    "--budget, --eval-every, --keep-last, --max-nonfinite, --tensorboard and progress may change",
    "init_from": "a finished run folder whose final weights start this run, trained with this run's "
    "--family and --objective (a decoder continued with MLM, an encoder with CLM); its "
    "tokenizer is used (--tokenizer, --vocab-size: leave out); --preset and sizes must give "
    "the same weight shapes; config.json records the source, metrics the tokens_seen_total "
    "and wall_s_total of both phases",
    "tensorboard": "also write TensorBoard event files to OUT/tensorboard (pip install 'maskwise[tensorboard]')",
}


def _settings_fields() -> tuple[list[dataclasses.Field[Any]], PretrainConfig]:
    top = [f for f in dataclasses.fields(PretrainConfig) if f.name != "train"]
    return top + list(dataclasses.fields(TrainConfig)), PretrainConfig()


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "pretrain", help="pretrain a model with one objective", argument_default=argparse.SUPPRESS
    )
    parser.add_argument("--config", help="TOML file of settings (flat keys, same names as the flags)")
    fields, defaults = _settings_fields()
    flat_defaults = defaults.flat()
    for field in fields:
        flag = "--" + field.name.replace("_", "-")
        default = flat_defaults[field.name]
        help_text = HELP.get(field.name, "")
        if isinstance(default, bool) or field.type == "bool | None":  # None: an alias left unset
            if default:
                parser.add_argument(
                    "--no-" + field.name.replace("_", "-"),
                    dest=field.name,
                    action="store_false",
                    help=help_text or f"disable {field.name}",
                )
            else:
                parser.add_argument(flag, action="store_true", help=help_text)
        else:
            parser.add_argument(flag, type=type(default), help=f"{help_text} (default {default!r})".strip())
    parser.set_defaults(handler=run_pretrain)


def run_pretrain(args) -> int:
    values = read_toml(args.config) if getattr(args, "config", None) else {}
    values.update({k: v for k, v in vars(args).items() if k not in ("config", "handler", "command")})
    settings = PretrainConfig.from_flat(values)
    result = pretrain(settings, given=set(values))
    records = result["records"]
    last = records[-1] if records else {}
    summary = {
        k: last[k]
        for k in ("step", "tokens_seen", "wall_s", "tokens_seen_total", "wall_s_total", "train_loss", "val_loss")
        if k in last
    }
    summary.update({k: v for k, v in last.items() if k.startswith("val_") and k != "val_loss"})
    print(f"run folder: {result['run_dir']}")
    if "share_of_matmul_peak" in last:
        summary.update({k: last[k] for k in ("model_flops_per_s", "matmul_peak_flops_per_s", "share_of_matmul_peak")})
        print(
            f"training ran at {last['model_flops_per_s'] / 1e9:,.1f} GFLOP/s of model FLOPs, "
            f"{last['share_of_matmul_peak']:.0%} of this machine's {last['matmul_peak_dtype']} matmul peak "
            f"({last['matmul_peak_flops_per_s'] / 1e9:,.1f} GFLOP/s, measured after training)"
        )
    print(json.dumps(summary), file=sys.stdout)
    return 0
