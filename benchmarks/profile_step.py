"""Where a step of ``bench_train.py`` or ``bench_decode.py`` spends its time, by operator, maskwise beside HF.

    python benchmarks/profile_step.py train --objective span
    python benchmarks/profile_step.py train --objective clm --sides hf maskwise-bf16
    python benchmarks/profile_step.py decode --batch 1

Each side is built as its benchmark builds it (the same shapes and inputs; a training step, or a ``generate`` call
writing ``--new-tokens`` tokens a row from the same GPT-2 weights), warmed up, then ``--steps`` steps run under
``torch.profiler``: the operators with the most self CPU time, the wall milliseconds per step, and the milliseconds
no operator accounts for (Python and dispatch). The sides run one after the other in this process, so read their
tables against each other, not their wall times: the benchmarks' alternated ratios are the speed measurements.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode
import bench_train
import common
from profile_nanogpt_step import operator_table

SHAPES = (("vocab", 8192), ("d_model", 256), ("layers", 4), ("heads", 4), ("d_ff", 1024))
BENCH_OPTIONS = {  # each benchmark's own options beyond SHAPES, with its defaults
    "train": (("seq", 128), ("batch", 16)),
    "decode": (("positions", 256), ("prompt", 16), ("new_tokens", 112), ("batch", 1)),
}


def sides_of(args, folder: str) -> dict[str, common.Side]:
    """Each side of ``args.sides`` as its benchmark builds it; decode's read the GPT-2 weights saved in ``folder``."""
    if args.bench == "train":
        return {side: bench_train.build(side, args) for side in args.sides}
    bench_decode.make_weights(folder, args)
    args.weights = folder
    built = {side: bench_decode.build(side, args) for side in ("hf", "maskwise")}
    for side in built.values():
        side.configure(args.batch)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", choices=tuple(BENCH_OPTIONS))
    parser.add_argument("--objective", choices=tuple(bench_train.REFERENCE), default="span", help="train only")
    parser.add_argument("--sides", nargs="+", default=["hf", "maskwise"],
                        choices=["hf", "hf-bf16", "maskwise", "maskwise-bf16"], help="train only (decode: hf, maskwise)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=20, help="operators listed per side")
    bench = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in BENCH_OPTIONS else "train"
    for name, default in (*SHAPES, *BENCH_OPTIONS[bench]):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args()
    args.device = "cpu"
    print(common.machine(), f"{torch.get_num_threads()} thread(s)")
    common.shakespeare(args.vocab)
    with tempfile.TemporaryDirectory(prefix="maskwise-profile-") as folder:
        for side, built in sides_of(args, folder).items():
            for _ in range(args.warmup):
                built.step()
            table, wall_ms, unaccounted_ms = operator_table(built.step, args.steps, args.top)
            what = args.objective if args.bench == "train" else f"decode, batch {args.batch}"
            print(f"\n{what} {side}: {wall_ms:.1f} ms per step under the profiler, {unaccounted_ms:.1f} ms of it in "
                  "no operator")
            print(table)


if __name__ == "__main__":
    main()
