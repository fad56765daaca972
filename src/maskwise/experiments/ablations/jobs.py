"""What the ablations measure a body on, each job with its trivial baseline: punctuation tagging and
retrieval (fine-tuned, read as the family reads) and held-out next-token loss (read left to right). The
pretraining ablations (``JOBS``) read tagging and the loss; retrieval is the embedder's and pooling's. A
fine-tuned job also has a control, the same block never pretrained and fine-tuned the same way:
fine-tuning alone learns some of a task, and only what an arm scores above the control is pretraining's.
An arm takes the jobs of the objective it ends with (``JOBS``); ``tabulate`` gives each job a metric
holding the arms that took it and the baseline (and control) beside them, so that a rule can ask both
"is a ahead of b" and "does a clear its baselines" of the metrics alone."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from maskwise.data.corpus import SHAKESPEARE
from maskwise.experiments.arms import Arm, Setup
from maskwise.experiments.framework import (
    RECALL,
    TAG_F1,
    Measured,
    Study,
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
from maskwise.experiments.verdict import compare, mean_and_spread
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


@dataclass(frozen=True)
class Job:
    """One thing a pretrained run is measured on: the record it takes (cached as JSON, read back as ``record``), the
    score the rules read, the trivial baseline in the same record, and the table's further rows from it."""

    name: str  # the measure in metrics and tables
    step: str  # its record's key in a run's measures, and the prefix of its cached step
    higher: bool
    record: type[Fields]  # what the JSON is read back as
    score: Callable[[Any], float]  # of the record
    baseline: Callable[[Any], tuple[str, float]]  # the record -> the trivial baseline's name and score
    more: tuple[tuple[str, Callable[[Any], float]], ...] = ()  # (row name, its value in the record)
    # How a job that fine-tunes nothing takes its record, (setup, run name, seed) -> JSON; None: it fine-tunes task
    # ``step`` (``framework.fine_tuned``), and an untrained body fine-tuned the same way is its control.
    own: Callable[[Setup, str, int], dict] | None = None

    @property
    def fine_tuned(self) -> bool:
        """Whether it fine-tunes task ``step``, so that it has a control (``control``)."""
        return self.own is None

    def take(self, setup: Setup, name: str, seed: int) -> dict:
        """Run ``name``'s record of this job for ``seed``, as JSON: task ``step`` fine-tuned on it, or its own."""
        return fine_tuned(setup, self.step, name, seed) if self.own is None else self.own(setup, name, seed)

    def read(self, field: Callable[[Any], float], stored: dict) -> float:
        """``field`` of a stored record of this job."""
        return field(self.record.from_json(stored))

    def score_of(self, stored: dict) -> float:
        return self.read(self.score, stored)

    def baseline_of(self, stored: dict) -> tuple[str, float]:
        return self.baseline(self.record.from_json(stored))

    def readers(self) -> list[tuple[str, Callable[[dict], float]]]:
        """(row name, its value in a stored record): the score's row, then ``more``'s."""
        return [(self.name, self.score_of), *((row, partial(self.read, field)) for row, field in self.more)]

    def bars(self, records: Sequence[dict]) -> dict[str, list[float]]:
        """What every arm must clear, per seed, from one arm's stored ``records``: the trivial baseline and the
        control."""
        return {
            BASELINE: [self.baseline_of(r)[1] for r in records],
            **({UNTRAINED: [self.score_of(r[UNTRAINED]) for r in records]} if self.fine_tuned else {}),
        }

    def rows(self, m: Measured, axis: str) -> tuple[dict[str, list[float]], list[list[str]]]:
        """Where every arm's measures are this job's record (``with_control``; mask-ratio, electra): its metric
        at ``axis`` (the arms' scores, the first arm's trivial baseline and the control), and its rows."""
        (_, score), *more = self.readers()
        scores = m.per_arm(axis, score)
        rows = [
            table_row(self.name, axis, scores, self.higher),
            *(table_row(row, axis, m.per_arm(axis, read), self.higher) for row, read in more),
        ]
        return {**scores, **self.bars(m.measured[axis][m.arms[0].key])}, rows


@dataclass(frozen=True)
class NextTokenLoss(Fields):
    """A run's nats per character of held-out text read left to right, and the unigram's on the same text."""

    nats_per_char: float
    unigram_nats_per_char: float


def next_token_loss(setup: Setup, name: str, seed: int) -> dict:
    """Run ``name``'s nats per character of held-out text read left to right (a hybrid's too), and the
    unigram's on the same text (the train plays' token counts, add-one)."""
    run = setup.exp.load(name)
    data = setup.corpus.get("data", SHAKESPEARE)
    text = held_out_text(setup.scale.held_out_chars, data)
    [unigram] = unigram_nats_per_char(run.tokenizer, train_token_counts(run.tokenizer, data), text, 1)
    return NextTokenLoss(decoder_nats_per_char(run.model, run.tokenizer, text), unigram).to_json()


def stronger_tag_baseline(record: TagRecord) -> tuple[str, float]:
    """The stronger of a tagging record's two trivial baselines, named, and its F1."""
    stronger = record.stronger_baseline()
    return stronger.name, stronger.micro.f1


TAGGING = Job(
    TAG_F1,
    "tag",
    True,
    TagRecord,
    lambda r: r.micro.f1,
    stronger_tag_baseline,
    (("tag detection F1 (some tag or none)", lambda r: r.detection.f1),),
)
RETRIEVAL = Job(
    RECALL,
    "embed",
    True,
    RetrievalRecord,
    lambda r: r.recall_at_10,
    lambda r: ("random ranking", r.baseline.expected.recall_at_10),
    (("MRR", lambda r: r.mrr),),
)
NEXT_TOKEN_LOSS = Job(
    NEXT_TOKEN,
    "next_token",
    False,
    NextTokenLoss,
    lambda r: r.nats_per_char,
    lambda r: ("unigram", r.unigram_nats_per_char),
    own=next_token_loss,
)

# By the objective an arm ends with: an MLM encoder is for reading a text with both sides, a CLM decoder
# for predicting the next token, and GPT-BERT's hybrid claims both. Not retrieval: at 1.4 M tokens no
# pretrained body cleared its untrained control there over 3 seeds, so it decided no rule while its
# fine-tunes took a third of cross-objective's minutes (docs/results.md).
JOBS = {"mlm": (TAGGING,), "clm": (NEXT_TOKEN_LOSS,), "hybrid": (TAGGING, NEXT_TOKEN_LOSS)}


def jobs_of(arm: Arm) -> tuple[Job, ...]:
    return JOBS[arm.settings["objective"]]


def taken(arms: Sequence[Arm]) -> list[Job]:
    """Every job one of ``arms`` takes, each once, in the arms' order."""
    return list(dict.fromkeys(job for arm in arms for job in jobs_of(arm)))


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
    return {**record, UNTRAINED: control(setup, job, seed)} if job.fine_tuned else record


def baselines(m: Measured, metrics: dict, axis: str) -> str:
    """Each job's trivial baseline (and control) at ``axis``, named, for a summary: "random ranking 0.014
    (untrained body 0.031), unigram 3.037"."""
    named = {
        job: job.baseline_of(m.first(next(a for a in m.arms if job in jobs_of(a)))[job.step])[0]
        for job in taken(m.arms)
    }

    def mean(job: Job, group: str) -> str:
        return f"{mean_and_spread(metrics[key(job.name, axis)][group])[0]:.3f}"

    return ", ".join(
        f"{name} {mean(job, BASELINE)}" + (f" ({UNTRAINED} {mean(job, UNTRAINED)})" if job.fine_tuned else "")
        for job, name in named.items()
    )


def ahead_on(metrics: dict, axis: str, a: str, b: str, jobs: Sequence[Job]) -> list[tuple[str, bool | None]]:
    """The claims "``a`` is ahead of ``b``" on each of ``jobs`` at ``axis``, for ``framework.claims_verdict``;
    on a job that ``a`` or ``b`` does not clear (``clears``) the claim is neither supported nor contradicted."""
    claims: list[tuple[str, bool | None]] = []
    for job in jobs:
        groups = metrics[key(job.name, axis)]
        c = compare(groups[a], groups[b], job.higher)
        short = short_of(metrics, axis, (a, b), job)
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


def short_of(metrics: dict, axis: str, labels: Sequence[str], job: Job) -> list[str]:
    """Those of ``labels`` that do not clear ``job`` at ``axis`` (``clears``): their comparisons are no evidence."""
    return [label for label in labels if not clears(metrics, axis, label, job)]


def clears(metrics: dict, axis: str, label: str, job: Job) -> bool:
    """Whether arm ``label`` is ahead, paired by seed, of the trivial baseline on ``job`` at ``axis`` and,
    on a fine-tuned job, of the untrained body fine-tuned the same way: what pretraining must have added."""
    groups = metrics[key(job.name, axis)]
    return all(
        compare(groups[label], groups[bar], job.higher).winner == "a" for bar in (BASELINE, UNTRAINED) if bar in groups
    )


class JobsStudy(Study):
    """An ablation whose arms each take the jobs of the objective they end with (``JOBS``), each job's metric
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

    def tabulate(self, m: Measured) -> tuple[dict, list]:
        """Per axis and job: the metric (the arms that took it, and ``BASELINE`` per seed from the first of
        them: every arm of a seed has the same test items; a fine-tuned job's ``UNTRAINED`` control, the same
        for every arm) and its rows, a dash where an arm did not take it; the last column compares each of ``pairs``
        that both took it."""
        pairs = self.pairs(m.arms)
        metrics: dict[str, dict[str, list[float]]] = {}
        rows: list[list[str]] = []
        for axis in m.runs:
            for job in taken(m.arms):
                records = {
                    arm.label: [r[job.step] for r in m.measured[axis][arm.key]] for arm in m.arms if job in jobs_of(arm)
                }
                first = next(iter(records.values()))
                for row, read in job.readers():
                    groups = {label: [read(r) for r in records[label]] for label in records}
                    compared = [
                        f"{a.label} vs {b.label}: "
                        + winner_text(compare(groups[a.label], groups[b.label], job.higher), a.label, b.label)
                        for a, b in pairs
                        if a.label in groups and b.label in groups
                    ]
                    if row == job.name:
                        bars = job.bars(first)
                        metrics[key(job.name, axis)] = {**groups, **bars}
                        compared.extend(
                            f"{job.baseline_of(first[0])[0] if bar == BASELINE else bar} {fmt_stat(scores)}"
                            for bar, scores in bars.items()
                        )
                    rows.append(
                        [
                            row,
                            axis,
                            *(fmt_stat(groups[a.label]) if a.label in groups else "—" for a in m.arms),
                            "; ".join(compared),
                        ]
                    )
        return metrics, rows

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """Each job's direction for its plot; its baseline is a group of the metric, plotted beside the arms."""
        return {job.name: (job.higher, None) for job in taken(m.arms)}
