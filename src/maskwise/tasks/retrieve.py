"""Exact nearest-neighbour search and retrieval evaluation.

Search is one matrix product of query and document vectors and a top-k, in chunks of queries so
memory stays bounded: exact, and for collections of thousands of passages faster than building an
index. Evaluation reports recall@k, MRR and nDCG@10, the same broken down by the length of the
relevant passage (short passages give a query less to match, long ones more to be confused by),
and a random ranking as the floor any embedder has to clear. A benchmark with graded judgements
(a BEIR folder) reports what BEIR and MTEB report: nDCG@10, recall@100 and MRR@10.
"""

from __future__ import annotations

import functools
import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
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


# BM25 as the field runs it: Lucene's BM25Similarity (Elasticsearch's default, BEIR's BM25 baseline), over the
# text an Elasticsearch analyzer would index. Words are runs of Unicode letters and digits ("2016", "élection"),
# lower-cased, joined across an apostrophe inside a word ("o'er", "don't") as Lucene's standard tokenizer joins them.
TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
K1, B = 1.2, 0.75
# The rule for "the documents are English": among the word tokens of a sample of them (up to ``ENGLISH_SAMPLE_DOCS``
# documents evenly spaced through the collection, the first ``ENGLISH_SAMPLE_CHARS`` characters of each), the share
# that are one of these common English words is at least ``ENGLISH_SHARE``. The words are English's most frequent
# that are rare in other European languages (not "a", "on", "in", "is", "was", "for", "to", "will", "we"). English
# prose scores 0.2 to 0.35 (the plays' speeches 0.21), terse English (a BEIR folder's title and sentence) about 0.1;
# French, German, Italian and Danish 0, Dutch a few hundredths ("of"). Headlines alone can fall under it (0.04):
# they are then read without English analysis.
ENGLISH_MARKERS = frozenset(
    "the of and that with this from his are it not you they were which be what there their been has she would".split()
)
ENGLISH_SHARE = 0.05
ENGLISH_SAMPLE_DOCS, ENGLISH_SAMPLE_CHARS = 1000, 2000
# Elasticsearch's and Lucene's English stop words (``_english_``, ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``): the 33
# the english analyzer drops. Not scikit-learn's 318, which also drop content words ("fire", "call", "thick", "bill")
# and cost the plays' ICT queries, short verse lines, 0.013 (val) and 0.018 (test) of recall@10 more than these do.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)


def words(text: str) -> list[str]:
    """``text``'s lower-cased words (``TOKEN``): what BM25 reads before any English analysis."""
    return TOKEN.findall(text.lower())


def english_share(docs: Sequence[str]) -> float:
    """The share of ``ENGLISH_MARKERS`` among the word tokens of a sample of ``docs`` (0 where it has none)."""
    step = max(1, math.ceil(len(docs) / ENGLISH_SAMPLE_DOCS))
    tokens = [w for doc in docs[::step] for w in words(doc[:ENGLISH_SAMPLE_CHARS])]
    return sum(w in ENGLISH_MARKERS for w in tokens) / len(tokens) if tokens else 0.0


@functools.lru_cache(maxsize=1)
def _porter() -> Callable[[str], str]:
    """The Porter stemmer as Martin Porter's reference implementations run it, as Lucene's ``PorterStemFilter`` does
    (its "logi" and "bli" rules; words of 1 or 2 letters kept): nltk's, imported on first use (a second), no data
    downloaded."""
    from nltk.stem.porter import PorterStemmer

    stemmer = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)

    def stem(word: str) -> str:
        return str(stemmer.stem(word, to_lowercase=False))

    return stem


@functools.lru_cache(maxsize=1 << 18)
def porter_stem(word: str) -> str:
    """``word``'s Porter stem, cached: a collection repeats its words, and nltk stems about 50,000 words a second."""
    return _porter()(word)


@dataclass(frozen=True)
class Bm25Analysis:
    """How BM25 turns a text into terms: lower-cased words (``words``), and where the documents are English
    (``english_share`` at least ``ENGLISH_SHARE``) Elasticsearch's english analyzer's steps, as BEIR's BM25 baseline
    runs them: a possessive "'s" dropped, its English stop words (``STOP_WORDS``) removed, Porter stems."""

    english: bool

    @classmethod
    def of(cls, docs: Sequence[str]) -> Bm25Analysis:
        """The analysis the rule picks for a collection: English where its sample's share of English function words
        is at least ``ENGLISH_SHARE``."""
        return cls(english_share(docs) >= ENGLISH_SHARE)

    def terms(self, text: str) -> list[str]:
        """``text``'s terms, in order: its words, and for English each one's stem unless it is a stop word."""
        found = words(text)
        if not self.english:
            return found
        kept = (w[:-2] if w.endswith(("'s", "\u2019s")) else w for w in found)
        return [porter_stem(w) for w in kept if w not in STOP_WORDS]

    def describe(self, k1: float = K1, b: float = B) -> str:
        """The classic method's full name: "BM25 (Lucene variant, k1 1.2, b 0.75; English analysis: ...)"."""
        analysis = (
            "English analysis: lower-case, Lucene's 33 English stop words, Porter stems"
            if self.english
            else "lower-case words, no stop words or stems: the documents are not English"
        )
        return f"BM25 (Lucene variant, k1 {k1:g}, b {b:g}; {analysis})"


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """The indices of ``scores``' ``k`` largest, best first, a tie in index order (as ``sorted`` by (-score,
    index) orders them), without sorting the whole row."""
    n = len(scores)
    k = min(k, n)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(scores, n - k)[n - k]  # the k-th largest score
    above = np.flatnonzero(scores > kth)
    above = above[np.argsort(-scores[above], kind="stable")]
    return np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])


def bm25_search(
    queries: Sequence[str],
    docs: Sequence[str],
    k: int = 100,
    k1: float = K1,
    b: float = B,
    analysis: Bm25Analysis | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Each query's top-``k`` documents by BM25, best first (a tie in score in index order), and their scores.

    The score is Lucene's BM25 (``BM25Similarity`` since Lucene 8, as bm25s's ``method="lucene"`` computes it):
    for each query term t, idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), with idf(t) = ln(1 + (N - df + 0.5)
    / (df + 0.5)) and |d| a document's number of terms after analysis; no (k1 + 1) factor, which Lucene 8 dropped
    as it orders nothing. A term repeated in a query counts once per occurrence, as Lucene counts it (its
    ``BooleanQuery`` sums repeated SHOULD clauses into one boosted clause) and bm25s does. Unlike Lucene, a
    document's length is exact, not rounded to Lucene's one-byte norm. ``analysis`` defaults to the one the
    documents pick (``Bm25Analysis.of``); the queries are analysed as the documents are."""
    analysis = analysis if analysis is not None else Bm25Analysis.of(docs)
    ranked, scored = _bm25_search(tuple(queries), tuple(docs), k, k1, b, analysis)
    return [list(r) for r in ranked], [list(s) for s in scored]


@functools.lru_cache(maxsize=4)  # searched once per collection: compare ranks it beside every family at every point
def _bm25_search(
    queries: tuple[str, ...], docs: tuple[str, ...], k: int, k1: float, b: float, analysis: Bm25Analysis
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[float, ...], ...]]:
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in analysis.terms(doc)] for doc in docs]
    n = len(docs)
    lengths = np.array([len(d) for d in ids], dtype=np.float64)
    average = float(lengths.mean()) if n and lengths.sum() else 1.0
    # The postings: each (term, document) pair once, sorted by term then document, with its term frequency.
    pairs = np.fromiter((t * n + i for i, d in enumerate(ids) for t in d), dtype=np.int64)
    pairs, tf = np.unique(pairs, return_counts=True)
    term, doc = np.divmod(pairs, max(n, 1))
    df = np.bincount(term, minlength=len(vocab))
    starts = np.concatenate([[0], np.cumsum(df)])
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    weight = idf[term] * tf / (tf + k1 * (1 - b + b * lengths[doc] / average))
    ranked, scored = [], []
    for query in queries:
        counts = Counter(vocab[t] for t in analysis.terms(query) if t in vocab)
        spans = [slice(starts[t], starts[t + 1]) for t in counts]
        hits = np.concatenate([doc[s] for s in spans]) if spans else np.zeros(0, dtype=np.int64)
        gains = np.concatenate([weight[s] * c for s, c in zip(spans, counts.values())]) if spans else np.zeros(0)
        scores = np.bincount(hits, weights=gains, minlength=n)
        top = _top(scores, k)
        ranked.append(tuple(top.tolist()))
        scored.append(tuple(scores[top].tolist()))
    return tuple(ranked), tuple(scored)


def bm25_ranking(
    data: RetrievalSet | GradedRetrievalSet,
    k: int = 100,
    k1: float = K1,
    b: float = B,
    analysis: Bm25Analysis | None = None,
) -> list[list[int]]:
    """Each query's top-``k`` documents by BM25 (``bm25_search``, Lucene's variant, k1 1.2 and b 0.75 as
    Elasticsearch and BEIR run it): the classic lexical first stage, the same for every reranker, and free of any
    model being compared."""
    return bm25_search(data.queries, data.docs, k, k1, b, analysis)[0]


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
    # each document's characters read and given (``with_bm25``); and its full name, the analysis it ran included
    # (``Bm25Analysis.describe``).
    classic: PerQuery | None = field(default=None, kw_only=True)
    classic_whole: PerQuery | None = field(default=None, kw_only=True)
    chars_read: list[int] | None = field(default=None, kw_only=True)
    chars_given: list[int] | None = field(default=None, kw_only=True)
    classic_method: str | None = field(default=None, kw_only=True)


def with_bm25(record: RetrievalRecord, data: RetrievalSet | GradedRetrievalSet, read: Sequence[int]) -> RetrievalRecord:
    """``record`` with BM25's per-query scores beside it (the metrics ``record`` has: a set's, or graded
    judgements' as BEIR scores them), on each document's first ``read`` characters (what the model read) and on
    whole documents; both analysed as the whole documents pick (``Bm25Analysis.of``), which ``classic_method``
    names."""
    analysis = Bm25Analysis.of(data.docs)

    def per_query(docs: tuple[str, ...]) -> PerQuery:
        ranked = bm25_ranking(replace(data, docs=docs), 101, analysis=analysis)
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
        classic_method=analysis.describe(),
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
