"""The few lines a task command prints about its results (the JSON files hold everything)."""

from __future__ import annotations

import json

from maskwise.tasks.rerank import gain_summary


def summarize(r: dict) -> str:
    """A few lines a person reads: the headline metric beside its baseline."""
    base = r.get("baseline", {})
    task = r["task"]
    if task == "classify":
        how = "zero-shot prompting" if r.get("mode") == "zero-shot" else f"{r['mode']}, {r['pooling']} pooling"
        return (f"classify ({how}) on {r['n_test']} examples: accuracy {r['accuracy']:.3f} "
                f"(majority class {base['accuracy']:.3f}), macro-F1 {r['macro_f1']:.3f} ({base['macro_f1']:.3f})")
    if task == "retrieve":
        mrr = "mrr@10" if "mrr@10" in r else "mrr"  # a benchmark's (BEIR, MTEB) MRR is cut at 10
        return (f"retrieve ({r['embedder']}) {r['n_queries']} queries over {r['n_docs']} passages: "
                f"nDCG@10 {r['ndcg@10']:.3f} (random {base['ndcg@10']:.3f}), {mrr.upper()} {r[mrr]:.3f} "
                f"({base[mrr]:.3f}), recall@100 {r['recall@100']:.3f} ({base['recall@100']:.3f})")
    if task == "rerank":
        lat = r["latency"]
        return (f"rerank ({r['reranker']}) {r['n_queries']} queries x {r['candidates_per_query']} candidates: "
                f"nDCG@10 {r['ndcg@10']:.3f} (first stage {base['ndcg@10']:.3f}, random order "
                f"{r['random_order']['ndcg@10']:.3f}), MRR {r['mrr']:.3f} ({base['mrr']:.3f}); "
                f"latency p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms per query\n{gain_summary(r)}")
    if task == "seq2seq":
        return (f"seq2seq ({r['family']}, {r['decoding']}) on {r['n_test']} passages: exact match "
                f"{r['exact_match']:.3f} (copy first line {base['exact_match']:.3f}), items F1 "
                f"{r['items_f1']:.3f} ({base['items_f1']:.3f}), token F1 {r['token_f1']:.3f} "
                f"({base['token_f1']:.3f})")
    if task == "tag":
        rule = r["line_break_rule"]
        return (f"tag ({r['family']}) {r['n_words']} words of {r['n_test']} texts: F1 {r['micro']['f1']:.3f} "
                f"(most frequent tag {base['micro']['f1']:.3f}, {rule['name']} {rule['micro']['f1']:.3f}), "
                f"detection F1 {r['detection']['f1']:.3f} ({base['detection']['f1']:.3f}, "
                f"{rule['detection']['f1']:.3f}), macro-F1 {r['macro_f1']:.3f}")
    if task == "break":
        enc, dec = r["encoder"], r["decoder"]
        return "\n".join([
            f"encoder (append [MASK], {enc['params']:,} params): {enc['sample']!r}",
            f"decoder ({dec['params']:,} params): {dec['sample']!r}",
            (f"bits/char on {r['held_out_chars']} held-out chars: encoder both sides "
             f"{enc['loss_both_sides']['bits_per_char']:.3f}, encoder left only "
             f"{enc['loss_left_only']['bits_per_char']:.3f}, decoder left only "
             f"{dec['loss_left_only']['bits_per_char']:.3f}"),
        ])
    return json.dumps(r)
