"""Turning one step's logits into the next tokens: CTRL's repetition penalty, top-k / top-p
filtering and the greedy-or-sampled choice, shared by ``generate``, beam search and ``fill_mask``."""

from __future__ import annotations

import torch


def seen_tokens_mask(seen_ids: list[list[int]], vocab: int, device) -> torch.Tensor:
    """(B, V) True where row b has already seen the token: what the repetition penalty reads."""
    seen = torch.zeros(len(seen_ids), vocab, dtype=torch.bool, device=device)
    for row, ids in enumerate(seen_ids):
        if ids:
            seen[row, torch.tensor(ids, device=device)] = True
    return seen


def penalise_repetition(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty on (B, V) logits: a seen token's positive logit is divided by
    ``penalty`` and a negative one multiplied, so it always becomes less likely for penalty > 1."""
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top ``top_k`` and outside the nucleus of mass ``top_p`` to -inf.
    The nucleus always keeps the most likely token."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)  # (B, V)
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p  # the mass before it already reaches p
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def choose_next(
    logits: torch.Tensor, seen: torch.Tensor | None, cfg, generator: torch.Generator | None
) -> torch.Tensor:
    """(B,) next tokens from (B, V) logits: repetition penalty on ``seen`` (B, V; None when the
    penalty is off), then argmax (temperature 0) or temperature, top-k, top-p and a draw from
    ``generator``. ``cfg``: the call's ``GenerationConfig`` (generate.py imports this module)."""
    scores = logits.float() if seen is None else penalise_repetition(logits.float(), seen, cfg.repetition_penalty)
    if cfg.temperature == 0:
        return scores.argmax(dim=-1)
    scores = filter_top_k_top_p(scores / cfg.temperature, cfg.top_k, cfg.top_p)
    return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator).squeeze(1)
