"""Where a step of ``bench_train.py`` or ``bench_decode.py`` spends its time, by operator, maskwise beside HF.

    python benchmarks/profile_step.py train --objective span
    python benchmarks/profile_step.py train --objective clm --sides hf maskwise-bf16
    python benchmarks/profile_step.py decode --batch 1
    python benchmarks/profile_step.py train --objective span --floor

Each side is built as its benchmark builds it (the same shapes and inputs; a training step, or a ``generate`` call
writing ``--new-tokens`` tokens a row from the same GPT-2 weights), warmed up, then ``--steps`` steps run under
``torch.profiler``: the operators with the most self CPU time, the wall milliseconds per step, and the milliseconds
no operator accounts for (Python and dispatch). The sides run one after the other in this process, so read their
tables against each other, not their wall times: the benchmarks' alternated ratios are the speed measurements.

``--floor``: what a step's matrix products cost at the kernel's own rate. Every matrix product the profile saw
(``mm``, ``addmm``, ``bmm``, ``baddbmm``, with its shapes and count per step) is timed again alone, on fresh
contiguous operands of the side's compute dtype (the median of repeats), and summed; beside it the step's wall time
without the profiler (the profiler inflates memory-bound operators several-fold). The sum is the time no change to
maskwise's own code can remove; wall minus it is what maskwise's code (and torch's other kernels) spends. For a
training target (``bench_train.TARGETS``) it says the time the target allows and whether the floor alone exceeds it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

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


# A matrix product as the profiler names it -> the same product on operands of the recorded shapes.
PRODUCTS = {
    "aten::mm": lambda a, b: torch.mm(a, b),
    "aten::addmm": lambda c, a, b: torch.addmm(c, a, b),
    "aten::addmm_": lambda c, a, b: c.addmm_(a, b),
    "aten::bmm": lambda a, b: torch.bmm(a, b),
    "aten::baddbmm": lambda c, a, b: torch.baddbmm(c, a, b),
}


def median_ms(call, repeats: int = 9) -> float:
    call()  # the first call pays for kernel selection
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def matmul_floor(step, steps: int, dtype: torch.dtype) -> tuple[float, int]:
    """(ms per step the step's matrix products take when each is timed alone, distinct shapes): the
    products are read from a profile of ``steps`` calls with their input shapes."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    floor_ms, shapes = 0.0, 0
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key not in PRODUCTS:
            continue
        arity = PRODUCTS[event.key].__code__.co_argcount
        operands = [torch.randn(shape, dtype=dtype) for shape in event.input_shapes[:arity]]
        floor_ms += median_ms(lambda: PRODUCTS[event.key](*operands)) * event.count / steps  # noqa: B023
        shapes += 1
    return floor_ms, shapes


def report_floors(args, built: dict[str, common.Side]) -> None:
    """Each side's wall time, matmul floor and rest; for a training target, what the target leaves."""
    walls = {}
    for side, bench_side in built.items():
        dtype = torch.bfloat16 if side.endswith("bf16") else torch.float32
        floor, shapes = matmul_floor(bench_side.step, args.steps, dtype)
        walls[side] = median_ms(bench_side.step, args.steps)  # no profiler
        print(f"{side}: {walls[side]:.1f} ms a step (wall, no profiler); its matrix products alone "
              f"{floor:.1f} ms ({shapes} shapes, {str(dtype).removeprefix('torch.')}); the rest {walls[side] - floor:.1f} ms")
        if args.bench == "train" and side.startswith("maskwise") and "hf" in walls:
            fp32_target, bf16_target = bench_train.TARGETS[args.objective]
            target = bf16_target if side.endswith("bf16") else fp32_target
            if target:
                allowed = walls["hf"] / float(target.rstrip("x"))
                verdict = ("out of reach: the products alone exceed it" if floor > allowed
                           else f"leaves {allowed - floor:.1f} ms for the rest")
                print(f"  target {target} HF ({walls['hf']:.1f} ms) allows {allowed:.1f} ms a step: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", choices=tuple(BENCH_OPTIONS))
    parser.add_argument("--objective", choices=tuple(bench_train.REFERENCE), default="span", help="train only")
    parser.add_argument("--sides", nargs="+", default=["hf", "maskwise"],
                        choices=["hf", "hf-bf16", "maskwise", "maskwise-bf16"], help="train only (decode: hf, maskwise)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=20, help="operators listed per side")
    parser.add_argument("--floor", action="store_true", help="the matmul floor of each side instead of its table "
                        "(list hf first to get the target's allowance)")
    bench = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in BENCH_OPTIONS else "train"
    for name, default in (*SHAPES, *BENCH_OPTIONS[bench]):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args()
    args.device = "cpu"
    print(common.machine(), f"{torch.get_num_threads()} thread(s)")
    common.shakespeare(args.vocab)
    with tempfile.TemporaryDirectory(prefix="maskwise-profile-") as folder:
        sides = sides_of(args, folder)
        for built in sides.values():
            for _ in range(args.warmup):
                built.step()
        if args.floor:
            report_floors(args, sides)
            return
        for side, built in sides.items():
            table, wall_ms, unaccounted_ms = operator_table(built.step, args.steps, args.top)
            what = args.objective if args.bench == "train" else f"decode, batch {args.batch}"
            print(f"\n{what} {side}: {wall_ms:.1f} ms per step under the profiler, {unaccounted_ms:.1f} ms of it in "
                  "no operator")
            print(table)


if __name__ == "__main__":
    main()
