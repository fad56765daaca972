"""The registry: every task kind, one instance each. A kind is one class, declared whole in its module
(``tasks/<kind>.py``, a subclass of ``tasks.unit.Task``); everything here is generic over them: the CLI's
``finetune``/``evaluate``, ``run_task``, ``compare --task``, and the fine-tune folders interop opens and exports.
A kind from another package registers through the ``maskwise.tasks`` entry point group (``docs/add-a-task.md``).
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points
from pathlib import Path

from maskwise.data.task_files import HOLD_OUT, MIN_TEST_ITEMS
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError
from maskwise.runs import (
    CONFIG_FILE,
    HEAD_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    save_weights,
    write_json,
)
from maskwise.tasks import classify, embed, rerank, seq2seq, tag
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.record import Record
from maskwise.tasks.unit import (
    CLAIMS,
    ENCODER_JOBS,
    GENERATE,
    READ_THEN_WRITE,
    Row,
    Task,
)

# The claims and ``Row`` are ``tasks.unit``'s, named here too for compare and the report, which read them with TASKS.
__all__ = [
    "CLAIMS",
    "ENCODER_JOBS",
    "GENERATE",
    "READ_THEN_WRITE",
    "TASKS",
    "Row",
    "by_evaluate_name",
    "configured_by",
    "in_cli_order",
    "keep_fine_tune",
    "leaked",
    "read_tasks",
    "register",
    "register_installed",
    "save_fine_tune",
    "shared_with_training",
    "task_of",
]

ENTRY_POINTS = "maskwise.tasks"  # the group a package's task kinds register under: name = "module:TaskSubclass"

# Every kind a user's --task may name, in the report's order: the package's own, then those registered.
TASKS: dict[str, Task] = {
    t.kind: t for t in (tag.Tag(), classify.Classify(), embed.Embed(), rerank.Rerank(), seq2seq.Seq2Seq())
}


def register(task: Task) -> Task:
    """Add ``task`` to the registry: ``finetune``, ``evaluate`` and ``compare --task`` take its kind from now on."""
    if not isinstance(task, Task):
        raise UserError(f"{task!r} is not a maskwise.tasks.unit.Task")
    if task.kind in TASKS and type(TASKS[task.kind]) is not type(task):
        raise UserError(
            f"task kind {task.kind!r} is registered twice ({type(TASKS[task.kind]).__name__} and "
            f"{type(task).__name__}); rename one"
        )
    TASKS[task.kind] = task
    return task


def register_installed() -> None:
    """Register every installed package's task kinds (the ``maskwise.tasks`` entry points); one that fails to load is
    a one-line warning, not a crash. The command line calls it before it lists the kinds; it runs on demand, not on
    import, so that a plugin may import any of maskwise."""
    for point in entry_points(group=ENTRY_POINTS):
        try:
            register(point.load()())
        except Exception as error:  # noqa: BLE001 - a broken plugin must not take the CLI down with it
            warnings.warn(f"maskwise: task kind {point.name} ({point.value}) not registered: {error}", stacklevel=2)


def task_of(cfg: FinetuneConfig) -> Task:
    """The task ``cfg`` configures: the one whose config is its type."""
    return configured_by(type(cfg))


def configured_by(config: type[FinetuneConfig]) -> Task:
    """The task whose config type is ``config``."""
    task = next((t for t in TASKS.values() if config is t.config), None)
    if task is None:
        raise UserError(
            f"no task is configured by {config.__name__}; known: {', '.join(t.config.__name__ for t in in_cli_order())}"
        )
    return task


def in_cli_order() -> list[Task]:
    """The tasks as the CLI lists them (``finetune``'s commands, ``evaluate --task``): by kind, alphabetically."""
    return sorted(TASKS.values(), key=lambda t: t.kind)


def by_evaluate_name() -> dict[str, Task]:
    """The tasks by their name under ``maskwise evaluate --task`` and in their results' ``task``, in the CLI's order."""
    return {t.evaluate_name: t for t in in_cli_order()}


def save_fine_tune(out: Path, model, tokenizer, task: dict, head=None) -> None:
    """Lay a fine-tune out as a run folder (``maskwise finetune``'s and compare's), so that every command and
    ``maskwise export`` open it like any run."""
    save_weights(model, out / MODEL_FILE)
    if head is not None:
        save_weights(head, out / HEAD_FILE)
    tokenizer.save(out / TOKENIZER_FILE)
    write_json(out / CONFIG_FILE, {"model": model.cfg.to_dict(), "task": task})


def keep_fine_tune(out: Path, kind: str, trained, record: Record, cfg: FinetuneConfig, tokenizer, base: str) -> None:
    """Write what ``run_task`` trained for task ``kind`` into the fine-tune folder ``out`` (created)."""
    task, model, head = TASKS[kind].kept(trained, record, cfg)
    out.mkdir(parents=True, exist_ok=True)
    save_fine_tune(out, model, tokenizer, {"kind": kind, "base": base, **task}, head)


def read_tasks(specs: list[TaskSpec]) -> list[UserTask]:
    """Every spec read and checked (names distinct, a held-out split large enough to judge), in the order given."""
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--task names {', '.join(twice)} more than once; each task needs its own name")
    tasks = [TASKS[s.kind].read(s) for s in specs]
    for task in tasks:
        if task.held_out and task.too_few:
            raise UserError(
                f"task {task.spec.name}: {task.too_few}; a verdict needs at least 2 labels tested: give "
                "more rows or a test file (,test=PATH)"
            )
        if task.held_out and task.test_rows < MIN_TEST_ITEMS:
            rows = task.train_rows + task.test_rows
            raise UserError(
                f"task {task.spec.name}: holding out {HOLD_OUT:.0%} of its {rows} rows leaves "
                f"{task.test_rows} test items, fewer than the {MIN_TEST_ITEMS} a verdict needs; give "
                "more rows or a test file (,test=PATH)"
            )
    return tasks


LEAK_MIN_CHARS = 20  # shorter test texts (a two-word query) occur in any corpus by chance, not by a leak


def leaked(tasks: list[UserTask], corpus: str) -> dict[str, int]:
    """Per task, how many of its test items' texts (of ``LEAK_MIN_CHARS`` or more) occur verbatim in ``corpus``."""
    counts = {}
    for task in tasks:
        texts = [t.strip() for t in TASKS[task.spec.kind].texts(task.test) if len(t.strip()) >= LEAK_MIN_CHARS]
        found = sum(text in corpus for text in texts)
        if found:
            counts[task.spec.name] = found
    return counts


def shared_with_training(task: UserTask) -> int:
    """How many of ``task``'s test items have a text that a training row has too (after trimming whitespace)."""
    texts = TASKS[task.spec.kind].texts
    trained = {t.strip() for t in texts(task.train)}
    return sum(t.strip() in trained for t in texts(task.test))
