"""The rule of thumb as code: compare's rows, each task under its claim, and the three coded verdicts.

The rows are the held-out text's (next-token loss, filling a blank) and one per task: the plays' five
(punctuation tagging, line order, ICT retrieval, verse from prose; passage -> speakers reported beside
them, a layout rule answering it) or the user's (``--task``). Each task belongs to one claim of the rule
of thumb (``tasks.registry``, fixed before any number is seen):

1. embed / score / classify => encoder: the encoder beats the decoder at every classify, tag, embed and
   rerank task (paired over the same test items);
2. generate => decoder: the decoder's held-out next-token loss is below the encoder's "generation"
   by repeated ``[MASK]`` (paired over the same blocks of text);
3. read-then-write => encoder-decoder: the encoder-decoder beats the decoder-only model at every seq2seq
   task, and its time to the first token on a long source is lower.

Each task gets its own verdict (``judge_part``); a claim's verdict comes from all of its tasks by one
rule (``claim_verdict``) that drops none: ``held`` when every task held, ``mixed`` when some held and
some were falsified (naming them), ``falsified`` when some were and none held, ``inconclusive``
otherwise, and ``not measured`` when no task of its job was given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from maskwise.data.task_files import MIN_TEST_ITEMS
from maskwise.data.user_tasks import UserTask
from maskwise.experiments.framework import Rule
from maskwise.experiments.intervals import (
    Interval,
    PerSeed,
    beats,
    interval,
    separation,
)
from maskwise.experiments.verdict import (
    FALSIFIED,
    HELD,
    INCONCLUSIVE,
    MIXED,
    NOT_MEASURED,
    TOO_FEW,
)
from maskwise.families import FAMILIES
from maskwise.tasks.items import Items, as_items
from maskwise.tasks.registry import (
    CLAIMS,
    ENCODER_JOBS,
    GENERATE,
    READ_THEN_WRITE,
    TASKS,
    Row,
)
from maskwise.tasks.unit import Scored

# ---- the rows, and the per-item measurements gathered over seeds ---------------------------------


@dataclass(frozen=True)
class CompareRow:
    """One row of the report: the task row (or held-out measure) that reads a run's measure ``measure``, and its
    claim."""

    key: str  # unique within a compare: "next_token", "fill", or a task's name (the plays': its kind)
    kind: str  # what ``cannot`` is asked: the measure, or the task's kind
    row: Row  # reads the row's numbers from the run's measure
    claim: str | None  # the claim that judges it; None: reported beside the claims
    measure: str = ""  # the run's measure it reads (empty: ``key``)
    too_few: str | None = None  # why its test split cannot separate anything (``Part.too_few``)

    @property
    def label(self) -> str:
        return self.row.label

    @property
    def higher(self) -> bool:
        return self.row.higher

    @property
    def baseline_name(self) -> str:
        return self.row.baseline_name

    @property
    def bounded(self) -> bool:
        return self.row.bounded

    @property
    def classic_name(self) -> str:
        return self.row.classic_name

    def scored(self, measures: Mapping[str, dict]) -> Scored:
        """Its numbers in one run's measures; a KeyError where the run has no such measure (its column cannot take
        the row)."""
        return self.row.scored(measures[self.measure or self.key])


@dataclass(frozen=True)
class NextTokenRow(Row):
    """Held-out next-token loss in nats per character, per block of text, beside the unigram's on the same blocks."""

    def scored(self, stored: dict[str, Any]) -> Scored:
        blocks = stored.get("nats_blocks")
        return Scored(None if blocks is None else Items(blocks), Items(stored["unigram_blocks"]))


@dataclass(frozen=True)
class FillRow(Row):
    """Filling a blank: each blank's 0/1, beside always answering the most frequent token."""

    def scored(self, stored: dict[str, Any]) -> Scored:
        filled = stored["blank_filling"]
        return Scored(Items(filled["correct"]), Items(filled["baseline"]["correct"]))


HELD_OUT_ROWS = (
    CompareRow(
        "next_token",
        "next_token",
        NextTokenRow("held-out next-token loss (nats/char)", False, "unigram", bounded=False),
        GENERATE,
        measure="lm",
    ),
    # Filling a blank is MLM's own pretraining task, not a job of the rule of thumb: reported, not judged.
    CompareRow("fill", "fill", FillRow("fill a blank (token accuracy)", True, "most frequent token"), None, "lm"),
)
PLAYS_TASK_KINDS = ("tag", "classify", "embed", "seq2seq")  # compare's task kinds when it is given none


def plays_fine_tunes() -> dict[str, str]:
    """compare's fine-tunes when it is given no task, measure key (the scale's fine-tune of that name) -> task kind:
    each plays row of ``PLAYS_TASK_KINDS`` (``Task.plays_rows``), read from the registry when called."""
    return {p.key: kind for kind in PLAYS_TASK_KINDS for p in TASKS[kind].plays_rows}


def task_row(
    key: str, kind: str, row: Row, judged: bool = True, label: str = "", too_few: str | None = None
) -> CompareRow:
    """A task's ``Row`` (read from its record, the run's measure ``key``) as a compare row: under its claim when
    ``judged``, else reported beside it (``label`` names a reported row apart from the judged one's key)."""
    return CompareRow(label or key, kind, row, TASKS[kind].claim if judged else None, key, too_few)


def rows_of(
    tasks: Sequence[UserTask], configs: Mapping[str, Any] | None = None, plays: bool = True
) -> tuple[CompareRow, ...]:
    """Compare's rows: the held-out text's, then each user task's at its config (``configs``: task name -> its
    fine-tune's config; its first row judged, the others reported), or the plays' when there is none and ``plays``
    (the corpus is the plays)."""
    if not tasks:
        return HELD_OUT_ROWS + (
            tuple(task_row(p.key, kind, p.row, p.judged) for kind in PLAYS_TASK_KINDS for p in TASKS[kind].plays_rows)
            if plays
            else ()
        )
    rows, configs = [], configs or {}
    for t in tasks:
        name, declared = t.spec.name, TASKS[t.spec.kind]
        first, *others = declared.user_rows(t, configs[name])
        rows += [
            task_row(name, t.spec.kind, first, too_few=t.too_few),
            *[task_row(name, t.spec.kind, row, False, f"{name}/{i}") for i, row in enumerate(others)],
        ]
        for variant in declared.variants:  # reported beside it: the choice's effect
            key = variant_key(name, variant)
            row = declared.user_rows(t, configs[key])[0]
            rows.append(task_row(key, t.spec.kind, row, False))
    return HELD_OUT_ROWS + tuple(rows)


def variant_key(name: str, variant: str) -> str:
    """The measure (and fine-tune folder) name of a task's variant (``tasks.registry.Task.variants``)."""
    return f"{name}.{variant}"


Baselines = dict[str, PerSeed | float]  # column -> its trivial baseline: per item on its test items, or a constant


def gather(measured: Mapping[int, Mapping[str, dict]], row: CompareRow) -> tuple[dict[str, PerSeed], Baselines]:
    """Per column that has the row, its per-item scores of every seed, and its baseline (per item, or a
    constant)."""
    scores: dict[str, PerSeed] = {}
    baselines: Baselines = {}
    for family in next(iter(measured.values())):
        try:
            scored = [row.scored(measured[seed][family]) for seed in measured]
        except KeyError:
            continue
        per_seed = [s.scores for s in scored if s.scores is not None]
        if len(per_seed) < len(scored):
            continue
        scores[family] = per_seed
        constants = [b for s in scored if isinstance(b := s.baseline, int | float)]
        per_item = [b for s in scored if isinstance(b := s.baseline, Items)]
        baselines[family] = sum(constants) / len(scored) if len(constants) == len(scored) else per_item
    return scores, baselines


@dataclass(frozen=True)
class Classic:
    """A row's classic method as measured beside each column (on that column's test items): on the characters the
    families read and on whole texts; and each test item's characters read and given. No scores: the row's trivial
    baseline is the classic method already (its name says which)."""

    name: str
    same: dict[str, PerSeed]  # column -> per-seed, per-item scores
    whole: dict[str, PerSeed]
    read: tuple[list[int], list[int]] | None = None

    def reference(self, contenders: Sequence[str]) -> str | None:
        """The column whose test items the report quotes the classic method on: the first contender measured, else
        the first column measured (None: no scores)."""
        return next((col for col in contenders if col in self.same), next(iter(self.same), None))


def gather_classic(measured: Mapping[int, Mapping[str, dict]], row: CompareRow) -> Classic | None:
    """``row``'s classic method per column that measured it (None: the row has none)."""
    if not row.classic_name:
        return None
    same: dict[str, PerSeed] = {}
    whole: dict[str, PerSeed] = {}
    read = None
    for column in next(iter(measured.values())):
        try:
            scored = [row.scored(measured[seed][column]) for seed in measured]
        except KeyError:  # a column that cannot take the row
            continue
        read = read or scored[0].read
        on_same = [s.classic for s in scored if s.classic is not None]
        on_whole = [s.classic_whole for s in scored if s.classic_whole is not None]
        if len(on_same) == len(scored):
            same[column] = on_same
        if len(on_whole) == len(scored):
            whole[column] = on_whole
    return Classic(row.classic_name, same, whole, read)


def share_read(read: tuple[list[int], list[int]]) -> str:
    """ "126 of 400 characters on average (32%); 90th percentile 126 of 517": what the families read of the texts."""
    chars, given = read

    def p90(values: list[int]) -> int:
        return sorted(values)[min(len(values) - 1, int(0.9 * len(values)))]

    mean_read, mean_given = sum(chars) / len(chars), sum(given) / len(given)
    return (
        f"{mean_read:,.0f} of {mean_given:,.0f} characters a text on average ({mean_read / max(mean_given, 1):.0%})"
        f"; 90th percentile {p90(chars):,} of {p90(given):,}"
    )


# ---- the three verdicts ----------------------------------------------------------------------------


class Part(NamedTuple):
    """One task as a claim reads it: the predicted winner's per-item scores against the other's, on the same items."""

    what: str
    predicted: PerSeed
    other: PerSeed
    higher: bool
    baselines: tuple[Any, Any] | None  # the predicted side's and the other's trivial baseline (per item or constant)
    too_few: str | None = None  # why its test split cannot separate anything whatever its size (one label present)
    min_items: int = MIN_TEST_ITEMS  # below it, too few (a timing's repeats are not test items: it sets 1)


POWER_Z = 1.960 + 0.8416  # a 95% interval that excludes zero in 80% of repeats: what "would separate" sizes


def items_to_separate(gap: Interval, items: int) -> int | None:
    """The test items at which a true difference of the observed size would separate (95% interval, 80% power), from
    the observed interval's width (which shrinks as one over the square root of the items); None without a gap."""
    half = (gap.high - gap.low) / 2
    if gap.mean == 0 or half <= 0:
        return None
    return math.ceil(items * (POWER_Z * half / 1.960 / abs(gap.mean)) ** 2)


def judge_part(part: Part) -> tuple[str, str]:
    """One task's verdict and its sentence: ``too few test items`` when its split cannot separate anything; else
    ``held`` if it separates the predicted way with the predicted side clearing its trivial baseline (``baselines``:
    the predicted side's and the other's, per item or constants), ``falsified`` if it separates the other way with
    the other side clearing its own: beating a model that is at chance, while at chance oneself, is not evidence for
    either family. An undecided task says how many test items its observed difference would need."""
    what, predicted, other, higher, baselines, too_few, min_items = Part(*part)
    stated = f"{what}: {interval(predicted).text()} vs {interval(other).text()}"
    items = min(as_items(scores).size for scores in predicted)
    if too_few or items < min_items:
        why = too_few or f"{items} test items, fewer than the {min_items} a verdict needs"
        return TOO_FEW, f"{stated} ({TOO_FEW}: {why})"
    base_p, base_o = baselines if baselines is not None else (None, None)
    clears_p = base_p is None or beats(predicted, base_p, higher)
    clears_o = base_o is None or beats(other, base_o, higher)
    order, gap = separation(predicted, other, higher)
    outcome = HELD if order > 0 and clears_p else FALSIFIED if order < 0 and clears_o else INCONCLUSIVE
    if gap is not None:
        stated += f", paired difference {gap.text()}"
    if not (clears_p or clears_o):
        stated += "; neither clears its trivial baseline"
    elif not clears_p:
        stated += "; the predicted winner does not clear its trivial baseline"
    if outcome == INCONCLUSIVE and order == 0 and gap is not None:
        needed = items_to_separate(gap, items)
        stated += (
            f"; a difference of this size would need about {needed:,} test items to separate (has {items:,})"
            if needed
            else "; no difference to separate"
        )
    return outcome, f"{stated} ({outcome})"


def claim_verdict(outcomes: Sequence[tuple[str, str]], other: str) -> tuple[str, str]:
    """A claim's verdict from its tasks' (name, verdict), none dropped, and the line that names them; a task with too
    few test items counts as undecided, and a claim with only such tasks says so."""
    if not outcomes:
        return NOT_MEASURED, "not measured: no task of this job was given"
    by = {v: [name for name, verdict in outcomes if verdict == v] for v in (HELD, FALSIFIED, INCONCLUSIVE, TOO_FEW)}
    said = "; ".join(
        f"{v} on {', '.join(names)}" + (f" (the {other} ahead)" if v == FALSIFIED else "")
        for v, names in by.items()
        if names
    )
    if len(by[TOO_FEW]) == len(outcomes):
        return TOO_FEW, said
    if not by[FALSIFIED] and not by[INCONCLUSIVE] and not by[TOO_FEW]:
        return HELD, said
    if by[HELD] and by[FALSIFIED]:
        return MIXED, said
    return (FALSIFIED if by[FALSIFIED] else INCONCLUSIVE), said


def judge(parts: Sequence[Part], other: str = "other family") -> tuple[str, list[str]]:
    """Each part judged (``judge_part``), then the claim (``claim_verdict``): its line, then each part's."""
    judged = [judge_part(part) for part in parts]
    verdict, said = claim_verdict(
        [(part[0].split(":")[0], outcome) for part, (outcome, _) in zip(parts, judged)], other
    )
    return verdict, [f"{verdict}: {said}", *[line for _, line in judged]]


def ttft_milliseconds(ttft: Mapping[int, dict]) -> dict[str, dict[str, PerSeed]]:
    """Per source-length bucket (shortest first), each writing column's timed first tokens per seed, in
    milliseconds (none when no source was timed)."""
    first = next(iter(ttft.values()), {})
    return {
        bucket["name"]: {
            f: [[1000 * t for t in ttft[seed]["buckets"][i]["seconds"][f]] for seed in ttft] for f in bucket["seconds"]
        }
        for i, bucket in enumerate(first.get("buckets", []))
    }


@dataclass(frozen=True)
class Evidence:
    """What the three rules read: the rows, every row's per-item scores and baselines, the first-token times, and
    which column stands for each family (compare: the family's own; ``compare --model``: its first model)."""

    rows: tuple[CompareRow, ...]
    gathered: Mapping[str, tuple[dict[str, PerSeed], Baselines]]  # row key -> (column -> per seed, column -> baseline)
    ttft_ms: Mapping[str, Mapping[str, PerSeed]]  # source-length bucket (shortest first) -> column -> per seed
    judged: Mapping[str, str] = field(default_factory=lambda: {f: f for f in FAMILIES})  # family -> its column
    # The columns the "best" cell chooses among: the three families, or every model given
    contenders: tuple[str, ...] = FAMILIES
    classic: Mapping[str, Classic | None] = field(default_factory=dict)  # row key -> its classic method

    def against_classic(self, row: CompareRow) -> str | None:
        """Whether any column clears ``row``'s classic method (paired, on its own test items), said plainly with the
        classic method's score on the characters the families read and on whole texts; None without one."""
        c = self.classic.get(row.key)
        if c is None:
            return None
        scores = self.gathered[row.key][0]
        read = f"; they read {share_read(c.read)}" if c.read else ""
        if not c.same:
            return (
                f"{row.label}: its trivial baseline, {row.baseline_name}, is the classic method a practitioner "
                f"would try first{read}"
                if c.name == row.baseline_name
                else f"{row.label}: the classic method ({c.name}) is its trivial baseline{read}"
            )
        columns = [col for col in self.contenders if col in scores and col in c.same]
        if not columns:
            return None
        first = columns[0]
        measured = f"{interval(c.same[first]).text()} on the characters the families read"
        if first in c.whole:
            measured += f", {interval(c.whole[first]).text()} on whole texts"
        measured += read or "; nothing is cut: they read every word"
        ahead = [col for col in columns if beats(scores[col], c.same[col], row.higher)]
        behind = [col for col in columns if beats(c.same[col], scores[col], row.higher)]
        if ahead:
            who = ahead[0] if len(ahead) == 1 else f"{', '.join(ahead[:-1])} and {ahead[-1]}"
            said = f"{who} clear{'s' if len(ahead) == 1 else ''} {c.name} (paired)"
        elif len(behind) == len(columns):
            said = f"no family reaches {c.name}: at this budget the answer is the classic method"
        else:
            said = f"no family separates from {c.name}, and none clears it"
        return f"{row.label}: {said} ({measured})"

    @property
    def longest_ttft(self) -> tuple[str, Mapping[str, PerSeed]] | None:
        """(its name, its times) of the longest sources timed: where the claim reads the first token."""
        return next(reversed(list(self.ttft_ms.items())), None)

    def parts(self, claim: str) -> list[Part]:
        """Every row of ``claim`` both of its columns were measured on: the predicted family's against the
        other's, on the same items."""
        predicted, other = (self.judged.get(f) for f in CLAIMS[claim])
        parts: list[Part] = []
        if predicted is None or other is None:  # a family neither pretrained nor given
            return parts
        for row in self.rows:
            scores, baselines = self.gathered[row.key]
            if row.claim != claim or predicted not in scores or other not in scores:
                continue
            parts.append(
                Part(
                    row.label,
                    scores[predicted],
                    scores[other],
                    row.higher,
                    (baselines[predicted], baselines[other]),
                    row.too_few,
                )
            )
        longest = self.longest_ttft
        if claim == READ_THEN_WRITE and parts and longest and predicted in longest[1] and other in longest[1]:
            name, times = longest
            parts.append(
                Part(f"time to first token (ms), {name}", times[predicted], times[other], False, None, min_items=1)
            )
        return parts

    def unmeasured(self, claim: str) -> str | None:
        """Why ``claim`` has no part although a row of its job was given: a family with no column, or a column
        that cannot take the job's rows (a model without an LM head); None otherwise."""
        rows = [row for row in self.rows if row.claim == claim]
        if not rows or self.parts(claim):
            return None
        missing = [f for f in CLAIMS[claim] if f not in self.judged]
        if missing:
            return f"not measured: no {' and no '.join(missing)} model was given"
        unable = [
            f"the {f} ({self.judged[f]})"
            for f in CLAIMS[claim]
            if not any(self.judged[f] in self.gathered[row.key][0] for row in rows)
        ]
        return f"not measured: {' and '.join(unable) or 'a side'} cannot take its rows (its cells say why)"


def judge_claim(claim: str, e: Evidence) -> tuple[str, list[str]]:
    """``claim`` judged on its tasks (``judge``), then, beside the verdict and not changing it, each task against its
    classic method (``Evidence.against_classic``)."""
    why = e.unmeasured(claim)
    if why:
        return NOT_MEASURED, [why]
    verdict, details = judge(e.parts(claim), CLAIMS[claim][1])
    beside = [said for row in e.rows if row.claim == claim and (said := e.against_classic(row))]
    return verdict, details + [f"against the classic method: {said}" for said in beside]


PAIRED = (
    "each task: held if it separates the predicted way (paired 95% interval of the difference over the "
    "same test items) and the predicted winner clears its trivial baseline; falsified if it separates the "
    "other way with the other side clearing its baseline; inconclusive otherwise. The claim, from all of "
    "its tasks: held if every task held; mixed if some held and some were falsified; falsified if some "
    "were and none held; inconclusive otherwise; not measured without a task of its job"
)
RULES = (
    Rule(
        "the encoder beats the decoder at every classify, tag, retrieval (embed) and rerank task",
        PAIRED,
        claim=ENCODER_JOBS,
    ),
    Rule(
        "the decoder's held-out next-token loss is below the encoder's by repeated [MASK]",
        PAIRED,
        claim=GENERATE,
    ),
    Rule(
        "the encoder-decoder beats the decoder-only model at every seq2seq task and reaches its first token "
        "sooner on a long source",
        PAIRED,
        claim=READ_THEN_WRITE,
    ),
)
