"""Scoring given continuations instead of generating them: log p(continuation | prompt) for
zero-shot classification by prompting and for the generative reranker."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.span import decoder_start_id
from maskwise.padding import pad
from maskwise.tasks.generate import check_generative
from maskwise.tasks.reading import batches, device_of


def start_id_of(model, tokenizer) -> int | None:
    """The decoder start id scoring needs: an encoder-decoder's, or None for a decoder (one sequence)."""
    return decoder_start_id(tokenizer) if model.cfg.kind.two_stacks else None


def continuation_batch(
    model,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    pad_id: int,
    start_id: int | None = None,
) -> dict[str, torch.Tensor]:
    """Model inputs whose labels mark exactly the continuation tokens (everything else -100), so
    ``model(**batch)`` gives the continuation's loss, and its logits rows are the continuation
    tokens in order. A decoder reads prompt + continuation (the prompt cut from the left to fit the
    context); an encoder-decoder reads the prompt as its source and the continuation as its target."""
    check_generative(model)
    if any(len(c) == 0 for c in continuations):
        raise UserError("a continuation to score must have at least one token")
    device, limit = device_of(model), model.cfg.max_seq_len
    if model.cfg.kind.causal:
        seqs, labels = [], []
        for prompt, continuation in zip(prompts, continuations):
            n = len(continuation)
            seq = list(prompt)[-max(1, limit - n) :] + list(continuation)
            seqs.append(seq)
            # position t predicts token t + 1: only the continuation's tokens are labelled
            labels.append([IGNORE_INDEX] * (len(seq) - n - 1) + list(continuation) + [IGNORE_INDEX])
        ids, mask = pad(seqs, pad_id, "right", device)
        label_ids, _ = pad(labels, IGNORE_INDEX, "right", device)
        return {"input_ids": ids, "attention_mask": mask, "labels": label_ids}
    if start_id is None:
        raise UserError("an encoder-decoder needs a decoder start token id")
    src, src_mask = pad([list(p)[-limit:] for p in prompts], pad_id, "right", device)
    dec, dec_mask = pad([[start_id, *c[:-1]] for c in continuations], pad_id, "right", device)
    label_ids, _ = pad([list(c) for c in continuations], IGNORE_INDEX, "right", device)
    return {
        "input_ids": src,
        "attention_mask": src_mask,
        "decoder_input_ids": dec,
        "decoder_attention_mask": dec_mask,
        "labels": label_ids,
    }


@torch.no_grad()
def continuation_logprobs(
    model,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    pad_id: int,
    batch_size: int = 32,
    start_id: int | None = None,
) -> torch.Tensor:
    """(N,) summed log p(continuation | prompt), one forward per pair, batched; vocabulary logits
    only at the continuation's positions (the LM head is sparse given labels). Used for zero-shot
    classification by prompting and by the generative reranker."""
    model.eval()
    scores: list[torch.Tensor] = []
    for chunk in batches(len(prompts), batch_size):
        batch = continuation_batch(
            model, [prompts[i] for i in chunk], [continuations[i] for i in chunk], pad_id, start_id
        )
        out = model(**batch)
        targets = batch["labels"][batch["labels"] != IGNORE_INDEX]  # (N,) row-major, as the logits
        logp = out.logits.float().log_softmax(dim=-1).gather(1, targets[:, None]).squeeze(1)  # (N,)
        scores.extend(part.sum() for part in logp.split([len(continuations[i]) for i in chunk]))
    return torch.stack(scores)
