"""Sequence classification: a head on a pooled state, fine-tuned or probed; or, for a decoder,
zero-shot by prompting.

* Encoder: the head reads the ``[CLS]`` state ("cls", BERT) or the mean of the real tokens ("mean").
* Decoder: the head reads the last real token ("last"), the only position that has seen the whole
  text through a causal mask; or no head at all: each label is scored as a continuation of a prompt
  and the most likely wins (``zero_shot_classify``).
* Encoder-decoder: the encoder alone, mean-pooled (the decoder has nothing to add to reading).
* A hybrid decoder (``--objective hybrid``) reads bidirectionally, as it was trained to: mean-pooled.

``freeze=True`` is a linear probe: the body is fixed and only the head trains, which measures what
pretraining put into the representation; ``freeze=False`` fine-tunes everything, the body at ``lr``
(default 2e-5) and the fresh head at ``head_lr`` (default 1e-3) through ``build_optimizer``'s head
group. Results always carry the pooling and mode used, accuracy, macro-F1 and the majority-class
baseline (``ClassifyRecord``), so a number never travels without what it should be compared to.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.data.task_readers import read_labelled
from maskwise.data.tasks import (
    LabelledText,
    genre_examples,
    line_order_examples,
    sentence_mark_examples,
    word_order_examples,
)
from maskwise.data.user_tasks import TaskSpec, UserTask, distribution
from maskwise.errors import UserError
from maskwise.families import Family
from maskwise.model.heads import (
    ONE_POSITION_POOLINGS,
    POOLINGS,
    ClassifierHead,
    pool,
    pooled_position,
)
from maskwise.runs import load_weights_into
from maskwise.runtime import Runtime
from maskwise.tasks.classic import TFIDF_LOGISTIC, chars_read, tfidf_logistic_regression
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.items import Items
from maskwise.tasks.metrics import accuracy, macro_f1, majority_label
from maskwise.tasks.reading import (
    batches,
    body_of,
    config_of,
    context_len,
    device_of,
    encode_texts,
)
from maskwise.tasks.record import Fields, Record
from maskwise.tasks.scoring import continuation_logprobs, start_id_of
from maskwise.tasks.unit import (
    ENCODER_JOBS,
    IMBALANCE,
    Head,
    PlaysRow,
    RecordRow,
    Row,
    Task,
    Work,
    chars_read_and_given,
    every_row,
    mean_tokens,
    within_context,
)

HEAD_PREFIX = "head."
# The plays' classification tasks: (split, texts per label, seed=) -> the labelled texts.
PLAYS_CLASSIFICATIONS: dict[str, Callable[..., list[LabelledText]]] = {
    "genre": genre_examples,
    "line-order": line_order_examples,
    "word-order": word_order_examples,
    "sentence-mark": sentence_mark_examples,
}


def check_pooling(kind: Family, pooling: str | None) -> str:
    """The pooling to use: the family's default (``cfg.kind``), or the one asked for if it makes sense there."""
    pooling = kind.classify_pooling if pooling is None else pooling
    if pooling not in POOLINGS:
        raise UserError(f"unknown pooling {pooling!r}; known: {', '.join(POOLINGS)}")
    if not kind.bidirectional and pooling == "cls":
        raise UserError(
            "cls pooling reads the first token, which a causal decoder sees before the rest of "
            "the text; use last (or mean)"
        )
    return pooling


class SequenceClassifier(nn.Module):
    """A body of any family plus ``ClassifierHead`` on its pooled hidden states.

    The body is kept under ``body.`` and the head under ``head.`` so that the optimizer's head group
    and the saved files split on a name prefix."""

    def __init__(
        self,
        body: nn.Module,
        labels: Sequence[str],
        pooling: str | None = None,
        freeze: bool = False,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.body, self.labels = body_of(body), list(labels)
        self.pooling = check_pooling(self.body.cfg.kind, pooling)
        self.freeze = freeze
        self.head = ClassifierHead.for_body(self.body.cfg, len(self.labels), dropout).to(device_of(body))
        body.requires_grad_(not freeze)

    def train(self, mode: bool = True) -> SequenceClassifier:
        super().train(mode)
        if self.freeze:
            self.body.eval()  # a probe reads the representation as pretraining left it: no dropout
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, n_classes). A one-position pooling reads that position alone
        (``Stack``'s ``read_at``): its last layer skips every other query."""
        if self.pooling in ONE_POSITION_POOLINGS:
            at = pooled_position(attention_mask, self.pooling, *input_ids.shape)[:, None]  # (B, 1)
            return self.head(self.body.read(input_ids, attention_mask, read_at=at)[:, 0])  # (B, n_classes)
        h = self.body.read(input_ids, attention_mask)  # (B, T, d)
        return self.head(pool(h, attention_mask, self.pooling))  # (B, n_classes)

    @classmethod
    def from_fine_tune(
        cls, body: nn.Module, task: dict, head: dict[str, torch.Tensor] | None, where: str
    ) -> SequenceClassifier:
        """The classifier a fine-tune left (``interop.folders.fine_tune_of``: a run's or an HF task class's
        record of labels, pooling and mode, and its head's tensors) on ``body``, in eval mode."""
        model = cls(body, task["labels"], task["pooling"], task.get("freeze", False))
        load_weights_into(model.head, head or {}, f"classifier head of {where}")
        return model.eval()


@dataclass
class ClassifyConfig(FinetuneConfig):
    pooling: str | None = None  # None = the family's default (``Family.classify_pooling``)
    freeze: bool = False  # True = linear probe: only the head trains
    # The task is read by balanced accuracy (``Classify.configure``): the loss weights each label by n / (labels x its
    # training count), as the classic method weights its classes, so that neither is fitted for another metric.
    balanced: bool = False
    max_len: int | None = None  # None = the model's context
    dropout: float = 0.1
    # The plays' labelled texts when a task is given none (``tasks.run.plays_rows``): one of ``PLAYS_CLASSIFICATIONS``,
    # this many of each label.
    plays_task: str = "genre"
    train_per_label: int = 300
    test_per_label: int = 100

    def validate(self) -> ClassifyConfig:
        if self.plays_task not in PLAYS_CLASSIFICATIONS:
            raise UserError(f"unknown plays task {self.plays_task!r}; known: {', '.join(PLAYS_CLASSIFICATIONS)}")
        super().validate()
        return self


def train_classifier(
    body: nn.Module,
    tokenizer,
    train: Sequence[LabelledText],
    cfg: ClassifyConfig,
    labels: Sequence[str] | None = None,
    runtime: Runtime | None = None,
) -> SequenceClassifier:
    """Fine-tune (or probe) ``body`` on ``train``; ``labels`` fixes the label order (default sorted)."""
    if not train:
        raise UserError("no training examples")
    labels = sorted({e.label for e in train}) if labels is None else list(labels)
    if len(labels) < 2:
        raise UserError(f"classification needs at least 2 labels, got {labels}")
    index = {label: i for i, label in enumerate(labels)}
    counts = Counter(e.label for e in train)
    weight = (
        torch.tensor([len(train) / (len(counts) * counts[label]) if counts[label] else 0.0 for label in labels])
        if cfg.balanced
        else None
    )
    torch.manual_seed(cfg.seed)  # the fresh head's initialisation is part of the seeded run
    model = SequenceClassifier(body, labels, cfg.pooling, cfg.freeze, cfg.dropout)
    max_len, device = context_len(body, cfg.max_len), device_of(body)

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = [train[rng.randrange(len(train))] for _ in range(cfg.batch_size)]
        ids, mask = encode_texts(tokenizer, [e.text for e in chosen], config_of(body).family, max_len, device)
        targets = torch.tensor([index[e.label] for e in chosen], device=device)
        return F.cross_entropy(model(ids, mask), targets, weight=None if weight is None else weight.to(device))

    fine_tune(model, step_loss, cfg, head_prefixes=(HEAD_PREFIX,), desc="classify", runtime=runtime)
    return model


@torch.no_grad()
def predict(
    model: SequenceClassifier, tokenizer, texts: Sequence[str], batch_size: int = 64, max_len: int | None = None
) -> list[str]:
    model.eval()
    max_len, device = context_len(model.body, max_len), device_of(model)
    predicted: list[str] = []
    for chunk in batches(len(texts), batch_size):
        ids, mask = encode_texts(tokenizer, [texts[i] for i in chunk], model.body.cfg.family, max_len, device)
        predicted.extend(model.labels[i] for i in model(ids, mask).argmax(dim=-1).tolist())
    return predicted


@dataclass(frozen=True)
class ClassifyScores(Fields):
    """One predictor's accuracy and macro-F1, and each test item's 0/1 (``correct``) and its weight towards
    balanced accuracy (``balanced_correct``: their mean is the mean of per-label recalls), for intervals."""

    accuracy: float
    macro_f1: float
    correct: list[int]
    balanced_correct: list[float]


@dataclass(frozen=True)
class MajorityBaseline(ClassifyScores):
    """The training set's most frequent label predicted for every test item."""

    name: str
    label: str


@dataclass(frozen=True)
class ClassicScores(ClassifyScores):
    """The classic method's scores (``classic.tfidf_logistic_regression``) on the same test items."""

    name: str


@dataclass(frozen=True)
class ClassifyRecord(ClassifyScores, Record):
    """A classifier's scores beside the majority-class baseline, with how they were made (``mode``: finetune,
    probe or zero-shot; ``settings``: the fine-tune's config, empty when it was not fine-tuned here); where it was
    fine-tuned on training rows, the classic method's beside it, on the characters the model read and on whole
    texts, and how many characters of each test text the model read."""

    task: ClassVar[str] = "classify"
    family: str
    mode: str
    pooling: str | None
    n_test: int
    baseline: MajorityBaseline
    settings: dict[str, Any] = field(default_factory=dict)
    classic: ClassicScores | None = None
    classic_whole: ClassicScores | None = None
    chars_read: list[int] | None = None
    chars_given: list[int] | None = None
    # Each test item's label: a per-label metric (balanced accuracy) is recomputed from it on every resample.
    gold: list[str] = field(default_factory=list)


def scores_of(predicted: Sequence[str], gold: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """``ClassifyScores``' fields for ``predicted`` against ``gold``."""
    per_label = Counter(gold)
    # Each item's 0/1 weighted by n / (labels x its label's count): their mean is balanced accuracy (the mean of
    # per-label recalls), so an interval over items can be drawn for it as for accuracy.
    weight = [len(gold) / (len(per_label) * per_label[g]) for g in gold]
    return {
        "accuracy": accuracy(predicted, gold),
        "macro_f1": macro_f1(predicted, gold, labels),
        "correct": [int(p == g) for p, g in zip(predicted, gold)],
        "balanced_correct": [w * (p == g) for w, p, g in zip(weight, predicted, gold)],
    }


def classification_results(
    predicted: Sequence[str],
    gold: Sequence[str],
    train_labels: Sequence[str],
    *,
    family: str,
    mode: str,
    pooling: str | None = None,
    settings: dict[str, Any] | None = None,
) -> ClassifyRecord:
    """Accuracy and macro-F1 beside the majority-class baseline (the train set's most frequent label
    predicted for every test example), with how they were made."""
    labels = sorted(set(gold) | set(train_labels))
    majority = majority_label(train_labels)
    baseline = MajorityBaseline(
        **scores_of([majority] * len(gold), gold, labels), name="majority class", label=majority
    )
    return ClassifyRecord(
        **scores_of(predicted, gold, labels),
        family=family,
        mode=mode,
        pooling=pooling,
        n_test=len(gold),
        baseline=baseline,
        settings=settings or {},
        gold=list(gold),
    )


def evaluate_classifier(
    model: SequenceClassifier,
    tokenizer,
    test: Sequence[LabelledText],
    train_labels: Sequence[str],
    batch_size: int = 64,
    settings: dict[str, Any] | None = None,
    max_len: int | None = None,
) -> ClassifyRecord:
    predicted = predict(model, tokenizer, [e.text for e in test], batch_size, max_len)
    return classification_results(
        predicted,
        [e.label for e in test],
        train_labels,
        family=model.body.cfg.family,
        mode="probe" if model.freeze else "finetune",
        pooling=model.pooling,
        settings=settings,
    )


def with_classic(
    record: ClassifyRecord,
    train: Sequence[LabelledText],
    test: Sequence[LabelledText],
    tokenizer,
    max_len: int,
    family: str,
    balanced: bool = False,
) -> ClassifyRecord:
    """``record`` with TF-IDF + logistic regression fitted on ``train`` beside it (``balanced``: for balanced
    accuracy, ``classic.tfidf_logistic_regression``): on the characters a model of ``family`` reads at ``max_len``
    tokens, and on whole texts; and each test text's characters read and given."""
    gold, labels = [e.label for e in test], sorted({e.label for e in (*train, *test)})
    read_train = chars_read(tokenizer, [e.text for e in train], max_len, family)
    read_test = chars_read(tokenizer, [e.text for e in test], max_len, family)

    def fitted(train_texts: list[str], test_texts: list[str]) -> ClassicScores:
        predicted = tfidf_logistic_regression(train_texts, [e.label for e in train], test_texts, balanced)
        return ClassicScores(**scores_of(predicted, gold, labels), name=TFIDF_LOGISTIC)

    return replace(
        record,
        classic=fitted([e.text[:n] for e, n in zip(train, read_train)], [e.text[:n] for e, n in zip(test, read_test)]),
        classic_whole=fitted([e.text for e in train], [e.text for e in test]),
        chars_read=read_test,
        chars_given=[len(e.text) for e in test],
    )


def settings_of(cfg: ClassifyConfig) -> dict:
    return {k: v for k, v in asdict(cfg).items() if k != "progress"}


# ---- zero-shot by prompting (decoders) -----------------------------------------------------------

DEFAULT_TEMPLATE = "{text}\n\nThe genre of this play is"


@torch.no_grad()
def zero_shot_classify(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    labels: Sequence[str],
    template: str = DEFAULT_TEMPLATE,
    per_token: bool = True,
    batch_size: int = 32,
) -> list[str]:
    """Pick, for each text, the label whose continuation " <label>" of ``template`` is most likely.

    ``per_token`` ranks by mean log-probability per token rather than the sum, so that a label is
    not preferred just for being short (with a character tokenizer "roman" would otherwise beat
    "tragedy" by two characters of probability alone). No training: this is what pretraining alone
    knows, reached through the language-model head."""
    if "{text}" not in template:
        raise UserError("the prompt template must contain {text}")
    label_ids = [tokenizer.encode(f" {label}") for label in labels]
    prompts = [tokenizer.encode(template.format(text=text)) for text in texts]
    pairs_prompt = [p for p in prompts for _ in labels]
    pairs_label = [ids for _ in prompts for ids in label_ids]
    start = start_id_of(model, tokenizer)
    scores = continuation_logprobs(model, pairs_prompt, pairs_label, tokenizer.pad_id, batch_size, start)
    if per_token:
        scores = scores / torch.tensor([len(ids) for ids in pairs_label], dtype=scores.dtype, device=scores.device)
    best = scores.view(len(texts), len(labels)).argmax(dim=-1)
    return [labels[i] for i in best.tolist()]


# ---- the unit: its plays' rows, its run, its commands and its compare rows ---------------------------


@dataclass(frozen=True)
class ClassifyRow(RecordRow[ClassifyRecord]):
    """A classification row: each test text's 0/1, or (``balanced``) that weighted by its label's share, so that their
    mean is balanced accuracy; beside the majority class and TF-IDF + logistic regression."""

    baseline_name: str = "majority class"
    classic_name: str = TFIDF_LOGISTIC
    balanced: bool = False

    def decode(self, stored: dict[str, Any]) -> ClassifyRecord:
        return ClassifyRecord.from_json(stored)

    def items(self, scores: ClassifyScores, gold: Sequence[str]) -> Items:
        """``scores``' per-item 0/1 under this row's metric: balanced accuracy labels each item by its gold label, so
        that every resample recomputes the mean of its own per-label recalls (a record written before its gold labels
        were kept: each item weighted by the whole test set's label shares, a mean that a resample can push past 1)."""
        if not self.balanced:
            return Items(scores.correct)
        if not gold:
            return Items(scores.balanced_correct)
        index = {label: i for i, label in enumerate(sorted(set(gold)))}
        return Items(scores.correct, labels=[index[g] for g in gold])

    def scores(self, record: ClassifyRecord) -> Items:
        return self.items(record, record.gold)

    def baseline(self, record: ClassifyRecord) -> Items:
        return self.items(record.baseline, record.gold)

    def classic(self, record: ClassifyRecord) -> Items | None:
        return None if record.classic is None else self.items(record.classic, record.gold)

    def classic_whole(self, record: ClassifyRecord) -> Items | None:
        return None if record.classic_whole is None else self.items(record.classic_whole, record.gold)

    def read(self, record: ClassifyRecord) -> tuple[list[int], list[int]] | None:
        return chars_read_and_given(record)


class Classify(Task[ClassifyConfig]):
    """Sequence classification: a head on a pooled state, scored beside the majority class and TF-IDF."""

    kind = "classify"
    claim = ENCODER_JOBS
    config = ClassifyConfig
    record = ClassifyRecord
    plays_rows = (PlaysRow("classify", ClassifyRow("line order accuracy (classification)", True)),)
    head = Head(
        SequenceClassifier,
        {"labels": (True, True), "pooling": (False, True), "train_labels": (True, False), "plays_task": (False, False)},
        classes_key="labels",
        hf_classes={"modernbert": "ModernBertForSequenceClassification"},
    )

    def plays(
        self, cfg: ClassifyConfig, model: nn.Module | None, split: str, training: bool
    ) -> tuple[list[LabelledText] | None, list[LabelledText]]:
        """The plays' labelled texts ``cfg.plays_task`` names, ``train_per_label`` / ``test_per_label`` of each."""
        examples = PLAYS_CLASSIFICATIONS[cfg.plays_task]
        train = examples("train", cfg.train_per_label, seed=cfg.data_seed) if training else None
        return train, examples(split, cfg.test_per_label, seed=cfg.test_seed)

    def run(
        self, model, tokenizer, cfg: ClassifyConfig, runtime: Runtime, data, label: str
    ) -> tuple[SequenceClassifier, Callable[[], ClassifyRecord], list[LabelledText]]:
        train, test = data or self.plays(cfg, model, "test", True)
        assert train is not None  # the plays' training rows were asked for
        classifier = train_classifier(model, tokenizer, train, cfg, runtime=runtime)

        def evaluate() -> ClassifyRecord:
            record = evaluate_classifier(
                classifier, tokenizer, test, [e.label for e in train], settings=settings_of(cfg), max_len=cfg.max_len
            )
            return with_classic(
                record,
                every_row(train),
                test,
                tokenizer,
                context_len(model, cfg.max_len),
                model.cfg.family,
                cfg.balanced,
            )

        return classifier, evaluate, test

    def kept(
        self, trained: SequenceClassifier, record: ClassifyRecord, cfg: ClassifyConfig
    ) -> tuple[dict[str, Any], nn.Module, nn.Module]:
        return {"labels": trained.labels, "pooling": trained.pooling, "freeze": cfg.freeze}, trained.body, trained.head

    def summary(self, record: ClassifyRecord) -> str:
        r = record
        how = "zero-shot prompting" if r.mode == "zero-shot" else f"{r.mode}, {r.pooling} pooling"
        classic = (
            f"; {r.classic.name}: accuracy {r.classic.accuracy:.3f} on the same characters, "
            f"{r.classic_whole.accuracy:.3f} on whole texts"
            if r.classic and r.classic_whole
            else ""
        )
        return (
            f"classify ({how}) on {r.n_test} examples: accuracy {r.accuracy:.3f} "
            f"(majority class {r.baseline.accuracy:.3f}), macro-F1 {r.macro_f1:.3f} ({r.baseline.macro_f1:.3f})"
            + classic
        )

    def read(self, spec: TaskSpec) -> UserTask:
        """``read_labelled``'s rows, with the metric their test labels call for (balanced accuracy where imbalanced)
        and, where the test split holds one label, why it cannot separate anything (``UserTask.too_few``)."""
        train, test = read_labelled(spec)
        tested = Counter(e.label for e in test)
        one_label = (
            f"its test split holds one label ({next(iter(tested))!r}), where always answering it scores 1.0"
            if len(tested) < 2
            else None
        )
        balanced = max(tested.values()) >= IMBALANCE * min(tested.values()) and len(tested) > 1
        metric = "balanced accuracy" if balanced else "accuracy"
        return UserTask(
            spec,
            train,
            test,
            len(train),
            len(test),
            distribution([e.label for e in train]),
            {
                "metric": metric,
                "why_metric": (
                    f"test labels imbalanced (largest/smallest {max(tested.values()) / min(tested.values()):.1f}"
                    f" >= {IMBALANCE}): balanced accuracy, the mean of per-label recalls, recomputed on every "
                    "resample; the fine-tunes' loss and the classic method weight each label by the inverse of its "
                    "training count"
                    if balanced
                    else f"test labels balanced within {IMBALANCE}x: accuracy"
                ),
            },
            too_few=one_label,
        )

    def user_rows(self, task: UserTask, cfg: ClassifyConfig) -> tuple[Row, ...]:
        metric = task.details["metric"]
        return (ClassifyRow(f"{task.spec.name}: {metric} (classify)", True, balanced=metric == "balanced accuracy"),)

    def work(self, cfg: ClassifyConfig, task: UserTask | None, per_char: float) -> Work:
        """Each step's batch of texts trained; each test text read once (the plays': two lines of verse)."""
        n, length = (
            (task.test_rows, mean_tokens([e.text for e in task.test], per_char))
            if task
            else (2 * cfg.test_per_label, 80 * per_char)
        )
        length = min(length, cfg.max_len or length)
        return Work(cfg.steps * cfg.batch_size * length, n * length, n / 64)

    def configure(self, cfg: ClassifyConfig, task: UserTask, context: int) -> ClassifyConfig:
        """Within the smallest family's context; class-weighted where the task is read by balanced accuracy."""
        return replace(within_context(cfg, task, context), balanced=task.details["metric"] == "balanced accuracy")
