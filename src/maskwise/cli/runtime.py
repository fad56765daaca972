"""The ``--device`` and ``--precision`` flags of every command that runs a model (``pretrain``
generates the same two from ``TrainConfig``), and the ``Runtime`` they resolve to."""

from __future__ import annotations

import argparse

DEVICE_HELP = "auto, cpu, cuda, cuda:N or mps (default auto: CUDA, else MPS, else CPU)"
PRECISION_HELP = ("auto, fp32, bf16 or fp16 (default auto: bf16 where the device runs it natively and faster, "
                  "fp16 with loss scaling on pre-Ampere GPUs, else fp32)")


def runtime_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--precision", default="auto", help=PRECISION_HELP)


def runtime_of(args):
    """The command's ``Runtime`` (``--bf16``, where a command has it, is ``--precision bf16``), announced once."""
    from maskwise.runtime import announce, precision_setting, resolve

    runtime = resolve(args.device, precision_setting(args.precision, getattr(args, "bf16", False)))
    announce(runtime)
    return runtime
