"""What the ablations measure a body on, each job with its trivial baseline: punctuation tagging and
retrieval (fine-tuned, read as the family reads) and held-out next-token loss (read left to right). The
pretraining ablations (``JOBS``) read tagging and the loss; retrieval is the embedder's and pooling's. A
fine-tuned job also has a control, the same block never pretrained and fine-tuned the same way:
fine-tuning alone learns some of a task, and only what an arm scores above the control is pretraining's.
An arm takes the jobs of the objective it ends with (``JOBS``); ``tabulate`` gives each job and axis its
``JobScores``, the arms that took it with the baseline (and control) beside them, so that a rule can ask both
"is a ahead of b" and "does a clear its baselines" of the measures alone.

A job is a class (``RecordJob[R]``: how its record is decoded, and which of its fields are the score, the baseline
and the further rows); a study holds jobs of several record types as ``Job``, which reads their stored JSON."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from statistics import fmean
from typing import ClassVar, Generic, TypeVar

from maskwise.data.corpus import SHAKESPEARE
from maskwise.experiments.arms import Arm, Setup
from maskwise.experiments.framework import (
    RECALL,
    TAG_F1,
    Measured,
    Measures,
    Study,
    Table,
    ahead,
    fine_tuned,
    fine_tuned_body,
    key,
    table_row,
    winner_text,
)
from maskwise.experiments.held_out import (
    held_out_text,
    train_token_counts,
    unigram_nats_per_char,
)
from maskwise.experiments.report import fmt_stat
from maskwise.experiments.verdict import Comparison, compare, mean_and_spread
from maskwise.recipes import pretrain_settings
from maskwise.tasks.fill_mask import decoder_nats_per_char
from maskwise.tasks.record import Fields
from maskwise.tasks.retrieve import RetrievalRecord
from maskwise.tasks.tag import TagRecord
from maskwise.train.pretrain import PretrainConfig, untrained

# The two specialists several ablations pit something against, each in its family's own objective.
MLM_ENCODER = Arm("mlm", "encoder (MLM)", {"family": "encoder", "objective": "mlm"})
CLM_DECODER = Arm("clm", "decoder (CLM)", {"family": "decoder", "objective": "clm"})


BASELINE = "trivial baseline"  # a job metric's group beside the arms': per seed, what every arm must clear
UNTRAINED = "untrained body"  # a fine-tuned job's control group: per seed, what fine-tuning alone reached
NEXT_TOKEN = "held-out next-token loss (nats/char)"

R = TypeVar("R", bound=Fields)


@dataclass(frozen=True)
class JobScores:
    """One job's measure on one axis, per seed: each column's score, and the bars every column must clear (the
    trivial baseline, and a fine-tuned job's control). Its JSON is the metric: the columns, then ``BASELINE`` and
    ``UNTRAINED`` as groups beside them."""

    arms: dict[str, list[float]]  # column label (an arm, or one encoder's pooling) -> per seed
    baseline: list[float]  # per seed, from the first column's records: every column of a seed has the same test items
    # The untrained body fine-tuned the same way, per seed; None: the job fine-tunes nothing.
    control: list[float] | None
    higher: bool

    def bars(self) -> list[tuple[str, list[float]]]:
        """(group, per seed) of what every column must clear: the trivial baseline, then the control if it has one."""
        return [(BASELINE, self.baseline), *([(UNTRAINED, self.control)] if self.control is not None else [])]

    def to_json(self) -> dict[str, list[float]]:
        return {**self.arms, **dict(self.bars())}

    def untrained(self) -> list[float]:
        """The control's scores: a fine-tuned job's (one that fine-tunes nothing has none to read)."""
        if self.control is None:
            raise ValueError("a job that fine-tunes nothing has no untrained control")
        return self.control

    def mean_of(self, label: str) -> float:
        return fmean(self.arms[label])

    def compare(self, a: str, b: str) -> Comparison:
        """Column ``a`` against column ``b``, paired by seed, in the job's direction."""
        return compare(self.arms[a], self.arms[b], self.higher)

    def clears(self, label: str) -> bool:
        """Whether column ``label`` is ahead, paired by seed, of the trivial baseline and, on a fine-tuned job, of the
        untrained body fine-tuned the same way: what pretraining must have added."""
        return all(compare(self.arms[label], bar, self.higher).winner == "a" for _, bar in self.bars())

    def short_of(self, labels: Sequence[str]) -> list[str]:
        """Those of ``labels`` that do not clear the bars (``clears``): their comparisons are no evidence."""
        return [label for label in labels if not self.clears(label)]


class Job(ABC):
    """One thing a pretrained run is measured on, as a study reads it: its record (cached as JSON), the score the rules
    read, the trivial baseline in the same record, and the table's further rows from it. ``RecordJob`` reads these from
    the job's own record type; a study holds jobs of several types as this."""

    name: ClassVar[str]  # the measure in metrics and tables
    step: ClassVar[str]  # its record's key in a run's measures, and the prefix of its cached step
    higher: ClassVar[bool]
    # Whether it fine-tunes task ``step`` (``framework.fine_tuned``), so that an untrained body fine-tuned the same way
    # is its control; a job that does not overrides ``take``.
    fine_tunes: ClassVar[bool] = True

    def take(self, setup: Setup, name: str, seed: int) -> dict:
        """Run ``name``'s record of this job for ``seed``, as JSON: task ``step`` fine-tuned on it."""
        return fine_tuned(setup, self.step, name, seed)

    @abstractmethod
    def score_of(self, stored: dict) -> float:
        """The score the rules read, of a stored record."""

    @abstractmethod
    def baseline_of(self, stored: dict) -> tuple[str, float]:
        """The trivial baseline's name and score in a stored record."""

    @abstractmethod
    def readings_of(self, stored: dict) -> list[tuple[str, float]]:
        """(row name, its value) of a stored record: the score's row, then the further rows."""

    def rows_of(self, stored: Mapping[str, Sequence[dict]]) -> dict[str, dict[str, list[float]]]:
        """Each table row's values (``readings_of``) of the stored records by column: row -> column -> per seed."""
        rows: dict[str, dict[str, list[float]]] = {}
        for label, records in stored.items():
            for record in records:
                for row, value in self.readings_of(record):
                    rows.setdefault(row, {}).setdefault(label, []).append(value)
        return rows

    def scores(self, stored: Mapping[str, Sequence[dict]], bars_from: Sequence[dict]) -> JobScores:
        """The measure of the stored records by column, with the trivial baseline and (a fine-tuned job's) control
        from ``bars_from``: one column's records, a control's beside each (``with_control``)."""
        return JobScores(
            {label: [self.score_of(r) for r in records] for label, records in stored.items()},
            [self.baseline_of(r)[1] for r in bars_from],
            [self.score_of(r[UNTRAINED]) for r in bars_from] if self.fine_tunes else None,
            self.higher,
        )

    def tabulated(self, m: Measured, axis: str) -> tuple[JobScores, list[list[str]]]:
        """Where every arm's measures are this job's record (``with_control``; mask-ratio, electra): its measure at
        ``axis`` (the arms' scores, the first arm's trivial baseline and the control), and its rows."""
        stored = {arm.label: m.measured[axis][arm.key] for arm in m.arms}
        rows = [table_row(row, axis, groups, self.higher) for row, groups in self.rows_of(stored).items()]
        return self.scores(stored, m.measured[axis][m.arms[0].key]), rows


class RecordJob(Job, Generic[R]):
    """A job read from its record type ``R``: each job's class says how its JSON is decoded and which fields count."""

    @abstractmethod
    def decode(self, stored: dict) -> R:
        """The record its JSON holds (keys beside it, a control's record, are left out)."""

    @abstractmethod
    def score(self, record: R) -> float:
        """The score the rules read."""

    @abstractmethod
    def baseline(self, record: R) -> tuple[str, float]:
        """The trivial baseline's name and score."""

    def more(self, record: R) -> list[tuple[str, float]]:
        """The table's further rows: (row name, value)."""
        return []

    def decoded(self, stored: Mapping[str, Sequence[dict]]) -> dict[str, list[R]]:
        """The stored records by column, decoded."""
        return {label: [self.decode(r) for r in records] for label, records in stored.items()}

    def score_of(self, stored: dict) -> float:
        return self.score(self.decode(stored))

    def baseline_of(self, stored: dict) -> tuple[str, float]:
        return self.baseline(self.decode(stored))

    def readings_of(self, stored: dict) -> list[tuple[str, float]]:
        record = self.decode(stored)
        return [(self.name, self.score(record)), *self.more(record)]


class Tagging(RecordJob[TagRecord]):
    """Punctuation restoration as tagging (or the user's tag task): micro F1 against the stronger trivial baseline."""

    name = TAG_F1
    step = "tag"
    higher = True

    def decode(self, stored: dict) -> TagRecord:
        return TagRecord.from_json(stored)

    def score(self, record: TagRecord) -> float:
        return record.micro.f1

    def baseline(self, record: TagRecord) -> tuple[str, float]:
        """The stronger of the record's two trivial baselines, named, and its F1."""
        stronger = record.stronger_baseline()
        return stronger.name, stronger.micro.f1

    def more(self, record: TagRecord) -> list[tuple[str, float]]:
        return [("tag detection F1 (some tag or none)", record.detection.f1)]


class Retrieval(RecordJob[RetrievalRecord]):
    """ICT retrieval (or the user's): recall@10 against a random ranking's expected recall."""

    name = RECALL
    step = "embed"
    higher = True

    def decode(self, stored: dict) -> RetrievalRecord:
        return RetrievalRecord.from_json(stored)

    def score(self, record: RetrievalRecord) -> float:
        return record.recall_at_10

    def baseline(self, record: RetrievalRecord) -> tuple[str, float]:
        expected = record.baseline.expected
        assert expected is not None, "one relevant passage a query: a random ranking's recall in expectation"
        return "random ranking", expected.recall_at_10

    def mrr(self, record: RetrievalRecord) -> float:
        """Set for the plays' ICT queries, each with one relevant passage (graded judgements have none)."""
        assert record.mrr is not None, "one relevant passage a query has an MRR"
        return record.mrr

    def more(self, record: RetrievalRecord) -> list[tuple[str, float]]:
        return [("MRR", self.mrr(record))]


@dataclass(frozen=True)
class NextTokenLoss(Fields):
    """A run's nats per character of held-out text read left to right, and the unigram's on the same text."""

    nats_per_char: float
    unigram_nats_per_char: float


class NextToken(RecordJob[NextTokenLoss]):
    """Held-out next-token loss read left to right, against the unigram's; nothing is fine-tuned, so no control."""

    name = NEXT_TOKEN
    step = "next_token"
    higher = False
    fine_tunes = False

    def take(self, setup: Setup, name: str, seed: int) -> dict:
        """Run ``name``'s nats per character of held-out text read left to right (a hybrid's too), and the
        unigram's on the same text (the train plays' token counts, add-one)."""
        run = setup.exp.load(name)
        data = setup.corpus.get("data", SHAKESPEARE)
        text = held_out_text(setup.scale.held_out_chars, data)
        [unigram] = unigram_nats_per_char(run.tokenizer, train_token_counts(run.tokenizer, data), text, 1)
        return NextTokenLoss(decoder_nats_per_char(run.model, run.tokenizer, text), unigram).to_json()

    def decode(self, stored: dict) -> NextTokenLoss:
        return NextTokenLoss.from_json(stored)

    def score(self, record: NextTokenLoss) -> float:
        return record.nats_per_char

    def baseline(self, record: NextTokenLoss) -> tuple[str, float]:
        return "unigram", record.unigram_nats_per_char


TAGGING = Tagging()
RETRIEVAL = Retrieval()
NEXT_TOKEN_LOSS = NextToken()

# By the objective an arm ends with: an MLM encoder is for reading a text with both sides, a CLM decoder
# for predicting the next token, and GPT-BERT's hybrid claims both. Not retrieval: at 1.4 M tokens no
# pretrained body cleared its untrained control there over 3 seeds, so it decided no rule while its
# fine-tunes took a third of cross-objective's minutes (docs/results.md).
JOBS: dict[str, tuple[Job, ...]] = {"mlm": (TAGGING,), "clm": (NEXT_TOKEN_LOSS,), "hybrid": (TAGGING, NEXT_TOKEN_LOSS)}


def jobs_of(arm: Arm) -> tuple[Job, ...]:
    return JOBS[arm.settings["objective"]]


def taken(arms: Sequence[Arm]) -> list[Job]:
    """Every job one of ``arms`` takes, each once, in the arms' order."""
    return list(dict.fromkeys(job for arm in arms for job in jobs_of(arm)))


def val_loss(point: dict) -> float:
    """A pretraining curve point's validation loss (in the run's own objective)."""
    return point["val_loss"]


def control(setup: Setup, job: Job, seed: int) -> dict:
    """Fine-tuned ``job`` on the recipe's block as an MLM encoder's pretraining would start it for ``seed``,
    never trained (the fine-tuned jobs read bidirectionally, a hybrid too); one cached step per seed."""

    def take() -> dict:
        settings = pretrain_settings(setup.scale, {"family": "encoder", "objective": "mlm"}, seed)
        model, tokenizer = untrained(PretrainConfig.from_flat(settings))
        return fine_tuned_body(setup, job.step, model, tokenizer, seed, f"untrained encoder, seed {seed}")

    return setup.exp.step(f"{job.step}-untrained-seed{seed}", take)


def with_control(setup: Setup, job: Job, record: dict, seed: int) -> dict:
    """``record`` of ``job``, with its control's record beside it (``UNTRAINED``) if it fine-tunes."""
    return {**record, UNTRAINED: control(setup, job, seed)} if job.fine_tunes else record


@dataclass(frozen=True)
class JobMeasures(Measures):
    """A jobs study's measures: each job's ``JobScores`` at each axis, in the table's order (axis, then job)."""

    scores: dict[tuple[str, Job], JobScores]  # (axis, job) ->

    def of(self, job: Job, axis: str) -> JobScores:
        return self.scores[(axis, job)]

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {key(job.name, axis): scores.to_json() for (axis, job), scores in self.scores.items()}


def baselines(m: Measured, measures: JobMeasures, axis: str) -> str:
    """Each job's trivial baseline (and control) at ``axis``, named, for a summary: "random ranking 0.014
    (untrained body 0.031), unigram 3.037"."""
    named = {
        job: job.baseline_of(m.first(next(a for a in m.arms if job in jobs_of(a)))[job.step])[0]
        for job in taken(m.arms)
    }

    def mean(values: list[float]) -> str:
        return f"{mean_and_spread(values)[0]:.3f}"

    parts = []
    for job, name in named.items():
        scores = measures.of(job, axis)
        control = f" ({UNTRAINED} {mean(scores.control)})" if scores.control is not None else ""
        parts.append(f"{name} {mean(scores.baseline)}{control}")
    return ", ".join(parts)


def ahead_on(measures: JobMeasures, axis: str, a: str, b: str, jobs: Sequence[Job]) -> list[tuple[str, bool | None]]:
    """The claims "``a`` is ahead of ``b``" on each of ``jobs`` at ``axis``, for ``framework.claims_verdict``;
    on a job that ``a`` or ``b`` does not clear (``JobScores.clears``) the claim is neither supported nor
    contradicted."""
    claims: list[tuple[str, bool | None]] = []
    for job in jobs:
        scores = measures.of(job, axis)
        c = scores.compare(a, b)
        short = scores.short_of((a, b))
        text = f"{a} ahead on {job.name} ({c.describe(a, b)})"
        if short:
            claims.append(
                (
                    (
                        f"{text}, not evidence as {' and '.join(short)} "
                        f"{'does' if len(short) == 1 else 'do'} not clear the baselines"
                    ),
                    None,
                )
            )
        else:
            claims.append((text, ahead(c)))
    return claims


class JobsStudy(Study[JobMeasures]):
    """An ablation whose arms each take the jobs of the objective they end with (``JOBS``), each job's measure
    holding the arms that took it with its baseline and control beside them."""

    @abstractmethod
    def pairs(self, arms: Sequence[Arm]) -> Sequence[Sequence[Arm]]:
        """The (a, b) arms the table's last column compares, where both took a job."""

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """Each of the arm's jobs on run ``name``, each its own cached step: ``{job.step: record}``, a fine-tuned
        job's record with its control's beside it."""
        return {
            job.step: with_control(
                setup, job, setup.exp.step(f"{job.step}-{name}", partial(job.take, setup, name, seed)), seed
            )
            for job in jobs_of(arm)
        }

    def header(self, labels: Sequence[str]) -> list[str]:
        return ["measure", "axis", *labels, "compared (paired by seed); trivial baseline"]

    def tabulate(self, m: Measured) -> Table[JobMeasures]:
        """Per axis and job: the measure (the arms that took it, and ``BASELINE`` per seed from the first of
        them: every arm of a seed has the same test items; a fine-tuned job's ``UNTRAINED`` control, the same
        for every arm) and its rows, a dash where an arm did not take it; the last column compares each of ``pairs``
        that both took it."""
        pairs = self.pairs(m.arms)
        scores: dict[tuple[str, Job], JobScores] = {}
        rows: list[list[str]] = []
        for axis in m.runs:
            for job in taken(m.arms):
                records = {
                    arm.label: [r[job.step] for r in m.measured[axis][arm.key]] for arm in m.arms if job in jobs_of(arm)
                }
                first = next(iter(records.values()))
                for row, groups in job.rows_of(records).items():
                    compared = [
                        f"{a.label} vs {b.label}: "
                        + winner_text(compare(groups[a.label], groups[b.label], job.higher), a.label, b.label)
                        for a, b in pairs
                        if a.label in groups and b.label in groups
                    ]
                    if row == job.name:
                        scores[(axis, job)] = measured = job.scores(records, first)
                        named = {BASELINE: job.baseline_of(first[0])[0]}
                        compared.extend(f"{named.get(bar, bar)} {fmt_stat(values)}" for bar, values in measured.bars())
                    rows.append(
                        [
                            row,
                            axis,
                            *(fmt_stat(groups[a.label]) if a.label in groups else "—" for a in m.arms),
                            "; ".join(compared),
                        ]
                    )
        return Table(JobMeasures(scores), rows)

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Each job's direction for its plot; its baseline is a group of the metric, plotted beside the arms."""
        return {job.name: (job.higher, None) for job in taken(m.arms)}
