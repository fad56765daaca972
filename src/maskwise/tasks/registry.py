"""The registry: every task kind, one line each. A task is one unit, declared whole in its module
(``tasks/<kind>.py``'s ``TASK = Task(...)``, ``tasks.unit.Task``); everything here is generic over them: the CLI's
``finetune``/``evaluate``, ``run_task``, ``compare --task``, and the fine-tune folders interop opens and exports.
"""

from __future__ import annotations

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
__all__ = ["CLAIMS", "ENCODER_JOBS", "GENERATE", "READ_THEN_WRITE", "TASKS", "Row", "by_evaluate_name", "in_cli_order",
           "keep_fine_tune", "leaked", "read_tasks", "save_fine_tune", "shared_with_training", "task_of"]

# Every kind a user's --task may name, in the report's order.
TASKS: dict[str, Task] = {t.kind: t for t in (tag.TASK, classify.TASK, embed.TASK, rerank.TASK, seq2seq.TASK)}


def task_of(cfg: FinetuneConfig) -> Task:
    """The task ``cfg`` configures: the one whose config is its type."""
    task = next((t for t in TASKS.values() if type(cfg) is t.config), None)
    if task is None:
        raise UserError(f"no task is configured by {type(cfg).__name__}; known: "
                        f"{', '.join(t.config.__name__ for t in in_cli_order())}")
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
        if task.held_out and task.test_rows < MIN_TEST_ITEMS:
            rows = task.train_rows + task.test_rows
            raise UserError(f"task {task.spec.name}: holding out {HOLD_OUT:.0%} of its {rows} rows leaves "
                            f"{task.test_rows} test items, fewer than the {MIN_TEST_ITEMS} a verdict needs; give "
                            "more rows or a test file (,test=PATH)")
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
