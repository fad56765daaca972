"""Heads on top of hidden states: the LM head, pooling, a classifier.

The LM head is sparse when training: vocabulary logits are computed only at positions whose label is
not -100. MLM takes a loss on ~15% of positions, so projecting every position onto the vocabulary
(B x T x V, the largest matmul of a small model) would be mostly waste. A caller that needs only the
loss (a CLM training step) asks for no logits at all and gets it from ``linear_cross_entropy``, which
never holds more than a chunk of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.config import ModelConfig
from maskwise.model.layout import project

IGNORE_INDEX = -100


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


# Logit elements per chunk of ``linear_cross_entropy`` (512 rows at V = 8192): 16 MiB in fp32. 256
# rows ran as fast; 128 was slower (thinner matmuls). Larger chunks hold more memory for no gain.
LOSS_CHUNK_ELEMENTS = 2**22
FP32_TINY = torch.finfo(torch.float32).tiny


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``h @ W^T + b``, with its gradients computed in the forward pass.

    Why: the plain path keeps (N, V) logits, their (N, V) log-softmax and, in the backward pass, an
    (N, V) zero-filled NLL gradient and an (N, V) log-softmax gradient; at a small model's sizes
    those element-wise passes cost more than anything but the matmuls. The gradient of the summed
    loss w.r.t. the logits is just ``softmax - onehot(target)``, known as soon as the softmax is,
    so each chunk of rows turns it straight into its part of grad_h, grad_W and grad_b. The
    backward pass only scales the saved gradients by the incoming scalar.

    Every chunk reuses the same few (rows, V) buffers (``out=`` and ``copy_``): glibc hands a
    freed multi-MiB block back to the kernel, so a fresh one per chunk is page-faulted in again,
    and that cost more than the softmax over it (one 512 x 8192 chunk, bf16 logits, 2-core EPYC:
    fp32 cast + softmax + bf16 cast 7.6 ms fresh, 3.0 ms into reused buffers).

    Precision: the matmuls run in ``compute_dtype`` (the autocast dtype under autocast, else the
    inputs' own), the softmax and loss in fp32, as ``F.cross_entropy(logits.float())`` does;
    grad_W and grad_b are accumulated over chunks in fp32. The loss is log(p) at the target; where
    p underflows fp32 (a target more than ~87 nats below the best), that row's log-softmax is
    computed directly instead.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk_rows, compute_dtype, with_grads):
        w = weight.to(compute_dtype)
        b = bias.to(compute_dtype) if bias is not None else None
        x = h.to(compute_dtype)
        fp32_matmuls = compute_dtype == torch.float32
        buffer_rows = min(chunk_rows, x.shape[0])
        vocab = weight.shape[0]
        logits_buffer = x.new_empty(buffer_rows, vocab)  # (rows, V), compute dtype
        fp32_logits_buffer = torch.empty(buffer_rows, vocab, device=x.device) if not fp32_matmuls else None
        probs_buffer = torch.empty(buffer_rows, vocab, device=x.device)  # (rows, V) fp32
        grad_buffer = x.new_empty(buffer_rows, vocab) if not fp32_matmuls and with_grads else None
        grad_w_chunk = w.new_empty(w.shape) if not fp32_matmuls and with_grads else None  # (V, d)
        fp32_grad_w_chunk = torch.empty_like(grad_w_chunk, dtype=torch.float32) if grad_w_chunk is not None else None
        loss_sum = torch.zeros((), dtype=torch.float32, device=h.device)
        if with_grads:
            grad_h = torch.empty_like(h)
            grad_w = torch.zeros_like(weight, dtype=torch.float32)
            grad_b = torch.zeros_like(bias, dtype=torch.float32) if bias is not None else None
        for start in range(0, x.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            x_chunk, chunk_targets = x[rows], targets[rows][:, None]  # (n, d), (n, 1)
            n = x_chunk.shape[0]
            ignored = chunk_targets == IGNORE_INDEX  # (n, 1)
            chunk_targets = chunk_targets.masked_fill(ignored, 0)  # any valid id where ignored
            logits = logits_buffer[:n]  # (n, V)
            if b is None:
                torch.mm(x_chunk, w.T, out=logits)
            else:
                torch.addmm(b, x_chunk, w.T, out=logits)
            if not fp32_matmuls:
                logits = fp32_logits_buffer[:n].copy_(logits)
            probs = torch.softmax(logits, -1, out=probs_buffer[:n])  # (n, V) fp32
            target_p = probs.gather(1, chunk_targets)  # (n, 1)
            target_logp = target_p.log()
            underflow = (target_p < FP32_TINY).squeeze(1)  # (n,): log(p) is -inf or imprecise there
            if underflow.any():
                target_logp[underflow] = torch.log_softmax(logits[underflow], -1).gather(1, chunk_targets[underflow])
            loss_sum -= target_logp.masked_fill(ignored, 0.0).sum()
            if not with_grads:
                continue
            # d loss_sum / d logits = softmax - onehot, formed in fp32 (p - 1 at the targets) and
            # rounded once to the matmul dtype, as autograd's path rounds it.
            grad = probs.scatter_(1, chunk_targets, target_p.sub(1.0))  # (n, V)
            grad.index_fill_(0, ignored.squeeze(1).nonzero().squeeze(1), 0.0)  # only the ignored rows
            if grad_b is not None:
                grad_b += grad.sum(0)  # (V,)
            if not fp32_matmuls:
                grad = grad_buffer[:n].copy_(grad)
                grad_h[rows] = grad @ w  # (n, d)
                torch.mm(grad.T, x_chunk, out=grad_w_chunk)  # (V, d)
                grad_w += fp32_grad_w_chunk.copy_(grad_w_chunk)
            else:
                torch.mm(grad, w, out=grad_h[rows])  # (n, d)
                grad_w.addmm_(grad.T, x_chunk)  # (V, d)
        if with_grads:
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype),
                                  grad_b.to(bias.dtype) if grad_b is not None else None)
        return loss_sum

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        return (grad_h * grad_loss, grad_w * grad_loss, grad_b * grad_loss if grad_b is not None else None,
                None, None, None, None)


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         targets: torch.Tensor, chunk_rows: int | None = None) -> torch.Tensor:
    """``F.cross_entropy(F.linear(h, weight, bias).float(), targets, reduction="sum")`` without ever
    holding more than ``chunk_rows`` rows of logits (see ``_LinearCrossEntropy``; default:
    ``LOSS_CHUNK_ELEMENTS`` logits per chunk).

    h: (N, d); weight: (V, d); bias: (V,) or None; targets: (N,), -100 = no loss. Returns the fp32
    summed loss. Gradients are computed only when autograd will ask for them, so evaluation under
    ``torch.no_grad`` pays for the loss alone."""
    chunk_rows = chunk_rows or max(1, LOSS_CHUNK_ELEMENTS // weight.shape[0])
    device = h.device.type
    compute_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
    with_grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, weight, bias))
    # Autocast is off inside: the function casts its inputs itself, once, to compute_dtype.
    with torch.autocast(device, enabled=False):
        return _LinearCrossEntropy.apply(h, weight, bias, targets, chunk_rows, compute_dtype, with_grads)


class LMHead(nn.Module):
    """Hidden states -> vocabulary logits, optionally through BERT's dense+act+norm transform.

    ``tied_to`` is the token embedding when input and output embeddings are tied. It is kept in a
    plain list so that the shared matrix is registered (and saved) once, under the embedding.
    """

    split_weight: torch.Tensor | None = None  # the vocabulary matrix split for decoding, see ``model.layout``

    def __init__(self, cfg: ModelConfig, tied_to: nn.Embedding | None):
        super().__init__()
        from maskwise.model.transformer import ACTIVATIONS, make_norm

        self.transform = None
        if cfg.lm_head_transform:
            self.transform = nn.Sequential(
                nn.Linear(cfg.d_model, cfg.d_model), _Activation(ACTIVATIONS[cfg.activation]), make_norm(cfg)
            )
        self.input_scale = cfg.lm_head_input_scale
        self._tied_to = [tied_to] if tied_to is not None else []
        self.weight = None if tied_to is not None else nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        if self.weight is not None:
            nn.init.normal_(self.weight, 0.0, cfg.init_std)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.lm_head_bias else None

    def reset_bias(self) -> None:
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    @property
    def vocab_weight(self) -> torch.Tensor:
        return self._tied_to[0].weight if self._tied_to else self.weight

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """What the vocabulary projection reads: h rescaled and transformed (when configured)."""
        if self.input_scale != 1.0:
            h = h * self.input_scale
        if self.transform is not None:
            h = self.transform(h)
        return h

    def decoding_weight(self) -> torch.Tensor:
        return self.vocab_weight

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return project(self.features(h), self.vocab_weight, self.bias, self.split_weight)

    def forward(self, h: torch.Tensor, labels: torch.Tensor | None = None, sparse: bool = True,
                return_logits: bool = True) -> LMOutput:
        """h: (B, T, d); labels: (B, T) with -100 where no loss is taken.

        ``sparse=False`` computes every position's logits first (the reference path the sparse one
        is tested against). ``return_logits=False`` (with labels) returns the loss without logits,
        computed by ``linear_cross_entropy`` in chunks: for training steps that use only the loss."""
        if labels is None:
            if not return_logits:
                raise ValueError("return_logits=False needs labels: without them there is no loss to return")
            return LMOutput(logits=self.logits(h))
        if sparse:
            selected = labels != IGNORE_INDEX  # (B, T)
            h, targets = h[selected], labels[selected]  # (N, d), (N,)
        else:
            h, targets = h.flatten(0, 1), labels.flatten()  # (B*T, d), (B*T,)
        features = self.features(h)
        logits = None
        if return_logits:
            logits = F.linear(features, self.vocab_weight, self.bias)  # (N, V)
            loss_sum = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum")
        else:
            loss_sum = linear_cross_entropy(features, self.vocab_weight, self.bias, targets)
        n = int((targets != IGNORE_INDEX).sum())
        return LMOutput(logits=logits, loss=loss_sum / max(n, 1), loss_sum=loss_sum, n_loss_positions=n)


class _Activation(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
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
    if attention_mask is None:
        attention_mask = torch.ones(B, T, dtype=torch.long, device=hidden.device)
    real = attention_mask.to(torch.bool)  # (B, T)
    positions = torch.arange(T, device=hidden.device).expand(B, T)
    rows = torch.arange(B, device=hidden.device)
    if how == "cls":
        first = torch.where(real, positions, T).min(dim=1).values  # (B,)
        return hidden[rows, first]
    if how == "mean":
        weights = real.to(hidden.dtype)[..., None]  # (B, T, 1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    if how == "last":
        last = torch.where(real, positions, -1).max(dim=1).values  # (B,)
        return hidden[rows, last]
    raise ValueError(f"unknown pooling {how!r}; known: {', '.join(POOLINGS)}")


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
        from maskwise.model.transformer import ACTIVATIONS

        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.act = _Activation(ACTIVATIONS[cfg.activation])
        self.out = nn.Linear(cfg.d_model, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.dense(h))).squeeze(-1)  # (B, T)


class ClassifierHead(nn.Module):
    """Pooled vector -> class logits, with dropout (BERT's sequence classification head)."""

    def __init__(self, d_model: int, n_classes: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, n_classes)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dropout(pooled))
