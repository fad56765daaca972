"""How many tokens ``maskwise compare`` pretrains per family in its budget, beside ``maskwise
pretrain`` with the same settings in fp32 and in bf16 (what compare hard-coded before the runtime
setting), all measured in one run.

    python benchmarks/compare_tokens.py [--seconds 90] [--families encoder,decoder,encoder-decoder]

Each side is its own process, one after another per family (compare, pretrain fp32, pretrain bf16),
on an otherwise idle machine. Prints a markdown table: tokens seen and optimizer steps per side, and
the ratios compare / bf16 (the gain) and compare / fp32 (how close compare's run is to the plain
command's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import common

FAMILIES = ("encoder", "decoder", "encoder-decoder")


def compare_settings(family: str, seconds: float) -> dict:
    from maskwise.recipes import CompareSettings, pretrain_settings

    scale = CompareSettings(seconds=seconds)
    return pretrain_settings(scale, scale.family_arm(family, "shakespeare"), seed=0)


def run_compare_side(family: str, seconds: float, out: str) -> dict:
    """What ``maskwise compare`` runs for one family: its settings, through its Experiment."""
    from maskwise.experiments.runner import Experiment

    exp = Experiment(out, overwrite=True)
    run = exp.pretrain(family, **compare_settings(family, seconds))
    return {"runtime": exp.runtime.describe(), **run["curve"][-1]}


def run_cli_side(family: str, seconds: float, out: str, precision: str) -> dict:
    """``maskwise pretrain`` with compare's settings as flags and ``--precision``."""
    flags = []
    for key, value in compare_settings(family, seconds).items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    command = [
        sys.executable,
        "-m",
        "maskwise",
        "pretrain",
        *flags,
        "--precision",
        precision,
        "--out",
        out,
        "--overwrite",
        "--no-progress",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # a failure is reported below
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1]}")
    from maskwise.runs import read_metrics

    return {"runtime": done.stderr.strip().splitlines()[0], **read_metrics(out)[-1]}


def worker(args) -> None:
    out = tempfile.mkdtemp(prefix="compare-tokens-")
    if args.worker == "compare":
        result = run_compare_side(args.family, args.seconds, out)
    else:
        result = run_cli_side(args.family, args.seconds, str(Path(out) / "run"), args.worker)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=90.0, help="pretraining seconds per family (compare's default)"
    )
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--worker", choices=("compare", "fp32", "bf16"), help=argparse.SUPPRESS)
    parser.add_argument("--family", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    rows = ["| family | side | runtime | steps | tokens seen | training s |", "|---|---|---|---|---|---|"]
    ratios = []
    for family in args.families.split(","):
        seen = {}
        for side in ("compare", "fp32", "bf16"):
            done = subprocess.run(
                [sys.executable, __file__, "--worker", side, "--family", family, "--seconds", str(args.seconds)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{family} {side}: {done.stderr.strip().splitlines()[-1]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            seen[side] = result["tokens_seen"]
            label = {
                "compare": "maskwise compare (precision auto)",
                "fp32": "maskwise pretrain --precision fp32",
                "bf16": "maskwise pretrain --precision bf16 (compare before)",
            }[side]
            rows.append(
                f"| {family} | {label} | {result['runtime']} | {result['step']} | "
                f"{result['tokens_seen']:,} | {result['wall_s']:.1f} |"
            )
            print(rows[-1], flush=True)
        ratios.append(
            f"- {family}: compare / bf16 = {seen['compare'] / max(seen['bf16'], 1):.1f}x, "
            f"compare / fp32 = {seen['compare'] / max(seen['fp32'], 1):.2f}"
        )
    print(
        "\n".join(
            [
                f"machine: {common.machine()}",
                f"command: python benchmarks/compare_tokens.py {' '.join(sys.argv[1:])}",
                "",
                *rows,
                "",
                *ratios,
            ]
        )
    )


if __name__ == "__main__":
    main()
