"""The flags and argparse types that ``finetune``, ``evaluate`` and the inference commands share; each task kind's
own flags are its adapter's (``cli.commands``), which imports these: this module imports no task."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

from maskwise.cli.runtime import runtime_flags

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a task's config


def positive(text: str) -> int:
    """argparse type for counts: a positive integer (argparse turns the error into one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def probability(text: str) -> float:
    """argparse type for a probability in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
    return value


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """--device / --precision and --no-progress, on every task command."""
    runtime_flags(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def config_from_flags(config_cls: type[C], args: argparse.Namespace, **values: Any) -> C:
    """The task config the command's flags give: every field whose flag was given (a dest of that
    name, not None), ``values``, and the config's own defaults for the rest."""
    given = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls) if getattr(args, f.name, None) is not None
    }
    return config_cls(**{**given, **values})


def finetune_config(config_cls: type[C], args: argparse.Namespace, **values: Any) -> C:
    """A fine-tune's config from its flags: the training draw follows --seed, the test draw stays fixed."""
    return config_from_flags(config_cls, args, data_seed=args.seed, **values)
