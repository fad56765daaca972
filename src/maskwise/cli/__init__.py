"""``maskwise <command>``: parse, call the library, print. Nothing in the library imports this package; each task
kind's flags and its ``finetune`` and ``evaluate`` commands are this package's adapters of it (``cli.commands``).

Each command group lives in its own module with a ``register(subparsers)`` function that adds its
parsers and sets ``handler``, built per call of ``build_parser`` (``finetune`` and ``evaluate`` list the tasks
``tasks.registry.TASKS`` holds then). Errors the user can fix (``UserError``, bad flags) become one line on
stderr and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

from maskwise.errors import UserError
from maskwise.tasks.registry import register_installed

COMMAND_MODULES = ("pretrain", "inspect", "finetune", "evaluate", "inference", "interop", "experiments")


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus an error; users get just the error, on one line, exit code 2."""

    def error(self, message: str):
        raise UserError(message.replace("\n", " "))


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="maskwise",
        description="Encoder, decoder and encoder-decoder transformers from one block: pretrain, fine-tune, compare.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    register_installed()  # other packages' task kinds, before any command lists the kinds
    for name in COMMAND_MODULES:
        importlib.import_module(f"maskwise.cli.{name}").register(subparsers)
    return parser


_python_warning = warnings.formatwarning


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """maskwise's own warnings as one line, as its errors are; another package's as Python prints them."""
    if "maskwise" in Path(filename).parts:
        return f"maskwise: warning: {' '.join(str(message).split())}\n"
    return _python_warning(message, category, filename, lineno, line)


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _warning_line
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except UserError as error:
        message = " ".join(str(error).split("\n"))
        print(f"maskwise: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maskwise: interrupted", file=sys.stderr)
        return 130
