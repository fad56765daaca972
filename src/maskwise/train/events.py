"""TensorBoard event files beside ``metrics.jsonl`` (``--tensorboard``): the same records, so that
``tensorboard --logdir runs`` shows every curve of every run without a converter.

``metrics.jsonl`` stays the record maskwise reads back; the events are a view of it. Each scalar is
written at its optimizer step; training seconds (``progress/wall_s``, evaluation and checkpoints left
out) are a curve of their own, because TensorBoard's own time axes count the pauses too.
"""

from __future__ import annotations

from pathlib import Path

from maskwise.errors import UserError

EVENTS_FOLDER = "tensorboard"

# Record keys that are axes or bookkeeping rather than curves.
NOT_SCALARS = ("step", "elapsed_s")


def scalar_tag(key: str) -> str:
    """``val_loss`` -> ``val/loss``, ``train_loss`` -> ``train/loss``, anything else -> ``progress/<key>``."""
    for part in ("val", "train"):
        if key.startswith(part + "_"):
            return f"{part}/{key[len(part) + 1 :]}"
    return f"progress/{key}"


class EventLog:
    """Writes eval records as TensorBoard scalars under ``run_dir/tensorboard``."""

    def __init__(self, run_dir: Path, resume_step: int):
        try:
            # optional dependency: tensorboard (maskwise[tensorboard]); torch.utils.tensorboard needs it
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError(
                "--tensorboard needs the tensorboard package: pip install 'maskwise[tensorboard]'"
            ) from None
        # purge_step: a resumed run rewinds to its checkpoint, so TensorBoard drops the events logged
        # after it (as metrics.jsonl is truncated to it).
        self.writer = SummaryWriter(
            log_dir=str(run_dir / EVENTS_FOLDER), purge_step=resume_step + 1 if resume_step else None
        )

    def write(self, record: dict) -> None:
        for key, value in record.items():
            if key in NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(scalar_tag(key), value, global_step=record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
