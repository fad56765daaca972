"""The type checker over the whole library and the toy plugin kind (``[tool.mypy]`` in pyproject.toml): a wrong
argument or field name anywhere on the path from a task's record to its verdict fails the suite, as a wrong import
fails test_layers. A second run plants three such faults in a copy and checks that mypy names each one."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (file, the line as it is, the line with a wrong field name, that name): a compare row reading its record, an
# ablation's rule reading its typed measures, and the toy plugin's row reading its record.
PLANTED = (
    (
        "src/maskwise/tasks/classify.py",
        "return Items(scores.correct, labels=[index[g] for g in gold])",
        "return Items(scores.corect, labels=[index[g] for g in gold])",
        "corect",
    ),
    (
        "src/maskwise/experiments/ablations/pooling.py",
        "order, retrieval = measures.word_order, measures.retrieval",
        "order, retrieval = measures.word_ordr, measures.retrieval",
        "word_ordr",
    ),
    ("tests/test_toy_task.py", "return Items(record.correct)", "return Items(record.corect)", "corect"),
)


def mypy(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(cwd / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )


@pytest.mark.integration
@pytest.mark.slow
def test_mypy_finds_no_error_in_the_library():
    done = mypy(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.integration
@pytest.mark.slow
def test_mypy_names_a_wrong_field_in_a_row_a_measure_and_a_plugin_record(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (copy / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "test_toy_task.py", copy / "tests")
    shutil.copy(ROOT / "pyproject.toml", copy)
    for path, line, planted, _ in PLANTED:
        text = (copy / path).read_text()
        assert text.count(line) == 1, f"{path} no longer holds {line!r}: plant the fault elsewhere"
        (copy / path).write_text(text.replace(line, planted))
    done = mypy(copy)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1
    for path, _, _, wrong in PLANTED:
        assert any(e.startswith(path) and f'"{wrong}"' in e for e in errors), (wrong, errors)
    assert len(errors) == len(PLANTED), errors
