"""What a read-then-write fine-tune is scored by: a writer's (or a copying baseline's) exact match, F1 over the
comma-separated items and token F1, per test item and by source length (and, on the plays' verse, F1 over the line
breaks), and the record that holds them. Apart from ``tasks.seq2seq`` because scoring reads only strings: no model, no
tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from maskwise.data.tasks import Seq2SeqExample
from maskwise.tasks.metrics import break_f1, bucketed, exact_match, rouge, set_f1, token_f1
from maskwise.tasks.record import Fields, Record


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
