"""Ablation reranker: a cross-encoder vs a generative reranker over the same BM25 top candidates.

The design notes' reporting template (section 7): "We replaced a generative reranker with a
cross-encoder over the same top-100 candidates: nDCG@10 went from A to B while p99 latency fell from
C to D". Three rerankers read the same candidates of the same queries: a cross-encoder (an MLM
encoder, one parallel pass per candidate), and one fine-tuned decoder read two ways: scoring one
relevance token (one pass, like the cross-encoder but causal) and writing its judgement (a few
greedy tokens per candidate, as LLM rerankers that answer in words do), so that what generation
costs shows up apart from what a decoder costs.
"""

from __future__ import annotations

import dataclasses
from statistics import fmean as mean

from maskwise.experiments.ablations.jobs import CLM_DECODER, MLM_ENCODER
from maskwise.experiments.arms import TOKENS, Arm, Setup
from maskwise.experiments.framework import (
    Measured,
    Rule,
    Study,
    claims_verdict,
    key,
    table_row,
)
from maskwise.experiments.verdict import INCONCLUSIVE, compare
from maskwise.tasks.rerank import evaluate_reranker, judging_scorer
from maskwise.tasks.run import run_task

CROSS, SCORES, WRITES = "cross-encoder", "generative, scores ' yes'", "generative, writes its judgement"
FIRST, RANDOM = "BM25 order", "random order"
SYSTEMS = (CROSS, FIRST, RANDOM, SCORES, WRITES)  # the table's columns: the last column compares the first and last
CANDIDATES = 100  # per query, from the first stage
NDCG, P50, P99 = "nDCG@10", "latency p50 (ms/query)", "latency p99 (ms/query)"

RULE = ("On the same queries and candidates, paired by seed. First, the cross-encoder must clear the random "
        "order of the candidates on nDCG@10 (otherwise nothing was learned to compare) and the first stage's own "
        "order (a reranker that does not improve on its first stage is not one); if it does not, the verdict is "
        "inconclusive. Then two claims: (1) the generative reranker that writes its judgement is not ahead of "
        "the cross-encoder on nDCG@10 (contradicted if it is); (2) the cross-encoder's p99 latency per query "
        "is lower (contradicted if higher). Falsified if a claim is contradicted, held if both are supported, "
        "inconclusive otherwise.")


def judge(metrics: dict, arms=None) -> tuple[str, str]:
    ndcg, p99 = metrics[key(NDCG, TOKENS)], metrics[key(P99, TOKENS)]
    learned = compare(ndcg[CROSS], ndcg[RANDOM])
    improves = compare(ndcg[CROSS], ndcg[FIRST])
    quality = compare(ndcg[CROSS], ndcg[WRITES])
    latency = compare(p99[CROSS], p99[WRITES], higher_is_better=False)
    if learned.winner != "a":
        return INCONCLUSIVE, (f"the cross-encoder does not clear a random order of its candidates "
                              f"({learned.describe('cross', 'random')}): nothing learned to compare")
    if improves.winner != "a":
        return INCONCLUSIVE, (f"the cross-encoder does not improve on the first stage's own order "
                              f"({improves.describe('cross', 'BM25')}): not yet a reranker to compare")
    not_behind = {"a": True, "tie": True, "b": False}[quality.winner]
    return claims_verdict([
        (f"not behind the writing reranker on nDCG@10 ({quality.describe('cross', 'writes')})", not_behind),
        (f"lower p99 latency ({latency.describe('cross', 'writes', 1)})",
         {"a": True, "tie": None, "b": False}[latency.winner]),
    ])


def measure(setup: Setup, arm: Arm, name: str, seed: int) -> dict:
    """The arm's rerankers on the seed's queries: ``{system: evaluate_reranker record}``; the
    decoder, fine-tuned once, is read both ways."""

    run = setup.exp.load(name)
    cfg = dataclasses.replace(setup.recipe.task("rerank", seed, setup.progress), candidates=CANDIDATES)
    label = CROSS if arm is MLM_ENCODER else SCORES
    result = run_task(cfg, run.model, run.tokenizer, setup.exp.runtime, label=label)
    measured = {label: result.record}
    if arm is CLM_DECODER:
        test, candidates = result.test
        writes = judging_scorer(result.model, run.tokenizer, result.record["max_len"])
        measured[WRITES] = evaluate_reranker(writes, test, candidates, WRITES, progress=False, seed=seed)
    return measured


def tabulate(m: Measured) -> tuple[dict, list]:
    runs = {arm.key: m.measured[TOKENS][arm.key] for arm in m.arms}
    by_system = {CROSS: [r[CROSS] for r in runs[MLM_ENCODER.key]], SCORES: [r[SCORES] for r in runs[CLM_DECODER.key]],
                 WRITES: [r[WRITES] for r in runs[CLM_DECODER.key]]}
    first = by_system[CROSS]  # the baselines are the same candidates whoever reranks them

    def per_system(get, baselines: dict | None = None) -> dict[str, list[float]]:
        values = {system: [get(r) for r in records] for system, records in by_system.items()}
        return {system: values.get(system, (baselines or {}).get(system, [])) for system in SYSTEMS}

    ndcg = per_system(lambda r: r["ndcg@10"], {FIRST: [mean(r["per_query"]["first_stage_ndcg@10"]) for r in first],
                                               RANDOM: [mean(r["per_query"]["random_order_ndcg@10"]) for r in first]})
    mrr = per_system(lambda r: r["mrr"], {FIRST: [r["baseline"]["mrr"] for r in first],
                                          RANDOM: [r["random_order"]["mrr"] for r in first]})
    p50 = per_system(lambda r: r["latency"]["p50_ms"])
    p99 = per_system(lambda r: r["latency"]["p99_ms"])
    metrics = {key(NDCG, TOKENS): ndcg, key(P99, TOKENS): p99}
    rows = [table_row(NDCG, TOKENS, ndcg, True), table_row("MRR", TOKENS, mrr, True),
            _cost_row(P50, p50), _cost_row(P99, p99)]
    return metrics, rows


def _cost_row(name: str, groups: dict[str, list[float]]) -> list[str]:
    """A latency row: the rerankers' numbers, a dash for the baselines (nothing to time), and the
    cross-encoder against the writing reranker (lower is better)."""
    row = table_row(name, TOKENS, {CROSS: groups[CROSS], WRITES: groups[WRITES]}, False, 1)
    cells = {CROSS: row[2], WRITES: row[3], SCORES: table_row(name, TOKENS, {SCORES: groups[SCORES]}, None, 1)[2]}
    return [name, TOKENS, *[cells.get(system, "—") for system in SYSTEMS], row[-1]]


def summary(m: Measured, metrics: dict) -> str:
    ndcg, p99 = metrics[key(NDCG, TOKENS)], metrics[key(P99, TOKENS)]
    gen_p99, cross_p99 = mean(p99[WRITES]), mean(p99[CROSS])
    return (f"We replaced a generative reranker with a cross-encoder over the same top-{CANDIDATES} candidates: "
            f"nDCG@10 went from {mean(ndcg[WRITES]):.3f} to {mean(ndcg[CROSS]):.3f} while p99 latency "
            f"{'fell' if cross_p99 < gen_p99 else 'rose'} from {gen_p99:.0f} ms to {cross_p99:.0f} ms per query "
            f"(BM25's own order: {mean(ndcg[FIRST]):.3f}; a random order of the candidates: "
            f"{mean(ndcg[RANDOM]):.3f}; the same decoder scoring one relevance token instead of writing: "
            f"{mean(ndcg[SCORES]):.3f} at p99 {mean(p99[SCORES]):.0f} ms).")


def notes(m: Measured) -> list[str]:
    return [
        (f"First stage: BM25 over lowercased words, top {CANDIDATES} of the test plays' speeches for "
         f"{m.setup.recipe.tasks['rerank'].test_queries} ICT queries per seed; the same candidates for every reranker. "
         "Training negatives: BM25's top wrong speeches for the train queries."),
        ("The writing reranker generates up to 4 tokens greedily after each candidate's prompt and counts 'yes' "
         "as relevant; ties keep BM25's order. Latency: wall-clock per query over all its candidates, batch 50, "
         "on this machine."),
    ]


ABLATION = Study(
    about="cross-encoder vs generative reranker over the same top-100 (nDCG@10, p50/p99 latency)",
    title="Ablation reranker: a cross-encoder vs a generative reranker over the same candidates",
    rules=(Rule(("Over the same top-100 candidates, a cross-encoder reranks at least as well as a generative "
                "reranker that writes its judgement, at a much lower p99 latency."), RULE, judge),),
    step="rerank", arms=lambda: (MLM_ENCODER, CLM_DECODER), measure=measure, tabulate=tabulate, summary=summary,
    notes=notes, axes=(TOKENS,), columns=lambda arms: list(SYSTEMS), extra_rows=False,
    meaning=lambda m: {NDCG: (True, None), P99: (False, None)})  # the baselines are columns (random order, first stage)
