"""Where a step of ``bench_train.py``, ``bench_decode.py`` or ``bench_finetune.py`` spends its time, by operator,
maskwise beside HF.

    python benchmarks/profile_step.py train --objective span
    python benchmarks/profile_step.py train --objective clm --sides hf maskwise-bf16
    python benchmarks/profile_step.py decode --batch 1
    python benchmarks/profile_step.py finetune --task embed
    python benchmarks/profile_step.py train --objective span --floor --target ">= 1.2x"

Each side is built as its benchmark builds it (the same shapes and inputs; a training or fine-tuning step, or a
``generate`` call writing ``--new-tokens`` tokens a row from the same GPT-2 weights), warmed up, then ``--steps``
steps run under ``torch.profiler``: the operators with the most self CPU time, the wall milliseconds per step, and
the milliseconds no operator accounts for (Python and dispatch). The sides run one after the other in this process,
so read their tables against each other, not their wall times: the benchmarks' alternated ratios are the speed
measurements.

``--floor``: what a step's matrix products cost at the kernel's own rate. Every matrix product the profile saw
(``mm``, ``addmm``, ``bmm``, ``baddbmm``, with its shapes and count per step) is timed again alone, on fresh
contiguous operands of the side's compute dtype (the median of repeats), and summed; beside it the step's wall time
without the profiler (the profiler inflates memory-bound operators several-fold), and the same step in place: a
dispatch mode times each torch operator where the step calls it (the mode's Python runs between operators, outside
the clock), so a product is timed on the operands and caches the step gives it. Both are medians over ``--steps``
rounds in which the sides take turns (this machine drifts 10-20% over a minute). "torch's products and attention"
(the products above and SDPA's kernels) is time no change to maskwise's own code can remove; "other operators"
(element-wise, reductions, copies, the optimizer) and "between operators" (Python, autograd, dispatch: wall minus
both) are where it can act. With ``--target`` (``run_all.py`` passes each missed target's) it says the time the
target allows a side against the first one, and whether torch's kernels alone, in place, already exceed it (out of
reach on this machine) or what it leaves for the rest. The sides share one process, and maskwise's Trainer and
fine-tuning sides set glibc to keep freed memory for the whole process: the HF side here is as ``bench_train.py``'s
``hf-retain``, faster than the plain process the targets are set against (by 1.03x on span, 1.27x on CLM in run_all,
2026-12-06), so the allowance printed is the stricter one.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode
import bench_finetune
import bench_train
import common
from profile_nanogpt_step import operator_table

SHAPES = (("vocab", 8192), ("d_model", 256), ("layers", 4), ("heads", 4), ("d_ff", 1024))
BENCH_OPTIONS = {  # each benchmark's integer options, with its defaults (finetune's shape is compare's model)
    "train": (*SHAPES, ("seq", 128), ("batch", 16)),
    "decode": (*SHAPES, ("positions", 256), ("prompt", 16), ("new_tokens", 112), ("batch", 1)),
    "finetune": (),
}


def sides_of(args, folder: str) -> dict[str, common.Side]:
    """Each side of ``args.sides`` as its benchmark builds it; decode's read the GPT-2 weights saved in ``folder``."""
    if args.bench == "train":
        return {side: bench_train.build(side, args) for side in args.sides}
    if args.bench == "finetune":
        return {side: bench_finetune.build(side, args) for side in args.sides}
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
        product = PRODUCTS[event.key]  # timed after one call, which pays for the kernel's selection
        seconds = common.median_seconds(lambda: product(*operands), 9, warmup=1)  # noqa: B023
        floor_ms += 1000 * seconds * event.count / steps
        shapes += 1
    return floor_ms, shapes


# Operators, as a dispatch mode names them, whose time is torch's matrix-product and attention kernels.
KERNELS = {name.removeprefix("aten::") for name in PRODUCTS} | {
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
}


class OperatorClock(TorchDispatchMode):
    """Seconds spent inside each torch operator the steps call (forward, backward and optimizer), by
    name: the clock runs around the operator's own call only, not the mode's Python around it."""

    def __init__(self):
        super().__init__()
        self.seconds = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        started = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds[func.overloadpacket.__name__] += time.perf_counter() - started
        return out


@dataclasses.dataclass
class Split:
    """A side's step, as medians over rounds: its wall ms (no clock), and in a clocked step the ms in
    torch's products and attention and in the other operators, with the costliest of those."""

    wall: float
    kernels: float
    others: float
    costliest: list[tuple[str, float]]

    @property
    def between(self) -> float:
        """ms outside every operator: Python, autograd, dispatch."""
        return self.wall - self.kernels - self.others


def alternated_splits(built: dict[str, common.Side], rounds: int) -> dict[str, Split]:
    """Each round runs every side twice, once bare (its wall time) and once under ``OperatorClock``,
    the sides taking turns: the machine's drift over a minute (10-20% here) moves every side and both
    measures alike, so each is compared within its round."""
    walls, kernels, others = ({side: [] for side in built} for _ in range(3))
    by_name = {side: Counter() for side in built}
    for _ in range(rounds):
        for side, bench_side in built.items():
            started = time.perf_counter()
            bench_side.step()
            walls[side].append(1000 * (time.perf_counter() - started))
            clock = OperatorClock()
            with clock:
                bench_side.step()
            ms = {name: 1000 * seconds for name, seconds in clock.seconds.items()}
            kernels[side].append(sum(v for name, v in ms.items() if name in KERNELS))
            others[side].append(sum(v for name, v in ms.items() if name not in KERNELS))
            by_name[side].update({name: v / rounds for name, v in ms.items() if name not in KERNELS})
    return {
        side: Split(
            statistics.median(walls[side]),
            statistics.median(kernels[side]),
            statistics.median(others[side]),
            by_name[side].most_common(5),
        )
        for side in built
    }


def report_floors(args, built: dict[str, common.Side]) -> None:
    """Each side's wall time, matmul floor, and in-place split; with ``--target``, what the target leaves
    each side against the first one."""
    dtypes = {side: torch.bfloat16 if side.endswith("bf16") else torch.float32 for side in built}
    floors = {side: matmul_floor(bench_side.step, args.steps, dtypes[side]) for side, bench_side in built.items()}
    splits = alternated_splits(built, args.steps)
    reference = next(iter(splits))
    ratio = common.target_ratio(args.target or "")
    for side, split in splits.items():
        floor, shapes = floors[side]
        print(
            f"{side}: {split.wall:.1f} ms a step (wall, no profiler); its matrix products alone "
            f"{floor:.1f} ms ({shapes} shapes, {str(dtypes[side]).removeprefix('torch.')}); the rest "
            f"{split.wall - floor:.1f} ms"
        )
        print(
            f"  in place: torch's products and attention {split.kernels:.1f} ms, other operators "
            f"{split.others:.1f} ms ({', '.join(f'{name} {ms:.1f}' for name, ms in split.costliest)}), "
            f"between operators {split.between:.1f} ms"
        )
        if ratio and side != reference:
            allowed = splits[reference].wall / ratio
            verdict = (
                f"out of reach here: torch's products and attention alone take {split.kernels:.1f} ms in place"
                if split.kernels >= allowed
                else f"not out of reach by torch's kernels: it leaves {allowed - split.kernels:.1f} ms beyond "
                f"their {split.kernels:.1f} ms in place, where the other operators take {split.others:.1f} "
                f"ms and {split.between:.1f} ms pass between operators"
            )
            print(
                f"  target {args.target} {reference} ({splits[reference].wall:.1f} ms, in this process) allows "
                f"{allowed:.1f} ms a step: {verdict}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", choices=tuple(BENCH_OPTIONS))
    parser.add_argument("--objective", choices=tuple(bench_train.REFERENCE), default="span", help="train only")
    parser.add_argument("--task", choices=bench_finetune.KINDS, default="classify", help="finetune only")
    parser.add_argument("--shape", choices=("compare", "wide"), default="compare", help="finetune only")
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["hf", "maskwise"],
        choices=["hf", "hf-bf16", "maskwise", "maskwise-bf16"],
        help="train and finetune (decode: hf, maskwise)",
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=20, help="operators listed per side")
    parser.add_argument("--floor", action="store_true", help="the matmul floor of each side instead of its table")
    parser.add_argument(
        "--target",
        help='with --floor: a speed target such as ">= 1.2x" over the first side, and what it leaves each other side',
    )
    bench = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in BENCH_OPTIONS else "train"
    for name, default in BENCH_OPTIONS[bench]:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default, one per core)")
    args = parser.parse_args()
    args.device = "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    print(common.machine(), f"{torch.get_num_threads()} thread(s)")
    if args.bench != "finetune":
        common.shakespeare(args.vocab)  # the tokenizer and id cache, built once before the sides need them
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
            what = (
                args.objective
                if args.bench == "train"
                else f"{args.task} fine-tune"
                if args.bench == "finetune"
                else f"decode, batch {args.batch}"
            )  # only decode has --batch
            print(
                f"\n{what} {side}: {wall_ms:.1f} ms per step under the profiler, {unaccounted_ms:.1f} ms of it in "
                "no operator"
            )
            print(table)


if __name__ == "__main__":
    main()
