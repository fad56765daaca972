"""The cross-encoder: an encoder reading query and passage in one joint pass, and one score for the pair.

``readout="cls"``: a fresh linear head on the [CLS] state, the textbook cross-encoder's. ``readout="segments"``: a
learned scale times the cosine of the query's and the passage's mean states in that pass, a score a body trained as
a bi-encoder (all-MiniLM-L6-v2) already gives, where a fresh [CLS] head starts from nothing (docs/ablations.md
measures both). Trained listwise by ``tasks.rerank.train_cross_encoder``, the task that uses it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.errors import UserError
from maskwise.model.heads import ClassifierHead, pool, pooled_position
from maskwise.model.transformer import Encoder
from maskwise.padding import pad
from maskwise.tasks.reading import batches, config_of, context_len, device_of
from maskwise.tasks.rerank_eval import ScoreFn

HEAD_PREFIX = "head."


class ClsScore(ClassifierHead):
    """One score from the [CLS] state: a fresh linear head (BERT's cross-encoders), one "class"."""

    def __init__(self, d_model: int, dropout: float):
        super().__init__(d_model, 1, dropout)

    @staticmethod
    def read_at(attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1): the [CLS] position, the one state this score reads (the body computes it alone)."""
        return pooled_position(attention_mask, "cls", *attention_mask.shape)[:, None]

    # Called as a readout (as ``SegmentCosine`` is), not on a pooled vector: the head is inherited for its layers.
    def forward(self, h, attention_mask, token_type_ids) -> torch.Tensor:  # type: ignore[override]
        return super().forward(h[:, 0]).squeeze(-1)  # (B, 1, d) -> (B,)


class SegmentCosine(nn.Module):
    """A learned scale times the cosine of the query's and the passage's mean states, both read in the
    one joint pass (each attends to the other): what a bi-encoder body was trained to score, so the
    cross-encoder starts from its body's sense of relevance. The scale starts at 20, the
    temperature sentence-transformers trains bi-encoders' in-batch softmax at."""

    def __init__(self, scale: float = 20.0):
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(math.log(scale)))

    @staticmethod
    def read_at(attention_mask: torch.Tensor) -> None:
        """Every position (None): the means read them all."""

    def forward(self, h, attention_mask, token_type_ids) -> torch.Tensor:
        real = attention_mask.bool()  # (B, T)
        h = h.float()  # the means and the cosine in fp32 under autocast
        query, passage = (pool(h, real & (token_type_ids == part), "mean") for part in (0, 1))  # 2 x (B, d)
        return self.log_scale.exp() * F.cosine_similarity(query, passage, dim=-1)  # (B,)


READOUTS = ("cls", "segments")


class CrossEncoder(nn.Module):
    """An encoder reading query and passage together; one score by ``readout`` (``READOUTS``)."""

    def __init__(self, body: nn.Module, dropout: float = 0.1, readout: str = "cls"):
        super().__init__()
        cfg = config_of(body)
        if not cfg.kind.encoder_only:
            raise UserError(
                f"a cross-encoder needs an encoder body, got a {cfg.family}; use the generative reranker for decoders"
            )
        if readout not in READOUTS:
            raise UserError(f"readout {readout!r}: expected one of {', '.join(READOUTS)}")
        self.body = cast(Encoder, body)  # an encoder-only body is an ``Encoder`` (checked above by its family)
        self.head: ClsScore | SegmentCosine = (
            ClsScore(cfg.d_model, dropout) if readout == "cls" else SegmentCosine()
        ).to(device_of(body))

    def forward(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        # A body without segment embeddings tells the parts apart by [SEP]; the readout reads the segments.
        types = token_type_ids if self.body.cfg.type_vocab_size > 0 else None
        h = self.body.hidden_states(
            input_ids, attention_mask, types, self.head.read_at(attention_mask)
        )  # (B, T or 1, d)
        return self.head(h, attention_mask, token_type_ids)  # (B,)


def pair_inputs(tokenizer, query: str, docs: Sequence[str], max_len: int, device) -> tuple[torch.Tensor, ...]:
    """``[CLS] query [SEP] doc [SEP]`` for each doc: the query keeps at most half the room, the doc
    fills the rest. Returns (ids, mask, token types), each (n, T)."""
    q = tokenizer.encode(query)[: max(1, (max_len - 3) // 2)]
    seqs, types = [], []
    for doc_ids in tokenizer.encode_batch(list(docs)):
        d = doc_ids[: max(0, max_len - 3 - len(q))]
        seqs.append([tokenizer.cls_id, *q, tokenizer.sep_id, *d, tokenizer.sep_id])
        types.append([0] * (len(q) + 2) + [1] * (len(d) + 1))
    ids, mask = pad(seqs, tokenizer.pad_id, "right", device)
    type_ids, _ = pad(types, 0, "right", device)
    return ids, mask, type_ids


def cross_encoder_scorer(model: CrossEncoder, tokenizer, max_len: int | None = 256, batch_size: int = 50) -> ScoreFn:
    max_len = context_len(model.body, max_len)

    @torch.no_grad()
    def score(query: str, docs: Sequence[str]) -> torch.Tensor:
        model.eval()
        parts = []
        for chunk in batches(len(docs), batch_size):
            inputs = pair_inputs(tokenizer, query, [docs[i] for i in chunk], max_len, device_of(model))
            parts.append(model(*inputs).float().cpu())
        return torch.cat(parts)

    return score
