"""A task kind from outside the package, as docs/add-a-task.md tells a user to write one: a ``Task`` subclass and one
registration, then ``maskwise finetune`` and ``compare --task`` take it; and the same kind from an installed
distribution's ``maskwise.tasks`` entry point, with no registration line at all."""

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from maskwise.data.task_readers import read_labelled
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError
from maskwise.tasks.classify import (
    ClassifyConfig,
    SequenceClassifier,
    predict,
    train_classifier,
)
from maskwise.tasks.items import Items
from maskwise.tasks.metrics import majority_label
from maskwise.tasks.record import Record
from maskwise.tasks.registry import ENCODER_JOBS, TASKS, register
from maskwise.tasks.unit import RecordRow, Row, Task, Work, within_context
from tests.test_compare import TINY
from tests.test_compare_user_tasks import write_task_files
from tests.tiny_run import encoder_run, run_cli

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ToyConfig(ClassifyConfig):
    steps: int = 3  # a toy's own defaults: what a scale that does not name the kind fine-tunes it with
    batch_size: int = 4


@dataclass(frozen=True)
class ToyRecord(Record):
    task: ClassVar[str] = "toy"
    accuracy: float
    correct: list[int]
    majority: list[int]  # each test item's 0/1 under the training rows' most frequent label
    n_test: int


@dataclass(frozen=True)
class ToyRow(RecordRow[ToyRecord]):
    """Its compare row: each test text's 0/1, beside the majority label's, read from its record's typed fields."""

    def decode(self, stored: dict[str, Any]) -> ToyRecord:
        return ToyRecord.from_json(stored)

    def scores(self, record: ToyRecord) -> Items:
        return Items(record.correct)

    def baseline(self, record: ToyRecord) -> Items:
        return Items(record.majority)


class Toy(Task[ToyConfig]):
    """A label per text, read from a user's file only (it has no slice of the plays)."""

    kind = "toy"
    claim = ENCODER_JOBS
    config = ToyConfig
    record = ToyRecord

    def plays(self, cfg: ToyConfig, model: Any, split: str, training: bool) -> tuple[Any, Any]:
        raise UserError("the toy task reads a user's file only: give --data")

    def run(self, model, tokenizer, cfg: ToyConfig, runtime, data, label: str):
        train, test = data if data is not None else self.plays(cfg, model, "test", True)
        classifier = train_classifier(model, tokenizer, train, cfg, runtime=runtime)

        def evaluate() -> ToyRecord:
            gold, majority = [e.label for e in test], majority_label([e.label for e in train])
            correct = [int(p == g) for p, g in zip(predict(classifier, tokenizer, [e.text for e in test]), gold)]
            return ToyRecord(sum(correct) / len(correct), correct, [int(g == majority) for g in gold], len(gold))

        return classifier, evaluate, test

    def summary(self, record: ToyRecord) -> str:
        return f"toy: accuracy {record.accuracy:.3f} on {record.n_test} texts"

    def read(self, spec: TaskSpec) -> UserTask:
        train, test = read_labelled(spec)
        return UserTask(
            spec,
            train,
            test,
            len(train),
            len(test),
            details={"metric": "accuracy"},
            too_few=None if len(Counter(e.label for e in test)) > 1 else "one test label",
        )

    def user_rows(self, task: UserTask, cfg: ToyConfig) -> tuple[Row, ...]:
        return (ToyRow(f"{task.spec.name}: accuracy (toy)", True, "majority class"),)

    def work(self, cfg: ToyConfig, task: UserTask | None, per_char: float) -> Work:
        return Work(cfg.steps * cfg.batch_size * 40.0, (task.test_rows if task else 0) * 40.0, 1.0)

    def configure(self, cfg: ToyConfig, task: UserTask, context: int) -> ToyConfig:
        return within_context(cfg, task, context)

    def kept(self, trained: SequenceClassifier, record: ToyRecord, cfg: ToyConfig):
        return {"labels": trained.labels}, trained.body, trained.head


@pytest.fixture
def toy_registered():
    register(Toy())  # the one line a user writes
    yield
    del TASKS["toy"]


@pytest.mark.e2e
def test_a_kind_defined_outside_the_package_fine_tunes_from_the_command_line(tmp_path, capsys, toy_registered):
    files = write_task_files(tmp_path / "data")
    run = encoder_run(tmp_path / "run")
    code, out, err = run_cli(
        capsys,
        "finetune",
        "toy",
        run,
        "--data",
        files["classify"],
        "--out",
        tmp_path / "ft",
        "--steps",
        "2",
        "--pooling",
        "mean",
        "--no-progress",
    )  # --pooling: its config's field
    assert code == 0, err
    assert "toy: accuracy" in out
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["task"] == "toy" and results["n_test"] == 30 and len(results["correct"]) == 30
    assert json.loads((tmp_path / "ft" / "config.json").read_text())["task"]["kind"] == "toy"


@pytest.mark.e2e
@pytest.mark.slow
def test_compare_judges_a_kind_defined_outside_the_package(tmp_path, capsys, toy_registered):
    files = write_task_files(tmp_path / "data")
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "cmp"
    code, _, err = run_cli(
        capsys,
        "compare",
        "--quick",
        "--config",
        config,
        "--out",
        out,
        "--no-progress",
        "--data",
        files["corpus"],
        "--task",
        f"calm=toy:{files['classify']}",
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    rows = {row[0]: row[1:] for row in results["table"]["rows"]}
    toy_row = rows["calm: accuracy (toy) [95% interval]"]
    assert len(toy_row) >= 3 and not any(cell.startswith("cannot") for cell in toy_row[:3])  # every family scored
    verdict = next(v for v in results["verdicts"] if v["claim"] == ENCODER_JOBS)
    assert verdict["verdict"] in ("held", "falsified", "mixed", "inconclusive") and verdict["details"][1].startswith(
        "calm"
    )  # judged under the claim it declares, from its own row


@pytest.mark.e2e
@pytest.mark.slow
def test_a_kind_registers_from_an_installed_distributions_entry_point(tmp_path):
    site = tmp_path / "site"  # a distribution installed on the path: its module and its dist-info
    (site / "toy_kind-0.1.dist-info").mkdir(parents=True)
    (site / "toy_kind.py").write_text("from tests.test_toy_task import Toy\n")
    (site / "toy_kind-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-kind\nVersion: 0.1\n")
    (site / "toy_kind-0.1.dist-info" / "entry_points.txt").write_text("[maskwise.tasks]\ntoy = toy_kind:Toy\n")
    files = write_task_files(tmp_path / "data")
    run = encoder_run(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": f"{site}:{ROOT}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "maskwise",
            "finetune",
            "toy",
            str(run),
            "--data",
            str(files["classify"]),
            "--out",
            str(tmp_path / "ft"),
            "--steps",
            "2",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "toy: accuracy" in done.stdout and (tmp_path / "ft" / "results.json").is_file()
    (site / "toy_kind-0.1.dist-info" / "entry_points.txt").write_text("[maskwise.tasks]\n")  # uninstalled: unknown
    done = subprocess.run(
        [sys.executable, "-m", "maskwise", "finetune", "toy", str(run), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2 and "invalid choice: 'toy'" in done.stderr
