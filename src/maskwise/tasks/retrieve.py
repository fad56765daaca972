"""Exact nearest-neighbour search and retrieval evaluation.

Search is one matrix product of query and document vectors and a top-k, in chunks of queries so
memory stays bounded: exact, and for collections of thousands of passages faster than building an
index. Evaluation reports recall@k, MRR and nDCG@10, the same broken down by the length of the
relevant passage (short passages give a query less to match, long ones more to be confused by),
and a random ranking as the floor any embedder has to clear. A benchmark with graded judgements
(a BEIR folder) reports what BEIR and MTEB report: nDCG@10, recall@100 and MRR@10.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from maskwise.data.beir import GradedRetrievalSet
from maskwise.data.tasks import RetrievalSet
from maskwise.tasks.metrics import Relevance, bucketed, mrr, ndcg_at_k, recall_at_k
from maskwise.tasks.record import Fields, Record, key

# An embedder: texts in, one vector each out (``tasks.embed.Embedder``, or an external model's callable).
EmbedFn = Callable[[Sequence[str]], torch.Tensor]

RECALL_KS = (1, 5, 10, 100)
# Passage length buckets in characters; ICT passages are speeches of 4+ lines (~150 chars and up).
LENGTH_EDGES = (0, 200, 400, 800)


def search(queries: torch.Tensor, docs: torch.Tensor, k: int, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` documents by dot product (cosine, for normalised vectors) for each query.

    queries: (Q, d); docs: (N, d). Returns (scores, indices), each (Q, min(k, N)), best first."""
    k = min(k, docs.shape[0])
    scores, indices = [], []
    for start in range(0, queries.shape[0], chunk):
        sims = queries[start : start + chunk] @ docs.T  # (chunk, N)
        top = sims.topk(k, dim=-1)
        scores.append(top.values)
        indices.append(top.indices)
    if not scores:
        return torch.zeros(0, k), torch.zeros(0, k, dtype=torch.long)
    return torch.cat(scores), torch.cat(indices)


def ranking_metrics(
    ranked: Sequence[Sequence[int]], relevant: Sequence[Relevance], ks: Sequence[int] = RECALL_KS
) -> dict[str, float]:
    result = {f"recall@{k}": recall_at_k(ranked, relevant, k) for k in ks}
    result["mrr"] = mrr(ranked, relevant)
    result["ndcg@10"] = ndcg_at_k(ranked, relevant, 10)
    return result


def per_query_metrics(ranked: Sequence[Sequence[int]], relevant: Sequence[Relevance]) -> dict[str, list[float]]:
    """Each query's own recall@10, reciprocal rank and nDCG@10 (for bucketing)."""
    return {
        "recall@10": [recall_at_k([r], [rel], 10) for r, rel in zip(ranked, relevant)],
        "mrr": [mrr([r], [rel]) for r, rel in zip(ranked, relevant)],
        "ndcg@10": [ndcg_at_k([r], [rel], 10) for r, rel in zip(ranked, relevant)],
    }


def expected_random(n_docs: int) -> dict[str, float]:
    """recall@10 and nDCG@10 of a uniformly random ranking in expectation, one relevant document
    among ``n_docs``: the chance level an interval must clear (one random draw is itself noisy)."""
    k = min(10, n_docs)
    return {"recall@10": k / n_docs, "ndcg@10": sum(1 / math.log2(r + 2) for r in range(k)) / n_docs}


def random_ranking(n_queries: int, n_docs: int, k: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [rng.sample(range(n_docs), min(k, n_docs)) for _ in range(n_queries)]


WORD = re.compile(r"[a-z']+")


def bm25_ranking(
    data: RetrievalSet | GradedRetrievalSet, k: int = 100, k1: float = 1.2, b: float = 0.75
) -> list[list[int]]:
    """Each query's top-``k`` documents by Okapi BM25 over lowercased words: the classic lexical
    first stage, the same for every reranker, and free of any model being compared."""
    docs = [Counter(WORD.findall(doc.lower())) for doc in data.docs]
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / max(len(docs), 1)
    postings: dict[str, list[int]] = {}
    for i, words in enumerate(docs):
        for word in words:
            postings.setdefault(word, []).append(i)
    n = len(docs)
    ranked = []
    for query in data.queries:
        scores = [0.0] * n
        for word in set(WORD.findall(query.lower())):
            holders = postings.get(word, ())
            idf = math.log(1 + (n - len(holders) + 0.5) / (len(holders) + 0.5))
            for i in holders:
                tf = docs[i][word]
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / average))
        ranked.append(sorted(range(n), key=lambda i: (-scores[i], i))[:k])
    return ranked


def rank(
    embedder: EmbedFn, data: RetrievalSet | GradedRetrievalSet, k: int = 100
) -> tuple[list[list[int]], dict[str, float]]:
    """Each query's top-``k`` document indices, best first, and how long embedding and search took."""
    started = time.perf_counter()
    doc_vectors = embedder(list(data.docs))
    query_vectors = embedder(list(data.queries))
    embedded = time.perf_counter()
    _, indices = search(query_vectors, doc_vectors, k)
    timing = {"embed_s": round(embedded - started, 3), "search_s": round(time.perf_counter() - embedded, 4)}
    return indices.tolist(), timing


@dataclass(frozen=True)
class RankingScores(Fields):
    """One ranking's means over the queries: ``ranking_metrics``' (one relevant passage a query) or
    ``benchmark_metrics``' (graded judgements, MRR cut at 10 as BEIR and MTEB cut it); the other's are None."""

    ndcg_at_10: float = field(metadata=key("ndcg@10"))
    recall_at_10: float = field(metadata=key("recall@10"))
    recall_at_100: float = field(metadata=key("recall@100"))
    recall_at_1: float | None = field(default=None, kw_only=True, metadata=key("recall@1"))
    recall_at_5: float | None = field(default=None, kw_only=True, metadata=key("recall@5"))
    mrr: float | None = field(default=None, kw_only=True)
    mrr_at_10: float | None = field(default=None, kw_only=True, metadata=key("mrr@10"))


@dataclass(frozen=True)
class ExpectedRandom(Fields):
    """A random ranking's scores in expectation (``expected_random``): the chance level, free of one draw's luck."""

    recall_at_10: float = field(metadata=key("recall@10"))
    ndcg_at_10: float = field(metadata=key("ndcg@10"))


@dataclass(frozen=True)
class RandomRanking(RankingScores):
    """One seeded random ranking of the collection: the floor any embedder has to clear."""

    name: str
    expected: ExpectedRandom | None = field(default=None, kw_only=True)  # one relevant passage a query only


@dataclass(frozen=True)
class PerQuery(Fields):
    """Each query's own scores, in query order: the items an interval over queries resamples."""

    recall_at_10: list[float] = field(metadata=key("recall@10"))
    ndcg_at_10: list[float] = field(metadata=key("ndcg@10"))
    mrr: list[float] | None = field(default=None, kw_only=True)
    recall_at_100: list[float] | None = field(default=None, kw_only=True, metadata=key("recall@100"))
    mrr_at_10: list[float] | None = field(default=None, kw_only=True, metadata=key("mrr@10"))
    query_id: list[str] | None = field(default=None, kw_only=True)  # graded judgements name their queries


@dataclass(frozen=True)
class LengthBucket(Fields):
    """The queries whose relevant passage falls in one length bucket: how many, and their mean scores."""

    n: int
    recall_at_10: float = field(metadata=key("recall@10"))
    mrr: float
    ndcg_at_10: float = field(metadata=key("ndcg@10"))


@dataclass(frozen=True)
class RetrievalRecord(RankingScores, Record):
    """An embedder's ranking of a collection beside a random ranking's, per query and (one relevant passage a
    query) by the relevant passage's length; a fine-tune's settings where it was fine-tuned here."""

    task: ClassVar[str] = "retrieve"
    embedder: str
    n_queries: int
    n_docs: int
    per_query: PerQuery
    baseline: RandomRanking
    embed_s: float
    search_s: float
    # By the relevant passage's length in characters; empty for graded judgements (many relevant documents a query).
    by_passage_chars: dict[str, LengthBucket] = field(default_factory=dict, kw_only=True)
    queries_without_relevant: int | None = field(default=None, kw_only=True)  # graded judgements: no grade above 0
    ignore_identical_ids: bool | None = field(default=None, kw_only=True)  # graded judgements only
    pooling: str | None = field(default=None, kw_only=True)  # the fine-tune's (``tasks.embed``), else None
    train_pairs: int | None = field(default=None, kw_only=True)
    max_len: int | None = field(default=None, kw_only=True)
    temperature: float | None = field(default=None, kw_only=True)
    # The classic method (BM25) on the same queries: on the documents as far as the model read them, and whole; and
    # each document's characters read and given (``with_bm25``).
    classic: PerQuery | None = field(default=None, kw_only=True)
    classic_whole: PerQuery | None = field(default=None, kw_only=True)
    chars_read: list[int] | None = field(default=None, kw_only=True)
    chars_given: list[int] | None = field(default=None, kw_only=True)


def with_bm25(record: RetrievalRecord, data: RetrievalSet | GradedRetrievalSet, read: Sequence[int]) -> RetrievalRecord:
    """``record`` with BM25's per-query scores beside it (the metrics ``record`` has: a set's, or graded
    judgements' as BEIR scores them), on each document's first ``read`` characters (what the model read) and on
    whole documents."""

    def per_query(docs: tuple[str, ...]) -> PerQuery:
        ranked = bm25_ranking(replace(data, docs=docs), 101)
        if isinstance(data, GradedRetrievalSet):
            if record.ignore_identical_ids:  # as the embedder was scored: a query never retrieves its own id
                ranked = [[d for d in r if data.doc_ids[d] != query] for r, query in zip(ranked, data.query_ids)]
            scored = [benchmark_metrics([r], [grades]) for r, grades in zip(ranked, data.qrels)]
            return PerQuery.from_json({metric: [q[metric] for q in scored] for metric in ("recall@10", "ndcg@10")})
        return PerQuery.from_json(per_query_metrics(ranked, [{d} for d in data.relevant]))

    return replace(
        record,
        classic=per_query(tuple(doc[:n] for doc, n in zip(data.docs, read))),
        classic_whole=per_query(data.docs),
        chars_read=list(read),
        chars_given=[len(doc) for doc in data.docs],
    )


def evaluate_retrieval(
    embedder: EmbedFn, data: RetrievalSet, k: int = 100, name: str = "embedder", seed: int = 0
) -> RetrievalRecord:
    """Embed the collection and the queries, search, and report metrics overall, by passage length,
    and for a random ranking; plus embedding and search time."""
    ranked, timing = rank(embedder, data, k)
    relevant = [{d} for d in data.relevant]
    lengths = [len(data.docs[d]) for d in data.relevant]
    baseline = random_ranking(len(ranked), len(data.docs), k, seed)
    per_query = per_query_metrics(ranked, relevant)
    return RetrievalRecord.from_json(
        {
            "embedder": name,
            "n_queries": len(data.queries),
            "n_docs": len(data.docs),
            **ranking_metrics(ranked, relevant),
            "per_query": per_query,
            "by_passage_chars": bucketed(lengths, per_query, LENGTH_EDGES),
            "baseline": {
                "name": "random ranking",
                **ranking_metrics(baseline, relevant),
                "expected": expected_random(len(data.docs)),
            },
            **timing,
        }
    )


def benchmark_metrics(ranked: Sequence[Sequence[int]], qrels: Sequence[Relevance]) -> dict[str, float]:
    """The numbers BEIR and MTEB report (nDCG@10 their headline), plus recall@10."""
    return {
        "ndcg@10": ndcg_at_k(ranked, qrels, 10),
        "recall@100": recall_at_k(ranked, qrels, 100),
        "mrr@10": mrr(ranked, qrels, k=10),
        "recall@10": recall_at_k(ranked, qrels, 10),
    }


def evaluate_graded_retrieval(
    embedder: EmbedFn,
    data: GradedRetrievalSet,
    k: int = 100,
    name: str = "embedder",
    ignore_identical_ids: bool = False,
    seed: int = 0,
) -> RetrievalRecord:
    """``evaluate_retrieval`` for graded, multi-document judgements (a BEIR folder's split): the
    benchmark's metrics overall and per query (with its id), and for a random ranking.

    ``ignore_identical_ids`` drops a document whose id is the query's own from its ranking, as BEIR's
    evaluator does by default and MTEB does for ArguAna and Quora, whose queries are in the corpus;
    off by default (MTEB's default), so a query's own id counts like any other document. Documents
    tied in score keep ``topk``'s order, where trec_eval orders them by id (float scores rarely tie)."""
    ranked, timing = rank(embedder, data, k + 1 if ignore_identical_ids else k)
    if ignore_identical_ids:
        ranked = [[d for d in r if data.doc_ids[d] != query][:k] for r, query in zip(ranked, data.query_ids)]
    per_query = [benchmark_metrics([r], [grades]) for r, grades in zip(ranked, data.qrels)]
    baseline = random_ranking(len(ranked), len(data.docs), k, seed)
    return RetrievalRecord.from_json(
        {
            "embedder": name,
            "n_queries": len(data.queries),
            "n_docs": len(data.docs),
            "queries_without_relevant": data.without_relevant,
            "ignore_identical_ids": ignore_identical_ids,
            **benchmark_metrics(ranked, data.qrels),
            "per_query": {
                "query_id": list(data.query_ids),
                **{metric: [q[metric] for q in per_query] for metric in benchmark_metrics([], [])},
            },
            "baseline": {"name": "random ranking", **benchmark_metrics(baseline, data.qrels)},
            **timing,
        }
    )
