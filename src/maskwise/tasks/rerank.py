"""Reranking the bi-encoder's top candidates: a cross-encoder and a generative reranker.

A bi-encoder embeds query and passage apart, so nothing in the query can change how the passage is
read. A reranker reads them together, which costs one forward pass per (query, candidate) pair, so
it only sees the first stage's top 100:

* cross-encoder (encoder, ``tasks.cross_encoder``): reads ``[CLS] query [SEP] passage [SEP]``
  (segments 0 and 1) and scores the pair by its ``readout``. Trained listwise: the positive and the
  bi-encoder's own hard negatives for a query form one softmax, and the loss is the positive's
  cross-entropy (the first stage's mistakes are exactly what the reranker must learn to fix).
* generative reranker (decoder or encoder-decoder): the score is log p(" yes" | "Passage: ...
  Line: ... Relevant:"), the relevance token's log-probability after a prompt. Fine-tuned with the
  language-model loss on " yes" for positives and " no" for hard negatives. The same model can
  also *write* its judgement (``judging_scorer``), as rerankers that answer in words do.

Both are evaluated on the same candidates with nDCG@10, MRR and per-query latency (p50/p99), beside
the first stage's own ordering of those candidates and a random order of them, with a paired
bootstrap interval on each nDCG@10 gain (``tasks.rerank_eval``). A user's task reads what retrieval
reads (query/positive rows or a BEIR folder, whose graded qrels are the gains), first-staged by BM25.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.data.beir import GradedRetrievalSet
from maskwise.data.task_readers import read_retrieval
from maskwise.data.tasks import RetrievalSet, ict_retrieval
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError
from maskwise.families import family_of
from maskwise.runtime import Runtime
from maskwise.tasks.cross_encoder import (
    HEAD_PREFIX,
    CrossEncoder,
    cross_encoder_scorer,
    pair_inputs,
)
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.items import Items
from maskwise.tasks.reading import batches, context_len, device_of
from maskwise.tasks.rerank_eval import (
    RerankRecord,
    ScoreFn,
    evaluate_reranker,
    gain_summary,
    judgements,
)
from maskwise.tasks.retrieve import Bm25Analysis, EmbedFn, bm25_ranking, random_ranking, rank
from maskwise.tasks.scoring import (
    continuation_batch,
    continuation_logprobs,
    start_id_of,
)
from maskwise.tasks.unit import (
    ENCODER_JOBS,
    RecordRow,
    Row,
    Task,
    Work,
    within_context,
)


@dataclass
class RerankConfig(FinetuneConfig):
    batch_size: int = 8  # queries per step; each brings 1 positive + n_negatives passages
    lr: float = 5e-5
    n_negatives: int = 7  # cross-encoder: negatives in each query's softmax
    generative_negatives: int = 3  # generative: " no" examples per " yes" (more would make " yes" rare)
    max_len: int | None = 256
    score_batch: int = 50  # pairs per forward pass when scoring candidates
    reranker: str | None = None  # "cross" or "generative"; None: ``default_reranker`` of the family
    readout: str = "cls"  # the cross-encoder's score: one of ``READOUTS``
    candidates: int = 100  # first-stage candidates per test query
    train_queries: int | None = None  # the plays' ICT queries (``tasks.run.plays_rows``); None: all
    test_queries: int = 100

    def for_pretrained_body(self, body_lr: float, head_lr: float) -> Self:
        """A pretrained body's rates, and the segments readout: a [CLS] head fresh on all-MiniLM-L6-v2 stayed at a
        random order over 100 steps, the segments' cosine starts from what the body knows (docs/ablations.md)."""
        return replace(super().for_pretrained_body(body_lr, head_lr), readout="segments")


def default_reranker(family: str) -> str:
    """An encoder reranks as a cross-encoder (one bidirectional pass over query and document);
    other families score a relevance token."""
    return family_of(family).reranker


def hard_negatives(ranked: Sequence[Sequence[int]], relevant: Sequence[int], n: int) -> list[list[int]]:
    """The first ``n`` candidates of each query's ranking that are not its relevant document."""
    return [[d for d in r if d != rel][:n] for r, rel in zip(ranked, relevant)]


def random_negatives(data: RetrievalSet, n: int, seed: int = 0) -> list[list[int]]:
    """``n`` documents drawn at random for each query, never its relevant one. Easier than the first
    stage's hard negatives, yet a small word-piece cross-encoder trained on them reranked
    all-MiniLM-L6-v2's top 100 better (nDCG@10 0.043 against 0.029, README), and they spare
    embedding the whole training collection with the first stage. The hard negatives of a random
    ranking: ``n + 1`` draws leave ``n`` once the relevant document is dropped."""
    if len(data.docs) <= n:
        raise UserError(f"{n} negatives per query need more than {n} documents, got {len(data.docs)}")
    return hard_negatives(random_ranking(len(data.relevant), len(data.docs), n + 1, seed), data.relevant, n)


NEGATIVE_SOURCES = ("first-stage", "random")


def training_negatives(data: RetrievalSet, n: int, source: str, embedder: EmbedFn, seed: int = 0) -> list[list[int]]:
    """``n`` training negatives per query from ``source`` (one of ``NEGATIVE_SOURCES``): the first
    stage's (``embedder``'s) top-ranked wrong documents, or random ones (the embedder is not run)."""
    if source == "random":
        return random_negatives(data, n, seed)
    ranked, _ = rank(embedder, data, k=n + 1)
    return hard_negatives(ranked, data.relevant, n)


def bm25_training_rows(data: RetrievalSet | GradedRetrievalSet, n: int) -> tuple[RetrievalSet, list[list[int]]]:
    """One training row per (query, relevant document), each with BM25's top ``n`` documents that are none of
    its query's relevant ones as negatives: the first stage's near misses, the mistakes a reranker must fix. A
    BEIR query judged relevant to several documents trains once on each."""
    judged = judgements(data)
    ranked = bm25_ranking(data, n + max(map(len, judged), default=0))
    queries, relevant, negatives = [], [], []
    for query, grades, ranking in zip(data.queries, judged, ranked):
        wrong = [d for d in ranking if d not in grades][:n]
        for doc in grades:
            queries.append(query)
            relevant.append(doc)
            negatives.append(wrong)
    return RetrievalSet(tuple(queries), data.docs, tuple(relevant)), negatives


# ---- generative reranker --------------------------------------------------------------------------

PROMPT_HEAD, PROMPT_MIDDLE, PROMPT_TAIL = "Passage: ", "\nLine: ", "\nRelevant:"
YES, NO = " yes", " no"


def relevance_prompt(tokenizer, query: str, doc: str, max_len: int, room_after: int) -> list[int]:
    """``Passage: {doc}\\nLine: {query}\\nRelevant:`` as ids, the passage cut (from its end) so that
    the whole prompt plus ``room_after`` tokens fits ``max_len``."""
    head = tokenizer.encode(PROMPT_HEAD)
    tail = tokenizer.encode(PROMPT_MIDDLE + query + PROMPT_TAIL)
    budget = max(0, max_len - len(head) - len(tail) - room_after)
    return head + tokenizer.encode(doc)[:budget] + tail


def train_cross_encoder(
    body: nn.Module,
    tokenizer,
    data: RetrievalSet,
    negatives: Sequence[Sequence[int]],
    cfg: RerankConfig,
    runtime: Runtime | None = None,
) -> CrossEncoder:
    """Listwise training: per query, softmax over [positive, *negatives]; the positive is class 0."""
    torch.manual_seed(cfg.seed)  # the fresh head's initialisation is part of the seeded run
    model = CrossEncoder(body, readout=cfg.readout)
    usable = [i for i, neg in enumerate(negatives) if neg]
    if not usable:
        raise UserError("no query has a negative to train against")
    max_len, device = context_len(body, cfg.max_len), device_of(body)

    def step_loss(rng: random.Random) -> torch.Tensor:
        losses = []
        for i in (usable[rng.randrange(len(usable))] for _ in range(cfg.batch_size)):
            group = [data.relevant[i], *negatives[i][: cfg.n_negatives]]
            scores = model(*pair_inputs(tokenizer, data.queries[i], [data.docs[d] for d in group], max_len, device))
            losses.append(F.cross_entropy(scores[None], torch.zeros(1, dtype=torch.long, device=device)))
        return torch.stack(losses).mean()

    fine_tune(model, step_loss, cfg, head_prefixes=(HEAD_PREFIX,), desc="rerank", runtime=runtime)
    return model


def generative_scorer(model: nn.Module, tokenizer, max_len: int | None = None, batch_size: int = 50) -> ScoreFn:
    """log p(" yes" | prompt) for each candidate: one forward pass per candidate, batched."""
    max_len = context_len(model, max_len)
    yes = tokenizer.encode(YES)
    start = start_id_of(model, tokenizer)

    def score(query: str, docs: Sequence[str]) -> torch.Tensor:
        prompts = [relevance_prompt(tokenizer, query, doc, max_len, len(yes)) for doc in docs]
        return continuation_logprobs(model, prompts, [yes] * len(docs), tokenizer.pad_id, batch_size, start).cpu()

    return score


def judging_scorer(
    model: nn.Module, tokenizer, max_len: int | None = None, batch_size: int = 50, max_new_tokens: int = 4
) -> ScoreFn:
    """The judgement *written*, as an LLM reranker that answers in words does: greedy decoding of up
    to ``max_new_tokens`` after each candidate's prompt; 1 when the answer starts with "yes", else
    0. Ties keep the first stage's order. The same fine-tuned model as ``generative_scorer``, so
    the difference between the two is the cost of generating, not of being a decoder."""

    max_len = context_len(model, max_len)
    start = start_id_of(model, tokenizer)
    greedy = GenerationConfig(max_new_tokens=max_new_tokens)

    @torch.no_grad()
    def score(query: str, docs: Sequence[str]) -> torch.Tensor:
        model.eval()
        prompts = [relevance_prompt(tokenizer, query, doc, max_len, max_new_tokens) for doc in docs]
        answers: list[str] = []
        for chunk in batches(len(prompts), batch_size):
            written = generate(model, [prompts[i] for i in chunk], greedy, tokenizer.eos_id, tokenizer.pad_id, start)
            answers.extend(tokenizer.decode(tokens) for tokens in written.tokens)
        return torch.tensor([float(a.strip().lower().startswith(YES.strip())) for a in answers])

    return score


def train_generative_reranker(
    model: nn.Module,
    tokenizer,
    data: RetrievalSet,
    negatives: Sequence[Sequence[int]],
    cfg: RerankConfig,
    runtime: Runtime | None = None,
) -> nn.Module:
    """Language-model loss on " yes" after positives' prompts and " no" after hard negatives'."""
    usable = [i for i, neg in enumerate(negatives) if neg]
    if not usable:
        raise UserError("no query has a negative to train against")
    max_len = context_len(model, cfg.max_len)
    yes, no = tokenizer.encode(YES), tokenizer.encode(NO)
    start = start_id_of(model, tokenizer)

    def step_loss(rng: random.Random) -> torch.Tensor:
        prompts, answers = [], []
        for i in (usable[rng.randrange(len(usable))] for _ in range(cfg.batch_size)):
            for d, answer in [(data.relevant[i], yes)] + [(d, no) for d in negatives[i][: cfg.generative_negatives]]:
                prompts.append(relevance_prompt(tokenizer, data.queries[i], data.docs[d], max_len, len(answer)))
                answers.append(answer)
        return model(**continuation_batch(model, prompts, answers, tokenizer.pad_id, start)).loss

    fine_tune(model, step_loss, cfg, desc="rerank", runtime=runtime)
    return model


# ---- the unit: its plays' rows, its run, its commands and its compare rows ---------------------------


@dataclass(frozen=True)
class RerankRow(RecordRow[RerankRecord]):
    """A reranking row: each test query's nDCG@10 over BM25's candidates, paired with BM25's own order of them, which
    is the classic method already."""

    baseline_name: str = "BM25's own order"
    classic_name: str = "BM25's own order"

    def decode(self, stored: dict[str, Any]) -> RerankRecord:
        return RerankRecord.from_json(stored)

    def scores(self, record: RerankRecord) -> Items:
        return Items(record.per_query.ndcg_at_10)

    def baseline(self, record: RerankRecord) -> Items:
        return Items(record.per_query.first_stage_ndcg_at_10)


class Rerank(Task[RerankConfig]):
    """Reranking a first stage's (BM25's) candidates: a cross-encoder, or a decoder's " yes" probability."""

    kind = "rerank"
    claim = ENCODER_JOBS
    config = RerankConfig
    record = RerankRecord

    def plays(
        self, cfg: RerankConfig, model: nn.Module | None, split: str, training: bool
    ) -> tuple[RetrievalSet | None, RetrievalSet]:
        """The plays' ICT queries: ``train_queries`` of the train split's, ``test_queries`` of the split's."""
        train = ict_retrieval("train", max_queries=cfg.train_queries, seed=cfg.data_seed) if training else None
        return train, ict_retrieval(split, max_queries=cfg.test_queries, seed=cfg.test_seed)

    def run(
        self, model, tokenizer, cfg: RerankConfig, runtime: Runtime, data, label: str
    ) -> tuple[nn.Module, Callable[[], RerankRecord], tuple[Any, list]]:
        if data is not None:
            train, negatives, test, candidates = data
        else:  # the plays' ICT queries with BM25 as the first stage, and its near misses as negatives
            train, test = self.plays(cfg, model, "test", True)
            assert train is not None  # the plays' training rows were asked for
            train, negatives = bm25_training_rows(train, cfg.n_negatives)
            candidates = bm25_ranking(test, cfg.candidates)
        kind = cfg.reranker or default_reranker(model.cfg.family)
        trained: nn.Module
        if kind == "cross":
            trained = train_cross_encoder(model, tokenizer, train, negatives, cfg, runtime)
            score = cross_encoder_scorer(trained, tokenizer, cfg.max_len, cfg.score_batch)
        else:
            trained = train_generative_reranker(model, tokenizer, train, negatives, cfg, runtime)
            score = generative_scorer(trained, tokenizer, cfg.max_len, cfg.score_batch)

        def evaluate() -> RerankRecord:
            return replace(
                evaluate_reranker(score, test, candidates, label, cfg.progress, cfg.seed),
                kind=kind,
                max_len=cfg.max_len,
                readout=cfg.readout if kind == "cross" else None,
            )

        return trained, evaluate, (test, candidates)

    def kept(
        self, trained: nn.Module, record: RerankRecord, cfg: RerankConfig
    ) -> tuple[dict[str, Any], nn.Module, nn.Module | None]:
        """A cross-encoder keeps its body and head; a generative reranker is the whole model."""
        task = {
            "reranker": record.kind,
            "first_stage": "BM25",
            "negatives": "bm25",
            "max_len": record.max_len,
            "readout": record.readout,
        }
        if record.kind == "cross":
            assert isinstance(trained, CrossEncoder)  # what ``run`` trains for a cross reranker
            return task, trained.body, trained.head
        return task, trained, None

    def summary(self, record: RerankRecord) -> str:
        r, base, lat = record, record.baseline, record.latency
        return (
            f"rerank ({r.reranker}) {r.n_queries} queries x {r.candidates_per_query} candidates: "
            f"nDCG@10 {r.ndcg_at_10:.3f} (first stage {base.ndcg_at_10:.3f}, random order "
            f"{r.random_order.ndcg_at_10:.3f}), MRR {r.mrr:.3f} ({base.mrr:.3f}); "
            f"latency p50 {lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms per query\n{gain_summary(r)}"
        )

    def read(self, spec: TaskSpec) -> UserTask:
        """The rows retrieval reads (query/positive rows, or a BEIR folder's train and test qrels), first-staged by
        BM25, named with the analysis its test documents pick (the report's data lines say it)."""
        task = read_retrieval(spec)
        first_stage = Bm25Analysis.of(task.test.docs).describe()
        return replace(task, details={**task.details, "first_stage": first_stage, "metric": "nDCG@10"})

    def user_rows(self, task: UserTask, cfg: RerankConfig) -> tuple[Row, ...]:
        return (RerankRow(f"{task.spec.name}: nDCG@10 over BM25's top candidates (rerank)", True),)

    def work(self, cfg: RerankConfig, task: UserTask | None, per_char: float) -> Work:
        """Each step's queries trained with their positive and negatives; every candidate pair of every test query
        scored, ``score_batch`` pairs a call."""
        queries = task.test_rows if task is not None else cfg.test_queries
        pair = cfg.max_len or 256  # a query and a passage: near the cut
        pairs = queries * cfg.candidates
        return Work(cfg.steps * cfg.batch_size * (1 + cfg.n_negatives) * pair, pairs * pair, pairs / cfg.score_batch)

    def configure(self, cfg: RerankConfig, task: UserTask, context: int) -> RerankConfig:
        return within_context(cfg, task, context)

    def rows_available(self, cfg: RerankConfig, task: UserTask | None) -> int:
        """One row per (query, relevant document), as ``bm25_training_rows`` trains on them, counted without BM25."""
        train = task.train if task else self.plays(cfg, None, "test", True)[0]
        assert train is not None  # drawn for training
        return sum(len(grades) for grades in judgements(train))

    def run_data(self, task: UserTask, cfg: RerankConfig) -> tuple[Any, list, Any, list]:
        """BM25's near misses as training negatives, and its top ``cfg.candidates`` as each test query's candidates
        (a BEIR folder's qrels grades are the gains of nDCG@10 over them)."""
        train, negatives = bm25_training_rows(task.train, cfg.n_negatives)
        return train, negatives, task.test, bm25_ranking(task.test, cfg.candidates)

    def rows_in(self, data: Any) -> int:
        return len(data[0].queries)

    def drawn(self, data: Any, kept: list[int]) -> Any:
        """The training rows at ``kept`` with their negatives; the test set and its candidates as they are."""
        train, negatives, *rest = data
        return (
            RetrievalSet(tuple(train.queries[i] for i in kept), train.docs, tuple(train.relevant[i] for i in kept)),
            [negatives[i] for i in kept],
            *rest,
        )

    def texts(self, rows: Any) -> list[str]:
        return list(rows.queries)

    def latency_ms(self, record: RerankRecord) -> tuple[str, list[float]]:
        """A query's latency: scoring its candidates, timed as the reranker was evaluated."""
        return "query, its candidates scored", [1000 * t for t in record.per_query.seconds]
