"""The ``--device`` and ``--precision`` flags of every command that runs a model (``pretrain``
generates the same two from ``TrainConfig``), and the ``Runtime`` they resolve to."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from maskwise.runtime import Runtime, announce, precision_setting, resolve

DEVICE_HELP = "auto, cpu, cuda, cuda:N or mps (default auto: CUDA, else MPS, else CPU)"
PRECISION_HELP = (
    "auto, fp32, bf16 or fp16 (default auto: training in bf16 where the device runs it natively and "
    "faster, fp16 with loss scaling on pre-Ampere GPUs, else fp32; inference in fp32)"
)


def runtime_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--precision", default="auto", help=PRECISION_HELP)


def runtime_of(args: argparse.Namespace) -> Runtime:
    """The command's ``Runtime`` (``--bf16``, where a command has it, is ``--precision bf16``; an
    inference command's, ``in_runtime``'s, is the inference one), decided and announced on the
    first call and kept on ``args`` for the command's later calls."""
    if getattr(args, "runtime", None) is None:
        runtime = resolve(args.device, precision_setting(args.precision, getattr(args, "bf16", None)))
        args.runtime = runtime.inference() if getattr(args, "inference", False) else runtime
        announce(args.runtime)
    return args.runtime


def in_runtime(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run an inference command's handler under its inference precision's autocast (fp32 under auto)."""

    def run(args: argparse.Namespace) -> int:
        args.inference = True
        with runtime_of(args).autocast():
            return handler(args)

    return run
