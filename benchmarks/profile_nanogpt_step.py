"""Where a ``maskwise pretrain`` step of nanoGPT's recipe spends its time, next to the minimal
reference's (``minimal_gpt.py``), at the recipe's tiny shapes (d 128, block 64, batch 12).

    OMP_NUM_THREADS=1 python benchmarks/profile_nanogpt_step.py --steps 200

Two passes per side, each after ``--warmup`` untimed steps. First, phase timers: maskwise's own
``Trainer.fit`` runs with its methods wrapped by timers (windows, batch preparation, forward,
backward, the optimizer step's gradient scaling/norm/clip, AdamW), so what the loop does between
them (schedule, counters, progress) is the loop's time less theirs; the reference's loop is timed
phase by phase the same way. Second, ``torch.profiler``: the operators with the most self CPU
time, and how much of the step no operator accounts for (Python and dispatch). The profiler slows
Python-heavy steps, so the phase timers are the numbers to compare; the operator table says why.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import minimal_gpt
from bench_nanogpt import FIRST_SEED, RECIPE, maskwise_settings, maskwise_token_streams

from maskwise.data.stream import TokenStream
from maskwise.kernels.memory import retain_freed_memory
from maskwise.runtime import machine_line, resolve
from maskwise.train.loop import Trainer
from maskwise.train.optim import set_lr
from maskwise.train.pretrain import PretrainConfig, initial_model


class PhaseTimer:
    """Seconds per named phase, accumulated over the calls of wrapped functions or over laps."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.last = time.perf_counter()

    def lap_start(self) -> None:
        """Start timing the first of a sequence of ``lap`` phases."""
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        """Add the time since the previous lap (or ``lap_start``) to phase ``name``."""
        now = time.perf_counter()
        self.seconds[name] += now - self.last
        self.last = now

    def wrap(self, name: str, function):
        """``function`` with its wall time added to phase ``name`` at every call."""

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started

        return timed

    def per_step_ms(self, steps: int) -> dict[str, float]:
        """Each phase's milliseconds per step, the unit the two sides are compared in."""
        return {name: round(1000 * s / steps, 3) for name, s in self.seconds.items()}


def maskwise_trainer(
    precision: str, steps: int, train_ids: torch.Tensor, val_ids: torch.Tensor, preset: str
) -> Trainer:
    """The trainer ``maskwise pretrain`` builds for the recipe with ``preset``'s model (no run folder:
    nothing is written)."""
    settings = PretrainConfig.from_flat(maskwise_settings(FIRST_SEED, steps, precision, "unused", preset)).resolved()
    tokenizer = maskwise_token_streams(settings)[2]
    _, objective, model = initial_model(settings, tokenizer)
    return Trainer(
        model,
        objective,
        TokenStream(train_ids),
        TokenStream(val_ids),
        settings.train,
        runtime=resolve("cpu", precision),
    )


def time_maskwise(precision: str, warmup: int, steps: int, train_ids, val_ids, preset: str) -> dict[str, float]:
    """Per-step milliseconds of maskwise's phases over ``steps`` steps of ``Trainer.fit``."""
    trainer = maskwise_trainer(precision, warmup, train_ids, val_ids, preset)
    trainer.fit()  # warm-up: the same trainer continues below
    trainer.cfg.steps = warmup + steps
    timer = PhaseTimer()
    objective, optimizer_step = trainer.objective, trainer.optimizer_step
    trainer.train_stream.windows = timer.wrap("windows", trainer.train_stream.windows)
    objective.prepare = timer.wrap("prepare batch", objective.prepare)
    objective.loss = timer.wrap("forward", objective.loss)
    optimizer_step.begin = timer.wrap("train() + zero_grad", optimizer_step.begin)
    optimizer_step.backward = timer.wrap("forward + backward", optimizer_step.backward)
    optimizer_step.apply = timer.wrap("scale + norm + clip + AdamW", optimizer_step.apply)
    trainer.optimizer.step = timer.wrap("AdamW", trainer.optimizer.step)
    trainer.train_step = timer.wrap("train_step", trainer.train_step)
    trainer.evaluate = lambda: {"val_loss": 0.0}  # the final record's evaluation is not a step
    started = time.perf_counter()
    trainer.fit()
    timer.seconds["loop"] = time.perf_counter() - started
    return _derived(
        timer.per_step_ms(steps),
        {
            "backward": ("forward + backward", "forward"),
            "grad scale + norm + clip": ("scale + norm + clip + AdamW", "AdamW"),
            "loop outside train_step": ("loop", "train_step"),
        },
    )


def time_reference(warmup: int, steps: int, train_ids: torch.Tensor, vocab_size: int) -> dict[str, float]:
    """Per-step milliseconds of the reference loop's phases (``minimal_gpt.train``'s loop, timed piecewise)."""
    torch.manual_seed(FIRST_SEED)
    model = minimal_gpt.MinimalGPT(minimal_gpt.GPTShape(vocab_size=vocab_size, block_size=RECIPE.block_size))
    recipe = minimal_gpt.Recipe(iters=warmup + steps)
    optimizer, _ = minimal_gpt.make_adamw(model, recipe)
    generator = torch.Generator().manual_seed(FIRST_SEED)
    timer = PhaseTimer()
    model.train()
    for step in range(warmup + steps):
        if step == warmup:
            timer.seconds.clear()
            loop_started = time.perf_counter()
        timer.lap_start()
        for group in optimizer.param_groups:
            group["lr"] = minimal_gpt.learning_rate(step, recipe)
        timer.lap("schedule")
        inputs, targets = minimal_gpt.random_windows(train_ids, recipe.batch_size, recipe.block_size, generator)
        timer.lap("windows")
        loss = model.loss(inputs, targets)
        timer.lap("forward")
        loss.backward()
        timer.lap("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        timer.lap("grad norm + clip")
        optimizer.step()
        timer.lap("AdamW")
        optimizer.zero_grad(set_to_none=True)
        timer.lap("zero_grad")
    timer.seconds["loop"] = time.perf_counter() - loop_started
    return timer.per_step_ms(steps)


def _derived(ms: dict[str, float], differences: dict[str, tuple[str, str]]) -> dict[str, float]:
    """``ms`` with phases that are one timer less another (nested wrappers) added."""
    for name, (outer, inner) in differences.items():
        ms[name] = round(ms[outer] - ms[inner], 3)
    return ms


def operator_table(step, steps: int, top: int) -> tuple[str, float, float]:
    """Profile ``steps`` calls of ``step``: the top operators by self CPU time, the wall ms per step
    and the ms per step no operator accounts for (top-level operators' total less the wall)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            step()
        wall_ms = 1000 * (time.perf_counter() - started) / steps
    averages = prof.key_averages()
    operator_ms = sum(event.self_cpu_time_total for event in averages) / 1000 / steps
    table = averages.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=48)
    return table, wall_ms, wall_ms - operator_ms


def maskwise_step(trainer: Trainer):
    """One step as ``Trainer.fit`` takes it, less its record keeping."""

    def step():
        set_lr(trainer.optimizer, trainer._lr_factor())
        trainer.train_step()
        trainer.counters.step += 1

    return step


def reference_step(model, optimizer, recipe, train_ids, generator):
    """One step of ``minimal_gpt.train``."""
    counter = [0]

    def step():
        for group in optimizer.param_groups:
            group["lr"] = minimal_gpt.learning_rate(counter[0], recipe)
        loss = model.loss(*minimal_gpt.random_windows(train_ids, recipe.batch_size, recipe.block_size, generator))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        counter[0] += 1

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--top", type=int, default=15, help="operators listed per side")
    parser.add_argument(
        "--presets",
        nargs="+",
        default=["nanogpt", "gpt2"],
        choices=["nanogpt", "gpt2"],
        help="maskwise's models: nanoGPT's layout, GPT-2's (biases, tanh GELU)",
    )
    args = parser.parse_args()
    retain_freed_memory("cpu")
    settings = PretrainConfig.from_flat(maskwise_settings(FIRST_SEED, args.steps, "fp32", "unused")).resolved()
    train_ids, val_ids, tokenizer, _ = maskwise_token_streams(settings)
    print(machine_line(resolve("cpu", "auto")))
    print(f"{args.steps} steps after {args.warmup} warm-up steps per side; per-step milliseconds")
    sides = [
        (f"maskwise {precision}, preset {name}", precision, name)
        for name in args.presets
        for precision in args.precisions
    ]
    print("phase timers:")
    print(f"  reference fp32: {time_reference(args.warmup, args.steps, train_ids, tokenizer.vocab_size)}")
    for name, precision, model_preset in sides:
        print(f"  {name}: {time_maskwise(precision, args.warmup, args.steps, train_ids, val_ids, model_preset)}")

    torch.manual_seed(FIRST_SEED)
    model = minimal_gpt.MinimalGPT(minimal_gpt.GPTShape(vocab_size=tokenizer.vocab_size))
    recipe = minimal_gpt.Recipe(iters=args.warmup + 2 * args.steps)
    optimizer, _ = minimal_gpt.make_adamw(model, recipe)
    steps = {
        "reference fp32": reference_step(model, optimizer, recipe, train_ids, torch.Generator().manual_seed(FIRST_SEED))
    }
    for name, precision, model_preset in sides:
        steps[name] = maskwise_step(
            maskwise_trainer(precision, args.warmup + 2 * args.steps, train_ids, val_ids, model_preset)
        )
    for name, step in steps.items():
        for _ in range(args.warmup):
            step()
        table, wall_ms, unaccounted_ms = operator_table(step, args.steps, args.top)
        print(f"\n{name}: {wall_ms:.2f} ms per step under the profiler, {unaccounted_ms:.2f} ms of it in no operator")
        print(table)


if __name__ == "__main__":
    main()
