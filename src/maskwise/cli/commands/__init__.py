"""The command line's adapter of each task kind: its flags on ``maskwise finetune KIND`` and ``maskwise evaluate``, and
the two commands. They live here, not in ``maskwise.tasks``, so that the library holds no argparse and never imports
its command line. A kind with no module here (one registered from outside) gets ``Generic``: flags from its config's
fields, and ``finetune`` through the task's own reader of a user's file."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from types import ModuleType
from typing import Any

from maskwise.cli.commands import classify, embed, rerank, seq2seq, tag
from maskwise.cli.task_flags import finetune_config
from maskwise.cli.task_inputs import user_task
from maskwise.errors import UserError
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.unit import Task

ADAPTERS: dict[str, ModuleType] = {module.TASK.kind: module for module in (classify, embed, rerank, seq2seq, tag)}


class Generic:
    """The commands of a kind with no adapter module: its config's own fields as flags, a fine-tune of the plays'
    slice or of ``--data`` read by the kind's own reader, and no ``evaluate`` (one line says so)."""

    def __init__(self, task: Task):
        self.task = task

    def flags(self, parser: argparse.ArgumentParser, evaluating: bool) -> None:
        if evaluating:  # ``evaluate`` has one parser for every kind: nothing of its own to add there
            return
        hints = typing.get_type_hints(self.task.config)
        shared = {f.name for f in dataclasses.fields(FinetuneConfig)}
        for field in dataclasses.fields(self.task.config):
            kind = next(
                (t for t in (bool, int, float, str) if t in (hints[field.name], *typing.get_args(hints[field.name]))),
                None,
            )
            if field.name in shared or kind is None:
                continue
            flag = "--" + field.name.replace("_", "-")
            if kind is bool:
                parser.add_argument(flag, dest=field.name, action="store_true", default=None)
            else:
                parser.add_argument(
                    flag,
                    dest=field.name,
                    type=kind,
                    default=None,
                    help=f"default {getattr(self.task.config, field.name, None)}",
                )

    def finetune(self, args, model, tokenizer, run) -> tuple[dict, Any, dict, Any, Any]:
        cfg = finetune_config(self.task.config, args)
        data = None
        if args.data is not None:
            data = self.task.run_data(user_task(args, self.task), cfg)
        trained, record = run(cfg, data)
        task, body, head = self.task.kept(trained, record, cfg)
        return task, record, {}, body, head

    def evaluate(self, args, model, tokenizer, fine_tune) -> Any:
        raise UserError(
            f"maskwise evaluate has no command for the task kind {self.task.kind!r}: its fine-tune's "
            "results.json holds its evaluation"
        )


def adapter_of(task: Task) -> ModuleType | Generic:
    """The command adapter of ``task``: its module here, else ``Generic``."""
    return ADAPTERS.get(task.kind) or Generic(task)
