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
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from maskwise.data.beir import GradedRetrievalSet
from maskwise.data.task_readers import Retrieval, read_retrieval
from maskwise.data.tasks import RetrievalSet, ict_retrieval
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError
from maskwise.model.heads import pool
from maskwise.runtime import Runtime
from maskwise.tasks.classic import BM25, chars_read
from maskwise.tasks.classify import check_pooling
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.items import Items
from maskwise.tasks.reading import (
    batches,
    body_of,
    config_of,
    context_len,
    device_of,
    encode_texts,
)
from maskwise.tasks.retrieve import (
    PerQuery,
    RetrievalRecord,
    evaluate_graded_retrieval,
    evaluate_retrieval,
    with_bm25,
)
from maskwise.tasks.unit import (
    ENCODER_JOBS,
    PlaysRow,
    RecordRow,
    Row,
    Task,
    Work,
    chars_read_and_given,
    mean_tokens,
    within_context,
)

# Mean pooling is the default for every family except the causal decoder: an untrained [CLS] state is a
# poor summary, while the mean of the token states works zero-shot (Sentence-BERT's finding).


class BiEncoder(nn.Module):
    """A body and a pooling: texts in, (optionally L2-normalised) vectors out. Queries and documents
    share the one body (a symmetric bi-encoder)."""

    def __init__(self, body: nn.Module, pooling: str | None = None, normalize: bool = True):
        super().__init__()
        self.body = body_of(body)
        kind = self.body.cfg.kind
        self.pooling = check_pooling(kind, kind.embed_pooling if pooling is None else pooling)
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
        for chunk in tqdm(
            chunks, desc="embed", unit="batch", leave=False, disable=not self.progress or len(chunks) < 4
        ):
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


def train_bi_encoder(
    body: nn.Module, tokenizer, pairs: Sequence[tuple[str, str]], cfg: EmbedConfig, runtime: Runtime | None = None
) -> BiEncoder:
    """Contrastive training of ``body`` on (query, positive) pairs; returns the trained bi-encoder
    (vectors always normalised: InfoNCE with a temperature is defined on cosines)."""
    if len(pairs) < 2:
        raise UserError(f"contrastive training needs at least 2 pairs (one positive, one negative), got {len(pairs)}")
    model = BiEncoder(body, cfg.pooling, normalize=True)
    family, device = config_of(body).family, device_of(body)
    max_len = context_len(body, cfg.max_len)
    size = min(cfg.batch_size, len(pairs))

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = rng.sample(range(len(pairs)), size)  # no pair twice: a duplicate would be its own negative
        q_ids, q_mask = encode_texts(tokenizer, [pairs[i][0] for i in chosen], family, max_len, device)
        d_ids, d_mask = encode_texts(tokenizer, [pairs[i][1] for i in chosen], family, max_len, device)
        return info_nce(model(q_ids, q_mask), model(d_ids, d_mask), cfg.temperature)

    fine_tune(model, step_loss, cfg, desc="embed", runtime=runtime)
    return model


# ---- the unit: its plays' rows, its run, its commands and its compare rows ---------------------------


@dataclass(frozen=True)
class RetrievalRow(RecordRow[RetrievalRecord]):
    """A retrieval row: each test query's recall@10, or (``ndcg``, graded judgements) its nDCG@10, beside a random
    ranking's and BM25's on the same queries."""

    classic_name: str = BM25
    ndcg: bool = False

    def decode(self, stored: dict[str, Any]) -> RetrievalRecord:
        return RetrievalRecord.from_json(stored)

    def items(self, per_query: PerQuery) -> Items:
        """``per_query``'s scores under this row's metric."""
        return Items(per_query.ndcg_at_10 if self.ndcg else per_query.recall_at_10)

    def scores(self, record: RetrievalRecord) -> Items:
        return self.items(record.per_query)

    def baseline(self, record: RetrievalRecord) -> float | None:
        """A random ranking's own nDCG@10 under graded judgements, else its expected recall@10."""
        if self.ndcg:
            return record.baseline.ndcg_at_10
        expected = record.baseline.expected
        return None if expected is None else expected.recall_at_10

    def classic(self, record: RetrievalRecord) -> Items | None:
        return None if record.classic is None else self.items(record.classic)

    def classic_whole(self, record: RetrievalRecord) -> Items | None:
        return None if record.classic_whole is None else self.items(record.classic_whole)

    def read(self, record: RetrievalRecord) -> tuple[list[int], list[int]] | None:
        return chars_read_and_given(record)


class Embed(Task[EmbedConfig]):
    """Embeddings fine-tuned for retrieval (in-batch negatives), scored as retrieval beside BM25."""

    kind = "embed"
    claim = ENCODER_JOBS
    config = EmbedConfig
    record = RetrievalRecord
    plays_rows = (PlaysRow("embed", RetrievalRow("retrieval recall@10 (ICT)", True, "random")),)
    evaluated_as = "retrieve"
    data_help = ", or a BEIR folder with qrels/train.tsv"

    def plays(
        self, cfg: EmbedConfig, model: nn.Module | None, split: str, training: bool
    ) -> tuple[list[tuple[str, str]] | None, RetrievalSet]:
        """The plays' ICT rows: a random subset of every train speech's pair, and the split's queries and speeches."""
        train = None
        if training:
            pairs = ict_retrieval("train", seed=cfg.data_seed).pairs()
            count = len(pairs) if cfg.train_pairs is None else min(cfg.train_pairs, len(pairs))
            train = random.Random(cfg.data_seed).sample(pairs, count)
        return train, ict_retrieval(split, max_queries=cfg.test_queries, max_docs=cfg.test_docs, seed=cfg.test_seed)

    def run(
        self, model, tokenizer, cfg: EmbedConfig, runtime: Runtime, data, label: str
    ) -> tuple[BiEncoder, Callable[[], RetrievalRecord], Retrieval]:
        pairs, test = data or self.plays(cfg, model, "test", True)
        assert pairs is not None  # the plays' training rows were asked for
        encoder = train_bi_encoder(model, tokenizer, pairs, cfg, runtime)
        embedder = Embedder(encoder, tokenizer, max_len=cfg.max_len, progress=cfg.progress)

        def evaluate() -> RetrievalRecord:
            name = f"{label} ({encoder.pooling} pooling)"
            read = chars_read(tokenizer, list(test.docs), context_len(model, cfg.max_len), model.cfg.family)
            if isinstance(test, GradedRetrievalSet):  # a BEIR folder's graded judgements
                record = evaluate_graded_retrieval(
                    embedder, test, name=name, ignore_identical_ids=cfg.ignore_identical_ids
                )
            else:
                record = evaluate_retrieval(embedder, test, name=name)
            record = with_bm25(record, test, read)
            return replace(
                record,
                pooling=encoder.pooling,
                train_pairs=len(pairs),
                max_len=cfg.max_len,
                temperature=cfg.temperature,
            )

        return encoder, evaluate, test

    def kept(
        self, trained: BiEncoder, record: RetrievalRecord, cfg: EmbedConfig
    ) -> tuple[dict[str, Any], nn.Module, None]:
        return (
            {
                "pooling": trained.pooling,
                "normalize": True,
                "max_len": record.max_len,
                "temperature": record.temperature,
            },
            trained.body,
            None,
        )

    def summary(self, record: RetrievalRecord) -> str:
        r, base = record, record.baseline
        graded = r.mrr_at_10 is not None  # a benchmark's (BEIR, MTEB) MRR is cut at 10
        mrr, base_mrr = (r.mrr_at_10, base.mrr_at_10) if graded else (r.mrr, base.mrr)
        return (
            f"retrieve ({r.embedder}) {r.n_queries} queries over {r.n_docs} passages: "
            f"nDCG@10 {r.ndcg_at_10:.3f} (random {base.ndcg_at_10:.3f}), {'MRR@10' if graded else 'MRR'} "
            f"{mrr:.3f} ({base_mrr:.3f}), recall@100 {r.recall_at_100:.3f} ({base.recall_at_100:.3f})"
        )

    def read(self, spec: TaskSpec) -> UserTask:
        return read_retrieval(spec)

    def user_rows(self, task: UserTask, cfg: EmbedConfig) -> tuple[Row, ...]:
        if task.details["metric"].lower() == "ndcg@10":  # graded judgements: the random ranking's own nDCG@10
            return (RetrievalRow(f"{task.spec.name}: nDCG@10 (embed, retrieval)", True, "random ranking", ndcg=True),)
        return (RetrievalRow(f"{task.spec.name}: recall@10 (embed, retrieval)", True, "random"),)

    def work(self, cfg: EmbedConfig, task: UserTask | None, per_char: float) -> Work:
        """Each step's batch of query-passage pairs trained; every test query and document embedded once (the
        plays' queries and passages: speeches)."""
        if task is not None:
            queries, docs = task.test_rows, len(task.test.docs)
            length = mean_tokens([*task.test.queries, *task.test.docs[:1000]], per_char)
        else:
            queries, docs, length = cfg.test_queries or 0, cfg.test_docs or 0, 200 * per_char
        length = min(length, cfg.max_len or length)
        return Work(2 * cfg.steps * cfg.batch_size * length, (queries + docs) * length, (queries + docs) / 64)

    def configure(self, cfg: EmbedConfig, task: UserTask, context: int) -> EmbedConfig:
        return within_context(cfg, task, context)

    def run_data(self, task: UserTask, cfg: EmbedConfig) -> tuple[list[tuple[str, str]], Retrieval]:
        return task.train.pairs(), task.test

    def texts(self, rows: Retrieval) -> list[str]:
        return list(rows.queries)
