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
baseline, so a number never travels without what it should be compared to.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.data.tasks import (
    LabelledText,
    genre_examples,
    line_order_examples,
    sentence_mark_examples,
    word_order_examples,
)
from maskwise.errors import UserError
from maskwise.families import Family
from maskwise.model.heads import POOLINGS, ClassifierHead, pool
from maskwise.runs import load_weights_into
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.metrics import accuracy, macro_f1, majority_label
from maskwise.tasks.reading import (
    batches,
    context_len,
    device_of,
    encode_texts,
)
from maskwise.tasks.scoring import continuation_logprobs, start_id_of

HEAD_PREFIX = "head."
# The plays' classification tasks: (split, texts per label, seed=) -> the labelled texts.
PLAYS_TASKS = {"genre": genre_examples, "line-order": line_order_examples, "word-order": word_order_examples,
               "sentence-mark": sentence_mark_examples}


def check_pooling(kind: Family, pooling: str | None) -> str:
    """The pooling to use: the family's default (``cfg.kind``), or the one asked for if it makes sense there."""
    pooling = kind.classify_pooling if pooling is None else pooling
    if pooling not in POOLINGS:
        raise UserError(f"unknown pooling {pooling!r}; known: {', '.join(POOLINGS)}")
    if not kind.bidirectional and pooling == "cls":
        raise UserError("cls pooling reads the first token, which a causal decoder sees before the rest of "
                        "the text; use last (or mean)")
    return pooling


class SequenceClassifier(nn.Module):
    """A body of any family plus ``ClassifierHead`` on its pooled hidden states.

    The body is kept under ``body.`` and the head under ``head.`` so that the optimizer's head group
    and the saved files split on a name prefix."""

    def __init__(self, body: nn.Module, labels: Sequence[str], pooling: str | None = None,
                 freeze: bool = False, dropout: float = 0.1):
        super().__init__()
        self.body, self.labels = body, list(labels)
        self.pooling = check_pooling(body.cfg.kind, pooling)
        self.freeze = freeze
        self.head = ClassifierHead.for_body(body.cfg, len(self.labels), dropout).to(device_of(body))
        body.requires_grad_(not freeze)

    def train(self, mode: bool = True) -> SequenceClassifier:
        super().train(mode)
        if self.freeze:
            self.body.eval()  # a probe reads the representation as pretraining left it: no dropout
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.body.read(input_ids, attention_mask)  # (B, T, d)
        return self.head(pool(h, attention_mask, self.pooling))  # (B, n_classes)

    @classmethod
    def from_fine_tune(cls, body: nn.Module, task: dict, head: dict[str, torch.Tensor] | None,
                       where: str) -> SequenceClassifier:
        """The classifier a fine-tune left (``interop.folders.fine_tune_of``: a run's or an HF task class's
        record of labels, pooling and mode, and its head's tensors) on ``body``, in eval mode."""
        model = cls(body, task["labels"], task["pooling"], task.get("freeze", False))
        load_weights_into(model.head, head or {}, f"classifier head of {where}")
        return model.eval()


@dataclass
class ClassifyConfig(FinetuneConfig):
    pooling: str | None = None  # None = the family's default (``Family.classify_pooling``)
    freeze: bool = False  # True = linear probe: only the head trains
    max_len: int | None = None  # None = the model's context
    dropout: float = 0.1
    # The plays' labelled texts when a task is given none (``tasks.run.plays_rows``): one of ``PLAYS_TASKS``,
    # this many of each label.
    plays_task: str = "genre"
    train_per_label: int = 300
    test_per_label: int = 100

    def validate(self) -> ClassifyConfig:
        if self.plays_task not in PLAYS_TASKS:
            raise UserError(f"unknown plays task {self.plays_task!r}; known: {', '.join(PLAYS_TASKS)}")
        super().validate()
        return self


def train_classifier(body: nn.Module, tokenizer, train: Sequence[LabelledText], cfg: ClassifyConfig,
                     labels: Sequence[str] | None = None, runtime: Runtime | None = None) -> SequenceClassifier:
    """Fine-tune (or probe) ``body`` on ``train``; ``labels`` fixes the label order (default sorted)."""
    if not train:
        raise UserError("no training examples")
    labels = sorted({e.label for e in train}) if labels is None else list(labels)
    if len(labels) < 2:
        raise UserError(f"classification needs at least 2 labels, got {labels}")
    index = {label: i for i, label in enumerate(labels)}
    torch.manual_seed(cfg.seed)  # the fresh head's initialisation is part of the seeded run
    model = SequenceClassifier(body, labels, cfg.pooling, cfg.freeze, cfg.dropout)
    max_len, device = context_len(body, cfg.max_len), device_of(body)

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = [train[rng.randrange(len(train))] for _ in range(cfg.batch_size)]
        ids, mask = encode_texts(tokenizer, [e.text for e in chosen], body.cfg.family, max_len, device)
        targets = torch.tensor([index[e.label] for e in chosen], device=device)
        return F.cross_entropy(model(ids, mask), targets)

    fine_tune(model, step_loss, cfg, head_prefixes=(HEAD_PREFIX,), desc="classify", runtime=runtime)
    return model


@torch.no_grad()
def predict(model: SequenceClassifier, tokenizer, texts: Sequence[str], batch_size: int = 64,
            max_len: int | None = None) -> list[str]:
    model.eval()
    max_len, device = context_len(model.body, max_len), device_of(model)
    predicted = []
    for chunk in batches(len(texts), batch_size):
        ids, mask = encode_texts(tokenizer, [texts[i] for i in chunk], model.body.cfg.family, max_len, device)
        predicted.extend(model.labels[i] for i in model(ids, mask).argmax(dim=-1).tolist())
    return predicted


def classification_results(predicted: Sequence[str], gold: Sequence[str], train_labels: Sequence[str],
                           **settings) -> dict:
    """Accuracy and macro-F1 beside the majority-class baseline (the train set's most frequent label
    predicted for every test example), plus whatever ``settings`` say about how they were made.
    ``correct`` holds each test example's 0/1, so that intervals and paired comparisons can be drawn."""
    labels = sorted(set(gold) | set(train_labels))
    majority = majority_label(train_labels)
    baseline = [majority] * len(gold)
    per_label = Counter(gold)
    # Each item's 0/1 weighted by n / (labels x its label's count): their mean is balanced accuracy (the mean of
    # per-label recalls), so an interval over items can be drawn for it as for accuracy.
    weight = [len(gold) / (len(per_label) * per_label[g]) for g in gold]
    return {
        "task": "classify",
        **settings,
        "n_test": len(gold),
        "accuracy": accuracy(predicted, gold),
        "macro_f1": macro_f1(predicted, gold, labels),
        "correct": [int(p == g) for p, g in zip(predicted, gold)],
        "balanced_correct": [w * (p == g) for w, p, g in zip(weight, predicted, gold)],
        "baseline": {"name": "majority class", "label": majority,
                     "accuracy": accuracy(baseline, gold), "macro_f1": macro_f1(baseline, gold, labels),
                     "correct": [int(majority == g) for g in gold],
                     "balanced_correct": [w * (majority == g) for w, g in zip(weight, gold)]},
    }


def evaluate_classifier(model: SequenceClassifier, tokenizer, test: Sequence[LabelledText],
                        train_labels: Sequence[str], batch_size: int = 64, **settings) -> dict:
    predicted = predict(model, tokenizer, [e.text for e in test], batch_size)
    return classification_results(predicted, [e.label for e in test], train_labels, **{
        **settings, "pooling": model.pooling, "mode": "probe" if model.freeze else "finetune",
        "family": model.body.cfg.family})


def settings_of(cfg: ClassifyConfig) -> dict:
    return {k: v for k, v in asdict(cfg).items() if k != "progress"}


# ---- zero-shot by prompting (decoders) -----------------------------------------------------------

DEFAULT_TEMPLATE = "{text}\n\nThe genre of this play is"


@torch.no_grad()
def zero_shot_classify(model: nn.Module, tokenizer, texts: Sequence[str], labels: Sequence[str],
                       template: str = DEFAULT_TEMPLATE, per_token: bool = True,
                       batch_size: int = 32) -> list[str]:
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
