"""The pretraining loop's settings, each default in one place, and the checks that refuse a bad one in one line."""

from __future__ import annotations

from dataclasses import dataclass

from maskwise.errors import UserError
from maskwise.runtime import Runtime, precision_setting, resolve
from maskwise.train.budget import Budget
from maskwise.train.optim import check_optimization


@dataclass
class TrainConfig:
    steps: int = 2000  # the schedule's length and the step limit
    batch_size: int = 16  # per process (global = batch_size x processes x grad_accum)
    block_size: int = 128
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr x this
    schedule: str = "cosine"  # cosine, or wsd: warmup, the peak, then linear to 0 over the last `cooldown` of the run
    cooldown: float = 0.2  # wsd: the share of the run its decay takes
    points: str = ""  # wsd: fractions of the run ("0.25,0.5") where a shorter run branches off (train.points)
    warmup: int = 100
    weight_decay: float = 0.1
    beta2: float = 0.99  # nanoGPT's choice for small models and few tokens per step
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_batches: int = 20
    seed: int = 1337
    device: str = "auto"  # auto, cpu, cuda, cuda:N or mps (maskwise.runtime decides "auto")
    precision: str = "auto"  # auto, fp32, bf16 or fp16 ("auto": the fastest the device runs natively)
    bf16: bool | None = None  # alias: True is precision "bf16", False is "fp32", None leaves precision as it is
    compile: bool = False  # torch.compile the model
    budget: str = ""  # "tokens=N", "seconds=S" or "flops=F": stop there (schedule follows it)
    keep_last: int = 3  # checkpoints kept
    max_nonfinite: int = 5  # stop after this many non-finite steps in a row
    progress: bool = True
    tensorboard: bool = False  # also write the eval records as TensorBoard events (train.events)

    def validate(self) -> TrainConfig:
        for name in (
            "steps",
            "batch_size",
            "block_size",
            "grad_accum",
            "eval_every",
            "eval_batches",
            "keep_last",
            "max_nonfinite",
        ):
            if getattr(self, name) <= 0:
                raise UserError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.warmup < 0:
            raise UserError(f"warmup must be >= 0, got {self.warmup}")
        check_optimization(self)
        if not 0 <= self.min_lr_ratio <= 1:
            raise UserError(f"min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.schedule not in SCHEDULES:
            raise UserError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not 0 < self.cooldown <= 1:
            raise UserError(f"cooldown must be in (0, 1], got {self.cooldown}")
        if self.point_fractions() and self.schedule != "wsd":
            raise UserError("points need --schedule wsd: a point of a cosine run is not a shorter run's end")
        Budget.parse(self.budget)
        precision_setting(self.precision, self.bf16)
        return self

    def runtime(self) -> Runtime:
        return resolve(self.device, precision_setting(self.precision, self.bf16))

    def point_fractions(self) -> tuple[float, ...]:
        """``points`` as fractions in (0, 1), ascending; refused in one line otherwise."""
        try:
            fractions = tuple(sorted(float(x) for x in self.points.split(",") if x.strip()))
        except ValueError:
            raise UserError(f"points must be fractions separated by commas, got {self.points!r}") from None
        if any(not 0 < f < 1 for f in fractions) or len(set(fractions)) < len(fractions):
            raise UserError(f"points must be distinct fractions in (0, 1), got {self.points!r}")
        return fractions


SCHEDULES = ("cosine", "wsd")
