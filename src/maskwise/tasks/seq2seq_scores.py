"""What a read-then-write fine-tune is scored by: a writer's (or a copying baseline's) exact match, F1 over the
comma-separated items, token F1 and ROUGE, per test item and by source length (and, on the plays' verse, F1 over the
line breaks), the record that holds them, and the compare rows that read it. Apart from ``tasks.seq2seq`` because
scoring reads only strings: no model, no tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from maskwise.data.tasks import (
    Seq2SeqExample,
)
from maskwise.tasks.items import Items
from maskwise.tasks.metrics import break_f1, bucketed, exact_match, rouge, set_f1, token_f1
from maskwise.tasks.record import Fields, Record
from maskwise.tasks.unit import RecordRow

# What a user's seq2seq rows read: ROUGE-L decides (summarisation's and headline writing's own score); the others are
# reported beside it on the judged sources.
WrittenMetric = Literal["ROUGE-L", "ROUGE-1", "ROUGE-2", "token F1"]


@dataclass(frozen=True)
class PerExample(Fields):
    """Each test item's scores: the items an interval over the test rows resamples."""

    exact_match: list[float]
    items_f1: list[float]
    token_f1: list[float]
    # ROUGE-L, -1 and -2 F-measures (``metrics.rouge``): summarisation's own scores, ROUGE-L a user's verdict's.
    rouge_l: list[float] | None = None
    rouge_1: list[float] | None = None
    rouge_2: list[float] | None = None
    break_f1: list[float] | None = None  # F1 over the line breaks (``metrics.break_f1``): the plays' verse task's


@dataclass(frozen=True)
class BucketScores(Fields):
    """The mean scores of the test items whose source length falls in one bucket (``metrics.bucketed``)."""

    n: int
    exact_match: float
    items_f1: float
    token_f1: float


@dataclass(frozen=True)
class Seq2SeqScores(Fields):
    """One writer's (or baseline's) scores: their means, each item's, and their means by source length in characters
    (bucket label -> its scores, empty buckets left out)."""

    exact_match: float
    items_f1: float
    token_f1: float
    per_example: PerExample
    by_source_chars: dict[str, BucketScores]


@dataclass(frozen=True)
class Seq2SeqBaseline(Seq2SeqScores):
    """Copying from the source, with no model: its first line (the plays: the first speaker) or its first words."""

    name: str


@dataclass(frozen=True)
class ShownExample(Fields):
    """One test item with what the model wrote: what a reader checks the scores against."""

    source: str
    target: str
    predicted: str


@dataclass(frozen=True)
class Seq2SeqRecord(Seq2SeqScores, Record):
    """A writer's scores beside copying from the source (``baseline``), with how it decoded, each test source's length
    (for rows by source length) and the first few items written; the plays' passages say how they were cut."""

    task: ClassVar[str] = "seq2seq"
    family: str
    decoding: str  # greedy, or beam N
    n_test: int
    source_chars: list[int]  # each test item's, for rows by source length
    baseline: Seq2SeqBaseline
    examples: list[ShownExample]
    # The plays' classic method: the lines that follow a blank line (``classic.lines_after_blank``), or on verse the
    # rule chosen on the training rows (``classic.best_verse_rule``); a user's rows have theirs as ``baseline`` already
    # (the lead).
    classic: Seq2SeqBaseline | None = None
    train_examples: int | None = None  # the rows it was fine-tuned on (None: scored by ``maskwise evaluate``)
    # Each test source's characters the model read (a body that cannot hold a source reads its start), and the
    # positions it read past its pretrained context to hold the longest (0: none).
    chars_read: list[int] | None = None
    positions_past_pretrained: int = 0
    # How the plays' passages were cut (None: a user's rows).
    hide_speakers: bool | None = None
    mid_speech: bool | None = None
    plays_task: str | None = None  # which of the plays' tasks it was (``seq2seq.PLAYS_SEQ2SEQ``); None: a user's rows
    # The verse task's rules (``classic.VERSE_RULE_OF``): each scored on the test items, and each one's mean break F1 on
    # the training rows, which chose ``classic`` among them.
    rules: list[Seq2SeqBaseline] | None = None
    rules_on_training: dict[str, float] | None = None


def generation_scores(
    predicted: Sequence[str],
    examples: Sequence[Seq2SeqExample],
    source_edges: Sequence[int],
    breaks: bool = False,
    english: bool = True,
) -> dict:
    """``Seq2SeqScores``' fields: exact match, F1 over the set of comma-separated items (on the plays: the speakers)
    and token F1, overall, per example and by source length; each item's ROUGE (``english``: its analysis,
    ``metrics.rouge``); with ``breaks``, each item's F1 over the line breaks."""
    per_example = {
        "exact_match": [exact_match(p, e.target) for p, e in zip(predicted, examples)],
        "items_f1": [set_f1(p, e.target) for p, e in zip(predicted, examples)],  # the speakers, on the plays
        "token_f1": [token_f1(p, e.target) for p, e in zip(predicted, examples)],
    }
    n = max(len(examples), 1)
    means = {name: sum(values) / n for name, values in per_example.items()}
    rouges = [rouge(p, e.target, english) for p, e in zip(predicted, examples)]
    per_example.update(rouge_1=[r[0] for r in rouges], rouge_2=[r[1] for r in rouges], rouge_l=[r[2] for r in rouges])
    if breaks:
        per_example["break_f1"] = [break_f1(p, e.target) for p, e in zip(predicted, examples)]
    return {
        **means,
        "per_example": per_example,
        "by_source_chars": bucketed([len(e.source) for e in examples], per_example, source_edges),
    }


def lead_words(train: Sequence[Seq2SeqExample]) -> int:
    """How many of the source's first words the lead baseline copies: the training targets' mean word count."""
    return max(1, round(sum(len(e.target.split()) for e in train) / max(len(train), 1)))


@dataclass(frozen=True)
class Seq2SeqRow(RecordRow[Seq2SeqRecord]):
    """A row read from a read-then-write fine-tune's record: its JSON decoded in one place."""

    def decode(self, stored: dict[str, Any]) -> Seq2SeqRecord:
        return Seq2SeqRecord.from_json(stored)


@dataclass(frozen=True)
class SpeakersRow(Seq2SeqRow):
    """The plays' passage -> speakers row: each passage's F1 over the set of speakers named, beside copying the first
    line and the lines after a blank line."""

    def scores(self, record: Seq2SeqRecord) -> Items:
        return Items(record.per_example.items_f1)

    def baseline(self, record: Seq2SeqRecord) -> Items:
        return Items(record.baseline.per_example.items_f1)

    def classic(self, record: Seq2SeqRecord) -> Items | None:
        return None if record.classic is None else Items(record.classic.per_example.items_f1)


@dataclass(frozen=True)
class VerseRow(Seq2SeqRow):
    """The plays' verse row: each source's F1 over its line breaks (``metrics.break_f1``), beside the source left as
    one line and the verse rule chosen on the training rows (``classic.best_verse_rule``)."""

    @staticmethod
    def breaks(scored: Seq2SeqScores | None) -> Items | None:
        """``scored``'s per-item break F1 (None: not scored on verse)."""
        values = None if scored is None else scored.per_example.break_f1
        return None if values is None else Items(values)

    def scores(self, record: Seq2SeqRecord) -> Items | None:
        return self.breaks(record)

    def baseline(self, record: Seq2SeqRecord) -> Items | None:
        return self.breaks(record.baseline)

    def classic(self, record: Seq2SeqRecord) -> Items | None:
        return self.breaks(record.classic)


@dataclass(frozen=True)
class WrittenRow(Seq2SeqRow):
    """A user's seq2seq row: ``metric`` (``WrittenMetric``) of the test items whose source has ``low`` characters or
    more and under ``high`` (None: no bound), beside the lead, which is summarisation's classic method already (named,
    not shown twice)."""

    baseline_name: str = "lead (the source's first words)"
    classic_name: str = "the lead"
    given: tuple[int, ...] = ()  # each test source's characters
    low: int = 0
    high: int | None = None
    metric: WrittenMetric = "ROUGE-L"

    def within(self, scored: Seq2SeqScores) -> Items | None:
        """``scored``'s per-item values of the sources in this row's span (None: a record scored without it)."""
        per = scored.per_example
        values = {"ROUGE-L": per.rouge_l, "ROUGE-1": per.rouge_1, "ROUGE-2": per.rouge_2, "token F1": per.token_f1}
        chosen = values[self.metric]
        if chosen is None:
            return None
        return Items([v for v, n in zip(chosen, self.given) if n >= self.low and (self.high is None or n < self.high)])

    def scores(self, record: Seq2SeqRecord) -> Items | None:
        return self.within(record)

    def baseline(self, record: Seq2SeqRecord) -> Items | None:
        return self.within(record.baseline)

    def read(self, record: Seq2SeqRecord) -> tuple[list[int], list[int]]:
        return record.chars_read or record.source_chars, list(self.given)
