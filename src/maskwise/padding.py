"""Padding id lists into batches: one helper for the objectives' collators and for every task."""

from __future__ import annotations

from collections.abc import Sequence

import torch

PAD_SIDES = ("left", "right")


def pad(
    seqs: Sequence[Sequence[int]], pad_id: int, side: str = "right", device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists into ``(B, T)`` ids and a ``(B, T)`` attention mask (1 = real token)."""
    if side not in PAD_SIDES:
        raise ValueError(f"unknown padding side {side!r}; known: {', '.join(PAD_SIDES)}")
    if not seqs:
        raise ValueError("nothing to pad")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if not seq:
            continue
        start = width - len(seq) if side == "left" else 0
        ids[row, start : start + len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, start : start + len(seq)] = 1
    return ids.to(device), mask.to(device)
