"""Import scripts of ``benchmarks/`` as modules, for the tests of what they compute."""

import importlib
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(*names: str):
    """The modules ``names`` of ``benchmarks/``, imported without leaving it on ``sys.path`` (its
    scripts' names, such as ``common``, would shadow others for the rest of the session)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return tuple(importlib.import_module(name) for name in names)
    finally:
        while str(BENCHMARKS) in sys.path:
            sys.path.remove(str(BENCHMARKS))
