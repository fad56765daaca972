"""Text embeddings: pool a body's hidden states into one vector per text, and train a bi-encoder.

An *embedder* is anything callable as ``embedder(texts) -> (N, d) tensor``. ``Embedder`` wraps one
of our bodies; an external model (all-MiniLM-L6-v2 through ``maskwise.interop``, say) is evaluated
as a baseline by passing its own callable to ``tasks.retrieve`` — retrieval never needs to know
where vectors come from.

Training is contrastive with in-batch negatives (InfoNCE): in a batch of (query, positive) pairs,
each query's positive is the right answer among all the batch's positives, so a batch of B pairs
gives every query B - 1 negatives for free. Similarities are cosines divided by a temperature
(default 0.05): cosines live in [-1, 1], and without the division the softmax over them would be
nearly flat and the gradient tiny.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from maskwise.errors import UserError
from maskwise.model.heads import pool
from maskwise.runtime import Runtime
from maskwise.tasks.classify import check_pooling
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.reading import (
    batches,
    context_len,
    device_of,
    encode_texts,
)

EmbedFn = Callable[[Sequence[str]], torch.Tensor]

# Mean pooling is the default for every family except the causal decoder: an untrained [CLS] state is a
# poor summary, while the mean of the token states works zero-shot (Sentence-BERT's finding).


class BiEncoder(nn.Module):
    """A body and a pooling: texts in, (optionally L2-normalised) vectors out. Queries and documents
    share the one body (a symmetric bi-encoder)."""

    def __init__(self, body: nn.Module, pooling: str | None = None, normalize: bool = True):
        super().__init__()
        self.body = body
        self.pooling = check_pooling(body.cfg.kind, body.cfg.kind.embed_pooling if pooling is None else pooling)
        self.normalize = normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        vectors = pool(self.body.read(input_ids, attention_mask), attention_mask, self.pooling)  # (B, d)
        return F.normalize(vectors, dim=-1) if self.normalize else vectors


@dataclass
class Embedder:
    """``BiEncoder`` + tokenizer as an ``EmbedFn``: batched, no gradients, progress on long inputs."""

    model: BiEncoder
    tokenizer: object
    batch_size: int = 64
    max_len: int | None = None
    progress: bool = False

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        self.model.eval()
        body, device = self.model.body, device_of(self.model)
        max_len = context_len(body, self.max_len)
        chunks = batches(len(texts), self.batch_size)
        vectors = []
        for chunk in tqdm(chunks, desc="embed", unit="batch", leave=False,
                          disable=not self.progress or len(chunks) < 4):
            ids, mask = encode_texts(self.tokenizer, [texts[i] for i in chunk], body.cfg.family, max_len, device)
            vectors.append(self.model(ids, mask).float().cpu())
        return torch.cat(vectors) if vectors else torch.zeros(0, body.cfg.d_model)


def info_nce(queries: torch.Tensor, docs: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """InfoNCE over in-batch negatives: row i of ``queries`` (B, d) should pick row i of ``docs``
    (B, d) among all B rows; cross-entropy of ``q @ d.T / temperature``. Pass normalised vectors
    for cosine similarity."""
    if not temperature > 0:
        raise UserError(f"temperature must be positive, got {temperature}")
    logits = queries @ docs.T / temperature  # (B, B)
    return F.cross_entropy(logits, torch.arange(len(queries), device=queries.device))


@dataclass
class EmbedConfig(FinetuneConfig):
    lr: float = 5e-5  # the whole body trains (there is no fresh head), a little faster than 2e-5
    batch_size: int = 32  # in-batch negatives: a bigger batch is a harder task
    pooling: str | None = None
    temperature: float = 0.05
    max_len: int | None = 128  # tokens read per text, in training and in the embedder it gives
    # The plays' ICT rows (``tasks.run.plays_rows``).
    train_pairs: int | None = None  # a random subset of every train speech's pair; None: all
    test_queries: int | None = 300  # a random subset of the test queries; the collection stays whole
    test_docs: int | None = None  # cut the collection itself (and its queries) to this many speeches
    ignore_identical_ids: bool = False  # evaluating on a BEIR set: never return the query's own id


def train_bi_encoder(body: nn.Module, tokenizer, pairs: Sequence[tuple[str, str]], cfg: EmbedConfig,
                     runtime: Runtime | None = None) -> BiEncoder:
    """Contrastive training of ``body`` on (query, positive) pairs; returns the trained bi-encoder
    (vectors always normalised: InfoNCE with a temperature is defined on cosines)."""
    if len(pairs) < 2:
        raise UserError(f"contrastive training needs at least 2 pairs (one positive, one negative), got {len(pairs)}")
    model = BiEncoder(body, cfg.pooling, normalize=True)
    family, device = body.cfg.family, device_of(body)
    max_len = context_len(body, cfg.max_len)
    size = min(cfg.batch_size, len(pairs))

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = rng.sample(range(len(pairs)), size)  # no pair twice: a duplicate would be its own negative
        q_ids, q_mask = encode_texts(tokenizer, [pairs[i][0] for i in chosen], family, max_len, device)
        d_ids, d_mask = encode_texts(tokenizer, [pairs[i][1] for i in chosen], family, max_len, device)
        return info_nce(model(q_ids, q_mask), model(d_ids, d_mask), cfg.temperature)

    fine_tune(model, step_loss, cfg, desc="embed", runtime=runtime)
    return model
