"""``maskwise ablate NAME``: change one design choice, hold the rest, and let a coded rule judge a prediction.

Every ablation pretrains tiny models (the GPT-2 block for every family, as ``compare`` does, so only
the attention mask, the loss or the one knob under study differs; d 64, 2 layers, a 2048-token BPE,
block 128) for several seeds, fine-tunes them identically, and writes ``results.json`` plus the
report of ``report.py``. Each arm is measured on two axes, always both:

* **equal tokens**: every arm pretrains with the budget ``tokens=N`` (encoder plus decoder tokens
  read), so each has seen the same amount of text;
* **equal wall-clock**: for each seed, the arm that needed the least training time T keeps its run,
  and every other arm is pretrained again from scratch with the budget ``seconds=T`` (its own
  complete learning-rate schedule, not a truncated one); everything downstream is measured again
  on those runs. Wall-clock is training time only, on a shared machine, so it carries the noise of
  whatever else ran at the time; the tokens/s rows show how large the speed gap was.

A prediction is judged by a rule coded in a ``judge_*`` function that reads nothing but the per-seed
numbers in ``results["metrics"]``. Comparisons use ``verdict.compare`` (mean ± one standard
deviation; overlapping intervals are "within noise"). The rule runs on each axis; the verdict is
their common outcome, and ``inconclusive`` when the axes disagree (a claim that holds at equal
tokens but not at equal time is not established). ``metrics`` holds exactly what the rules read
(it is also what the bar charts show); the table holds those and everything else measured.

Scales: the default is sized for about 15 minutes on 2 CPU cores, ``quick`` for a few (much of it
fixed cost: every pretraining run tokenizes the corpus, and there are up to nine). The environment
variable ``MASKWISE_ABLATION_SCALE=smoke`` selects a third scale of a few steps that only checks
the plumbing (the tests use it); its reports say so in the title, and its numbers mean nothing.

Finished steps are cached by ``Experiment``, so an interrupted ablation continues where it stopped;
an output folder remembers its recipe (ablation, scale, model and fine-tuning settings) and refuses
to mix in another.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from maskwise.errors import UserError
from maskwise.experiments.report import fmt_stat, mean_and_spread, render, write_results
from maskwise.experiments.runner import Experiment, machine_info
from maskwise.runtime import Runtime
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE, Comparison, compare

TOKENS, WALL = "equal tokens", "equal wall-clock"
AXES = (TOKENS, WALL)
SHARED = "equal tokens and wall-clock"  # the axis name when every arm reads the same pretrained model
SCALE_ENV = "MASKWISE_ABLATION_SCALE"
MIN_BUCKET = 10  # a length bucket needs this many test items before a rule reads it


@dataclass(frozen=True)
class Scale:
    name: str
    tokens: int  # pretraining budget per arm
    finetune_steps: int
    train_examples: int  # fine-tuning windows, pairs or passages
    eval_examples: int  # test windows, queries or passages
    evals: int  # validation points on each pretraining curve
    eval_batches: int
    held_out_chars: int  # text scored for next-token loss (shift-bug)


SCALES = {
    "default": Scale("default", tokens=1_000_000, finetune_steps=150, train_examples=1800, eval_examples=600,
                     evals=8, eval_batches=8, held_out_chars=3000),
    "quick": Scale("quick", tokens=100_000, finetune_steps=30, train_examples=480, eval_examples=240,
                   evals=4, eval_batches=4, held_out_chars=1000),
    "smoke": Scale("smoke", tokens=4096, finetune_steps=2, train_examples=24, eval_examples=24,
                   evals=1, eval_batches=1, held_out_chars=200),
}

# The block every arm shares unless the ablation changes it (compare.py's choice: GPT-2's
# pre-norm block for every family, so that only the mask and the loss differ between families).
MODEL = dict(preset="gpt2", tokenizer="bpe", vocab_size=2048, d_model=64, heads=2, layers=2,
             block_size=128, batch_size=16, lr=2e-3)


@dataclass(frozen=True)
class Arm:
    key: str  # names its runs and cached steps
    label: str  # names it in tables, plots and metrics
    settings: dict  # pretraining settings beyond MODEL


@dataclass(frozen=True)
class Setup:
    """What every ablation function receives besides its own options."""

    exp: Experiment
    scale: Scale
    seeds: tuple[int, ...]
    progress: bool


# ---- pretraining on both axes ---------------------------------------------------------------------


def pretrain_settings(scale: Scale, arm: Arm, seed: int, budget: str = "") -> dict:
    """Flat pretraining settings of ``arm``. The budget ends every run; ``steps`` is only the
    schedule's length, set to twice what the token budget allows so that it never binds first (an
    encoder-decoder reads more than batch x block tokens a step), with warmup 10% of it (5% of
    the run)."""
    values = {**MODEL, **arm.settings}
    steps = 2 * -(-scale.tokens // (values["batch_size"] * values["block_size"]))
    return {**values, "seed": seed, "steps": steps, "warmup": steps // 10,
            "eval_every": max(1, steps // (2 * scale.evals)), "eval_batches": scale.eval_batches,
            "budget": budget or f"tokens={scale.tokens}"}


def train_seconds(run: dict) -> float:
    return run["curve"][-1]["wall_s"]


def tokens_per_second(run: dict) -> float:
    last = run["curve"][-1]
    return last["tokens_seen"] / max(last["wall_s"], 1e-9)


def run_name(run: dict) -> str:
    return Path(run["run_dir"]).name


def pretrain_arms(setup: Setup, arms: Sequence[Arm]) -> dict[str, dict[str, list[dict]]]:
    """``{axis: {arm key: [pretraining run per seed]}}`` (see the module docstring for the axes).

    Seeds run one after another, all arms of a seed together, so the arms of one seed share the
    machine's conditions as far as possible and an interrupted ablation keeps whole seeds."""
    runs: dict[str, dict[str, list[dict]]] = {axis: {arm.key: [] for arm in arms} for axis in AXES}
    for seed in setup.seeds:
        by_tokens = {arm.key: setup.exp.pretrain(f"{arm.key}-seed{seed}", progress=setup.progress,
                                                 **pretrain_settings(setup.scale, arm, seed))
                     for arm in arms}
        seconds = min(train_seconds(run) for run in by_tokens.values())
        for arm in arms:
            run = by_tokens[arm.key]
            if train_seconds(run) > seconds:
                run = setup.exp.pretrain(f"{arm.key}-seed{seed}-wall", progress=setup.progress,
                                         **pretrain_settings(setup.scale, arm, seed, f"seconds={seconds}"))
            runs[TOKENS][arm.key].append(by_tokens[arm.key])
            runs[WALL][arm.key].append(run)
    return runs


def measure(setup: Setup, runs: dict[str, dict[str, list[dict]]], arms: Sequence[Arm], task: str,
            fn: Callable[[Arm, str, int], dict]) -> dict[str, dict[str, list[dict]]]:
    """``fn(arm, run name, seed)`` for every run, cached as step ``task-<run>`` (a run that serves
    both axes is measured once)."""
    return {axis: {arm.key: [setup.exp.step(f"{task}-{run_name(run)}",
                                            lambda arm=arm, run=run: fn(arm, run_name(run), run["settings"]["seed"]))
                             for run in by_arm[arm.key]]
                   for arm in arms}
            for axis, by_arm in runs.items()}


def curve_entries(runs: dict[str, dict[str, list[dict]]], arms: Sequence[Arm]) -> list[dict]:
    """Every distinct pretraining run, for the two loss plots."""
    entries, seen = [], set()
    for axis in AXES:
        for arm in arms:
            for run in runs[axis][arm.key]:
                if run_name(run) in seen:
                    continue
                seen.add(run_name(run))
                seed = run["settings"]["seed"]
                budget = run["settings"]["budget"]
                suffix = f", {float(budget.split('=')[1]):.0f} s budget" if budget.startswith("seconds") else ""
                entries.append({"label": f"{arm.label}, seed {seed}{suffix}", "group": arm.label, "seed": seed,
                                "curve": run["curve"]})
    return entries


def parameters(setup: Setup, runs: dict[str, dict[str, list[dict]]], arms: Sequence[Arm]) -> dict:
    from maskwise.model.accounting import parameter_breakdown

    return {arm.label: parameter_breakdown(setup.exp.load(run_name(runs[TOKENS][arm.key][0])).model)
            for arm in arms}


# ---- tables, verdicts and sentences -----------------------------------------------------------------


def key(name: str, axis: str) -> str:
    """The metrics key of measure ``name`` on ``axis``."""
    return f"{name} at {axis}"


def per_arm(measured: dict, axis: str, arms: Sequence[Arm], get: Callable[[dict], float]) -> dict[str, list[float]]:
    return {arm.label: [get(m) for m in measured[axis][arm.key]] for arm in arms}


def winner_text(c: Comparison, first: str, last: str) -> str:
    return {"a": f"{first} ahead", "b": f"{last} ahead", "tie": "within noise"}[c.winner]


def table_row(name: str, axis: str, groups: dict[str, list[float]], higher: bool | None,
              digits: int = 3) -> list[str]:
    """``[measure, axis, mean ± sd per group..., first vs last group]``; ``higher`` None = no
    better direction (a cost that is reported, not judged)."""
    labels = list(groups)
    cells = [fmt_stat(groups[label], digits) for label in labels]
    if higher is None or len(labels) < 2:
        return [name, axis, *cells, ""]
    c = compare(groups[labels[0]], groups[labels[-1]], higher)
    return [name, axis, *cells, winner_text(c, labels[0], labels[-1])]


def table(labels: Sequence[str], rows: list[list[str]]) -> dict:
    first_vs_last = f"{labels[0]} vs {labels[-1]}" if len(labels) > 1 else ""
    return {"columns": ["measure", "axis", *labels, first_vs_last], "rows": rows}


def throughput_rows(runs: dict, arms: Sequence[Arm]) -> list[list[str]]:
    rows = []
    for axis in AXES:
        groups = {arm.label: [tokens_per_second(r) for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining tokens/s", axis, groups, None, 0))
        groups = {arm.label: [r["curve"][-1]["tokens_seen"] / 1000 for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining tokens seen (thousands)", axis, groups, None, 1))
        groups = {arm.label: [train_seconds(r) for r in runs[axis][arm.key]] for arm in arms}
        rows.append(table_row("pretraining seconds", axis, groups, None, 1))
    return rows


def on_both_axes(judge_axis: Callable[[str], tuple[str, str]], axes: Sequence[str] = AXES) -> tuple[str, str]:
    """Apply a one-axis rule on every axis: their common verdict, or inconclusive if they differ."""
    outcomes = {axis: judge_axis(axis) for axis in axes}
    found = {verdict for verdict, _ in outcomes.values()}
    detail = " ".join(f"At {axis}: {verdict}, {why}." for axis, (verdict, why) in outcomes.items())
    if len(found) == 1:
        return found.pop(), detail
    return INCONCLUSIVE, "The axes disagree. " + detail


def claims_verdict(claims: Sequence[tuple[str, bool | None]]) -> tuple[str, str]:
    """Claims that are supported (True), contradicted (False) or within noise (None): falsified if
    any is contradicted, held if all are supported, inconclusive otherwise."""
    outcome = {True: "supported", False: "contradicted", None: "within noise"}
    detail = "; ".join(f"{text}: {outcome[ok]}" for text, ok in claims)
    if any(ok is False for _, ok in claims):
        return FALSIFIED, detail
    if all(ok is True for _, ok in claims):
        return HELD, detail
    return INCONCLUSIVE, detail


def ahead(c: Comparison) -> bool | None:
    """The claim "a is ahead of b" under comparison ``c``."""
    return {"a": True, "b": False, "tie": None}[c.winner]


def moved(before: list[float], after: list[float], digits: int = 3) -> str:
    """"rose from 0.412 to 0.455" / "fell from ..." / "stayed at ...", by the means."""
    a, b = mean_and_spread(before)[0], mean_and_spread(after)[0]
    if round(a, digits) == round(b, digits):
        return f"stayed at {a:.{digits}f}"
    return f"{'rose' if b > a else 'fell'} from {a:.{digits}f} to {b:.{digits}f}"


def buckets_of(metrics: dict, prefix: str, axis: str) -> list[str]:
    """Keys of ``metrics`` that start with ``prefix`` on ``axis``, in their (length) order."""
    return [k for k in metrics if k.startswith(prefix) and k.endswith(f" at {axis}")]


def common_buckets(measured: dict, arms: Sequence[Arm], field: str) -> list[str]:
    """Length buckets that every run has with at least ``MIN_BUCKET`` items, in length order."""
    results = [m for axis in AXES for arm in arms for m in measured[axis][arm.key]]
    first = list(results[0][field])
    return [b for b in first if all(b in m[field] and m[field][b]["n"] >= MIN_BUCKET for m in results)]


# ---- fine-tuning, shared by the ablations ----------------------------------------------------------

# Learning rates chosen on a quick-scale encoder: these tiny bodies need 1e-3 (at 3e-4, or with
# [CLS] pooling, 150 classification steps stayed near chance; mean pooling at 1e-3 reached 0.29).
FINETUNE = dict(classify=dict(batch_size=32, lr=1e-3, head_lr=3e-3),
                embed=dict(batch_size=32, lr=1e-3),
                seq2seq=dict(batch_size=16, lr=1e-3, max_target_len=32))


def classify(setup: Setup, name: str, seed: int, pooling: str | None = None) -> dict:
    """Fine-tune run ``name`` on genre classification (the fixed train windows) and evaluate on the
    test plays' windows."""
    from maskwise.data.corpus import GENRES
    from maskwise.data.tasks import genre_examples
    from maskwise.tasks.classify import ClassifyConfig, evaluate_classifier, train_classifier

    run = setup.exp.load(name)
    train = genre_examples("train", per_genre=setup.scale.train_examples // len(GENRES))
    test = genre_examples("test", per_genre=setup.scale.eval_examples // len(GENRES))
    cfg = ClassifyConfig(steps=setup.scale.finetune_steps, pooling=pooling, seed=seed, progress=setup.progress,
                         precision=setup.exp.runtime.precision, **FINETUNE["classify"])
    started = time.perf_counter()
    model = train_classifier(run.model, run.tokenizer, train, cfg)
    seconds = time.perf_counter() - started
    return {**evaluate_classifier(model, run.tokenizer, test, [e.label for e in train]), "finetune_s": seconds}


def retrieve(setup: Setup, name: str, seed: int, pooling: str | None = None) -> dict:
    """Contrastive ICT training of run ``name`` as a bi-encoder, then retrieval over the whole test
    collection (a subset of its queries)."""
    from maskwise.data.tasks import ict_retrieval
    from maskwise.tasks.embed import EmbedConfig, Embedder, train_bi_encoder
    from maskwise.tasks.retrieve import evaluate_retrieval

    run = setup.exp.load(name)
    pairs = ict_retrieval("train", max_queries=setup.scale.train_examples).pairs()
    test = ict_retrieval("test", max_queries=setup.scale.eval_examples)
    cfg = EmbedConfig(steps=setup.scale.finetune_steps, pooling=pooling, seed=seed, progress=setup.progress,
                      precision=setup.exp.runtime.precision, **FINETUNE["embed"])
    started = time.perf_counter()
    encoder = train_bi_encoder(run.model, run.tokenizer, pairs, cfg)
    seconds = time.perf_counter() - started
    return {**evaluate_retrieval(Embedder(encoder, run.tokenizer), test, name=f"{name} ({encoder.pooling})"),
            "pooling": encoder.pooling, "finetune_s": seconds}


# ---- 1. embedder --------------------------------------------------------------------------------

EMB_ENCODER = Arm("mlm", "encoder (MLM, mean)", dict(family="encoder", objective="mlm"))
EMB_DECODER = Arm("clm", "decoder (CLM, last)", dict(family="decoder", objective="clm"))
EMB_BUCKET = "recall@10, passages of "
# Each family's summary position (the report's notes say why).
EMB_POOLING = {EMB_ENCODER.key: "mean", EMB_DECODER.key: "last"}

EMBEDDER_PREDICTION = ("A bidirectional encoder makes a better bi-encoder than a causal decoder of the same size and "
                       "pretraining budget; the gap narrows for short passages.")
EMBEDDER_RULE = ("Compare recall@10 of the encoder (a) and the decoder (b) overall and per passage-length bucket "
                 "(characters; buckets with at least 10 queries). Falsified if the encoder is ahead neither "
                 "overall nor in any bucket (the causal model matches or beats it at every length). Held if the "
                 "encoder is ahead overall and its mean gap is smaller in the shortest bucket than in the longest. "
                 "Otherwise inconclusive. Applied at equal tokens and at equal wall-clock; the verdict is the "
                 "common outcome, inconclusive if they differ.")


def _pair(groups: dict[str, list[float]], a: Arm, b: Arm) -> tuple[list[float], list[float]]:
    return groups[a.label], groups[b.label]


def judge_embedder(metrics: dict) -> tuple[str, str]:
    def judge(axis: str) -> tuple[str, str]:
        overall = compare(*_pair(metrics[key("recall@10", axis)], EMB_ENCODER, EMB_DECODER))
        buckets = [(k, compare(*_pair(metrics[k], EMB_ENCODER, EMB_DECODER)))
                   for k in buckets_of(metrics, EMB_BUCKET, axis)]
        if not buckets:
            return INCONCLUSIVE, f"no passage-length bucket has {MIN_BUCKET} queries"
        if overall.winner != "a" and not any(c.winner == "a" for _, c in buckets):
            where = overall.describe("encoder", "decoder")
            return FALSIFIED, f"the decoder matches or beats the encoder overall ({where}) and in every length bucket"
        short, long = buckets[0][1], buckets[-1][1]
        gap_short, gap_long = short.mean_a - short.mean_b, long.mean_a - long.mean_b
        narrows = gap_short < gap_long
        text = (f"overall {overall.describe('encoder', 'decoder')}; gap {gap_short:+.3f} on the shortest passages "
                f"vs {gap_long:+.3f} on the longest")
        if overall.winner == "a" and narrows:
            return HELD, text
        return INCONCLUSIVE, text + (" (the gap does not narrow)" if not narrows else " (not ahead overall)")

    return on_both_axes(judge)


def embedder(setup: Setup) -> dict:
    arms = (EMB_ENCODER, EMB_DECODER)
    runs = pretrain_arms(setup, arms)
    measured = measure(setup, runs, arms, "retrieve",
                       lambda arm, name, seed: retrieve(setup, name, seed, EMB_POOLING[arm.key]))
    buckets = common_buckets(measured, arms, "by_passage_chars")
    metrics, rows = {}, []
    for axis in AXES:
        metrics[key("recall@10", axis)] = per_arm(measured, axis, arms, lambda m: m["recall@10"])
        rows.append(table_row("recall@10", axis, metrics[key("recall@10", axis)], True))
        for bucket in buckets:
            name = f"{EMB_BUCKET}{bucket} chars"
            metrics[key(name, axis)] = per_arm(measured, axis, arms,
                                               lambda m, b=bucket: m["by_passage_chars"][b]["recall@10"])
            rows.append(table_row(name, axis, metrics[key(name, axis)], True))
        rows.append(table_row("MRR", axis, per_arm(measured, axis, arms, lambda m: m["mrr"]), True))
    random_recall = measured[TOKENS][EMB_ENCODER.key][0]["baseline"]["recall@10"]
    verdict, detail = judge_embedder(metrics)
    tok = metrics[key("recall@10", TOKENS)]
    wall = metrics[key("recall@10", WALL)]
    enc, dec = EMB_ENCODER.label, EMB_DECODER.label
    by_length = " (no length bucket had enough queries to break it down)"
    if buckets:
        parts = []
        for bucket in dict.fromkeys((buckets[0], buckets[-1])):
            groups = metrics[key(f"{EMB_BUCKET}{bucket} chars", TOKENS)]
            parts.append(f"on passages of {bucket} characters it {moved(groups[enc], groups[dec])}")
        by_length = ", while " + " and ".join(parts)
    summary = (
        f"We replaced the bidirectional encoder (MLM, mean pooling) with a causal decoder of the same size (CLM, "
        f"last-token pooling) as the body of an ICT bi-encoder: recall@10 {moved(tok[enc], tok[dec])} at equal "
        f"tokens ({moved(wall[enc], wall[dec])} at equal wall-clock){by_length} (random ranking: {random_recall:.3f}).")
    return {
        "title": "Ablation embedder: bidirectional encoder vs causal decoder as a bi-encoder",
        "prediction": EMBEDDER_PREDICTION, "rule": EMBEDDER_RULE, "verdict": verdict, "verdict_detail": detail,
        "summary": summary, "metrics": metrics,
        "table": table([a.label for a in arms], rows + throughput_rows(runs, arms)),
        "runs": curve_entries(runs, arms), "parameters": parameters(setup, runs, arms),
        "notes": [
            "Both bodies pretrain on the same text with the same block; only the attention mask and the loss "
            "differ. Contrastive training (InfoNCE, in-batch negatives) has the same steps, batch and learning rate.",
            "Pooling: mean over real tokens for the encoder, the last real token for the decoder (the only position "
            "that has seen the whole text through a causal mask).",
            f"Inputs are cut to {MODEL['block_size']} tokens (about 350 characters with this BPE): in the longest "
            "buckets both models read only the start of the passage.",
            "The validation losses on the plots are per masked token (MLM) and per token (CLM): compare shapes, "
            "not levels.",
        ],
    }


# ---- 2. mask-ratio ------------------------------------------------------------------------------

MASK_LOSS = "held-out MLM loss at 15% masking"
GENRE_ACC = "genre accuracy"
DEFAULT_RATIOS = (0.15, 0.30)

MASK_RATIO_PREDICTION = ("Masking 30% instead of 15% gives a lower pretraining loss per step (twice the predictions "
                         "per step) but worse downstream genre classification.")
MASK_RATIO_RULE = ("Compare the lowest ratio (a) and the highest (b). The loss is MLM loss per masked token on "
                   "held-out text with the same 15% masks for every model (a loss at each model's own ratio would "
                   "compare different tasks), after the same steps (equal tokens: the batches are the same size). "
                   "Falsified if b is ahead on genre accuracy. Held if a is ahead on accuracy and b has the lower "
                   "loss. Otherwise inconclusive. Applied at equal tokens and at equal wall-clock; the verdict is "
                   "the common outcome, inconclusive if they differ.")


def ratio_arm(ratio: float) -> Arm:
    return Arm(f"ratio{ratio:g}", f"mask {ratio:g}", dict(family="encoder", objective="mlm", mask_ratio=ratio))


def judge_mask_ratio(metrics: dict, low: str, high: str) -> tuple[str, str]:
    """``low``/``high``: the labels of the lowest and highest ratio's arms."""

    def judge(axis: str) -> tuple[str, str]:
        loss = compare(metrics[key(MASK_LOSS, axis)][low], metrics[key(MASK_LOSS, axis)][high], higher_is_better=False)
        acc = compare(metrics[key(GENRE_ACC, axis)][low], metrics[key(GENRE_ACC, axis)][high])
        text = f"loss {loss.describe(low, high)}; accuracy {acc.describe(low, high)}"
        if acc.winner == "b":
            return FALSIFIED, text
        if acc.winner == "a" and loss.winner == "b":
            return HELD, text
        return INCONCLUSIVE, text

    return on_both_axes(judge)


def mlm_loss_at(setup: Setup, name: str, ratio: float = 0.15) -> float:
    """MLM loss per masked token of run ``name`` on the validation plays, masking ``ratio`` with
    the same seed for every model, through the training loop's own evaluation."""
    from maskwise.data.corpus import load_corpus
    from maskwise.data.stream import TokenStream
    from maskwise.objectives.mlm import MLM
    from maskwise.train.loop import TrainConfig, Trainer

    run = setup.exp.load(name)
    val = TokenStream.from_texts(load_corpus("shakespeare").val, run.tokenizer, "validation data")
    cfg = TrainConfig(block_size=MODEL["block_size"], batch_size=MODEL["batch_size"],
                      eval_batches=4 * setup.scale.eval_batches, seed=0, progress=False)
    objective = MLM(run.tokenizer, run.model.cfg.vocab_size, mask_ratio=ratio)
    return Trainer(run.model, objective, val, val, cfg, runtime=setup.exp.runtime).evaluate()["val_loss"]


def parse_ratios(ratios: Sequence[float]) -> tuple[float, ...]:
    values = tuple(sorted({float(r) for r in ratios}))
    if len(values) < 2 or not all(0.0 < r < 1.0 for r in values):
        raise UserError(f"ratios: need at least two distinct mask ratios in (0, 1), got {list(ratios)}")
    return values


def mask_ratio(setup: Setup, ratios: Sequence[float] = DEFAULT_RATIOS) -> dict:
    arms = tuple(ratio_arm(r) for r in parse_ratios(ratios))
    low, high = arms[0].label, arms[-1].label
    runs = pretrain_arms(setup, arms)
    measured = measure(setup, runs, arms, "mask", lambda arm, name, seed: {
        "mlm_loss_15": mlm_loss_at(setup, name), **classify(setup, name, seed, "mean")})
    metrics, rows = {}, []
    for axis in AXES:
        metrics[key(MASK_LOSS, axis)] = per_arm(measured, axis, arms, lambda m: m["mlm_loss_15"])
        metrics[key(GENRE_ACC, axis)] = per_arm(measured, axis, arms, lambda m: m["accuracy"])
        own = {arm.label: [r["curve"][-1]["val_loss"] for r in runs[axis][arm.key]] for arm in arms}
        rows += [table_row(MASK_LOSS + " (nats per masked token)", axis, metrics[key(MASK_LOSS, axis)], False),
                 table_row("validation loss at its own ratio (not comparable across ratios)", axis, own, None),
                 table_row(GENRE_ACC, axis, metrics[key(GENRE_ACC, axis)], True),
                 table_row("genre macro-F1", axis, per_arm(measured, axis, arms, lambda m: m["macro_f1"]), True)]
    verdict, detail = judge_mask_ratio(metrics, low, high)
    loss, acc = metrics[key(MASK_LOSS, TOKENS)], metrics[key(GENRE_ACC, TOKENS)]
    loss_w, acc_w = metrics[key(MASK_LOSS, WALL)], metrics[key(GENRE_ACC, WALL)]
    chance = measured[TOKENS][arms[0].key][0]["baseline"]["accuracy"]
    summary = (
        f"We replaced mask ratio {low.split()[-1]} with {high.split()[-1]}: held-out MLM loss at 15% masking "
        f"{moved(loss[low], loss[high])} after the same steps ({moved(loss_w[low], loss_w[high])} at equal "
        f"wall-clock), while genre accuracy {moved(acc[low], acc[high])} ({moved(acc_w[low], acc_w[high])} at "
        f"equal wall-clock; majority class {chance:.3f}).")
    return {
        "title": "Ablation mask-ratio: how much to mask in MLM",
        "prediction": MASK_RATIO_PREDICTION, "rule": MASK_RATIO_RULE, "verdict": verdict, "verdict_detail": detail,
        "summary": summary, "metrics": metrics,
        "table": table([a.label for a in arms], rows + throughput_rows(runs, arms)),
        "runs": curve_entries(runs, arms), "parameters": parameters(setup, runs, arms),
        "notes": [
            "What is compared: MLM loss per masked token, on the same held-out windows with the same 15% masks "
            "for every model. A model trained at 30% is scored on the loss at its own ratio during training (the "
            "curves and the 'own ratio' row), where each prediction has less context: those numbers measure "
            "different tasks and are not compared.",
            "Wettig et al. (2023, 'Should You Mask 15% in Masked Language Modeling?') found 40% masking beating "
            "15% downstream for BERT-large-sized models with an efficient recipe; the tiny models here are far "
            "from that regime, and the verdict is reported either way.",
            "Classification: mean pooling, the same fine-tuning steps, batch and learning rates for every ratio.",
        ],
    }


# ---- 3. shift-bug -------------------------------------------------------------------------------

SHIFT_OK = Arm("shift", "correct shift", dict(family="decoder", objective="clm"))
SHIFT_BUG = Arm("noshift", "no shift (bug)", dict(family="decoder", objective="clm", no_shift=True))
REPORTED = "reported validation loss"
COPY_RATE = "sample copy rate"
TRUE_LOSS = "next-token loss on held-out text, nats/char"
SAMPLE_PROMPTS, PROMPT_TOKENS, SAMPLE_TOKENS = 8, 12, 48

SHIFT_BUG_PREDICTION = ("A decoder trained to predict the token it is looking at (no shift) reports a much lower "
                        "loss than a correct one and generates degenerate copies.")
SHIFT_BUG_RULE = ("Two claims. (1) The broken model's reported validation loss is lower with separated intervals "
                  "and below half the correct model's (contradicted if the correct one is lower, or the broken one "
                  "lower but not by half). (2) Its samples repeat the previous token more often (copy rate, "
                  "separated intervals). Falsified if a claim is contradicted, held if both are supported, "
                  "inconclusive otherwise. Applied at equal tokens and at equal wall-clock; the verdict is the "
                  "common outcome, inconclusive if they differ.")


def copy_rate(prompt: Sequence[int], new: Sequence[int]) -> tuple[int, int]:
    """(generated tokens equal to the token just before them, generated tokens): the signature of a
    model that learned to copy its input instead of predicting what comes next."""
    previous = [prompt[-1], *new[:-1]] if new else []
    return sum(a == b for a, b in zip(new, previous)), len(new)


def judge_shift_bug(metrics: dict) -> tuple[str, str]:
    bug, ok = SHIFT_BUG.label, SHIFT_OK.label

    def judge(axis: str) -> tuple[str, str]:
        reported = compare(metrics[key(REPORTED, axis)][bug], metrics[key(REPORTED, axis)][ok], higher_is_better=False)
        copies = compare(metrics[key(COPY_RATE, axis)][bug], metrics[key(COPY_RATE, axis)][ok])
        lower = ahead(reported)
        if lower and not reported.mean_a < 0.5 * reported.mean_b:
            lower = False  # lower, but not "much lower"
        ratio = reported.mean_a / reported.mean_b
        return claims_verdict([
            (f"reported loss below half ({reported.describe(bug, ok)}; ratio {ratio:.2f})", lower),
            (f"more copies ({copies.describe(bug, ok)})", ahead(copies)),
        ])

    return on_both_axes(judge)


def shift_measures(setup: Setup, name: str, seed: int) -> dict:
    """Held-out next-token loss with the correct shift, and sampled continuations of held-out
    prompts: their copy rate and the first one as text."""
    from maskwise.experiments.compare import held_out_text
    from maskwise.tasks import seeded_generator
    from maskwise.tasks.fill_mask import decoder_nats_per_char
    from maskwise.tasks.generate import GenerationConfig, generate

    run = setup.exp.load(name)
    tok, text = run.tokenizer, held_out_text(setup.scale.held_out_chars)
    ids = tok.encode(text)
    room = max(1, len(ids) - PROMPT_TOKENS)
    prompts = [ids[i * room // SAMPLE_PROMPTS:][:PROMPT_TOKENS] for i in range(SAMPLE_PROMPTS)]
    sampling = GenerationConfig(max_new_tokens=SAMPLE_TOKENS, temperature=0.8, top_k=40)
    new = generate(run.model, prompts, sampling, tok.eos_id, tok.pad_id, None,
                   seeded_generator(run.model, seed)).tokens
    copied, total = map(sum, zip(*(copy_rate(p, n) for p, n in zip(prompts, new))))
    return {"nats_per_char": decoder_nats_per_char(run.model, tok, text), "copy_rate": copied / max(total, 1),
            "sample": f"PROMPT: {tok.decode(prompts[0])}\nCONTINUATION: {tok.decode(new[0])}"}


def shift_bug(setup: Setup) -> dict:
    arms = (SHIFT_OK, SHIFT_BUG)
    runs = pretrain_arms(setup, arms)
    measured = measure(setup, runs, arms, "shift", lambda arm, name, seed: shift_measures(setup, name, seed))
    metrics, rows = {}, []
    for axis in AXES:
        metrics[key(REPORTED, axis)] = {arm.label: [r["curve"][-1]["val_loss"] for r in runs[axis][arm.key]]
                                        for arm in arms}
        metrics[key(COPY_RATE, axis)] = per_arm(measured, axis, arms, lambda m: m["copy_rate"])
        rows += [table_row(REPORTED + " (its own objective, per token)", axis, metrics[key(REPORTED, axis)], False),
                 table_row(TRUE_LOSS + " (correct shift for both)", axis,
                           per_arm(measured, axis, arms, lambda m: m["nats_per_char"]), False),
                 table_row(COPY_RATE + " (generated token = previous token)", axis,
                           metrics[key(COPY_RATE, axis)], False)]
    verdict, detail = judge_shift_bug(metrics)
    ok, bug = SHIFT_OK.label, SHIFT_BUG.label
    reported, copies = metrics[key(REPORTED, TOKENS)], metrics[key(COPY_RATE, TOKENS)]
    true_loss = per_arm(measured, TOKENS, arms, lambda m: m["nats_per_char"])
    summary = (
        f"We replaced the next-token target with the current token (CLM without the shift): the reported "
        f"validation loss {moved(reported[ok], reported[bug])} at equal tokens, while the true next-token loss on "
        f"held-out text {moved(true_loss[ok], true_loss[bug])} nats per character and the share of sampled tokens "
        f"that copy the previous one {moved(copies[ok], copies[bug])}.")
    return {
        "title": "Ablation shift-bug: a causal LM that forgot to shift its labels",
        "prediction": SHIFT_BUG_PREDICTION, "rule": SHIFT_BUG_RULE, "verdict": verdict, "verdict_detail": detail,
        "summary": summary, "metrics": metrics,
        "table": table([a.label for a in arms], rows + throughput_rows(runs, arms)),
        "runs": curve_entries(runs, arms), "parameters": parameters(setup, runs, arms),
        "samples": {f"{arm.label}, seed {setup.seeds[0]} (temperature 0.8, top-k 40)":
                    measured[TOKENS][arm.key][0]["sample"] for arm in arms},
        "notes": [
            "The reported loss is each run's own validation loss: for the broken run, the loss of predicting the "
            "token at the same position, which the causal mask lets it see; so it falls towards zero.",
            "The held-out next-token loss scores both models with the correct shift on the opening of a test play "
            "(nats per character, so the tokenizer does not matter): what the broken run actually knows about "
            "what comes next.",
            f"Copy rate: over {SAMPLE_PROMPTS} held-out prompts of {PROMPT_TOKENS} tokens, each continued for "
            f"{SAMPLE_TOKENS} tokens, the share of generated tokens equal to the token just before them.",
        ],
    }


# ---- 4. seq2seq ---------------------------------------------------------------------------------

S2S_BLOCK = dict(block_size=256, batch_size=8)  # passages run to 600 characters (~220 tokens)
S2S_DECODER = Arm("decoder", "decoder-only", dict(family="decoder", objective="clm", layers=4, **S2S_BLOCK))
S2S_ENCDEC = "encoder-decoder"  # its arm's label; the FFN width is matched at run time
F1 = "speakers F1"
F1_BUCKET = "speakers F1, sources of "
TTFT_BUCKET = "time to first token (ms), sources of "
COST_BATCH, COST_TOKENS, COST_REPEATS = 8, 32, 3

SEQ2SEQ_PREDICTION = ("At the same parameter count, a decoder-only model with the source in its prompt and an "
                      "encoder-decoder extract the speakers of a passage equally well from short sources; the "
                      "encoder-decoder pulls ahead as sources grow, with a lower prefill cost.")
SEQ2SEQ_RULE = ("Compare the encoder-decoder (a) with the decoder-only model (b) in the shortest and the longest "
                "source-length bucket (at least 10 test passages): speakers F1, and time to first token at a "
                "fixed batch. Falsified if at the longest sources the decoder-only model matches or beats the "
                "encoder-decoder on F1 and on time to first token. Held if F1 is within noise on the shortest "
                "sources, and at the longest the encoder-decoder is ahead on F1 and faster to the first token. "
                "Otherwise inconclusive. Applied at equal tokens and at equal wall-clock; the verdict is the "
                "common outcome, inconclusive if they differ.")


def count_parameters(settings: dict, vocab_size: int) -> int:
    from maskwise.model.transformer import build_model
    from maskwise.train.pretrain import PretrainConfig, model_config

    config = PretrainConfig.from_flat(settings).resolved()
    return sum(p.numel() for p in build_model(model_config(config, vocab_size)).parameters())


def matched_encoder_decoder() -> tuple[Arm, int, int]:
    """The encoder-decoder arm (2 + 2 layers) whose FFN width brings its parameter count closest to
    the 4-layer decoder's; with both counts. Cross-attention costs 4 d^2 per decoder layer, paid
    for with a narrower FFN."""
    from maskwise.data.corpus import load_corpus
    from maskwise.data.tokenizers import build_tokenizer

    vocab = build_tokenizer(MODEL["tokenizer"], load_corpus("shakespeare"), MODEL["vocab_size"]).vocab_size
    target = count_parameters({**MODEL, **S2S_DECODER.settings}, vocab)

    def arm(d_ff: int) -> Arm:
        return Arm("encdec", S2S_ENCDEC, dict(family="encoder-decoder", objective="span", layers=2,
                                              decoder_layers=2, d_ff=d_ff, **S2S_BLOCK))

    counts = {d_ff: count_parameters({**MODEL, **arm(d_ff).settings}, vocab)
              for d_ff in range(16, 8 * MODEL["d_model"] + 1, 16)}
    best = min(counts, key=lambda d_ff: abs(counts[d_ff] - target))
    if abs(counts[best] - target) > 0.1 * target:
        raise UserError(f"seq2seq: no encoder-decoder FFN width brings it within 10% of the decoder's {target:,} "
                        f"parameters (closest: {counts[best]:,})")
    return arm(best), counts[best], target


def _median_seconds(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(COST_REPEATS):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def generation_cost(model, tokenizer, examples, max_target_len: int) -> dict[str, dict[str, float]]:
    """Per source-length bucket with at least ``COST_BATCH`` passages: time to first token (prefill
    plus one decoding step) for a batch of ``COST_BATCH``, and decoding tokens/s after it (from
    ``COST_TOKENS`` forced new tokens: no [EOS], so every row runs the same length). Medians of
    ``COST_REPEATS`` runs, KV cache on."""
    from maskwise.objectives.span import decoder_start_id
    from maskwise.tasks.generate import GenerationConfig, generate
    from maskwise.tasks.metrics import bucket_label
    from maskwise.tasks.seq2seq import SOURCE_EDGES, source_ids

    groups: dict[str, list] = {}
    for example in examples:
        groups.setdefault(bucket_label(SOURCE_EDGES, len(example.source)), []).append(example)
    start = decoder_start_id(tokenizer)
    result = {}
    for label in dict.fromkeys(bucket_label(SOURCE_EDGES, edge) for edge in SOURCE_EDGES):
        if len(groups.get(label, ())) < COST_BATCH:
            continue
        prompts = [source_ids(model, tokenizer, e.source, max_target_len) for e in groups[label][:COST_BATCH]]

        def run(tokens: int, prompts=prompts):
            generate(model, prompts, GenerationConfig(max_new_tokens=tokens), None, tokenizer.pad_id, start)

        first = _median_seconds(lambda: run(1))
        full = _median_seconds(lambda: run(COST_TOKENS))
        result[label] = {"ttft_ms": 1000 * first,
                         "decode_tokens_per_s": COST_BATCH * (COST_TOKENS - 1) / max(full - first, 1e-9),
                         "source_tokens": statistics.fmean(len(p) for p in prompts)}
    return result


def seq2seq_measures(setup: Setup, name: str, seed: int) -> dict:
    from maskwise.data.tasks import speaker_examples
    from maskwise.tasks.generate import GenerationConfig
    from maskwise.tasks.seq2seq import Seq2SeqConfig, evaluate_seq2seq, train_seq2seq

    run = setup.exp.load(name)
    train = speaker_examples("train", limit=setup.scale.train_examples)
    test = speaker_examples("test", limit=setup.scale.eval_examples)
    cfg = Seq2SeqConfig(steps=setup.scale.finetune_steps, seed=seed, progress=setup.progress,
                        precision=setup.exp.runtime.precision, **FINETUNE["seq2seq"])
    started = time.perf_counter()
    train_seq2seq(run.model, run.tokenizer, train, cfg)
    seconds = time.perf_counter() - started
    quality = evaluate_seq2seq(run.model, run.tokenizer, test, GenerationConfig(max_new_tokens=cfg.max_target_len + 1),
                               cfg.max_target_len, progress=False)
    return {**quality, "finetune_s": seconds,
            "cost": generation_cost(run.model, run.tokenizer, test, cfg.max_target_len)}


def judge_seq2seq(metrics: dict) -> tuple[str, str]:
    ed, do = S2S_ENCDEC, S2S_DECODER.label

    def judge(axis: str) -> tuple[str, str]:
        f1_keys, ttft_keys = buckets_of(metrics, F1_BUCKET, axis), buckets_of(metrics, TTFT_BUCKET, axis)
        if not f1_keys or not ttft_keys:
            return INCONCLUSIVE, f"no source-length bucket has {MIN_BUCKET} test passages"
        short = compare(metrics[f1_keys[0]][ed], metrics[f1_keys[0]][do])
        long = compare(metrics[f1_keys[-1]][ed], metrics[f1_keys[-1]][do])
        cost = compare(metrics[ttft_keys[-1]][ed], metrics[ttft_keys[-1]][do], higher_is_better=False)
        text = (f"shortest sources F1 {short.describe(ed, do)}; longest sources F1 {long.describe(ed, do)}; "
                f"longest sources time to first token {cost.describe(ed, do, 1)}")
        if long.winner != "a" and cost.winner != "a":
            return FALSIFIED, text
        if short.winner == "tie" and long.winner == "a" and cost.winner == "a":
            return HELD, text
        return INCONCLUSIVE, text

    return on_both_axes(judge)


def seq2seq(setup: Setup) -> dict:
    encdec, encdec_params, decoder_params = matched_encoder_decoder()
    arms = (encdec, S2S_DECODER)
    runs = pretrain_arms(setup, arms)
    measured = measure(setup, runs, arms, "seq2seq",
                       lambda arm, name, seed: seq2seq_measures(setup, name, seed))
    buckets = common_buckets(measured, arms, "by_source_chars")
    metrics, rows = {}, []
    for axis in AXES:
        metrics[key(F1, axis)] = per_arm(measured, axis, arms, lambda m: m["speakers_f1"])
        rows += [table_row(F1, axis, metrics[key(F1, axis)], True),
                 table_row("exact match", axis, per_arm(measured, axis, arms, lambda m: m["exact_match"]), True)]
        for i, bucket in enumerate(buckets):
            groups = per_arm(measured, axis, arms, lambda m, b=bucket: m["by_source_chars"][b]["speakers_f1"])
            rows.append(table_row(f"{F1_BUCKET}{bucket} chars", axis, groups, True))
            if i in (0, len(buckets) - 1):  # the rule reads the shortest and the longest
                metrics[key(f"{F1_BUCKET}{bucket} chars", axis)] = groups
        for i, bucket in enumerate(buckets):
            groups = per_arm(measured, axis, arms, lambda m, b=bucket: m["cost"][b]["ttft_ms"])
            rows.append(table_row(f"{TTFT_BUCKET}{bucket} chars", axis, groups, False, 1))
            if i == len(buckets) - 1:
                metrics[key(f"{TTFT_BUCKET}{bucket} chars", axis)] = groups
        for bucket in buckets:
            groups = per_arm(measured, axis, arms, lambda m, b=bucket: m["cost"][b]["decode_tokens_per_s"])
            rows.append(table_row(f"decode tokens/s (batch {COST_BATCH}), sources of {bucket} chars", axis,
                                  groups, True, 0))
    verdict, detail = judge_seq2seq(metrics)
    baseline = measured[TOKENS][encdec.key][0]["baseline"]["speakers_f1"]
    f1 = metrics[key(F1, TOKENS)]
    if buckets:
        long = per_arm(measured, TOKENS, arms, lambda m: m["by_source_chars"][buckets[-1]]["speakers_f1"])
        ttft = per_arm(measured, TOKENS, arms, lambda m: m["cost"][buckets[-1]]["ttft_ms"])
        longest = (f", on sources of {buckets[-1]} characters it {moved(long[encdec.label], long[S2S_DECODER.label])}, "
                   f"while the time to first token there {moved(ttft[encdec.label], ttft[S2S_DECODER.label], 1)} ms")
    else:
        longest = " (no length bucket had enough passages to break it down)"
    summary = (
        f"We replaced the encoder-decoder ({encdec_params:,} parameters) with a decoder-only model reading the source "
        f"in its prompt ({decoder_params:,} parameters): speakers F1 {moved(f1[encdec.label], f1[S2S_DECODER.label])} "
        f"at equal tokens{longest} (copying the first line scores F1 {baseline:.3f}).")
    return {
        "title": "Ablation seq2seq: decoder-only vs encoder-decoder for passage -> speakers",
        "prediction": SEQ2SEQ_PREDICTION, "rule": SEQ2SEQ_RULE, "verdict": verdict, "verdict_detail": detail,
        "summary": summary, "metrics": metrics,
        "table": table([a.label for a in arms], rows + throughput_rows(runs, arms)),
        "runs": curve_entries(runs, arms), "parameters": parameters(setup, runs, arms),
        "notes": [
            f"Equal size: 4 causal layers vs 2 + 2 layers whose FFN width ({encdec.settings['d_ff']}) was chosen so "
            f"the parameter sums match ({decoder_params:,} vs {encdec_params:,}); both pretrain on blocks of "
            f"{S2S_BLOCK['block_size']} tokens, the decoder by CLM, the encoder-decoder by T5 span corruption.",
            "Tokens seen count what a model reads: for the encoder-decoder, its corrupted inputs plus its span "
            "targets (sentinels included), about 10% more than the raw text they were cut from.",
            "Fine-tuning: the same steps, batch and learning rate; the decoder-only model reads 'source [SEP] target' "
            "with the loss on the target only. Greedy decoding for quality.",
            f"Cost at a fixed batch of {COST_BATCH} passages from one length bucket, KV cache on, medians of "
            f"{COST_REPEATS}: time to first token = prefill + one step; decode tokens/s over {COST_TOKENS - 1} more "
            "forced tokens. Measured on a shared machine: compare within a row, not across reports.",
            "The validation losses on the plots are per token of different objectives (CLM, span corruption): "
            "compare shapes, not levels.",
        ],
    }


# ---- 5. electra ---------------------------------------------------------------------------------

EL_ELECTRA = Arm("electra", "ELECTRA", dict(family="encoder", objective="electra"))
EL_MLM = Arm("mlm", "MLM", dict(family="encoder", objective="mlm"))

ELECTRA_PREDICTION = ("ELECTRA (replaced-token detection) pretrains a better encoder than MLM at equal compute, "
                      "most clearly for small models (Clark et al., 2020).")
ELECTRA_RULE = ("Compare genre accuracy after identical fine-tuning of the ELECTRA discriminator (a) and the MLM "
                "encoder (b), both of the same size: held if ELECTRA is ahead, falsified if MLM is ahead, "
                "inconclusive within noise. Applied at equal tokens and at equal wall-clock (ELECTRA's generator "
                "makes its steps dearer, which only the wall-clock axis charges it for); the verdict is the common "
                "outcome, inconclusive if they differ.")


def judge_electra(metrics: dict) -> tuple[str, str]:
    def judge(axis: str) -> tuple[str, str]:
        groups = metrics[key(GENRE_ACC, axis)]
        c = compare(groups[EL_ELECTRA.label], groups[EL_MLM.label])
        return {"a": HELD, "b": FALSIFIED, "tie": INCONCLUSIVE}[c.winner], c.describe("ELECTRA", "MLM")

    return on_both_axes(judge)


def electra(setup: Setup) -> dict:
    arms = (EL_ELECTRA, EL_MLM)
    runs = pretrain_arms(setup, arms)
    measured = measure(setup, runs, arms, "classify", lambda arm, name, seed: classify(setup, name, seed, "mean"))
    metrics, rows = {}, []
    for axis in AXES:
        metrics[key(GENRE_ACC, axis)] = per_arm(measured, axis, arms, lambda m: m["accuracy"])
        flops = {arm.label: [r["curve"][-1]["flops"] / 1e12 for r in runs[axis][arm.key]] for arm in arms}
        rows += [table_row(GENRE_ACC, axis, metrics[key(GENRE_ACC, axis)], True),
                 table_row("genre macro-F1", axis, per_arm(measured, axis, arms, lambda m: m["macro_f1"]), True),
                 table_row("pretraining FLOPs (estimate, 10^12)", axis, flops, None, 2)]
    verdict, detail = judge_electra(metrics)
    acc, acc_w = metrics[key(GENRE_ACC, TOKENS)], metrics[key(GENRE_ACC, WALL)]
    chance = measured[TOKENS][EL_MLM.key][0]["baseline"]["accuracy"]
    speed = {arm.label: [tokens_per_second(r) for r in runs[TOKENS][arm.key]] for arm in arms}
    summary = (
        f"We replaced MLM with ELECTRA's replaced-token detection for the same encoder: genre accuracy "
        f"{moved(acc[EL_MLM.label], acc[EL_ELECTRA.label])} at equal tokens "
        f"({moved(acc_w[EL_MLM.label], acc_w[EL_ELECTRA.label])} at equal wall-clock; majority class {chance:.3f}), "
        f"while pretraining throughput {moved(speed[EL_MLM.label], speed[EL_ELECTRA.label], 0)} tokens/s.")
    return {
        "title": "Ablation electra: replaced-token detection vs masked language modelling",
        "prediction": ELECTRA_PREDICTION, "rule": ELECTRA_RULE, "verdict": verdict, "verdict_detail": detail,
        "summary": summary, "metrics": metrics,
        "table": table([a.label for a in arms], rows + throughput_rows(runs, arms)),
        "runs": curve_entries(runs, arms), "parameters": parameters(setup, runs, arms),
        "notes": [
            "Equal compute is stated two ways: equal tokens (the same text; ELECTRA also runs a generator a quarter "
            "the width, so it spends more per token, see the FLOPs row) and equal wall-clock (the fair one for "
            "cost). The FLOPs estimate counts ELECTRA as 6 x all its parameters per token.",
            "What fine-tunes is the discriminator (the run's model.safetensors), a plain encoder of the same size "
            "as the MLM one; mean pooling, the same steps, batch and learning rates.",
            "One model size only: the 'most clearly for small models' part of the prediction is not tested here.",
            "ELECTRA's validation loss (generator MLM + 50 x discriminator BCE) is on another scale than MLM's: "
            "compare the curves' shapes, not their levels.",
        ],
    }


# ---- 6. pooling ---------------------------------------------------------------------------------

POOL_ARM = Arm("mlm", "encoder (MLM)", dict(family="encoder", objective="mlm"))
POOLINGS = ("cls", "mean")
RECALL = "recall@10"
CLOSE = 0.02  # accuracy difference that still counts as "close" when the intervals separate

POOLING_PREDICTION = ("On one pretrained encoder, [CLS] and mean pooling are close on classification, and mean "
                      "pooling is ahead on retrieval.")
POOLING_RULE = (f"Two claims, on the same pretrained encoders (so equal tokens and equal wall-clock coincide). "
                f"(1) Genre accuracy with [CLS] and with mean pooling is close: intervals overlap or the means "
                f"differ by at most {CLOSE} (contradicted otherwise). (2) Mean pooling is ahead on ICT recall@10 "
                f"(contradicted if [CLS] is ahead). Falsified if a claim is contradicted, held if both are "
                f"supported, inconclusive otherwise.")


def judge_pooling(metrics: dict) -> tuple[str, str]:
    acc = compare(metrics[key(GENRE_ACC, SHARED)]["mean"], metrics[key(GENRE_ACC, SHARED)]["cls"])
    recall = compare(metrics[key(RECALL, SHARED)]["mean"], metrics[key(RECALL, SHARED)]["cls"])
    close = acc.winner == "tie" or abs(acc.mean_a - acc.mean_b) <= CLOSE
    return claims_verdict([(f"close on classification ({acc.describe('mean', 'cls')})", close),
                           (f"mean ahead on retrieval ({recall.describe('mean', 'cls')})", ahead(recall))])


def pooling(setup: Setup) -> dict:
    runs = pretrain_arms(setup, (POOL_ARM,))
    shared = {TOKENS: runs[TOKENS]}  # one encoder per seed: its token run serves both axes
    classified = {p: measure(setup, shared, (POOL_ARM,), f"classify-{p}",
                             lambda arm, name, seed, p=p: classify(setup, name, seed, p)) for p in POOLINGS}
    retrieved = {p: measure(setup, shared, (POOL_ARM,), f"retrieve-{p}",
                            lambda arm, name, seed, p=p: retrieve(setup, name, seed, p)) for p in POOLINGS}

    def groups(measured: dict, field: str) -> dict[str, list[float]]:
        return {p: [m[field] for m in measured[p][TOKENS][POOL_ARM.key]] for p in POOLINGS}

    metrics = {key(GENRE_ACC, SHARED): groups(classified, "accuracy"),
               key(RECALL, SHARED): groups(retrieved, "recall@10")}
    rows = [table_row(GENRE_ACC, SHARED, metrics[key(GENRE_ACC, SHARED)], True),
            table_row("genre macro-F1", SHARED, groups(classified, "macro_f1"), True),
            table_row(RECALL, SHARED, metrics[key(RECALL, SHARED)], True),
            table_row("MRR", SHARED, groups(retrieved, "mrr"), True),
            table_row("classification fine-tuning seconds", SHARED, groups(classified, "finetune_s"), None, 1),
            table_row("retrieval fine-tuning seconds", SHARED, groups(retrieved, "finetune_s"), None, 1)]
    verdict, detail = judge_pooling(metrics)
    acc, recall = metrics[key(GENRE_ACC, SHARED)], metrics[key(RECALL, SHARED)]
    summary = (
        f"We replaced [CLS] pooling with mean pooling on the same pretrained encoders: genre accuracy "
        f"{moved(acc['cls'], acc['mean'])}, while ICT recall@10 {moved(recall['cls'], recall['mean'])}.")
    return {
        "title": "Ablation pooling: [CLS] vs mean pooling on one encoder",
        "prediction": POOLING_PREDICTION, "rule": POOLING_RULE, "verdict": verdict, "verdict_detail": detail,
        "summary": summary, "metrics": metrics, "table": table(list(POOLINGS), rows),
        "runs": curve_entries(runs, (POOL_ARM,)), "parameters": parameters(setup, runs, (POOL_ARM,)),
        "notes": [
            "Both poolings fine-tune copies of the same pretrained encoder for the same steps, so equal tokens and "
            "equal wall-clock are the same comparison; the fine-tuning seconds rows show the costs match.",
            "Classification: a fresh head on the pooled state, body and head fine-tuned. Retrieval: contrastive ICT "
            "training of the pooled, normalised vectors.",
        ],
    }


# ---- the registry --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ablation:
    run: Callable[..., dict]  # (Setup, **options) -> results without the shared keys
    about: str
    options: tuple[str, ...] = ()  # keyword options the run accepts


ABLATIONS: dict[str, Ablation] = {
    "embedder": Ablation(embedder, "bidirectional encoder vs causal decoder as bi-encoders (ICT retrieval)"),
    "mask-ratio": Ablation(mask_ratio, "MLM mask ratio 0.15 vs 0.30: pretraining loss and downstream accuracy",
                           ("ratios",)),
    "shift-bug": Ablation(shift_bug, "a causal LM with and without the one-position label shift"),
    "seq2seq": Ablation(seq2seq, "decoder-only vs encoder-decoder at equal size on passage -> speakers"),
    "electra": Ablation(electra, "ELECTRA vs MLM pretraining, then the same classification fine-tuning"),
    "pooling": Ablation(pooling, "[CLS] vs mean pooling for classification and retrieval"),
}


def select_scale(quick: bool) -> Scale:
    """``quick`` or the default, unless ``MASKWISE_ABLATION_SCALE`` names a scale (tests use "smoke")."""
    name = os.environ.get(SCALE_ENV) or ("quick" if quick else "default")
    if name not in SCALES:
        raise UserError(f"{SCALE_ENV}={name!r} is not a scale; known: {', '.join(SCALES)}")
    return SCALES[name]


def run_ablation(name: str, out: str | Path | None = None, quick: bool = False, seeds: int = 3,
                 overwrite: bool = False, progress: bool = False, runtime: Runtime | None = None,
                 **options) -> Path:
    """Run (or continue) ablation ``name`` in ``out`` (default ``runs/ablate-<name>``), write its
    results.json and render the report; returns the folder. ``options``: the ablation's own
    (``ratios`` for mask-ratio)."""
    if name not in ABLATIONS:
        raise UserError(f"unknown ablation {name!r}; known: {', '.join(ABLATIONS)}")
    ablation = ABLATIONS[name]
    unknown = sorted(set(options) - set(ablation.options))
    if unknown:
        accepted = ", ".join(ablation.options) or "none"
        raise UserError(f"ablation {name} does not take {', '.join(unknown)} (its options: {accepted})")
    if seeds < 2:
        raise UserError(f"seeds must be at least 2 (a spread needs two values), got {seeds}")
    scale = select_scale(quick)
    exp = Experiment(out or f"runs/ablate-{name}", overwrite, runtime)
    # Cached steps are only valid for the recipe that made them: the folder keeps it and refuses another.
    recipe = json.loads(json.dumps({"ablation": name, "scale": dataclasses.asdict(scale), "model": MODEL,
                                    "finetune": FINETUNE}))
    created = []  # filled only if this call is the folder's first: otherwise it continues an earlier one
    stored = exp.step("ablation", lambda: created.append(True) or recipe)
    if stored != recipe:
        raise UserError(f"{exp.out} holds ablation {stored['ablation']} at scale {stored['scale']['name']} with "
                        f"other settings than {name} at scale {scale.name} now; use --overwrite or another --out")
    results = ablation.run(Setup(exp, scale, tuple(range(seeds)), progress), **options)
    results["title"] += f" [{scale.name} scale]"
    if scale.name == "smoke":
        results["notes"].insert(0, f"Smoke scale ({SCALE_ENV}=smoke): a few steps to check the plumbing; the "
                                   "numbers and the verdict mean nothing.")
    if not created:
        results["notes"].append("This call continued an earlier one in the same folder, reusing its finished steps: "
                                "the total time above is this call's only.")
    results.update(kind="ablation", machine=machine_info(exp.runtime), wall_s=exp.elapsed(),
                   settings={**recipe, "seeds": list(range(seeds)), **options})
    write_results(exp.out, results)
    render(exp.out)
    return exp.out
