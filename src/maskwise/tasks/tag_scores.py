"""What a tagger is scored by: its record (each word's and each text's scores, the entity counts of a span scheme,
the trivial baselines and the classic word tagger beside them) and the compare rows that read it. Apart from
``tasks.tag`` because scoring reads only tags: no model, no tokenizer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from maskwise.data.tagging import (
    OUTSIDE,
    TaggedText,
)
from maskwise.errors import UserError
from maskwise.tasks.classic import WORD_TAGGER
from maskwise.tasks.items import Items
from maskwise.tasks.metrics import (
    Scheme,
    accuracy,
    entity_counts,
    pooled_entity_f1,
    span_scheme,
    tag_scores,
)
from maskwise.tasks.record import Fields, Record
from maskwise.tasks.unit import (
    RecordRow,
)


@dataclass(frozen=True)
class PRF(Fields):
    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True)
class PerText(Fields):
    f1: list[float]  # each text's micro F1: the items an interval over texts resamples
    # Where the tags are a span scheme (IOB, IOBES, BILOU): each text's (entities right, predicted, gold), as seqeval
    # counts them by the scheme's rules (``metrics.entities``); pooled over texts they give the field's entity F1.
    entities: list[list[int]] | None = None


@dataclass(frozen=True)
class TagScores(Fields):
    """One tagger's (or baseline's) ``metrics.tag_scores`` over every word, and each text's own micro F1."""

    micro: PRF
    macro_f1: float
    detection: PRF
    per_tag: dict[str, PRF]
    per_example: PerText
    # Pooled entity precision, recall and F1, where the gold tags are a span scheme.
    entity: dict[str, float] | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class TagBaseline(TagScores):
    name: str
    tag: str | None = None  # the one tag it places everywhere (the most frequent tag's)


@dataclass(frozen=True)
class TagRecord(TagScores, Record):
    """A tagger's scores beside two trivial baselines: the most frequent tag everywhere (``baseline``) and a mark
    before every line break (``line_break_rule``); ``correct`` holds each word's 0/1."""

    task: ClassVar[str] = "tag"
    family: str
    tags: list[str]
    truncated_words: int  # words the length cut left unread (tagged as outside)
    n_test: int
    n_words: int
    accuracy: float
    correct: list[int]
    baseline: TagBaseline
    line_break_rule: TagBaseline
    train_counts: dict[str, int] = field(default_factory=dict)  # the training tags' counts the baselines drew on
    classic: TagBaseline | None = None  # each word's most frequent training tag (``classic.most_frequent_tags``)
    # Each test text's document, where its file marks them (``TaggedText.document``): an interval redraws a document's
    # texts together. Empty: none marked, each text drawn alone.
    documents: list[str] = field(default_factory=list)

    def stronger_baseline(self) -> TagBaseline:
        """The stronger of the two baselines: the line-break rule on the plays' punctuation, the most frequent tag
        on a user's tags (where the rule, with no line breaks to read, marks nothing)."""
        return max((self.line_break_rule, self.baseline), key=lambda b: b.micro.f1)


def checked_scheme(tags: Iterable[str], where: str) -> Scheme | None:
    """``span_scheme`` of ``tags``; tags no one scheme's rules can check refused in one line, before any number."""
    try:
        return span_scheme(tags)
    except ValueError as error:
        raise UserError(f"{where}: {error}") from None


def scored(predicted: Sequence[Sequence[str]], test: Sequence[TaggedText], scheme: Scheme | None) -> dict:
    """``TagScores``' fields of per-text ``predicted`` tags; entity counts too, by ``scheme``'s rules, where the tags
    are a span scheme."""
    flat = [t for row in predicted for t in row]
    per_example: dict = {"f1": window_f1(predicted, test)}
    pooled = None
    if scheme:
        per_example["entities"] = [list(entity_counts(row, e.tags, scheme)) for row, e in zip(predicted, test)]
        pooled = pooled_entity_f1(per_example["entities"])
    return {
        **tag_scores(flat, [t for e in test for t in e.tags], OUTSIDE),
        "per_example": per_example,
        "entity": pooled,
    }


def tagging_results(
    predicted: Sequence[Sequence[str]],
    test: Sequence[TaggedText],
    train_counts: dict[str, int],
    family: str,
    tags: Sequence[str],
    truncated_words: int = 0,
    classic: Sequence[Sequence[str]] | None = None,
) -> TagRecord:
    """Per-word scores (``tag_scores``) beside two trivial baselines: every word tagged with the
    training set's most frequent tag, and the most frequent other tag placed before every line
    break (the verse rule, strong for punctuation), and each word's 0/1 for intervals; ``classic``: the classic
    tagger's tags (each word's most frequent training tag), scored beside them."""
    gold = [t for e in test for t in e.tags]
    # The training tags' scheme, as ``Tag.read`` decided it; a test file of another (``evaluate --data``) refused.
    scheme = checked_scheme([*train_counts, *gold], "the training and test tags")
    flat = [t for row in predicted for t in row]
    counts = Counter(train_counts)
    majority = counts.most_common(1)[0][0]
    marked = Counter({t: n for t, n in counts.items() if t != OUTSIDE}).most_common(1)
    rule_tag = marked[0][0] if marked else OUTSIDE
    rule_rows = [[rule_tag if s == "\n" else OUTSIDE for s in e.separators] for e in test]
    return TagRecord.from_json(
        {
            **scored(predicted, test, scheme),
            "family": family,
            "tags": list(tags),
            "truncated_words": truncated_words,
            "n_test": len(test),
            "n_words": len(gold),
            "accuracy": accuracy(flat, gold),
            "correct": [int(p == g) for p, g in zip(flat, gold)],
            "train_counts": dict(train_counts),
            "baseline": {
                **scored([[majority] * len(e.tags) for e in test], test, scheme),
                "name": "most frequent tag",
                "tag": majority,
            },
            "line_break_rule": {**scored(rule_rows, test, scheme), "name": f"{rule_tag!r} before every line break"},
            "classic": classic and {**scored(classic, test, scheme), "name": WORD_TAGGER},
            "documents": [e.document for e in test] if any(e.document for e in test) else [],
        }
    )


def window_f1(predicted: Sequence[Sequence[str]], test: Sequence[TaggedText]) -> list[float]:
    """Each text's micro F1 on its own: the items an interval over texts resamples."""
    return [tag_scores(row, e.tags, OUTSIDE)["micro"]["f1"] for row, e in zip(predicted, test)]


@dataclass(frozen=True)
class PunctuationRow(RecordRow[TagRecord]):
    """The plays' punctuation row: each window's F1 over its marks, beside a mark before every line break, the rule a
    practitioner would write for verse and so the classic method already (said, not twice)."""

    baseline_name: str = "a mark before every line break"
    classic_name: str = "a mark before every line break"

    def decode(self, stored: dict[str, Any]) -> TagRecord:
        return TagRecord.from_json(stored)

    def scores(self, record: TagRecord) -> Items:
        return Items(record.per_example.f1)

    def baseline(self, record: TagRecord) -> Items:
        return Items(record.line_break_rule.per_example.f1)


@dataclass(frozen=True)
class TagRow(RecordRow[TagRecord]):
    """A user's tag row: each text's F1 over its tags, or (``entities``, a span scheme) each text's (2 x entities
    right, predicted + gold entities), pooled into the entity F1; beside the most frequent tag and the word tagger.
    Its texts are the user's sentences, redrawn by document where the file marks them."""

    baseline_name: str = "most frequent tag"
    classic_name: str = WORD_TAGGER
    entities: bool = False

    def decode(self, stored: dict[str, Any]) -> TagRecord:
        return TagRecord.from_json(stored)

    def items(self, scores: TagScores, documents: Sequence[str]) -> Items | None:
        """``scores``' per-text values under this row's metric, grouped by ``documents`` where there are any (None:
        no entity counts)."""
        index = {d: i for i, d in enumerate(dict.fromkeys(documents))}
        groups = [index[d] for d in documents] if documents else None
        if not self.entities:
            return Items(scores.per_example.f1, groups)
        counts = scores.per_example.entities
        pairs = None if counts is None else [[2 * right, predicted + gold] for right, predicted, gold in counts]
        return None if pairs is None else Items(pairs, groups)

    def scores(self, record: TagRecord) -> Items | None:
        return self.items(record, record.documents)

    def baseline(self, record: TagRecord) -> Items | None:
        return self.items(record.baseline, record.documents)

    def classic(self, record: TagRecord) -> Items | None:
        return None if record.classic is None else self.items(record.classic, record.documents)
