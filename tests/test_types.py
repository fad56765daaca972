"""The type checker over the library's tasks, studies and readers (``[tool.mypy]`` in pyproject.toml): a wrong
argument to a task method, a study's method or a reader fails the suite, as a wrong import fails test_layers."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
@pytest.mark.slow
def test_mypy_finds_no_error_in_tasks_experiments_and_data():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
