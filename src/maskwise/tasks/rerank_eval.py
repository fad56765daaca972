"""Evaluating a reranker over fixed candidates: nDCG@10, MRR and latency per query, beside the first stage's own
order and a random order of the same candidates, with a paired bootstrap interval on each nDCG@10 gain.

Judgements are a query's one relevant document (ICT, query/positive rows) or a BEIR folder's graded qrels, whose
grades are nDCG's gains; ``judgements`` gives either as one ``Relevance`` per query.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from tqdm import tqdm

from maskwise.data.beir import GradedRetrievalSet
from maskwise.data.tasks import RetrievalSet
from maskwise.tasks.metrics import Relevance, gains, latency_ms, paired_bootstrap
from maskwise.tasks.record import Fields, R, Record, key
from maskwise.tasks.retrieve import per_query_metrics, ranking_metrics

ScoreFn = Callable[[str, Sequence[str]], torch.Tensor]  # (query, candidates) -> (n,) scores


def judgements(data: RetrievalSet | GradedRetrievalSet) -> list[Relevance]:
    """Each query's relevant documents: its one (a set) or its graded qrels (document -> grade, the gain)."""
    if isinstance(data, GradedRetrievalSet):
        return list(data.qrels)
    return [{d} for d in data.relevant]


RECALL = "recall@"  # how each recall's JSON key starts (``retrieve.ranking_metrics``)


@dataclass(frozen=True)
class OrderScores(Fields):
    """An order's ``retrieve.ranking_metrics`` over each query's candidates, alike for a reranker and a baseline
    (its own name: ``retrieve.RankingScores`` ranks a whole collection)."""

    # Recall at 1, 10 and the candidate depth: the depth's key (``recall@100``) is known only at run time, so the
    # recalls are held by their JSON keys, and the JSON spreads them beside ``mrr`` as ``ranking_metrics`` does.
    recall: dict[str, float]  # "recall@k" -> recall at k; at the depth it bounds what any reranker can reach
    mrr: float
    ndcg_at_10: float = field(metadata=key("ndcg@10"))

    def to_json(self) -> dict[str, Any]:
        """Its fields, each recall under its own key in ``recall``'s place."""
        spread: dict[str, Any] = {}
        for name, value in super().to_json().items():
            spread.update(value if name == "recall" else {name: value})
        return spread

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        return super().from_json({**data, "recall": {k: v for k, v in data.items() if k.startswith(RECALL)}})


@dataclass(frozen=True)
class OrderBaseline(OrderScores):
    """An order of the same candidates that no reranker chose: what a reranker must beat to be worth its latency."""

    name: str


@dataclass(frozen=True)
class QueryScores(Fields):
    """Each query's own numbers, paired across orders by query: what a compare row and the bootstrap resample."""

    ndcg_at_10: list[float] = field(metadata=key("ndcg@10"))
    seconds: list[float]
    first_stage_ndcg_at_10: list[float] = field(metadata=key("first_stage_ndcg@10"))
    random_order_ndcg_at_10: list[float] = field(metadata=key("random_order_ndcg@10"))  # expected, not sampled


@dataclass(frozen=True)
class Latency(Fields):
    """Per-query wall-clock (``metrics.latency_ms``): the median a user usually waits, p99 the slow tail."""

    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class PairedGain(Fields):
    """``metrics.paired_bootstrap`` of two orders on the same queries: a gain with the luck of the queries drawn."""

    difference: float  # the mean per-query gain
    ci95_low: float
    ci95_high: float
    p_not_better: float  # the fraction of resamples without a gain


@dataclass(frozen=True)
class NdcgGains(Fields):
    """The reranker's nDCG@10 gain over each baseline order, so that neither is read without its interval."""

    over_random_order: PairedGain
    over_first_stage: PairedGain


@dataclass(frozen=True)
class RerankRecord(OrderScores, Record):
    """A reranker's metrics and latency over fixed candidates beside two orders of the same candidates: the first
    stage's (``baseline``) and a random one (``random_order``), with each nDCG@10 gain's interval."""

    task: ClassVar[str] = "rerank"
    reranker: str  # its label
    n_queries: int
    candidates_per_query: int  # the depth: the most candidates a query has
    per_query: QueryScores
    latency: Latency
    baseline: OrderBaseline
    random_order: OrderBaseline
    ndcg_at_10_gain: NdcgGains = field(metadata=key("ndcg@10_gain"))
    kind: str | None = None  # "cross" or "generative", where fine-tuned here (``rerank._run``)
    max_len: int | None = None  # tokens a (query, candidate) pair is cut to, where fine-tuned here
    readout: str | None = None  # a cross-encoder's score (``cross_encoder.READOUTS``), where fine-tuned here
    first_stage: str | None = None  # the bi-encoder that drew the candidates (the CLI's commands)


def evaluate_reranker(
    score: ScoreFn,
    data: RetrievalSet | GradedRetrievalSet,
    candidates: Sequence[Sequence[int]],
    name: str,
    progress: bool = True,
    seed: int = 0,
) -> RerankRecord:
    """Rerank each query's candidates by ``score`` and report metrics and per-query latency, beside
    two baselines over the same candidates: the first stage's order (what a reranker must improve
    on to be worth its latency) and a random order (the trivial floor, its expected metrics). The
    nDCG@10 gain over each comes with a paired bootstrap over queries (``seed``): its 95% interval
    says whether the gain is more than the luck of which queries were drawn. ``recall@k`` of the
    first stage at the candidate depth bounds what any reranker can reach."""
    if len(candidates) != len(data.queries):
        raise ValueError(f"{len(candidates)} candidate lists for {len(data.queries)} queries")
    relevant = judgements(data)
    reranked, seconds = [], []
    for query, cands in tqdm(
        list(zip(data.queries, candidates)), desc=f"rerank ({name})", unit="query", leave=False, disable=not progress
    ):
        started = time.perf_counter()
        scores = score(query, [data.docs[d] for d in cands])
        order = scores.argsort(descending=True, stable=True).tolist()
        seconds.append(time.perf_counter() - started)
        reranked.append([cands[i] for i in order])
    depth = max((len(c) for c in candidates), default=0)
    ks = tuple(sorted({1, 10, depth}))
    ndcg = per_query_metrics(reranked, relevant)["ndcg@10"]
    first_stage = per_query_metrics(candidates, relevant)["ndcg@10"]
    random_order = random_order_per_query(candidates, relevant, ks)
    return RerankRecord.from_json(
        {
            "reranker": name,
            "n_queries": len(data.queries),
            "candidates_per_query": depth,
            **ranking_metrics(reranked, relevant, ks),
            "per_query": {
                "ndcg@10": ndcg,
                "seconds": seconds,
                "first_stage_ndcg@10": first_stage,
                "random_order_ndcg@10": random_order["ndcg@10"],
            },
            "latency": latency_ms(seconds),
            "baseline": {"name": "first-stage order", **ranking_metrics(candidates, relevant, ks)},
            "random_order": {
                "name": "random order of the same candidates (expected value)",
                **{metric: sum(values) / len(values) for metric, values in random_order.items()},
            },
            "ndcg@10_gain": {
                "over_random_order": paired_bootstrap(ndcg, random_order["ndcg@10"], seed=seed),
                "over_first_stage": paired_bootstrap(ndcg, first_stage, seed=seed),
            },
        }
    )


def gain_summary(record: RerankRecord) -> str:
    """One line for people: the nDCG@10 gain over each baseline with its 95% interval."""
    over = record.ndcg_at_10_gain
    return "nDCG@10 gain " + ", ".join(
        f"{g.difference:+.3f} over {label} (95% CI {g.ci95_low:+.3f}..{g.ci95_high:+.3f})"
        for g, label in ((over.over_random_order, "random order"), (over.over_first_stage, "first stage"))
    )


def random_order_per_query(
    candidates: Sequence[Sequence[int]], relevant: Sequence[int | Relevance], ks: Sequence[int]
) -> dict[str, list[float]]:
    """Each query's expected recall@k, reciprocal rank and nDCG@10 when its candidates are put in a
    uniformly random order; ``relevant[i]`` is query i's one relevant document or its judgements
    (``judgements``). Exact, not sampled: each of the n candidates sits at each rank 1..n with
    probability 1/n, so a relevant candidate's expected gain at the cut is its gain times the mean
    discount over those ranks; the first of m relevant candidates is at rank r with probability
    C(n - r, m - 1) / C(n, m) (one relevant: H_n / n). A query with no relevant candidate scores 0."""
    result: dict[str, list[float]] = {**{f"recall@{k}": [] for k in ks}, "mrr": [], "ndcg@10": []}
    for cands, rel in zip(candidates, relevant, strict=True):
        judged = gains({rel} if isinstance(rel, int) else rel)
        n, present = len(cands), [judged[d] for d in cands if d in judged]
        m = len(present)
        for k in ks:
            result[f"recall@{k}"].append(m / len(judged) * min(k, n) / n if m else 0.0)
        result["mrr"].append(
            sum(math.comb(n - r, m - 1) / r for r in range(1, n - m + 2)) / math.comb(n, m) if m else 0.0
        )
        ideal = sum(g / math.log2(rank + 1) for rank, g in enumerate(sorted(judged.values(), reverse=True)[:10], 1))
        mean_discount = sum(1 / math.log2(rank + 1) for rank in range(1, min(10, n) + 1)) / n if n else 0.0
        result["ndcg@10"].append(sum(present) * mean_discount / ideal if m else 0.0)
    return result
