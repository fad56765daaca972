"""The pretraining loop: one loop for every objective and family.

What it guarantees:

- the loss is averaged over loss-carrying positions of the whole (accumulated, all-process) batch:
  each micro-batch backpropagates its summed loss, and gradients are scaled once by 1 / positions;
- AdamW, warmup + cosine (following the budget's used fraction when a budget is set, so runs at
  equal tokens or equal seconds both finish their schedule), gradient clipping;
- or warmup, stable, decay (``schedule = "wsd"``), with a checkpoint kept at each branch point (``points``) that a
  shorter run of the same recipe resumes to cool down from (``train.points``);
- a non-finite loss or gradient norm skips the step (counted and recorded), and too many in a row
  stop the run, instead of silently corrupting the weights;
- evaluation every ``eval_every`` steps on fixed validation windows, one line of ``metrics.jsonl``
  per evaluation, and an atomic checkpoint at each, so ``resume`` continues bit-exactly (fp32, CPU);
- data parallelism through ``torch.distributed`` (DDP; NCCL on GPUs, gloo on CPUs): metrics and
  checkpoints from rank 0 only;
- one device and precision (``maskwise.runtime``): model, batches and loss sums on the device, one
  host synchronisation per optimizer step (the non-finite guard) besides the LM head's count of its
  loss positions (``model.heads``: a boolean index and an ``int``, one wait per micro-batch).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from maskwise.errors import UserError
from maskwise.kernels.memory import retain_freed_memory
from maskwise.objectives.base import LossParts, Objective
from maskwise.runs import CHECKPOINTS, METRICS_FILE, latest_checkpoint, newest_intact, point_root
from maskwise.runtime import Runtime, announce, matmul_peak
from maskwise.train import checkpoint as ckpt
from maskwise.train.budget import Budget, flops_per_token
from maskwise.train.events import EventLog
from maskwise.train.optim import build_optimizer, lr_factor, set_lr, wsd_factor
from maskwise.train.settings import TrainConfig
from maskwise.train.step import OptimizerStep

# A run that trained this long (seconds, steps only) ends with its share of the machine's matmul peak. Why not
# shorter ones: their rate is mostly warm-up, and the peak's probe (half a second) would be a visible part of them.
UTILIZATION_MIN_SECONDS = 30.0


@dataclass
class Counters:
    """Everything the loop accumulates; saved in checkpoints so that resume continues exactly."""

    step: int = 0
    encoder_tokens: int = 0
    decoder_tokens: int = 0
    loss_positions: int = 0
    flops: float = 0.0
    wall_s: float = 0.0  # training time only (evaluation and checkpointing excluded)
    nonfinite_steps: int = 0
    nonfinite_in_a_row: int = 0

    @classmethod
    def saved(cls, values, where: str) -> Counters:
        """The counters a checkpoint's state holds; anything but this class's fields as numbers >= 0 is refused."""
        kinds = {f.name: (int,) if type(f.default) is int else (int, float) for f in dataclasses.fields(cls)}
        if not (
            isinstance(values, dict)
            and set(values) <= set(kinds)
            and "step" in values
            and all(type(v) in kinds[k] and v >= 0 for k, v in values.items())
        ):
            raise UserError(f"{where}: its loop counters are missing or not numbers")
        return cls(**values)


def distributed_context(runtime: Runtime | None = None) -> tuple[int, int]:
    """(rank, world size); under torchrun, initialises the process group: NCCL with this process's
    GPU (``runtime.device``, cuda:LOCAL_RANK) as the current device, gloo on CPUs."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        gpu = runtime.torch_device if runtime is not None and runtime.device_type == "cuda" else None
        if gpu is not None:
            torch.cuda.set_device(gpu)
        dist.init_process_group("nccl" if gpu is not None else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        objective: Objective,
        train_stream,
        val_stream,
        cfg: TrainConfig,
        run_dir: str | Path | None = None,
        head_prefixes: tuple[str, ...] = (),
        runtime: Runtime | None = None,
        earlier: dict[str, float] | None = None,
    ):
        """``earlier``: what the runs this one continues spent (``train.init_from``), by record key;
        each record then also carries ``<key>_total``, so the phases add up."""
        self.cfg = cfg.validate()
        self.earlier = earlier or {}
        self.runtime = runtime or cfg.runtime()
        retain_freed_memory(self.runtime.device_type)
        self.model, self.objective = model.to(self.runtime.torch_device), objective
        self.train_stream, self.val_stream = train_stream, val_stream
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.rank, self.world = distributed_context(self.runtime)
        if self.rank == 0:
            announce(self.runtime)
        self.raw_length = objective.raw_length(cfg.block_size)
        train_stream.check_length(self.raw_length)
        val_stream.check_length(self.raw_length)
        self.budget = Budget.parse(cfg.budget)
        self.optimizer = build_optimizer(
            self.model, cfg.lr, cfg.weight_decay, betas=(0.9, cfg.beta2), head_prefixes=head_prefixes
        )
        self.generator = torch.Generator().manual_seed(cfg.seed)
        torch.manual_seed(cfg.seed + self.rank)
        self.counters = Counters()
        self.flops_per = flops_per_token(model, cfg.block_size)
        self.optimizer_step = OptimizerStep(self.model, self.optimizer, self.runtime, cfg.grad_clip)
        self.sum_dtype = torch.float32 if self.runtime.device_type == "mps" else torch.float64  # MPS has no fp64
        self.step_model = self.model
        if self.world > 1:
            on_gpu = self.runtime.device_type == "cuda"
            self.step_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.runtime.torch_device] if on_gpu else None
            )
        if cfg.compile:
            compiled = torch.compile(self.step_model)
            assert isinstance(compiled, nn.Module)  # a module compiles to a module (its stubs say a callable)
            self.step_model = compiled

    # ---- resume -----------------------------------------------------------------------------

    def resume(self) -> bool:
        """Restore from the newest intact checkpoint of ``run_dir``; False if there is none."""
        run_dir = self.run_dir
        assert run_dir is not None  # only a run with a folder has checkpoints
        path = latest_checkpoint(run_dir)
        if path is None:
            return False
        state, extra = ckpt.load_checkpoint(path, self.model, self.optimizer)
        self.counters = Counters.saved(state.get("counters"), f"checkpoint {path}")
        try:
            self.generator.set_state(extra["data_rng"])
            torch.set_rng_state(
                extra[f"torch_rng_{self.rank}"] if f"torch_rng_{self.rank}" in extra else extra["torch_rng_0"]
            )
        except (KeyError, RuntimeError) as error:
            raise UserError(
                f"checkpoint {path}: its random-number states are missing or unreadable ({error})"
            ) from None
        if self.rank == 0:
            ckpt.truncate_metrics(run_dir, self.counters.step)
        # A run resumed on another device keeps its data order and CPU RNG; the CUDA generator
        # (dropout on the GPU) is restored only where the checkpoint was written on CUDA too.
        if self.runtime.device_type == "cuda" and f"cuda_rng_{self.rank}" in extra:
            torch.cuda.set_rng_state(extra[f"cuda_rng_{self.rank}"])
        if self.optimizer_step.scaler.is_enabled() and "grad_scaler" in state:
            self.optimizer_step.scaler.load_state_dict(state["grad_scaler"])
        return True

    def _save(self, point: float | None = None) -> None:
        """A checkpoint to resume from, pruned to ``keep_last``; at branch ``point``, one kept apart, never pruned."""
        if self.run_dir is None:
            return
        states = {"torch_rng": torch.get_rng_state()}
        if self.runtime.device_type == "cuda":
            states["cuda_rng"] = torch.cuda.get_rng_state()
        extra = {"data_rng": self.generator.get_state()}
        for name, local in states.items():
            for r, gathered in enumerate(self._all_gather(local)):
                extra[f"{name}_{r}"] = gathered
        if self.rank == 0:
            state: dict[str, Any] = {
                "counters": asdict(self.counters),
                "train": asdict(self.cfg),
                "runtime": self.runtime.to_dict(),
            }
            if self.optimizer_step.scaler.is_enabled():
                state["grad_scaler"] = self.optimizer_step.scaler.state_dict()
            if point is None:
                root, keep = self.run_dir / CHECKPOINTS, self.cfg.keep_last
            else:
                root, keep, state["point"] = point_root(self.run_dir, point), 1, point
            ckpt.save_checkpoint(root, self.counters.step, self.model, self.optimizer, state, extra, keep)

    def _point_kept(self, fraction: float) -> bool:
        """Whether an earlier call of this run (resumed since) kept its checkpoint at point ``fraction``."""
        return self.run_dir is not None and newest_intact(point_root(self.run_dir, fraction)) is not None

    def _all_gather(self, local: torch.Tensor) -> list[torch.Tensor]:
        """Every process's copy of a CPU tensor (through the device, where NCCL needs it)."""
        if self.world == 1:
            return [local]
        on_device = local.to(self.runtime.torch_device)
        gathered = [torch.empty_like(on_device) for _ in range(self.world)]
        dist.all_gather(gathered, on_device)
        return [g.cpu() for g in gathered]

    # ---- one step ---------------------------------------------------------------------------

    def _all_sum(self, sums: torch.Tensor) -> torch.Tensor:
        """Sums over every process, on the device (NCCL reduces device tensors only)."""
        if self.world > 1:
            dist.all_reduce(sums)
        return sums

    def train_step(self) -> tuple[torch.Tensor, int, bool]:
        """One optimizer step over ``grad_accum`` micro-batches. Returns (summed loss over the
        global batch, a device scalar; global loss positions; whether the step was applied)."""
        cfg, c, runtime = self.cfg, self.counters, self.runtime
        self.optimizer_step.begin()
        loss_sum = torch.zeros((), dtype=self.sum_dtype, device=runtime.torch_device)
        positions, enc, dec = 0, 0, 0
        for micro in range(cfg.grad_accum):
            windows = self.train_stream.windows(cfg.batch_size, self.raw_length, self.generator, self.rank, self.world)
            batch = runtime.move(self.objective.prepare(windows, self.generator))
            sync = micro == cfg.grad_accum - 1 or self.world == 1
            # DDP's no_sync, also through torch.compile's wrapper
            no_sync = contextlib.nullcontext if sync else getattr(self.step_model, "no_sync", contextlib.nullcontext)
            with no_sync():
                parts: LossParts = self.optimizer_step.backward(
                    functools.partial(self.objective.loss, self.step_model, batch), lambda parts: parts.loss_sum
                )
            loss_sum += parts.loss_sum.detach()
            positions += parts.n_positions
            enc += parts.encoder_tokens
            dec += parts.decoder_tokens
        if self.world > 1:
            counts = torch.tensor([positions, enc, dec], dtype=self.sum_dtype, device=runtime.torch_device)
            totals = self._all_sum(torch.cat([loss_sum[None], counts]))  # (4,)
            loss_sum = totals[0]
            positions, enc, dec = (int(n) for n in totals[1:].tolist())
        # DDP averaged gradients over processes; rescale to "sum over the global batch / positions".
        finite = self.optimizer_step.apply(loss_sum, self.world / max(positions, 1))
        if finite:
            c.nonfinite_in_a_row = 0
        else:
            c.nonfinite_steps += 1
            c.nonfinite_in_a_row += 1
        c.encoder_tokens += enc
        c.decoder_tokens += dec
        c.loss_positions += positions
        enc_f, dec_f, head_f = self.flops_per
        c.flops += enc_f * enc + dec_f * dec + head_f * positions
        return loss_sum, positions, finite

    # ---- evaluation -------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss (and objective metrics) on the same ``eval_batches`` validation windows each time.

        Every process evaluates the whole global batch (``batch_size x processes`` windows), so the
        numbers do not depend on how many processes share the training."""
        self.model.eval()
        generator = torch.Generator().manual_seed(self.cfg.seed + 10_000)
        totals: dict[str, float] = {"loss_sum": 0.0, "n_positions": 0}
        for _ in range(self.cfg.eval_batches):
            windows = self.val_stream.windows(self.cfg.batch_size * self.world, self.raw_length, generator)
            batch = self.runtime.move(self.objective.prepare_eval(windows, generator))
            with self.runtime.autocast():
                parts = self.objective.loss(self.model, batch)
            totals["loss_sum"] += float(parts.loss_sum)
            totals["n_positions"] += parts.n_positions
            for key, value in parts.metrics.items():
                totals[key] = totals.get(key, 0.0) + value
        result = {"val_loss": totals["loss_sum"] / max(totals["n_positions"], 1)}
        result.update({f"val_{k}": v for k, v in self.objective.eval_metrics(totals).items()})
        return result

    # ---- the loop ---------------------------------------------------------------------------

    def _progress(self) -> float:
        """The run's used fraction: of its steps, or of its budget where that is further along."""
        c, cfg = self.counters, self.cfg
        steps = c.step / cfg.steps
        return steps if self.budget is None else max(steps, self.budget.used_fraction(*self._spent()))

    def _lr_factor(self) -> float:
        c, cfg = self.counters, self.cfg
        if cfg.schedule == "wsd":
            return wsd_factor(c.step, self._progress(), cfg.warmup, cfg.cooldown)
        if self.budget is None:
            return lr_factor(c.step, cfg.warmup, cfg.steps, cfg.min_lr_ratio)
        # Follow the budget: progress is the larger of step progress and budget progress.
        used = self.budget.used_fraction(*self._spent())
        virtual_step = max(c.step, int(used * cfg.steps))
        return lr_factor(virtual_step, cfg.warmup, cfg.steps, cfg.min_lr_ratio)

    def _budget_spent(self) -> bool:
        c = self.counters
        if c.step >= self.cfg.steps:
            return True
        if self.budget is None:
            return False
        return self.budget.used_fraction(*self._spent()) >= 1.0

    def _write_metrics(self, line: dict) -> None:
        if self.rank == 0 and self.run_dir is not None:
            with open(self.run_dir / METRICS_FILE, "a") as handle:
                handle.write(json.dumps(line) + "\n")

    def _event_log(self) -> EventLog | None:
        if not self.cfg.tensorboard or self.rank != 0 or self.run_dir is None:
            return None
        return EventLog(self.run_dir, resume_step=self.counters.step)

    def _spent(self) -> tuple[int, float, float]:
        """(tokens, training seconds, FLOPs) so far: what a budget counts."""
        c = self.counters
        return c.encoder_tokens + c.decoder_tokens, c.wall_s, c.flops

    def _progress_bar(self) -> tqdm:
        """Counts what stops the run: steps, or the budget's own unit (so its ETA is honest)."""
        disable = not self.cfg.progress or self.rank != 0
        desc = self.objective.name
        if self.budget is None:
            return tqdm(
                total=self.cfg.steps,
                initial=self.counters.step,
                disable=disable,
                desc=desc,
                unit="step",
                dynamic_ncols=True,
                leave=False,
            )
        unit = {"tokens": "tok", "seconds": "s", "flops": "FLOP"}[self.budget.kind]
        bar = tqdm(
            total=self.budget.amount,
            disable=disable,
            desc=desc,
            unit=unit,
            dynamic_ncols=True,
            leave=False,
            unit_scale=self.budget.kind != "seconds",
            bar_format=None
            if self.budget.kind != "seconds"
            else "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}{postfix}]",
        )
        self._advance(bar)
        return bar

    def _advance(self, bar: tqdm) -> None:
        if self.budget is None:
            bar.update(1)
            return
        done = dict(zip(("tokens", "seconds", "flops"), self._spent()))[self.budget.kind]
        bar.update(min(done, self.budget.amount) - bar.n)

    def _utilization(self) -> dict:
        """The run's model FLOP/s (``budget.flops_per_token``'s count over the training seconds) and its
        share of this machine's matmul peak at the run's compute dtype, measured now: what a researcher
        who knows the hardware's peak asks of a run. On one CPU process that trained for at least
        ``UTILIZATION_MIN_SECONDS`` in a precision the CPU runs natively; elsewhere nothing (processes
        share a CPU's peak, an emulated precision's probe would take tens of seconds and its warning
        already says the run is slow, and no GPU path has run here)."""
        c = self.counters
        if (
            self.world > 1
            or self.runtime.device_type != "cpu"
            or self.runtime.warning
            or c.wall_s < UTILIZATION_MIN_SECONDS
        ):
            return {}
        dtype = self.runtime.autocast_dtype or torch.float32
        rate, peak = c.flops / c.wall_s, matmul_peak(dtype, self.runtime.device, seconds=0.5)
        return {
            "model_flops_per_s": rate,
            "matmul_peak_flops_per_s": peak,
            "matmul_peak_dtype": str(dtype).removeprefix("torch."),
            "share_of_matmul_peak": rate / peak,
        }

    def fit(self, on_eval=None) -> list[dict]:
        """Train until the step limit or the budget; returns the metrics records of this call."""
        cfg, c = self.cfg, self.counters
        records: list[dict] = []
        window_loss: float | torch.Tensor = 0.0  # a device tensor once a step is summed in
        window_positions, lr = 0, 0.0
        bar = self._progress_bar()
        events = self._event_log()
        self._write_metrics(
            {"header": "runtime", "step": c.step, "runtime": self.runtime.to_dict(), "processes": self.world}
        )
        started = time.perf_counter()
        # a point's branch starts where the stable phase is at its own 1 - cooldown (train.points)
        pending = [f for f in cfg.point_fractions() if not self._point_kept(f)]
        while not self._budget_spent():
            factor = self._lr_factor()
            lr = cfg.lr * factor
            set_lr(self.optimizer, factor)
            t0 = time.perf_counter()
            loss_sum, positions, finite = self.train_step()
            c.wall_s += time.perf_counter() - t0
            c.step += 1
            self._advance(bar)
            if finite:
                window_loss += loss_sum
                window_positions += positions
            elif c.nonfinite_in_a_row >= cfg.max_nonfinite:
                bar.close()
                raise UserError(
                    f"training stopped at step {c.step}: {c.nonfinite_in_a_row} non-finite "
                    "losses or gradient norms in a row (lower --lr, or train with --precision fp32)"
                )
            while pending and self._progress() >= (1.0 - cfg.cooldown) * pending[0]:
                self._save(point=pending.pop(0))
            finished = self._budget_spent()
            if c.step % cfg.eval_every == 0 or finished:
                record: dict[str, Any] = {  # a metrics line: numbers, None (no train loss yet), strings
                    "step": c.step,
                    "tokens_seen": c.encoder_tokens + c.decoder_tokens,
                    "encoder_tokens": c.encoder_tokens,
                    "decoder_tokens": c.decoder_tokens,
                    "loss_positions_seen": c.loss_positions,
                    "flops": c.flops,
                    "wall_s": round(c.wall_s, 4),
                    "elapsed_s": round(time.perf_counter() - started, 4),
                    "train_loss": float(window_loss) / window_positions if window_positions else None,
                    "lr": lr,
                    "nonfinite_steps": c.nonfinite_steps,
                    **self.evaluate(),
                }
                if finished:
                    record.update(self._utilization())
                record.update({f"{key}_total": round(record[key] + spent, 4) for key, spent in self.earlier.items()})
                window_loss, window_positions = 0.0, 0
                bar.set_postfix(val=f"{record['val_loss']:.3f}")
                records.append(record)
                self._write_metrics(record)
                if events is not None:
                    events.write(record)
                self._save()
                if on_eval is not None:
                    on_eval(record)
        bar.close()
        if events is not None:
            events.close()
        return records
