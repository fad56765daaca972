"""Heads on top of hidden states: the LM head, pooling, a classifier.

The LM head is sparse when training: vocabulary logits are computed only at positions whose label is
not -100. MLM takes a loss on ~15% of positions, so projecting every position onto the vocabulary
(B x T x V, the largest matmul of a small model) would be mostly waste. A caller that needs only the
loss (a CLM training step) asks for no logits at all and gets it from ``kernels.linear_cross_entropy``
(on a CPU fused and chunked, never holding more than a chunk of them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from maskwise import kernels
from maskwise.config import ModelConfig
from maskwise.model.layers import ACTIVATIONS, make_norm

IGNORE_INDEX = -100
READ_LABELLED_SHARE = 0.75  # a loss on at most this share of positions reads them alone (``labelled_reading``)


@dataclass
class LMOutput:
    """``logits``: (B, T, V) without labels; with labels, (N, V) at the N labelled positions only
    (in row-major order of the labelled positions), or None when the caller asked for the loss alone
    (``return_logits=False``). ``loss`` is the mean over labelled positions; ``loss_sum`` (fp32) and
    ``n_loss_positions`` let a training loop average over a whole batch that was split into
    micro-batches (a mean of micro-batch means would weight positions unequally)."""

    logits: torch.Tensor | None
    loss: torch.Tensor | None = None
    loss_sum: torch.Tensor | None = None
    n_loss_positions: int = 0
    hidden_states: torch.Tensor | None = None


class LMHead(nn.Module):
    """Hidden states -> vocabulary logits, optionally through BERT's dense+act+norm transform.

    ``tied_to`` is the token embedding when input and output embeddings are tied. It is kept in a
    plain list so that the shared matrix is registered (and saved) once, under the embedding.
    """

    decoding_split: kernels.cpu.DecodingSplit | None = (
        None  # the vocabulary matrix split for decoding, see ``model.layout``
    )

    def __init__(self, cfg: ModelConfig, tied_to: nn.Embedding | None):
        super().__init__()
        self.transform = None
        width = cfg.d_model  # what the vocabulary matrix reads: the transform maps d_model to embedding_width
        if cfg.lm_head_transform:
            width = cfg.embedding_width
            self.transform = dense_act_norm(cfg, width)
        # Tied, no transform, factorised embeddings (an ELECTRA discriminator, a base ElectraModel):
        # d_model-wide features cannot meet an embedding_size-wide token table: no vocabulary projection.
        self.unreadable = tied_to is not None and width != cfg.embedding_width
        self.input_scale = cfg.lm_head_input_scale
        self._tied_to = [tied_to] if tied_to is not None else []
        self.weight = None if tied_to is not None else nn.Parameter(torch.empty(cfg.vocab_size, width))
        if self.weight is not None:
            nn.init.normal_(self.weight, 0.0, cfg.init_std)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.lm_head_bias else None

    def reset_bias(self) -> None:
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    @property
    def vocab_weight(self) -> torch.Tensor:
        if self._tied_to:
            return self._tied_to[0].weight
        assert self.weight is not None  # untied: the head owns its matrix
        return self.weight

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """What the vocabulary projection reads: h rescaled and transformed (when configured)."""
        if self.unreadable:
            raise ValueError(
                "this model has no vocabulary projection: its hidden states are d_model wide and its "
                "tied embeddings embedding_size wide, with no lm_head_transform between; read "
                "hidden_states"
            )
        if self.input_scale != 1.0:
            h = h * self.input_scale
        if self.transform is not None:
            h = self.transform(h)
        return h

    def decoding_params(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.vocab_weight, self.bias

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return kernels.project(self.features(h), self.vocab_weight, self.bias, self.decoding_split)

    def forward(
        self, h: torch.Tensor, labels: torch.Tensor | None = None, sparse: bool = True, return_logits: bool = True
    ) -> LMOutput:
        """h: (B, T, d); labels: (B, T) with -100 where no loss is taken.

        ``sparse=False`` computes every position's logits first (the reference path the sparse one
        is tested against). ``return_logits=False`` (with labels) returns the loss without logits,
        computed by ``kernels.linear_cross_entropy``: for training steps that use only the loss."""
        if labels is None:
            if not return_logits:
                raise ValueError("return_logits=False needs labels: without them there is no loss to return")
            return LMOutput(logits=self.logits(h))
        selected = labels != IGNORE_INDEX  # (B, T)
        n = int(selected.sum())  # the one read of a tensor
        if sparse and n < labels.numel():  # every position labelled (CLM): no gather, no scatter back
            h, targets = h[selected], labels[selected]  # (N, d), (N,)
        else:
            h, targets = h.flatten(0, 1), labels.flatten()  # (B*T, d), (B*T,)
        features = self.features(h)
        logits = None
        if return_logits:
            logits = F.linear(features, self.vocab_weight, self.bias)  # (N, V)
            loss_sum = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum")
        else:
            loss_sum = kernels.linear_cross_entropy(features, self.vocab_weight, self.bias, targets, IGNORE_INDEX)
        return LMOutput(logits=logits, loss=loss_sum / max(n, 1), loss_sum=loss_sum, n_loss_positions=n)


def labelled_reading(labels: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The positions a forward with a loss on ``labels`` (B, T) reads (an LM's, a tagger's), for ``Stack``'s
    ``read_at``, and the labels there: (B, R) positions, each row's labelled ones (label not -100) in order, R
    the most any row has (a row with fewer fills its last slots with unlabelled positions, whose label is -100,
    so a selection by label keeps the labelled ones in the same order), and their (B, R) labels. (None, labels)
    where no position is labelled, or where R is more than ``READ_LABELLED_SHARE`` of the positions: then
    every position is read (a causal stack keeps its built-in causal kernel)."""
    if labels is None:
        return None, None
    unlabelled = labels == IGNORE_INDEX  # (B, T)
    R = labels.shape[1] - int(unlabelled.sum(dim=1).min())
    if R == 0 or R > READ_LABELLED_SHARE * labels.shape[1]:
        return None, labels
    read_at = torch.argsort(unlabelled.to(torch.uint8), dim=1, stable=True)[:, :R]  # (B, R): labelled first
    return read_at, labels.gather(1, read_at)


def dense_act_norm(cfg: ModelConfig, width: int) -> nn.Sequential:
    """BERT's and ModernBERT's head transform, d_model -> ``width``: dense, the body's activation, its norm."""
    return nn.Sequential(
        nn.Linear(cfg.d_model, width, bias=cfg.lm_head_transform_bias),
        _Activation(ACTIVATIONS[cfg.activation]),
        make_norm(cfg, width),
    )


class _Activation(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


POOLINGS = ("cls", "mean", "last")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None, how: str) -> torch.Tensor:
    """One vector per sequence from (B, T, d) hidden states.

    - ``cls``: the first position (BERT puts ``[CLS]`` there; with left padding, the first real token).
    - ``mean``: the mean over real (non-padding) tokens only.
    - ``last``: the last real token, correct under both left and right padding — the only position
      a causal model has seen the whole sequence from.
    """
    B, T, _ = hidden.shape
    if how in ONE_POSITION_POOLINGS:
        return hidden[torch.arange(B, device=hidden.device), pooled_position(attention_mask, how, B, T)]
    if how == "mean":
        real = attention_mask if attention_mask is not None else torch.ones(B, T, device=hidden.device)
        weights = real.to(hidden.dtype)[..., None]  # (B, T, 1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    raise ValueError(f"unknown pooling {how!r}; known: {', '.join(POOLINGS)}")


ONE_POSITION_POOLINGS = ("cls", "last")  # the poolings that read one position: a body can compute it alone


def pooled_position(attention_mask: torch.Tensor | None, how: str, B: int, T: int) -> torch.Tensor:
    """(B,) the position a ``cls`` or ``last`` pooling reads in each row: the first or last real token."""
    positions = torch.arange(T, device=attention_mask.device if attention_mask is not None else None)
    if attention_mask is None:
        return positions[0 if how == "cls" else T - 1].expand(B)
    real = attention_mask.to(torch.bool)  # (B, T)
    if how == "cls":
        return torch.where(real, positions, T).min(dim=1).values  # (B,)
    return torch.where(real, positions, -1).max(dim=1).values  # (B,)


@dataclass
class RTDOutput:
    """``logits``: (B, T), > 0 = "this token was replaced"; ``loss``: mean binary cross-entropy over
    the positions whose label is not -100 (labels: 1 = replaced, 0 = original)."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None


class RTDHead(nn.Module):
    """ELECTRA's replaced-token-detection head: dense d -> d, activation, dense d -> 1, per token."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.act = _Activation(ACTIVATIONS[cfg.activation])
        self.out = nn.Linear(cfg.d_model, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.dense(h))).squeeze(-1)  # (B, T)


class ClassifierHead(nn.Module):
    """Pooled vector (or each position's state) -> class logits: dropout and a linear layer, as BERT's
    task heads; with ``transform``, a dense + act + norm first (``dense_act_norm``), as ModernBERT's."""

    def __init__(self, d_model: int, n_classes: int, dropout: float = 0.1, transform: ModelConfig | None = None):
        super().__init__()
        self.transform = dense_act_norm(transform, d_model) if transform is not None else None
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, n_classes)

    @classmethod
    def for_body(cls, cfg: ModelConfig, n_classes: int, dropout: float = 0.1) -> ClassifierHead:
        """The head a body of layout ``cfg`` is fine-tuned with (its transform where ``classifier_transform``)."""
        return cls(cfg.d_model, n_classes, dropout, cfg if cfg.classifier_transform else None)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        if self.transform is not None:
            pooled = self.transform(pooled)
        return self.proj(self.dropout(pooled))
