"""The linter and the formatter over the code (``[tool.ruff]`` in pyproject.toml): a finding or a file that
``ruff format`` would change fails the suite, as a type error fails test_types."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ["src", "tests", "benchmarks"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, *CODE], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False
    )


@pytest.mark.integration
def test_ruff_finds_nothing():
    done = ruff("check", "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.integration
def test_ruff_format_would_change_nothing():
    done = ruff("format", "--check", "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
