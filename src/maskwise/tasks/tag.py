"""Token classification: one tag per word, read off the hidden state of the word's last token.

Why the last token: it is where the word has been read whole. A bidirectional body (an encoder, or an
encoder-decoder's encoder) has also read everything after it there; a causal decoder has read only
what came before. Tags that depend on the right context (a comma before "and", a name's end) are
the structural difference between the families that a small model can show, which is what the
plays' punctuation task measures (``data.tagging``).

The head is ``ClassifierHead`` applied at every position (dropout + linear, as HF's
``*ForTokenClassification``), kept under ``head.`` beside the body for the optimizer's head group
and the saved files. Words cut off by ``max_len`` are predicted ``O`` and counted (``truncated_words``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.data.tagging import (
    OUTSIDE,
    TaggedText,
    punctuation_examples,
    rejoined,
    windows_of,
)
from maskwise.data.task_readers import read_tagged
from maskwise.data.user_tasks import TaskSpec, UserTask, distribution
from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX, ClassifierHead, labelled_reading
from maskwise.padding import pad
from maskwise.runs import load_weights_into
from maskwise.runtime import Runtime
from maskwise.tasks.classic import most_frequent_tags
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.reading import (
    batches,
    body_of,
    closing,
    config_of,
    context_len,
    device_of,
    encoded,
    frame,
    frame_extra,
    text_room,
)
from maskwise.tasks.tag_scores import PunctuationRow, TagRecord, TagRow, checked_scheme, tagging_results
from maskwise.tasks.unit import (
    ENCODER_JOBS,
    Head,
    PlaysRow,
    Row,
    Task,
    Work,
    every_row,
    mean_tokens,
)

HEAD_PREFIX = "head."


@dataclass
class TagConfig(FinetuneConfig):
    max_len: int | None = None  # tokens read per text; None = the model's context
    dropout: float = 0.1
    train_windows: int = 4000  # the plays' punctuation windows (``tasks.run.plays_rows``)
    test_windows: int = 1000
    window_chars: int | None = None  # None: what fits the model's context
    # Where a word's tag is read: its last token (a causal reader has then read the whole word; the default) or its
    # first (HF's convention for word labels; a causal reader has then seen only the word's start).
    read_out: str = "last"

    def validate(self) -> TagConfig:
        if self.read_out not in READ_OUTS:
            raise UserError(f"read_out must be one of {', '.join(READ_OUTS)}, got {self.read_out!r}")
        super().validate()
        return self


READ_OUTS = ("last", "first")


class TokenTagger(nn.Module):
    """A body of any family plus a per-position ``ClassifierHead``: ``(B, T)`` ids -> ``(B, T, tags)``."""

    def __init__(self, body: nn.Module, tags: Sequence[str], dropout: float = 0.1, read_out: str = "last"):
        super().__init__()
        self.body, self.tags, self.read_out = body_of(body), list(tags), read_out
        self.head = ClassifierHead.for_body(self.body.cfg, len(self.tags), dropout).to(device_of(body))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, read_at: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, T) -> (B, T, n_tags); at the positions ``read_at`` (B, R) alone, (B, R, n_tags)."""
        return self.head(self.body.read(input_ids, attention_mask, read_at))  # (B, T or R, n_tags)

    def labelled_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, n_tags) logits at the N labelled positions of ``labels`` (B, T), row-major, and their (N,)
        labels. The body's last layer reads those positions alone where they are few (``heads.labelled_reading``:
        a word's one token in five or so under a character tokenizer)."""
        read_at, at = labelled_reading(labels)
        assert at is not None  # labels were given: their values at the positions read
        chosen = at != IGNORE_INDEX  # (B, T or R)
        return self(input_ids, attention_mask, read_at)[chosen], at[chosen]

    @classmethod
    def from_fine_tune(
        cls, body: nn.Module, task: dict, head: dict[str, torch.Tensor] | None, where: str
    ) -> TokenTagger:
        """The tagger a fine-tune left (``interop.folders.fine_tune_of``: a run's or an HF task class's
        record of tags, and its head's tensors) on ``body``, in eval mode."""
        read_out = task.get("read_out", "last")  # folders written before it was recorded read at the last token
        if read_out not in READ_OUTS:
            raise UserError(f"{where}: its task record reads words at {read_out!r}; known: {', '.join(READ_OUTS)}")
        model = cls(body, task["tags"], read_out=read_out)
        load_weights_into(model.head, head or {}, f"tagger head of {where}")
        return model.eval()


def word_positions(
    tokenizer, example: TaggedText, family: str, max_len: int, read_out: str = "last"
) -> tuple[list[int], list[int]]:
    """The framed ids of ``example`` (cut to ``max_len``) and, per word, the position of the token
    that holds its last character (``read_out`` "first": its first), -1 where the cut left that token out."""
    [text] = encoded(tokenizer, [example.text])
    ends, shift = text.ends, frame_extra(family)
    room = text_room(tokenizer, family, max_len)
    positions, token = [], 0
    for word, end in zip(example.words, example.word_ends()):
        char = end if read_out == "last" else end - len(word) + 1  # offsets end past their last character
        while token < len(ends) and ends[token] < char:
            token += 1
        positions.append(token + shift if token < min(room, len(ends)) else -1)
    return frame(tokenizer, text.ids[:room], family) + closing(tokenizer, family), positions


def _batch(tokenizer, examples: Sequence[TaggedText], family: str, max_len: int, device, read_out: str = "last"):
    framed, positions = zip(*(word_positions(tokenizer, e, family, max_len, read_out) for e in examples))
    ids, mask = pad(list(framed), tokenizer.pad_id, "right", device)
    return ids, mask, positions


def train_tagger(
    body: nn.Module,
    tokenizer,
    train: Sequence[TaggedText],
    cfg: TagConfig,
    tags: Sequence[str] | None = None,
    runtime: Runtime | None = None,
) -> TokenTagger:
    """Fine-tune ``body`` and a fresh per-token head on ``train``; ``tags`` fixes the tag order
    (default: sorted, ``O`` first)."""
    if not train:
        raise UserError("no training sentences")
    seen = {t for e in train for t in e.tags}
    tags = sorted(seen, key=lambda t: (t != OUTSIDE, t)) if tags is None else list(tags)
    if len(tags) < 2:
        raise UserError(f"tagging needs at least 2 tags, got {tags}")
    index = {tag: i for i, tag in enumerate(tags)}
    torch.manual_seed(cfg.seed)  # the fresh head's initialisation is part of the seeded run
    model = TokenTagger(body, tags, cfg.dropout, cfg.read_out)
    max_len, device = context_len(body, cfg.max_len), device_of(body)

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = [train[rng.randrange(len(train))] for _ in range(cfg.batch_size)]
        ids, mask, positions = _batch(tokenizer, chosen, config_of(body).family, max_len, device, cfg.read_out)
        labels = torch.full(ids.shape, IGNORE_INDEX, dtype=torch.long)  # (B, T): a label at each word's last token
        for row, (example, where) in enumerate(zip(chosen, positions)):
            for tag, position in zip(example.tags, where):
                if position >= 0:
                    labels[row, position] = index[tag]
        logits, targets = model.labelled_logits(ids, mask, labels.to(device))  # (N, n_tags), (N,)
        return F.cross_entropy(logits.float(), targets)

    fine_tune(model, step_loss, cfg, head_prefixes=(HEAD_PREFIX,), desc="tag", runtime=runtime)
    return model


@torch.no_grad()
def predict_tags(
    model: TokenTagger, tokenizer, examples: Sequence[TaggedText], batch_size: int = 64, max_len: int | None = None
) -> tuple[list[list[str]], int]:
    """Each example's predicted tag per word, and how many words the length cut left unread (tagged ``O``)."""
    model.eval()
    max_len, device = context_len(model.body, max_len), device_of(model)
    outside = OUTSIDE if OUTSIDE in model.tags else model.tags[0]
    predicted, truncated = [], 0
    for chunk in batches(len(examples), batch_size):
        ids, mask, positions = _batch(
            tokenizer, [examples[i] for i in chunk], model.body.cfg.family, max_len, device, model.read_out
        )
        read = torch.full(ids.shape, IGNORE_INDEX, device=device)  # (B, T): 0 at the positions a word is read at
        for row, where in enumerate(positions):
            read[row, [p for p in where if p >= 0]] = 0
        best = iter(model.labelled_logits(ids, mask, read)[0].argmax(dim=-1).tolist())  # row-major, as ``read``
        for where in positions:
            tag_at = {p: model.tags[next(best)] for p in sorted({p for p in where if p >= 0})}
            predicted.append([tag_at.get(p, outside) for p in where])  # -1 (cut): outside
            truncated += sum(p < 0 for p in where)
    return predicted, truncated


def tag_counts(examples: Sequence[TaggedText]) -> dict[str, int]:
    """How often each tag occurs: what the baselines are drawn from (a fine-tune keeps its training set's)."""
    return dict(Counter(t for e in examples for t in e.tags))


def evaluate_tagger(
    model: TokenTagger,
    tokenizer,
    test: Sequence[TaggedText],
    train_counts: dict[str, int],
    max_len: int | None = None,
    batch_size: int = 64,
    train: Sequence[TaggedText] | None = None,
    window_chars: int | None = None,
) -> TagRecord:
    """The tagger's scores on ``test``; with its ``train`` rows, the classic word tagger's beside them. With
    ``window_chars``, each test text is read in windows of whole words that the context holds (``windows_of``) and
    scored whole, on its own sentence, as the field scores it: an entity a window edge cuts is still one entity."""
    if window_chars is None:
        predicted, truncated = predict_tags(model, tokenizer, test, batch_size, max_len)
    else:
        in_windows, truncated = predict_tags(
            model, tokenizer, windows_of(list(test), window_chars), batch_size, max_len
        )
        predicted = rejoined(test, in_windows)
    # The classic tagger's tags: none without ``train``, an empty list for empty rows (nothing to fit it on).
    classic = None if train is None else (most_frequent_tags(train, test) if train else [])
    return tagging_results(
        predicted,
        test,
        train_counts,
        family=model.body.cfg.family,
        tags=model.tags,
        truncated_words=truncated,
        classic=classic,
    )


# ---- the unit: its plays' rows, its run, its commands and its compare rows ---------------------------


def _window_chars(cfg: TagConfig, model: nn.Module | None) -> int:
    """The config's window, else what fits the context: a character a token at worst, and [CLS]."""
    if cfg.window_chars:
        return cfg.window_chars
    assert model is not None, "the plays' windows fit a model's context unless window_chars is set"
    return max(20, config_of(model).max_seq_len - 1)


class Tag(Task[TagConfig]):
    """Token classification: a tag for each word, read at one of its characters' positions."""

    kind = "tag"
    claim = ENCODER_JOBS
    config = TagConfig
    record = TagRecord
    # Per text, paired with the verse rule on the same text: whether a mark follows a word is decided by
    # what comes after it, which only a bidirectional reader has seen.
    plays_rows = (PlaysRow("tag", PunctuationRow("punctuation restoration F1 per text (tagging)", True)),)
    # Read at the last character, a causal reader has read the whole word; at the first it has seen one
    # character of it: on tags that the word itself decides (part of speech) this can decide the verdict.
    variants: ClassVar[dict[str, dict[str, Any]]] = {"first": {"read_out": "first"}}
    head = Head(
        TokenTagger,
        {"tags": (True, True)},
        classes_key="tags",
        hf_classes={"bert": "BertForTokenClassification", "modernbert": "ModernBertForTokenClassification"},
    )

    def plays(
        self, cfg: TagConfig, model: nn.Module | None, split: str, training: bool
    ) -> tuple[list[TaggedText] | None, list[TaggedText]]:
        """The plays' punctuation windows: ``train_windows`` of the train split's, ``test_windows`` of the split's."""
        chars = _window_chars(cfg, model)
        train = punctuation_examples("train", chars, limit=cfg.train_windows, seed=cfg.data_seed) if training else None
        return train, punctuation_examples(split, chars, limit=cfg.test_windows, seed=cfg.test_seed)

    def run(
        self, model, tokenizer, cfg: TagConfig, runtime: Runtime, data, label: str
    ) -> tuple[TokenTagger, Callable[[], TagRecord], list[TaggedText]]:
        train, test = data or self.plays(cfg, model, "test", True)
        assert train is not None  # the plays' training rows were asked for
        tagger = train_tagger(model, tokenizer, train, cfg, runtime=runtime)
        counts = tag_counts(train)

        def evaluate() -> TagRecord:
            # A user's texts are read in windows and scored whole; the plays' rows are windows already.
            window = _window_chars(cfg, model) if data else None
            return evaluate_tagger(
                tagger, tokenizer, test, counts, cfg.max_len, train=every_row(train), window_chars=window
            )

        return tagger, evaluate, test

    def kept(
        self, trained: TokenTagger, record: TagRecord, cfg: TagConfig
    ) -> tuple[dict[str, Any], nn.Module, nn.Module]:
        return (
            {"tags": trained.tags, "train_counts": record.train_counts, "read_out": trained.read_out},
            trained.body,
            trained.head,
        )

    def summary(self, record: TagRecord) -> str:
        r, base, rule = record, record.baseline, record.line_break_rule
        entity = ""
        if r.entity:
            assert base.entity is not None  # scored on the same gold tags, a span scheme for both
            entity = f"; entity F1 {r.entity['f1']:.3f} (most frequent tag {base.entity['f1']:.3f})"
        return (
            f"tag ({r.family}) {r.n_words} words of {r.n_test} texts: F1 {r.micro.f1:.3f} "
            f"(most frequent tag {base.micro.f1:.3f}, {rule.name} {rule.micro.f1:.3f}), "
            f"detection F1 {r.detection.f1:.3f} ({base.detection.f1:.3f}, {rule.detection.f1:.3f}), "
            f"macro-F1 {r.macro_f1:.3f}"
            + entity
            + (f"; {r.classic.name}: F1 {r.classic.micro.f1:.3f}" if r.classic else "")
        )

    def read(self, spec: TaskSpec) -> UserTask:
        """``read_tagged``'s rows, with the score their training tags call for (entity F1 for a span scheme)."""
        train, test = read_tagged(spec)
        tags = Counter(t for e in train for t in e.tags)
        scheme = checked_scheme(tags, f"task {spec.name}")
        rules = "default (CoNLL) mode" if scheme == "IOB" else "strict mode (a chunk the scheme leaves open is none)"
        why = (
            f"its tags are a span scheme ({scheme}): entities scored as seqeval's {rules} scores them, "
            "precision, recall and F1 pooled over the test set, its interval from redrawing sentences (documents "
            "where the file marks them)"
            if scheme
            else "its tags are no span scheme (no B-/I-/E-/S-/L-/U- of a type): each word's tag counts on its own, "
            "F1 over the tags other than O within each text, averaged over texts"
        )
        return UserTask(
            spec,
            train,
            test,
            len(train),
            len(test),
            distribution([t for e in train for t in e.tags]),
            {
                "read_out": "each word's last character, where a causal reader has read the whole word "
                "(judged); its first character reported beside it (`.first`)",
                "scheme": scheme,
                "why_metric": why,
            },
        )

    def user_rows(self, task: UserTask, cfg: TagConfig) -> tuple[Row, ...]:
        """Entity F1 pooled over the test set where the tags are a span scheme (the field's score: CoNLL's for IOB,
        seqeval strict's for IOBES and BILOU; always-O scores 0), else each text's F1 over its tags averaged over
        texts; read where ``cfg.read_out`` says. Fixed by the training tags when the file is read, before any number
        is seen."""
        where = f"read at each word's {cfg.read_out} character"
        scheme = task.details.get("scheme")
        if scheme:
            rules = "CoNLL" if scheme == "IOB" else "seqeval strict"
            label = f"{task.spec.name}: entity F1 pooled over the test set ({scheme}, {rules}), {where} (tag)"
            return (TagRow(label, True, entities=True),)
        return (TagRow(f"{task.spec.name}: F1 per text, {where} (tag)", True),)

    def work(self, cfg: TagConfig, task: UserTask | None, per_char: float) -> Work:
        """Each step's batch of windows trained; each test window read once."""
        window = cfg.window_chars or 120
        n, length = (
            (task.test_rows, mean_tokens(self.texts(task.test), per_char))
            if task
            else (cfg.test_windows, window * per_char)
        )
        length = min(length, window * per_char + 2)
        return Work(cfg.steps * cfg.batch_size * length, n * length, n / 64)

    def configure(self, cfg: TagConfig, task: UserTask, context: int) -> TagConfig:
        return replace(cfg, window_chars=context - 2)  # room for [CLS], [SEP]

    def run_data(self, task: UserTask, cfg: TagConfig) -> tuple[list[TaggedText], list[TaggedText]]:
        """A user's training texts cut into windows of whole words that every family's context holds, and the test
        texts whole (read in such windows, scored on the text: ``evaluate_tagger``)."""
        assert cfg.window_chars is not None  # ``configure`` fitted it to the smallest context
        return windows_of(task.train, cfg.window_chars), task.test

    def texts(self, rows: Sequence[TaggedText]) -> list[str]:
        return [" ".join(e.words) for e in rows]
