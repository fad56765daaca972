"""What ``compare`` (pretraining the families, ``compare``) and ``compare --model`` (the models given, ``candidates``)
share: one study base (``CompareStudy``: the plan's rows measured on every column, the first-token timing, the claims
of ``claims`` and the report of ``compare_report``), one time plan (``time_plan``) and one run (``run_compare``)."""

from __future__ import annotations

import dataclasses
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from maskwise.data.tasks import verse_examples
from maskwise.data.user_tasks import UserTask
from maskwise.errors import UserError
from maskwise.experiments.arms import NO_OPTIONS, WALL, Arm, Setup, StudyOptions
from maskwise.experiments.checkpoints import column_of
from maskwise.experiments.claims import RULES, judge_claim
from maskwise.experiments.compare_plan import (
    ComparePlan,
    Reader,
    TimePlan,
    measure_steps,
)
from maskwise.experiments.compare_report import CLASSIC_COLUMN, CompareMeasures, cannot, meta
from maskwise.experiments.eta import Expected, Ledger, probe, step_name
from maskwise.experiments.framework import Measured, Rule, Study, conduct, write
from maskwise.experiments.held_out import language_modelling
from maskwise.experiments.runner import Experiment
from maskwise.objectives.span import decoder_start_id
from maskwise.recipes import CompareSettings, pretrain_settings
from maskwise.runtime import Runtime
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.reading import config_of
from maskwise.tasks.registry import READ_THEN_WRITE, TASKS, keep_fine_tune
from maskwise.tasks.run import run_task
from maskwise.tasks.seq2seq import VERSE, Seq2SeqConfig, room_for_whole, source_ids
from maskwise.tasks.unit import Speeds

Measure = Callable[[Setup, str, int], dict]  # (setup, run name, seed) -> one measure of the run, as JSON
FINE_TUNED = "fine-tuned"  # the experiment's folder of fine-tunes, one run folder each: <task>=<run>
# The plays' verse sources timed to the first token: up to 16 lines, cut to a block of characters.
TTFT_LINES = (2, 16)


# ---- what every column is measured on --------------------------------------------------------------------------


def ttft_buckets(plan: ComparePlan, s: CompareSettings) -> tuple[list[tuple[str, list[str]]], int]:
    """([(bucket name, its sources)], the answer's room in tokens): the sources to time the first token on, shortest
    bucket first: the plays' longest test verse as prose (one bucket: runs of a verse speech's lines up to a block of
    characters, twice what the encoder-decoder's half of it holds at the default scale, read whole: the longer the
    source, the more of the time is its reading and the less dispatch and load noise), or the test sources of the
    user's first read-then-write (seq2seq) task in its source-length buckets (the seed predicts the encoder-decoder's
    lead grows with the source); none without such a task."""
    if plan.plays_tasks:
        verse = verse_examples("test", n_lines=TTFT_LINES, max_chars=s.block_size, seed=0)
        plays = s.config_of(VERSE)
        assert isinstance(plays, Seq2SeqConfig)
        return [("the longest test verse", [e.source for e in verse])], plays.max_target_len
    task = next((t for t in plan.tasks if TASKS[t.spec.kind].claim == READ_THEN_WRITE), None)
    cfg = plan.configs[task.spec.name] if task is not None else None
    if task is None or not isinstance(cfg, Seq2SeqConfig):  # a writing task of another kind: its own sources
        return [], 0
    sources = [e.source[: cfg.max_chars] for e in task.test]  # as every family reads them (``_seq2seq_data``)
    edges = cfg.source_edges or (0,)
    buckets = []
    for low, high in zip(edges, [*edges[1:], None]):
        name = f"sources of {low}+ characters" if high is None else f"sources of {low}-{high - 1} characters"
        buckets.append((name, [x for x in sources if len(x) >= low and (high is None or len(x) < high)]))
    return [(name, inside) for name, inside in buckets if inside], cfg.max_target_len


@torch.no_grad()
def time_to_first_token(exp: Experiment, runs: dict[str, str], s: CompareSettings, plan: ComparePlan) -> dict:
    """Seconds from a batch of sources to the first token of their answers, per source-length bucket
    (``ttft_buckets``: the longest ``s.ttft_batch`` sources of each, read whole where a body's positions allow it,
    cut to one length for every family, a decoder's prompt keeping room for its answer), for every column that writes
    (``runs``: column -> run name), timed in turns so that a change in the machine's load falls on all of them. A
    batch, because at batch 1 a model this small spends the time on dispatch, not on reading the source
    (docs/results.md). Each reads through its own tokenizer (a given model's may not be the scale's)."""

    buckets, room = ttft_buckets(plan, s)
    if not buckets:
        return {}
    loaded = {column: exp.load(run) for column, run in runs.items() if cannot(exp.kind(run), "ttft") is None}
    for run in loaded.values():
        run.model.eval()
        # whole where positions allow: a user's sources as far as its fine-tunes read them, the plays' verse past them
        room_for_whole(run.model, run.tokenizer, [x for _, inside in buckets for x in inside], room)
    one = GenerationConfig(max_new_tokens=1)
    timed = []
    for name, sources in buckets:
        chosen = sorted(sources, key=len, reverse=True)[: s.ttft_batch]
        batches = {f: [source_ids(r.model, r.tokenizer, source, room) for source in chosen] for f, r in loaded.items()}
        length = min(len(p) for batch in batches.values() for p in batch)
        # the same source length for all, a causal prompt keeping its closing [SEP]
        batches = {
            f: [p[: length - 1] + p[-1:] if config_of(loaded[f].model).kind.causal else p[:length] for p in batch]
            for f, batch in batches.items()
        }
        seconds: dict[str, list[float]] = {f: [] for f in loaded}
        for repeat in range(s.ttft_repeats + 2):  # two warm-up turns, not kept
            for family, run in loaded.items():
                tok, started = run.tokenizer, time.perf_counter()
                generate(run.model, batches[family], one, tok.eos_id, tok.pad_id, decoder_start_id(tok))
                if repeat >= 2:
                    seconds[family].append(time.perf_counter() - started)
        timed.append({"name": name, "source_tokens": length, "batch": len(chosen), "seconds": seconds})
    return {"buckets": timed}


def held_out(setup: Setup, name: str, seed: int) -> dict:
    """Run ``name``'s measures on the held-out text of the plan's corpus (``held_out.language_modelling``)."""
    return language_modelling(setup.exp, name, setup.recipe, seed, setup.plan.data)


def fine_tune(key: str, kind: str, task: UserTask | None, setup: Setup, name: str, seed: int) -> dict:
    """Fine-tune run ``name`` on task ``key`` (a user's ``task`` at its configured settings, else the plays' at
    the scale's; the seed draws the batches and the plays' rows), evaluate it, and keep it as a run folder
    under ``FINE_TUNED`` so that the winner can be evaluated again or exported (``maskwise export``)."""
    cfg, data = setup.plan.fine_tune(key, kind, task, setup.recipe, seed, setup.progress)
    cfg = setup.plan.for_model(column_of(name), key, cfg)
    run = setup.exp.load(name)
    result = run_task(cfg, run.model, run.tokenizer, setup.exp.runtime, data=data, label=name)
    folder = setup.exp.out / FINE_TUNED / step_name(key, name)
    keep_fine_tune(folder, kind, result.model, result.record, cfg, run.tokenizer, str(setup.exp.run_dir(name)))
    return {
        **result.record.to_json(),
        "folder": f"{FINE_TUNED}/{folder.name}",
        "fine_tuning": {"steps": cfg.steps, "batch_size": cfg.batch_size, "lr": cfg.lr, "head_lr": cfg.head_lr},
    }


def task_measures(plan: ComparePlan, s: CompareSettings) -> dict[str, tuple[str, Measure]]:
    """What one run is measured on, measure name -> (what ``cannot`` is asked, how): the held-out text, and each
    task with a row in the report (the user's, else the plays')."""
    return {
        "lm": ("lm", held_out),
        **{key: (kind, partial(fine_tune, key, kind, task)) for key, (kind, _, task) in plan.fine_tunes(s).items()},
    }


# ---- the study ----------------------------------------------------------------------------------------------


class CompareStudy(Study[CompareMeasures]):
    """A compare: every column (a family pretrained here, or a model given) measured on the plan's rows, the writers
    of each seed timed to their first token together, judged by the rule of thumb's claims, reported as one table."""

    rules = RULES
    step = "measures"
    axes = (WALL,)
    extra_rows = False
    per_seed_step = "ttft"
    kept_as: str  # the step its folder's recipe is kept as: a folder holds one compare
    columns_are: str  # what its columns are, as a refusal names them

    @abstractmethod
    def measures(self, setup: Setup, name: str, seed: int) -> dict[str, Measure]:
        """What run ``name`` is measured on for ``seed``, measure name -> how."""

    @abstractmethod
    def experiment(self, out: str | Path, overwrite: bool, runtime: Runtime | None, plan: ComparePlan) -> Experiment:
        """The experiment folder its runs are read from."""

    @abstractmethod
    def readers(
        self, plan: ComparePlan, s: CompareSettings, arms: Sequence[Arm], body: Speeds, runtime: Runtime
    ) -> dict[str, Reader]:
        """Each column as the time plan sees it (``body``: the scale's body's probed speeds)."""

    @abstractmethod
    def own_steps(self, plan: ComparePlan, readers: dict[str, Reader], seeds: int) -> list[Expected]:
        """The steps it takes beyond the measures every compare takes (``compare_plan.measure_steps``)."""

    @abstractmethod
    def pretraining(
        self, plan: ComparePlan, s: CompareSettings, runs: int, rest: float, fit: bool
    ) -> tuple[CompareSettings, float | None, list[Expected]]:
        """(the settings, the scale's seconds where ``fit`` shortened them, the pretraining steps) of ``runs``
        columns-and-seeds whose other steps take ``rest`` seconds."""

    @abstractmethod
    def recorded(self, options: StudyOptions) -> dict:
        """What the folder's recipe and the report's settings say of the columns."""

    def points_of(self, s: CompareSettings) -> int:
        """The points of compute every column is measured at: one (the models given); compare's ladder."""
        return 1

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """Each of ``measures``, its own cached step."""
        return {
            what: setup.exp.step(step_name(what, name), partial(fn, setup, name, seed))
            for what, fn in self.measures(setup, name, seed).items()
        }

    def measure_seed(self, setup: Setup, names: dict[str, str], seed: int) -> dict:
        """The time to the first token of every column that writes (``time_to_first_token``)."""
        return time_to_first_token(setup.exp, names, setup.recipe, setup.plan)

    def header(self, groups: Sequence[str]) -> list[str]:
        return ["task", *groups, CLASSIC_COLUMN, "best"]

    def judge(self, rule: Rule, measures: CompareMeasures, m: Measured) -> tuple[str, list[str]]:
        """The rule's claim on every row's per-item scores, not the means: the claims pair the columns over test
        items."""
        return judge_claim(rule.claim, measures.evidence)

    def meta(self, m: Measured, measures: CompareMeasures) -> dict:
        return meta(measures.evidence)

    def samples(self, m: Measured) -> dict[str, str]:
        """The first seed's held-out sample of every column that has a next-token head."""
        first = m.setup.seeds[0]
        return {
            f"{a.label} sample (seed {first})": m.measured[WALL][a.key][0]["lm"]["sample"]
            for a in m.arms
            if "lm" in m.measured[WALL][a.key][0]
        }


def time_plan(
    study: CompareStudy,
    plan: ComparePlan,
    s: CompareSettings,
    seeds: int,
    runtime: Runtime,
    fit: bool = True,
    body: Speeds | None = None,
    options: StudyOptions = NO_OPTIONS,
) -> TimePlan:
    """What ``study`` with ``options`` will spend at this machine's probed speeds (``body``: probed already); with the
    user's tasks and ``fit``, the pretraining clock shortened where the estimate would pass ``s.minutes``
    (``CompareStudy.pretraining``)."""
    arms = study.arms(options)
    body = body or probe(pretrain_settings(s, {"family": "decoder"}, 0), runtime)
    readers = study.readers(plan, s, arms, body, runtime)
    steps = [*measure_steps(plan, s, seeds, readers), *study.own_steps(plan, readers, seeds)]
    settings, fitted_from, pretraining = study.pretraining(
        plan, s, len(arms) * seeds, sum(e.count * e.seconds for e in steps), fit
    )
    # every point measured as the last (the first token: the final point's alone), fitted without them
    points = study.points_of(settings)
    laddered = [e if e.prefix == "ttft" else replace(e, count=e.count * points) for e in steps]
    ladder_s = sum(e.count * e.seconds for e in [*pretraining, *laddered] if e.prefix == "cooldown") + sum(
        (points - 1) * e.count * e.seconds for e in steps if e.prefix != "ttft"
    )
    return TimePlan(settings, (*pretraining, *laddered), body, fitted_from, ladder_s)


def fitted(
    study: CompareStudy,
    plan: ComparePlan,
    s: CompareSettings,
    seeds: int,
    runtime: Runtime,
    fit: bool = True,
    options: StudyOptions = NO_OPTIONS,
) -> tuple[ComparePlan, TimePlan]:
    """The plan and its time plan; where the estimate passes ``s.minutes`` (pretraining at its floor already, where
    ``fit``), each task that can read less of its rows (``Task.shorter``: a seq2seq window, halved) is narrowed until
    it fits or none can, and the plan says why, with the time plan's numbers."""
    timing = time_plan(study, plan, s, seeds, runtime, fit, options=options)
    first, budget = timing, 60 * s.minutes
    while timing.total - timing.ladder_s > budget:
        narrower = {
            t.spec.name: cfg
            for t in plan.tasks
            if (cfg := TASKS[t.spec.kind].shorter(plan.configs[t.spec.name], t, plan.context)) is not None
        }
        if not narrower:
            break
        for name, cfg in narrower.items():
            plan = plan.reconfigured(name, cfg)
        timing = time_plan(study, plan, s, seeds, runtime, fit, timing.speeds, options)
    if timing is not first:
        plan = replace(
            plan,
            narrowed=(
                f"Read less to fit the {s.minutes:g}-minute budget: the time plan estimated about "
                f"{(first.total - first.ladder_s) / 60:.0f} min at this machine's probed speed with every task read as "
                f"configured, and {(timing.total - timing.ladder_s) / 60:.0f} min as read here (each task's reading "
                "below), before the ladder's points."
            ),
        )
    return plan, timing


def run_compare(
    study: CompareStudy,
    out: str | Path,
    plan: ComparePlan,
    timing: TimePlan,
    seeds: int = 1,
    first_seed: int = 0,
    overwrite: bool = False,
    progress: bool = True,
    runtime: Runtime | None = None,
    options: StudyOptions = NO_OPTIONS,
) -> Path:
    """Measure ``study``'s columns (``options``) on ``plan`` (``compare_plan.plan_of``, every file read and checked
    before this replaces a folder) at ``timing``'s settings (its ``time_plan``), judge them, and write the report
    into ``out``."""
    s = timing.settings
    exp = study.experiment(out, overwrite, runtime, plan)
    kept = exp.cached(study.kept_as)
    if timing.fitted_from is not None and kept is not None:  # a resumed compare keeps the clock it was planned with
        s = replace(s, seconds=kept["settings"]["seconds"])
    exp.ledger = Ledger(list(timing.expected), progress, "compare")
    described, columns = plan.described, study.recorded(options)
    other, _ = exp.keep_recipe(
        study.kept_as, {"settings": dataclasses.asdict(s), "data": plan.data, **columns, "tasks": described["tasks"]}
    )
    if other is not None:
        labels = ", ".join(arm.label for arm in study.arms(options))
        raise UserError(
            f"{exp.out} holds a compare at scale {other['settings']['name']} with other settings, "
            f"{study.columns_are} or tasks than now ({s.name}: {labels}); use --overwrite or another --out"
        )
    seed_list = tuple(range(first_seed, first_seed + seeds))
    try:
        results = conduct(study, Setup(exp, s, seed_list, progress, plan, options))
    finally:
        exp.ledger.close()
    return write(
        exp,
        {**results, "data": described},
        "compare",
        {
            **dataclasses.asdict(s),
            "seeds": list(seed_list),
            "data": plan.data,
            **columns,
            "task_flags": [t.spec.flag() for t in plan.tasks],
        },
    )
