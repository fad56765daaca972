"""A task is one unit: its module's ``Task`` subclass declares all of it, and the CLI, ``run_task``, interop and the
recipes read the registry, so one module and one line of ``tasks.registry.TASKS`` are enough."""

import inspect
import re

import pytest

from maskwise.cli import build_parser
from maskwise.cli.commands import ADAPTERS
from maskwise.cli.finetune import run_finetune
from maskwise.errors import UserError
from maskwise.interop.hf_keys import classes_key, task_classes
from maskwise.recipes import COMPARE_SCALES, SCALES, SMOKE
from maskwise.tasks.classify import Classify
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.record import Record
from maskwise.tasks.registry import CLAIMS, TASKS, by_evaluate_name, task_of
from maskwise.tasks.unit import Head, PlaysRow, Row, Task

pytestmark = pytest.mark.unit


def help_of(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return capsys.readouterr().out


def choices_in(text: str, before: str) -> set[str]:
    """The ``{a,b,c}`` choices argparse prints right after ``before`` in a help text."""
    return set(re.search(re.escape(before) + r"\{([^}]*)\}", text).group(1).split(","))


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_every_registered_task_declares_every_field(kind):
    task = TASKS[kind]
    assert isinstance(task, Task) and not inspect.isabstract(type(task))  # every abstract method written
    assert task.kind == kind and task.claim in CLAIMS
    assert issubclass(task.config, FinetuneConfig) and task_of(task.config()) is task  # one task per config type
    assert all(isinstance(p, PlaysRow) and isinstance(p.row, Row) for p in task.plays_rows)
    adapter = ADAPTERS[kind]  # its command line: an adapter module in cli/, not a field of the task
    assert all(callable(getattr(adapter, hook)) for hook in ("flags", "finetune", "evaluate"))
    if task.head is not None:
        assert isinstance(task.head, Head) and task.head.classes_key in task.head.record
    # Its evaluation's record is its own type, named as ``evaluate`` names the task.
    assert issubclass(task.record, Record) and task.record is not Record and task.record.task == task.evaluate_name


def test_interop_reads_the_heads_the_tasks_declare():
    with_head = {kind for kind, task in TASKS.items() if task.head is not None}
    assert {kind for kind in TASKS if classes_key(kind) is not None} == with_head == {"classify", "tag"}
    assert {kind for _, kind in task_classes()} == with_head


def test_the_help_lists_exactly_the_registered_tasks(capsys):
    assert choices_in(help_of(capsys, "finetune"), "usage: maskwise finetune [-h] ") == set(TASKS)
    evaluated = {task.evaluate_name for task in TASKS.values()}
    assert evaluated == {"classify", "retrieve", "rerank", "seq2seq", "tag"}  # embed is scored as retrieval
    assert choices_in(help_of(capsys, "evaluate"), "--task ") == evaluated


def test_a_task_registered_at_runtime_gets_its_commands(monkeypatch, capsys):
    # classify under another kind: a subclass and a registry entry, nothing else; with no adapter module of its own,
    # the CLI gives it the generic one (flags from its config's fields)
    toy = type("Toy", (Classify,), {"kind": "toy"})()
    monkeypatch.setitem(TASKS, "toy", toy)
    assert "toy" in choices_in(help_of(capsys, "finetune"), "usage: maskwise finetune [-h] ")
    assert "toy" in choices_in(help_of(capsys, "evaluate"), "--task ")
    args = build_parser().parse_args(
        ["finetune", "toy", "run", "--out", "fine-tuned", "--plays-task", "line-order", "--freeze"]
    )
    assert (args.task, args.handler) == ("toy", run_finetune)
    assert (args.plays_task, args.freeze, args.pooling) == ("line-order", True, None)  # from ClassifyConfig's fields
    assert by_evaluate_name()["toy"] is toy
    monkeypatch.delitem(TASKS, "toy")
    with pytest.raises(UserError, match="invalid choice: 'toy'"):
        build_parser().parse_args(["finetune", "toy", "run", "--out", "fine-tuned"])


@pytest.mark.parametrize(
    "scale", [f"compare {n}" for n in sorted(COMPARE_SCALES)] + [f"ablate {n}" for n in sorted(SCALES)] + ["smoke"]
)
def test_every_scale_sets_every_registered_task(scale):
    kind, _, name = scale.partition(" ")
    recipe = SMOKE if kind == "smoke" else COMPARE_SCALES[name] if kind == "compare" else SCALES[name].recipe
    plays = {p.key: kind for kind, task in TASKS.items() for p in task.plays_rows}  # the plays' fine-tunes, by name
    assert set(recipe.tasks) == set(TASKS) | set(plays)
    for name, cfg in recipe.tasks.items():
        assert type(cfg) is TASKS[plays.get(name, name)].config


def test_no_task_module_imports_the_command_line_experiments_or_interop():
    """The library's layers point down: a task module imports none of ``cli``, ``experiments`` or ``interop``,
    at the top, inside a function or for type checking alike."""
    import ast
    from pathlib import Path

    import maskwise.tasks

    upward = ("maskwise.cli", "maskwise.experiments", "maskwise.interop")
    found = []
    for path in sorted(Path(maskwise.tasks.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{path.name}: {name}" for name in names if name.startswith(upward)]
    assert found == []
