"""What the pretraining ablations measure a body on, each job with its trivial baseline: punctuation
tagging and retrieval (fine-tuned, read as the family reads) and held-out next-token loss (read left
to right). An arm takes the jobs of the objective it ends with (``JOBS``); ``tabulate`` gives each job
a metric holding the arms that took it and the baseline beside them, so that a rule can ask both
"is a ahead of b" and "does a clear its baseline" of the metrics alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from maskwise.experiments.compare import (
    held_out_text,
    train_token_counts,
    unigram_nats_per_char,
)
from maskwise.experiments.framework import (
    RECALL,
    TAG_F1,
    Arm,
    Measured,
    Setup,
    ahead,
    fine_tuned,
    key,
    table_row,
    winner_text,
)
from maskwise.experiments.report import fmt_stat
from maskwise.experiments.verdict import compare, mean_and_spread
from maskwise.tasks.fill_mask import decoder_nats_per_char

BASELINE = "trivial baseline"  # a job metric's group beside the arms': per seed, what every arm must clear
NEXT_TOKEN = "held-out next-token loss (nats/char)"


@dataclass(frozen=True)
class Job:
    """One thing a pretrained run is measured on: the record it takes, the score the rules read, the
    trivial baseline in the same record, and the table's further rows from it."""

    name: str  # the measure in metrics and tables
    step: str  # its record's key in a run's measures, and the prefix of its cached step
    higher: bool
    take: Callable[[Setup, str, int], dict]  # (setup, run name, seed) -> the record
    score: Callable[[dict], float]
    baseline: Callable[[dict], tuple[str, float]]  # the record -> the trivial baseline's name and score
    more: tuple[tuple[str, Callable[[dict], float]], ...] = ()  # (row name, its value in the record)

    def rows(self, m: Measured, axis: str) -> tuple[dict[str, list[float]], list[list[str]]]:
        """Where every arm's measures are this job's record (mask-ratio, electra): its scores at ``axis``
        by arm, and its rows."""
        scores = m.per_arm(axis, self.score)
        return scores, [table_row(self.name, axis, scores, self.higher),
                        *(table_row(row, axis, m.per_arm(axis, read), self.higher) for row, read in self.more)]


def next_token_loss(setup: Setup, name: str, seed: int) -> dict:
    """Run ``name``'s nats per character of held-out text read left to right (a hybrid's too), and the
    unigram's on the same text (the train plays' token counts, add-one)."""
    run = setup.exp.load(name)
    text = held_out_text(setup.scale.held_out_chars)
    [unigram] = unigram_nats_per_char(run.tokenizer, train_token_counts(run.tokenizer), text, 1)
    return {"nats_per_char": decoder_nats_per_char(run.model, run.tokenizer, text), "unigram_nats_per_char": unigram}


TAGGING = Job(TAG_F1, "tag", True, lambda setup, name, seed: fine_tuned(setup, "tag", name, seed),
              lambda r: r["micro"]["f1"], lambda r: (r["line_break_rule"]["name"], r["line_break_rule"]["micro"]["f1"]),
              (("punctuation detection F1 (a mark here or not)", lambda r: r["detection"]["f1"]),))
RETRIEVAL = Job(RECALL, "embed", True, lambda setup, name, seed: fine_tuned(setup, "embed", name, seed),
                lambda r: r["recall@10"], lambda r: ("random ranking", r["baseline"]["expected"]["recall@10"]),
                (("MRR", lambda r: r["mrr"]),))
NEXT_TOKEN_LOSS = Job(NEXT_TOKEN, "next_token", False, next_token_loss, lambda r: r["nats_per_char"],
                      lambda r: ("unigram", r["unigram_nats_per_char"]))

# By the objective an arm ends with: an MLM encoder is for reading a text with both sides, a CLM decoder
# for predicting the next token, and GPT-BERT's hybrid claims both.
JOBS = {"mlm": (TAGGING, RETRIEVAL), "clm": (NEXT_TOKEN_LOSS,), "hybrid": (TAGGING, RETRIEVAL, NEXT_TOKEN_LOSS)}


def jobs_of(arm: Arm) -> tuple[Job, ...]:
    return JOBS[arm.settings["objective"]]


def taken(arms: Sequence[Arm]) -> list[Job]:
    """Every job one of ``arms`` takes, each once, in the arms' order."""
    return list(dict.fromkeys(job for arm in arms for job in jobs_of(arm)))


def measure(setup: Setup, arm: Arm, name: str, seed: int) -> dict:
    """Each of the arm's jobs on run ``name``, each its own cached step: ``{job.step: record}``."""
    return {job.step: setup.exp.step(f"{job.step}-{name}", lambda job=job: job.take(setup, name, seed))
            for job in jobs_of(arm)}


def header(labels: Sequence[str]) -> list[str]:
    return ["measure", "axis", *labels, "compared (paired by seed); trivial baseline"]


def tabulate(m: Measured, pairs: Sequence[tuple[Arm, Arm]]) -> tuple[dict, list]:
    """Per axis and job: the metric (the arms that took it, and ``BASELINE`` per seed from the first of
    them: every arm of a seed has the same test items) and its rows, a dash where an arm did not take
    it; the last column compares each of ``pairs`` that both took it."""
    metrics, rows = {}, []
    for axis in m.runs:
        for job in taken(m.arms):
            records = {arm.label: [r[job.step] for r in m.measured[axis][arm.key]] for arm in m.arms
                       if job in jobs_of(arm)}
            first = next(iter(records.values()))
            baseline = [job.baseline(r)[1] for r in first]
            for row, read in ((job.name, job.score), *job.more):
                groups = {label: [read(r) for r in records[label]] for label in records}
                compared = [f"{a.label} vs {b.label}: "
                            f"{winner_text(compare(groups[a.label], groups[b.label], job.higher), a.label, b.label)}"
                            for a, b in pairs if a.label in groups and b.label in groups]
                if row == job.name:
                    metrics[key(job.name, axis)] = {**groups, BASELINE: baseline}
                    compared.append(f"{job.baseline(first[0])[0]} {fmt_stat(baseline)}")
                rows.append([row, axis, *(fmt_stat(groups[a.label]) if a.label in groups else "—" for a in m.arms),
                             "; ".join(compared)])
    return metrics, rows


def meaning(m: Measured) -> dict[str, tuple[bool, None]]:
    """Each job's direction for its plot; its baseline is a group of the metric, plotted beside the arms."""
    return {job.name: (job.higher, None) for job in taken(m.arms)}


def baselines(m: Measured, metrics: dict, axis: str) -> str:
    """Each job's trivial baseline at ``axis``, named, for a summary: "random ranking 0.014, unigram 3.037"."""
    named = {job: job.baseline(m.first(next(a for a in m.arms if job in jobs_of(a)))[job.step])[0]
             for job in taken(m.arms)}
    return ", ".join(f"{name} {mean_and_spread(metrics[key(job.name, axis)][BASELINE])[0]:.3f}"
                     for job, name in named.items())


def ahead_on(metrics: dict, axis: str, a: str, b: str, jobs: Sequence[Job]) -> list[tuple[str, bool | None]]:
    """The claims "``a`` is ahead of ``b``" on each of ``jobs`` at ``axis``, for ``framework.claims_verdict``."""
    claims = []
    for job in jobs:
        groups = metrics[key(job.name, axis)]
        c = compare(groups[a], groups[b], job.higher)
        claims.append((f"{a} ahead on {job.name} ({c.describe(a, b)})", ahead(c)))
    return claims


def clears(metrics: dict, axis: str, label: str, job: Job) -> bool:
    """Whether arm ``label`` is ahead of the trivial baseline on ``job`` at ``axis``, paired by seed."""
    groups = metrics[key(job.name, axis)]
    return compare(groups[label], groups[BASELINE], job.higher).winner == "a"
