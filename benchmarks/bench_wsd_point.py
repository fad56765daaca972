"""One point of the compute ladder measured both ways: a WSD run's branch against a run trained for that budget alone.

compare's ladder (``train.points``) pretrains each family once with a warmup-stable-decay schedule and branches each
shorter point off its stable phase, cooling down from there. This benchmark checks that such a point is as good a
model as the separately trained cosine run compare used before, at equal tokens read:

- ``wsd``: the family's run on compare's clock (``--seconds``), schedule wsd, cooldown ``--cooldown``, keeping the
  point ``--fraction``; then its branch at that fraction (resumed from the point, cooled down);
- ``cosine``: a run with main's cosine schedule on exactly the tokens the branch read, and one on exactly the tokens
  the whole WSD run read (so that both schedules' final points are compared too).

Equal tokens make the comparison exact whatever the machine's load: only the WSD run reads the clock. Printed: each
family and seed's final validation loss (own objective, the same windows for every run of a family and seed) for
both schedules at both points, and their differences; a schedule's choice rests on the differences' size against the
seeds' spread.

Usage: python benchmarks/bench_wsd_point.py [--seconds 120] [--fraction 0.25] [--seeds 0 1] [--families ...]
       [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from maskwise.families import FAMILIES
from maskwise.recipes import DEFAULT, pretrain_settings
from maskwise.runs import read_metrics
from maskwise.train.points import branch
from maskwise.train.pretrain import PretrainConfig, pretrain


def trained(values: dict) -> dict:
    """The run of ``values``' last evaluation record."""
    pretrain(PretrainConfig.from_flat(values))
    return read_metrics(values["out"])[-1]


def one(family: str, seed: int, args: argparse.Namespace, out: Path) -> dict:
    """Both schedules at the point and at the whole budget, for one family and seed."""
    base = {**pretrain_settings(DEFAULT, {"family": family}, seed), "progress": False}
    wsd = {**base, "budget": f"seconds={args.seconds}", "schedule": "wsd", "cooldown": args.cooldown}
    whole = trained({**wsd, "points": f"{args.fraction:g}", "out": str(out / f"{family}-{seed}-wsd")})
    settings = branch(out / f"{family}-{seed}-wsd", args.fraction, out / f"{family}-{seed}-wsd-point")
    point = trained({**settings, "resume": True})
    cosine = {**base, "schedule": "cosine"}
    alone = trained(
        {**cosine, "budget": f"tokens={point['tokens_seen']}", "out": str(out / f"{family}-{seed}-cos-point")}
    )
    full = trained({**cosine, "budget": f"tokens={whole['tokens_seen']}", "out": str(out / f"{family}-{seed}-cos")})
    return {
        "family": family,
        "seed": seed,
        "point_tokens": point["tokens_seen"],
        "whole_tokens": whole["tokens_seen"],
        "point": {"wsd": point["val_loss"], "cosine": alone["val_loss"]},
        "whole": {"wsd": whole["val_loss"], "cosine": full["val_loss"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=DEFAULT.seconds, help="the WSD run's clock (compare's)")
    parser.add_argument("--fraction", type=float, default=0.25, help="the point measured both ways")
    parser.add_argument("--cooldown", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.out or scratch)
        rows = []
        for seed in args.seeds:
            for family in args.families:
                row = one(family, seed, args, out)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(
        f"\n| family | seed | tokens at {args.fraction:g} | WSD branch | cosine alone | WSD - cosine | whole: WSD | "
        "cosine | WSD - cosine |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, w = r["point"], r["whole"]
        print(
            f"| {r['family']} | {r['seed']} | {r['point_tokens']:,} | {p['wsd']:.4f} | {p['cosine']:.4f} | "
            f"{p['wsd'] - p['cosine']:+.4f} | {w['wsd']:.4f} | {w['cosine']:.4f} | {w['wsd'] - w['cosine']:+.4f} |"
        )
    for at in ("point", "whole"):
        gaps = [r[at]["wsd"] - r[at]["cosine"] for r in rows]
        spread = [
            abs(a[at]["cosine"] - b[at]["cosine"])
            for a in rows
            for b in rows
            if a["family"] == b["family"] and a["seed"] < b["seed"]
        ]
        print(
            f"{at}: WSD - cosine mean {statistics.mean(gaps):+.4f} (min {min(gaps):+.4f}, max {max(gaps):+.4f}); "
            f"seeds' spread of the cosine loss {statistics.mean(spread):.4f}"
            if spread
            else f"{at}: WSD - cosine mean {statistics.mean(gaps):+.4f} (min {min(gaps):+.4f}, max {max(gaps):+.4f})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
