"""What a task is: the ``Task`` base class each task module subclasses once, and what those subclasses share.
``tasks.registry`` lists them; this module imports none of them, so each can import it.

The claims are the design notes' three; each task belongs to one, fixed in its declaration before any number is
seen: classify, tag, embed (retrieval) and rerank are the encoder's jobs; seq2seq is read-then-write.
(Generation is read on held-out next-token loss of the corpus itself, which every compare measures.)
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import torch
from torch import nn

from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.families import Family
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.items import Items
from maskwise.tasks.record import Record

ENCODER_JOBS = "embed, score or classify => encoder"
GENERATE = "generate => decoder"
READ_THEN_WRITE = "read-then-write => encoder-decoder"
# claim -> (the family it predicts wins, the family it is compared with)
CLAIMS: dict[str, tuple[str, str]] = {
    ENCODER_JOBS: ("encoder", "decoder"),
    GENERATE: ("decoder", "encoder"),
    READ_THEN_WRITE: ("encoder-decoder", "decoder"),
}
# A classification test set whose most frequent label has this many times the rows of its rarest is read by
# balanced accuracy (the mean of per-label recalls), where accuracy would reward always answering the majority.
IMBALANCE = 1.5
C = TypeVar("C", bound=FinetuneConfig)  # a task kind's config type


class ReadsText(Protocol):
    """A record that counts each test item's characters read and given."""

    @property
    def chars_read(self) -> list[int] | None: ...

    @property
    def chars_given(self) -> list[int] | None: ...


RecordT = TypeVar("RecordT", bound=Record)  # a task kind's record type


@dataclass(frozen=True)
class Scored:
    """One run's numbers on one compare row, read from its record once: what an interval, a verdict and the report's
    classic-method line read."""

    scores: Items | None  # per test item (None: not measured)
    baseline: Items | float | None  # per item (paired), or a constant
    # The classic method a practitioner tries first (``tasks.classic``), per item on the characters the model read and
    # on whole texts (None: not measured, or the same characters are the whole text).
    classic: Items | None = None
    classic_whole: Items | None = None
    read: tuple[list[int], list[int]] | None = None  # each test item's characters read and given (None: every one)


@dataclass(frozen=True)
class Row(ABC):
    """How one stored measure becomes a compare row: its label, direction and baselines' names, and its numbers read
    from the measure's JSON (``scored``). A name of the classic method without scores says the trivial baseline is the
    classic method already (BM25's order; the lead)."""

    label: str
    higher: bool
    baseline_name: str
    classic_name: str = ""
    # Its metric lies in [0, 1] (accuracy, F1, recall): an error rate a power law may fit (``experiments.trend``).
    bounded: bool = True

    @abstractmethod
    def scored(self, stored: dict[str, Any]) -> Scored:
        """The row's numbers in one run's stored measure (a record's JSON); a KeyError where the run has none."""


@dataclass(frozen=True)
class RecordRow(Row, Generic[RecordT]):
    """A row read from a task kind's typed record: the kind's row classes say which of its fields are the scores."""

    @abstractmethod
    def decode(self, stored: dict[str, Any]) -> RecordT:
        """The record its JSON holds."""

    @abstractmethod
    def scores(self, record: RecordT) -> Items | None:
        """Its per-item scores (None: not measured)."""

    @abstractmethod
    def baseline(self, record: RecordT) -> Items | float | None:
        """Its trivial baseline: per item on the same items (paired), or a constant."""

    def classic(self, record: RecordT) -> Items | None:
        """The classic method's per-item scores on the characters the model read (None: none measured)."""
        return None

    def classic_whole(self, record: RecordT) -> Items | None:
        """The classic method's per-item scores on whole texts (None: none measured, or no text was cut)."""
        return None

    def read(self, record: RecordT) -> tuple[list[int], list[int]] | None:
        """Each test item's characters read and given (None: every character is read, as a tagger's windows are)."""
        return None

    def scored(self, stored: dict[str, Any]) -> Scored:
        record = self.decode(stored)
        return Scored(
            self.scores(record),
            self.baseline(record),
            self.classic(record),
            self.classic_whole(record),
            self.read(record),
        )


@dataclass(frozen=True)
class PlaysRow:
    """A row compare reads on the plays when it is given no task: the scale's fine-tune ``key`` (its name in
    ``CompareSettings.tasks`` and the run's measure: a task kind's, or one of its plays' tasks), read by ``row``,
    judged under the kind's claim or reported beside it."""

    key: str
    row: Row
    judged: bool = True


@dataclass(frozen=True)
class Speeds:
    """A machine's measured speeds at a scale's block (``experiments.eta.probe`` measures them): what ``Work``'s
    seconds follow from."""

    train_s_per_token: float
    read_s_per_token: float
    call_s: float
    length: int  # the tokens of a sequence they were measured at
    width: int  # the body's d_model: how much attention adds to a token's cost as sequences grow


@dataclass(frozen=True)
class Work:
    """What a fine-tune and its evaluation compute, counted before they run: their seconds follow from a machine's
    measured speeds (``experiments.eta.probe``), so that compare can plan its minutes."""

    trained_tokens: float  # tokens through forward and backward
    read_tokens: float  # tokens through forward only (evaluation, scoring candidates, embedding a collection)
    calls: float  # forward calls too small for their tokens to matter (a decoding step, a small batch)
    length: float = 0.0  # the tokens of the sequences they are in (0: the probe's own)

    def seconds(self, speeds: Speeds) -> float:
        """At the probed speeds, a token's cost scaled by attention's share at this length: per token and layer the
        projections and FFN take ~24 d^2 FLOPs and attention ~4 T d, so the cost grows as 1 + T / 6d."""
        longer = (1 + self.length / (6 * speeds.width)) / (1 + speeds.length / (6 * speeds.width)) if self.length else 1
        return (
            longer * (self.trained_tokens * speeds.train_s_per_token + self.read_tokens * speeds.read_s_per_token)
            + self.calls * speeds.call_s
        )


def chars_read_and_given(record: ReadsText) -> tuple[list[int], list[int]] | None:
    """A record's characters read and given per test item (its ``chars_read``, ``chars_given``), for a row's
    ``read``; None where it did not count them."""
    given = record.chars_given
    return (record.chars_read, given) if record.chars_read and given is not None else None


def mean_tokens(texts: list[str], tokens_per_char: float) -> float:
    """The mean length of ``texts`` in tokens, at ``tokens_per_char``, with [CLS] and [SEP]."""
    return tokens_per_char * sum(map(len, texts)) / max(len(texts), 1) + 2


class FineTunedHead(Protocol):
    """A module class that a fine-tune folder's body and task record rebuild (``SequenceClassifier``,
    ``TokenTagger``): what ``Head.model`` names."""

    @classmethod
    def from_fine_tune(
        cls, body: nn.Module, task: dict, head: dict[str, torch.Tensor] | None, where: str
    ) -> nn.Module: ...


@dataclass(frozen=True)
class Head:
    """A trained head that a fine-tune folder hands back whole on its body (``maskwise.load_fine_tuned``), and
    that ``maskwise export`` writes as an HF task class."""

    model: type[FineTunedHead]  # what ``load_fine_tuned`` rebuilds, through its ``from_fine_tune``
    # The task record's fields that rebuild it and its baseline: field -> (a list of names, else one name; required).
    record: dict[str, tuple[bool, bool]]
    classes_key: str  # the record's field holding its classes, in the head's output order
    hf_classes: dict[str, str]  # HF's class for it, per body column of ``interop.hf_keys`` (none: no export)


class DrawnRows(list):
    """The training rows a budget drew (what the families fine-tune on), holding every row beside them: the classic
    method fits on all of them, since it costs seconds, not the budget (``every_row``)."""

    def __init__(self, kept: list, whole: Sequence[Any]):
        super().__init__(kept)
        self.whole = whole


def every_row(train: Sequence[Any]) -> Sequence[Any]:
    """Every training row a classic method fits on: all of them where a budget drew fewer for the fine-tune."""
    return train.whole if isinstance(train, DrawnRows) else train


class Task(ABC, Generic[C]):
    """One task kind, whole: its config and plays' rows, how it fine-tunes, its compare rows and how a user's files
    become them, and the head interop hands back. A kind is a subclass with one instance in the registry
    (``tasks.registry``); its command line (flags, ``finetune KIND``, ``evaluate``) is the CLI's adapter of it
    (``cli.commands``), so a task module imports nothing from ``cli``, ``experiments`` or ``interop``."""

    kind: ClassVar[str]  # the fine-tune's name (``maskwise finetune KIND``, a compare ``--task``'s kind)
    claim: ClassVar[str]  # which of ``CLAIMS`` its verdict judges, fixed before any number is seen
    config: type[C]  # its settings: ``run_task`` finds the task by its config's type
    record: ClassVar[type[Record]]  # what its evaluation returns (its JSON: ``to_json``, read back by ``from_json``)
    # Its rows when compare reads the plays, each its own fine-tune (none: the plays' compare has none).
    plays_rows: ClassVar[tuple[PlaysRow, ...]] = ()
    # Choices that could decide its verdict, fixed before any number is seen: name -> its config's changes (its row's
    # label says which). compare fine-tunes each variant too and reports it beside the judged row: its effect shows.
    variants: ClassVar[dict[str, dict[str, Any]]] = {}
    # Its name under ``maskwise evaluate --task`` and in its results' ``task`` when not its kind: what it is scored
    # as (embed's fine-tune is scored as retrieval, which a model never fine-tuned can be scored on too).
    evaluated_as: ClassVar[str | None] = None
    head: ClassVar[Head | None] = None  # the trained head a folder hands back whole (None: it keeps none of its own)
    data_help: ClassVar[str] = ""  # what ``finetune KIND --data`` may name besides a file of rows, appended to its help

    @property
    def evaluate_name(self) -> str:
        """Its name under ``maskwise evaluate --task`` and in its results' ``task``."""
        return self.evaluated_as or self.kind

    @abstractmethod
    def plays(self, cfg: C, model: nn.Module | None, split: str, training: bool) -> tuple[Any, Any]:
        """(training rows or None when not training, the split's rows): the plays' slice it reads when it is given
        no rows of its own, drawn with ``cfg.data_seed`` and ``cfg.test_seed``."""

    @abstractmethod
    def run(
        self, model: Any, tokenizer: Any, cfg: C, runtime: Runtime, data: Any, label: str
    ) -> tuple[Any, Callable[[], Record], Any]:
        """(what fine-tuning produced, a function that evaluates it into its record, the rows it evaluates), on the
        caller's rows ``data`` (``run_data``'s) or the plays' slice: what ``run_task`` times and runs."""

    @abstractmethod
    def summary(self, record: Any) -> str:
        """Its record as the lines a task command prints (the JSON holds the rest)."""

    @abstractmethod
    def read(self, spec: TaskSpec) -> UserTask:
        """A user's task files read and checked, or a one-line ``UserError``: what ``maskwise finetune KIND --data``
        and ``compare --task`` both read (compare adds what a verdict needs: ``registry.read_tasks``)."""

    @abstractmethod
    def user_rows(self, task: UserTask, cfg: C) -> tuple[Row, ...]:
        """Its compare rows on a user's task at its configured settings: the first is judged under its claim, any
        others are reported beside it (seq2seq: every source-length bucket, the longest judged)."""

    @abstractmethod
    def work(self, cfg: C, task: UserTask | None, per_char: float) -> Work:
        """The work its fine-tune and evaluation will do on ``task`` (None: the plays' slice) at ``per_char`` tokens a
        character: what compare's time plan estimates its seconds from."""

    def configure(self, cfg: C, task: UserTask, context: int) -> C:
        """The scale's config adjusted to a user's rows (settings only the plays' rows have turned off), given the
        tokens of context the smallest family's stack holds; or a one-line ``UserError``."""
        return cfg

    def shorter(self, cfg: C, task: UserTask, context: int) -> C | None:
        """A config that reads less of a user's rows, for a budget that cannot afford ``cfg`` (compare halves a
        seq2seq window so); None where there is none."""
        return None

    def reading(self, cfg: C, task: UserTask, context: int) -> str | None:
        """What of a user's rows ``cfg`` reads, for the report, where that is a choice (a seq2seq window); None
        where every family reads them as its context allows."""
        return None

    def run_data(self, task: UserTask, cfg: C) -> Any:
        """What ``run`` is given as the caller's rows for a user's task."""
        return task.train, task.test

    def user_data(self, task: UserTask, cfg: C) -> Any:
        """``run_data`` with at most ``cfg.max_train_rows`` of its training rows, drawn by ``cfg.data_seed`` (what a
        budget that cannot afford the fine-tuning rule's epochs over every row trains on)."""
        data = self.run_data(task, cfg)
        cap, rows = cfg.max_train_rows, self.rows_in(data)
        if cap is None or cap >= rows:
            return data
        return self.drawn(data, sorted(random.Random(cfg.data_seed).sample(range(rows), cap)))

    def rows_in(self, data: Any) -> int:
        """The training rows in ``run_data``'s ``data``."""
        return len(data[0])

    def drawn(self, data: Any, kept: list[int]) -> Any:
        """``run_data``'s ``data`` with only its training rows at the indices ``kept`` (every row still held for the
        classic method, ``DrawnRows``)."""
        train, *rest = data
        return (DrawnRows([train[i] for i in kept], train), *rest)

    def rows_available(self, cfg: C, task: UserTask | None) -> int:
        """How many rows a fine-tune at ``cfg`` could draw its batches from (a user's ``task``, else the plays'
        slice), before any budget's cap."""
        return self.rows_in(self.run_data(task, cfg) if task else self.plays(cfg, None, "test", True))

    def training_rows(self, cfg: C, task: UserTask | None) -> int:
        """How many rows a fine-tune at ``cfg`` draws its batches from: what an epoch is, for the fine-tuning rule
        (``finetune.FineTuningRule``)."""
        rows = self.rows_available(cfg, task)
        return rows if task is None or cfg.max_train_rows is None else min(rows, cfg.max_train_rows)

    def kept(self, trained: Any, record: Any, cfg: C) -> tuple[dict[str, Any], nn.Module, nn.Module | None]:
        """What a fine-tune folder keeps of ``run``'s product: (the config.json task record ``interop.folders`` reads
        back, the module saved as the model, the head saved beside it or None)."""
        return {}, trained, None

    def texts(self, rows: Any) -> list[str]:
        """The text a model reads of each of a split's rows (to warn when the corpus or the training split holds a
        test item verbatim)."""
        return [e.text for e in rows]

    def latency_ms(self, record: Any) -> tuple[str, list[float]] | None:
        """(what one item is, each test item's serving time in ms) as its own evaluation timed it, where that is the
        cost a user pays (a reranker scoring a query's candidates); None: compare --model times a read or a first
        token instead."""
        return None

    def cannot(self, family: Family) -> str | None:
        """Why a model of ``family`` cannot do it (the report's cell), or None where it can."""
        return None


def within_context(cfg, task: UserTask, context: int):
    """Every family reads at most the smallest family's context (the encoder-decoder's encoder holds half the
    block), so that no family sees more of a text than another."""
    return replace(cfg, max_len=min(cfg.max_len or context, context))
