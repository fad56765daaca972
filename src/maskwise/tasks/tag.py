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
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.data.tagging import OUTSIDE, TaggedText
from maskwise.errors import UserError
from maskwise.model.heads import IGNORE_INDEX, ClassifierHead
from maskwise.padding import pad
from maskwise.runs import load_weights_into
from maskwise.runtime import Runtime
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.metrics import accuracy, tag_scores
from maskwise.tasks.reading import batches, context_len, device_of, frame, frame_extra

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
        return super().validate()


READ_OUTS = ("last", "first")


class TokenTagger(nn.Module):
    """A body of any family plus a per-position ``ClassifierHead``: ``(B, T)`` ids -> ``(B, T, tags)``."""

    def __init__(self, body: nn.Module, tags: Sequence[str], dropout: float = 0.1, read_out: str = "last"):
        super().__init__()
        self.body, self.tags, self.read_out = body, list(tags), read_out
        self.head = ClassifierHead.for_body(body.cfg, len(self.tags), dropout).to(device_of(body))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.body.read(input_ids, attention_mask))  # (B, T, n_tags)

    @classmethod
    def from_fine_tune(cls, body: nn.Module, task: dict, head: dict[str, torch.Tensor] | None,
                       where: str) -> TokenTagger:
        """The tagger a fine-tune left (``interop.folders.fine_tune_of``: a run's or an HF task class's
        record of tags, and its head's tensors) on ``body``, in eval mode."""
        read_out = task.get("read_out", "last")  # folders written before it was recorded read at the last token
        if read_out not in READ_OUTS:
            raise UserError(f"{where}: its task record reads words at {read_out!r}; known: {', '.join(READ_OUTS)}")
        model = cls(body, task["tags"], read_out=read_out)
        load_weights_into(model.head, head or {}, f"tagger head of {where}")
        return model.eval()


def word_positions(tokenizer, example: TaggedText, family: str, max_len: int,
                   read_out: str = "last") -> tuple[list[int], list[int]]:
    """The framed ids of ``example`` (cut to ``max_len``) and, per word, the position of the token
    that holds its last character (``read_out`` "first": its first), -1 where the cut left that token out."""
    ids, offsets = tokenizer.encode_offsets(example.text)
    shift = frame_extra(family)
    room = max_len - shift
    positions, token = [], 0
    for word, end in zip(example.words, example.word_ends()):
        char = end if read_out == "last" else end - len(word) + 1  # offsets end past their last character
        while token < len(offsets) and offsets[token][1] < char:
            token += 1
        positions.append(token + shift if token < min(room, len(offsets)) else -1)
    return frame(tokenizer, ids[:room], family), positions


def _batch(tokenizer, examples: Sequence[TaggedText], family: str, max_len: int, device, read_out: str = "last"):
    framed, positions = zip(*(word_positions(tokenizer, e, family, max_len, read_out) for e in examples))
    ids, mask = pad(list(framed), tokenizer.pad_id, "right", device)
    return ids, mask, positions


def train_tagger(body: nn.Module, tokenizer, train: Sequence[TaggedText], cfg: TagConfig,
                 tags: Sequence[str] | None = None, runtime: Runtime | None = None) -> TokenTagger:
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
        ids, mask, positions = _batch(tokenizer, chosen, body.cfg.family, max_len, device, cfg.read_out)
        labels = torch.full(ids.shape, IGNORE_INDEX, dtype=torch.long)  # (B, T): a label at each word's last token
        for row, (example, where) in enumerate(zip(chosen, positions)):
            for tag, position in zip(example.tags, where):
                if position >= 0:
                    labels[row, position] = index[tag]
        logits = model(ids, mask)  # (B, T, n_tags)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.to(device).flatten(), ignore_index=IGNORE_INDEX)

    fine_tune(model, step_loss, cfg, head_prefixes=(HEAD_PREFIX,), desc="tag", runtime=runtime)
    return model


@torch.no_grad()
def predict_tags(model: TokenTagger, tokenizer, examples: Sequence[TaggedText], batch_size: int = 64,
                 max_len: int | None = None) -> tuple[list[list[str]], int]:
    """Each example's predicted tag per word, and how many words the length cut left unread (tagged ``O``)."""
    model.eval()
    max_len, device = context_len(model.body, max_len), device_of(model)
    outside = OUTSIDE if OUTSIDE in model.tags else model.tags[0]
    predicted, truncated = [], 0
    for chunk in batches(len(examples), batch_size):
        ids, mask, positions = _batch(tokenizer, [examples[i] for i in chunk], model.body.cfg.family, max_len, device,
                                      model.read_out)
        best = model(ids, mask).argmax(dim=-1).cpu()  # (B, T)
        for row, where in enumerate(positions):
            predicted.append([model.tags[best[row, p]] if p >= 0 else outside for p in where])
            truncated += sum(p < 0 for p in where)
    return predicted, truncated


def tag_counts(examples: Sequence[TaggedText]) -> dict[str, int]:
    """How often each tag occurs: what the baselines are drawn from (a fine-tune keeps its training set's)."""
    return dict(Counter(t for e in examples for t in e.tags))


def tagging_results(predicted: Sequence[Sequence[str]], test: Sequence[TaggedText], train_counts: dict[str, int],
                    **settings) -> dict:
    """Per-word scores (``tag_scores``) beside two trivial baselines: every word tagged with the
    training set's most frequent tag, and the most frequent other tag placed before every line
    break (the verse rule, strong for punctuation), and each word's 0/1 for intervals."""
    gold = [t for e in test for t in e.tags]
    flat = [t for row in predicted for t in row]
    counts = Counter(train_counts)
    majority = counts.most_common(1)[0][0]
    marked = Counter({t: n for t, n in counts.items() if t != OUTSIDE}).most_common(1)
    rule_tag = marked[0][0] if marked else OUTSIDE
    rule_rows = [[rule_tag if s == "\n" else OUTSIDE for s in e.separators] for e in test]
    rule = [t for row in rule_rows for t in row]
    return {
        "task": "tag", **settings, "n_test": len(test), "n_words": len(gold),
        "accuracy": accuracy(flat, gold), **tag_scores(flat, gold, OUTSIDE),
        "correct": [int(p == g) for p, g in zip(flat, gold)],
        "per_example": {"f1": window_f1(predicted, test)},
        "baseline": {"name": "most frequent tag", "tag": majority,
                     **tag_scores([majority] * len(gold), gold, OUTSIDE),
                     "per_example": {"f1": window_f1([[majority] * len(e.tags) for e in test], test)}},
        "line_break_rule": {"name": f"{rule_tag!r} before every line break", **tag_scores(rule, gold, OUTSIDE),
                            "per_example": {"f1": window_f1(rule_rows, test)}},
    }


def window_f1(predicted: Sequence[Sequence[str]], test: Sequence[TaggedText]) -> list[float]:
    """Each text's micro F1 on its own: the items an interval over texts resamples."""
    return [tag_scores(row, e.tags, OUTSIDE)["micro"]["f1"] for row, e in zip(predicted, test)]


def evaluate_tagger(model: TokenTagger, tokenizer, test: Sequence[TaggedText], train_counts: dict[str, int],
                    max_len: int | None = None, batch_size: int = 64) -> dict:
    predicted, truncated = predict_tags(model, tokenizer, test, batch_size, max_len)
    return tagging_results(predicted, test, train_counts, family=model.body.cfg.family, tags=model.tags,
                           truncated_words=truncated)
