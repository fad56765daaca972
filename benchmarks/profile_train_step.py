"""Where a training step of ``bench_train.py`` spends its time, by operator, maskwise beside HF.

    OMP_NUM_THREADS=2 python benchmarks/profile_train_step.py --objective span
    python benchmarks/profile_train_step.py --objective clm --sides hf maskwise-bf16

Each side is built as ``bench_train.py`` builds it (the same shapes, batch and objective; ``maskwise-bf16``
under bf16 autocast), warmed up, then ``--steps`` steps run under ``torch.profiler``: the operators with the most
self CPU time, the wall milliseconds per step, and the milliseconds no operator accounts for (Python and
dispatch). The sides run one after the other in this process, so read their tables against each other, not their
wall times: ``bench_train.py``'s alternated ratio is the speed measurement, this says where each step goes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train
import common
from profile_nanogpt_step import operator_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objective", choices=tuple(bench_train.REFERENCE), default="span")
    parser.add_argument("--sides", nargs="+", default=["hf", "maskwise"],
                        choices=["hf", "hf-bf16", "maskwise", "maskwise-bf16"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=20, help="operators listed per side")
    for name, default in (("vocab", 8192), ("d_model", 256), ("layers", 4), ("heads", 4), ("d_ff", 1024),
                          ("seq", 128), ("batch", 16)):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args()
    args.device = "cpu"
    print(common.machine(), f"{torch.get_num_threads()} thread(s)")
    for side in args.sides:
        built = bench_train.build(side, args)
        for _ in range(args.warmup):
            built.step()
        table, wall_ms, unaccounted_ms = operator_table(built.step, args.steps, args.top)
        print(f"\n{args.objective} {side}: {wall_ms:.1f} ms per step under the profiler, {unaccounted_ms:.1f} ms of "
              "it in no operator")
        print(table)


if __name__ == "__main__":
    main()
