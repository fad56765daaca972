"""Punctuation restoration on pretrained bodies: does seeing the right context decide it?

    python benchmarks/tagging.py RUN [RUN ...] [--seeds 3] [--steps 150] [--lr 1e-3]

Each run folder (e.g. the ``runs/<family>-seed0`` folders of a ``maskwise compare``) is fine-tuned
with a fresh per-token head (``tasks.tag``) on the train plays' punctuation windows, once per seed,
and scored on the same test windows: detection F1 (a mark here or not) and micro F1 (the right mark),
each with a 95% bootstrap interval over test windows, beside the line-break rule and the
most-frequent-tag baseline.
"""

from __future__ import annotations

import argparse
import random
import time

from maskwise.data.tagging import OUTSIDE, punctuation_examples
from maskwise.interop.folders import load
from maskwise.tasks.tag import (
    TagConfig,
    predict_tags,
    tag_counts,
    tagging_results,
    train_tagger,
)


def window_f1_interval(predicted, test, exact: bool, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of F1 over test windows (counts pooled within a draw)."""
    counts = []
    for rows, example in zip(predicted, test):
        pairs = list(zip(rows, example.tags))
        hit = sum((p == g if exact else True) and p != OUTSIDE and g != OUTSIDE for p, g in pairs)
        counts.append((hit, sum(p != OUTSIDE for p, _ in pairs), sum(g != OUTSIDE for _, g in pairs)))
    rng, scores = random.Random(seed), []
    for _ in range(resamples):
        drawn = [counts[rng.randrange(len(counts))] for _ in counts]
        hit, n_pred, n_gold = (sum(c[i] for c in drawn) for i in range(3))
        scores.append(2 * hit / (n_pred + n_gold) if n_pred + n_gold else 0.0)
    scores.sort()
    return scores[int(0.025 * resamples)], scores[int(0.975 * resamples) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--head-lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--window-chars", type=int, default=200)
    parser.add_argument("--train-windows", type=int, default=4000)
    parser.add_argument("--eval-windows", type=int, default=1000)
    args = parser.parse_args()
    train = punctuation_examples("train", args.window_chars, limit=args.train_windows)
    test = punctuation_examples("test", args.window_chars, limit=args.eval_windows)
    counts = tag_counts(train)
    print(f"{len(train)} training windows, {len(test)} test windows ({sum(len(e.words) for e in test)} words)")
    for run in args.runs:
        for seed in range(args.seeds):
            model, tokenizer = load(run)
            started = time.perf_counter()
            cfg = TagConfig(
                steps=args.steps,
                batch_size=args.batch_size,
                lr=args.lr,
                head_lr=args.head_lr,
                seed=seed,
                progress=False,
            )
            tagger = train_tagger(model, tokenizer, train, cfg)
            predicted, _ = predict_tags(tagger, tokenizer, test)
            r = tagging_results(predicted, test, counts, model.cfg.family, tagger.tags)
            det, micro = window_f1_interval(predicted, test, False), window_f1_interval(predicted, test, True)
            print(
                f"{run} seed {seed} ({model.cfg.family}): detection F1 {r.detection.f1:.3f} "
                f"[{det[0]:.3f}, {det[1]:.3f}], micro F1 {r.micro.f1:.3f} [{micro[0]:.3f}, {micro[1]:.3f}], "
                f"macro-F1 {r.macro_f1:.3f}; {time.perf_counter() - started:.0f} s",
                flush=True,
            )
    rule = r.line_break_rule
    print(
        f"baselines: {rule.name} detection F1 {rule.detection.f1:.3f}, micro F1 {rule.micro.f1:.3f}; "
        f"most frequent tag {r.baseline.tag!r} {r.baseline.detection.f1:.3f}"
    )


if __name__ == "__main__":
    main()
