"""The few lines a task command prints about its results (the JSON files hold everything)."""

from __future__ import annotations

import json

from maskwise.tasks.registry import by_evaluate_name


def summarize(r: dict) -> str:
    """A few lines a person reads: the headline metric beside its baseline (a task's own ``Task.summary``)."""
    task = r["task"]
    tasks = by_evaluate_name()
    if task in tasks:
        return tasks[task].summary(tasks[task].record.from_json(r))
    if task == "break":
        enc, dec = r["encoder"], r["decoder"]
        return "\n".join(
            [
                f"encoder (append [MASK], {enc['params']:,} params): {enc['sample']!r}",
                f"decoder ({dec['params']:,} params): {dec['sample']!r}",
                (
                    f"bits/char on {r['held_out_chars']} held-out chars: encoder both sides "
                    f"{enc['loss_both_sides']['bits_per_char']:.3f}, encoder left only "
                    f"{enc['loss_left_only']['bits_per_char']:.3f}, decoder left only "
                    f"{dec['loss_left_only']['bits_per_char']:.3f}"
                ),
            ]
        )
    return json.dumps(r)
