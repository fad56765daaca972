"""CPU implementations of the operations that ``maskwise.kernels`` dispatches.

Each one measured faster on this project's CPU than torch's own kernel for the same result
(docs/results.md, Performance; ``benchmarks/``). ``maskwise.kernels`` decides when each is taken; nothing here checks
the device.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx

from maskwise.masks import Mask

# --- RMSNorm -------------------------------------------------------------------------------------


class _RMSNormFunction(torch.autograd.Function):
    """y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) over the last dimension, with the
    gradients written out so that they take a few whole-tensor passes:

        grad_w = sum over rows of g * x_hat                      (x_hat = x * rstd)
        grad_x = rstd * (g * w - x_hat * (sum_j g_j w_j x_hat_j) / d)

    ``g * x_hat`` serves both: summed over rows it is grad_w, multiplied by w (one matrix-vector
    product) it is the per-row dot. Computed in fp32 at least (bf16 inputs too), as torch's kernel does.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        d, compute_dtype = x.shape[-1], torch.promote_types(x.dtype, torch.float32)
        rstd = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=compute_dtype)  # (..., 1)
        rstd = rstd.square_().div_(d).add_(eps).rsqrt_()
        normed = x.to(compute_dtype) * rstd  # (..., d)
        ctx.save_for_backward(normed, weight, rstd)
        return (normed * weight).to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        # ctx: Any, as torch's stubs type ``saved_tensors`` a 1-tuple
        normed, weight, rstd = ctx.saved_tensors
        d = normed.shape[-1]
        g, w = grad.to(normed.dtype), weight.to(normed.dtype)
        g_normed = g * normed  # (..., d)
        grad_w = g_normed.reshape(-1, d).sum(0)  # (..., d) -> (d,)
        row_dot = (g_normed @ w).unsqueeze(-1)  # (..., 1): sum_j g_j w_j x_hat_j
        grad_x = (g * w).mul_(rstd).addcmul_(normed, rstd * row_dot / d, value=-1)
        return grad_x.to(grad.dtype), grad_w.to(weight.dtype), None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.rms_norm`` over the last dimension with a hand-written backward. Why: torch's CPU backward
    for it is autograd's decomposition, a dozen element-wise passes; this one takes five."""
    return _RMSNormFunction.apply(x, weight, eps)


# --- attention -----------------------------------------------------------------------------------

# ``maskwise.kernels.attention`` hands attention over more keys than this to fp32 SDPA: the explicit
# (B, H, T, S) scores grow quadratically, and beyond this they cost more than they save.
EXPLICIT_ATTENTION_MAX_KEYS = 512
# ``explicit_attention`` scales q rather than the scores from this many keys per unit of head width: at compare's
# shape (16-wide heads, 256 keys) a bf16 step measured 2-4% faster so, at run_all's (64-wide, 128 keys) no faster.
QUERY_SCALING_KEYS_PER_HEAD_WIDTH = 4
# A padded batch's token-wise work runs on its real tokens alone (``model.packing``) where at most this share of
# its cells are real: fine-tuning steps at compare's width measured 1.04-1.11x faster so in fp32 and 0.98-1.04x in bf16
# at 0.72-0.80, but 1.00-1.05x and 0.96-0.99x at 0.83-0.87 and 0.88-1.01x at 0.91-0.93, where the packing's copies
# cost about what the padding does.
PACK_MAX_REAL_SHARE = 0.8
# ... and packs a multiple of this many rows (the real tokens, then copies of a padding position): oneDNN builds a
# bf16 matmul for each new shape, and a count that changed with every batch made a fine-tune's packed step 3-14%
# slower than the padded one where its batches were all different (as a real fine-tune's are), against 2-7% faster
# where 4 recurred.
PACK_ROW_MULTIPLE = 64


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Mask,
    bias: torch.Tensor | None,
    dropout_p: float,
    scale: float | None,
) -> torch.Tensor:
    """Attention as two matmuls around a softmax: q (B, H, T, hd), k and v (B, H, S, hd) -> (B, H, T, hd).
    Why: under CPU bf16 autocast, torch's bf16 and fp32 flash kernels were both slower than this;
    with T5's bias (which needs a gradient) SDPA's math path does the same matmuls plus a guard for
    fully masked rows and two extra scalings.

    The scores are products rounded once to the matmul dtype, then scaled and masked. With a mask
    they stay in that dtype: torch's CPU softmax and its backward accumulate bf16 in fp32, and the
    probabilities are rounded to bf16 for the second matmul anyway, so fp32 (B, H, T, S) copies
    bought nothing but memory traffic (a CLM layer's forward and backward measured 7.7 ms with them,
    3.9 ms without; docs/results.md, 2026-12-05 session 5). T5's bias is added in fp32, so that its
    gradient, summed over the batch, is not rounded to bf16.

    With keys at least ``QUERY_SCALING_KEYS_PER_HEAD_WIDTH`` times the head width, the scale goes on q
    before the product instead of on the scores after it: q is then a quarter of the scores' size or
    less, and the scores' own scaling pass (and its backward's) is the costlier one."""
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    scale_queries = bias is None and k.shape[2] >= QUERY_SCALING_KEYS_PER_HEAD_WIDTH * q.shape[-1]
    scores = torch.matmul(q * scale if scale_queries else q, k.transpose(-1, -2))  # (B, H, T, S), the matmul dtype
    if bias is not None:
        scores = torch.add(bias, scores.float(), alpha=scale)  # fp32
    else:
        additive = mask.additive(q.shape[2], k.shape[2], q.device, scores.dtype)
        if additive is not None:
            scores = scores.add_(additive) if scale_queries else torch.add(additive, scores, alpha=scale)
        elif not scale_queries:
            scores = scores.mul_(scale)
    probs = torch.softmax(scores, -1)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return torch.matmul(probs, v)  # bf16 under autocast


# --- the fused loss ------------------------------------------------------------------------------

# Logit elements per chunk of ``linear_cross_entropy`` (512 rows at V = 8192): 16 MiB in fp32.
# Smaller chunks measured slower (thinner matmuls); larger ones hold more memory for no gain.
LOSS_CHUNK_ELEMENTS = 2**22
# ``maskwise.kernels.linear_cross_entropy`` takes the fused path for more logits than this (8 MiB in fp32): below
# it torch's own loss was as fast or faster (a character vocabulary's 768 x 128 logits: 0.79x fused in fp32,
# 0.72x in bf16; 4096 x 256: 0.95x / 0.92x; 2048 x 1024: 1.00x / 1.01x), above it the fused one was faster
# (4096 x 1024: 1.25x / 1.56x; 4096 x 2048: 2.89x / 2.97x): docs/results.md, 2026-12-06 fifth session.
LOSS_FUSED_MIN_LOGITS = 2**21
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
    which cost more than the softmax over it.

    Precision: the matmuls run in ``compute_dtype`` (the autocast dtype under autocast, else the
    inputs' own), the softmax and loss in fp32, as ``F.cross_entropy(logits.float())`` does;
    grad_W and grad_b are accumulated over chunks in fp32. The loss is log(p) at the target; where
    p underflows fp32 (a target more than ~87 nats below the best), that row's log-softmax is
    computed directly instead.
    """

    @staticmethod
    def forward(
        ctx: Any,  # torch's stubs refuse the None that ``save_for_backward`` takes
        h: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        ignore_index: int,
        chunk_rows: int,
        compute_dtype: torch.dtype,
        with_grads: bool,
    ) -> torch.Tensor:
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
            ignored = chunk_targets == ignore_index  # (n, 1)
            chunk_targets = chunk_targets.masked_fill(ignored, 0)  # any valid id where ignored
            logits = logits_buffer[:n]  # (n, V)
            if b is None:
                torch.mm(x_chunk, w.T, out=logits)
            else:
                torch.addmm(b, x_chunk, w.T, out=logits)
            if not fp32_matmuls:
                assert fp32_logits_buffer is not None  # made where the matmuls are not fp32
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
                # made where the matmuls are not fp32 and gradients are asked for
                assert grad_buffer is not None and grad_w_chunk is not None and fp32_grad_w_chunk is not None
                grad = grad_buffer[:n].copy_(grad)
                grad_h[rows] = grad @ w  # (n, d)
                torch.mm(grad.T, x_chunk, out=grad_w_chunk)  # (V, d)
                grad_w += fp32_grad_w_chunk.copy_(grad_w_chunk)
            else:
                torch.mm(grad, w, out=grad_h[rows])  # (n, d)
                grad_w.addmm_(grad.T, x_chunk)  # (V, d)
        if with_grads:
            ctx.save_for_backward(
                grad_h,
                grad_w.to(weight.dtype),
                grad_b.to(bias.dtype) if grad_b is not None and bias is not None else None,
            )
        return loss_sum

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # ctx: Any, as torch's stubs type ``saved_tensors`` a 1-tuple
        grad_h, grad_w, grad_b = ctx.saved_tensors
        return (
            grad_h * grad_loss,
            grad_w * grad_loss,
            grad_b * grad_loss if grad_b is not None else None,
            None,
            None,
            None,
            None,
            None,
        )


def linear_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    ignore_index: int,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """``F.cross_entropy(F.linear(h, weight, bias).float(), targets, reduction="sum")`` without ever
    holding more than ``chunk_rows`` rows of logits (see ``_LinearCrossEntropy``; default:
    ``LOSS_CHUNK_ELEMENTS`` logits per chunk).

    h: (N, d); weight: (V, d); bias: (V,) or None; targets: (N,), ``ignore_index`` = no loss. Returns
    the fp32 summed loss. Gradients are computed only when autograd will ask for them, so evaluation
    under ``torch.no_grad`` pays for the loss alone."""
    chunk_rows = chunk_rows or max(1, LOSS_CHUNK_ELEMENTS // weight.shape[0])
    compute_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else h.dtype
    with_grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, weight, bias))
    # Autocast is off inside: the function casts its inputs itself, once, to compute_dtype.
    with torch.autocast("cpu", enabled=False):
        return _LinearCrossEntropy.apply(h, weight, bias, targets, ignore_index, chunk_rows, compute_dtype, with_grads)


# --- the decoding layout -------------------------------------------------------------------------


class DecodingSplit(NamedTuple):
    """A projection laid out for one-row decoding products (``split_for_decoding``)."""

    weight: torch.Tensor  # (S, in, out / S)
    bias: torch.Tensor | None  # (S, 1, out / S), a view of the bias


def split_for_decoding(weight: torch.Tensor, bias: torch.Tensor | None, parts: int) -> DecodingSplit:
    """(out, in) -> (S, in, out / S): the output columns in S blocks, one per thread, for
    ``split_project``; a contiguous copy per block when out >= in, else a view (S = 1 when S does
    not divide out). The bias is viewed as (S, 1, out / S) here, once a call, not once a token.

    Why: a one-row (decoding) product is bound by streaming the weight from memory, and the BLAS runs
    it on one core; one ``bmm`` over the blocks spreads them over the threads (it was no slower for
    prompts of up to 128 rows either). One row reads a wide matrix faster as (in, out / S) blocks, a
    narrowing one faster in its stored (out, in) layout. docs/results.md, Performance; benchmarks/bench_decode.py.
    """
    out_features, in_features = weight.shape
    if out_features % parts:
        parts = 1
    blocks = weight.view(parts, out_features // parts, in_features).transpose(1, 2)  # (S, in, out/S)
    return DecodingSplit(
        blocks.contiguous() if out_features >= in_features else blocks,
        bias.view(parts, 1, out_features // parts) if bias is not None else None,
    )


def split_project(x: torch.Tensor, split: DecodingSplit) -> torch.Tensor:
    """``F.linear`` for x of shape (..., in) as one batched product over ``split_for_decoding``'s
    (S, in, out / S) blocks -> (..., out). A batch of one, (1, T, in), is read as it is: at one token a
    step, every operator less is a few microseconds of a ~0.8 ms step."""
    parts, in_features, part_out = split.weight.shape
    rows = x if x.dim() == 3 and x.shape[0] == 1 else x.reshape(1, -1, in_features)  # (1, N, in)
    rows = rows.expand(parts, -1, -1)  # (S, N, in)
    if split.bias is None:
        y = torch.bmm(rows, split.weight)  # (S, N, out/S)
    else:
        y = torch.baddbmm(split.bias, rows, split.weight)  # (S, N, out/S)
    if y.shape[1] == 1:  # one row (a decoding step): (S, 1, out/S) is already (1, out) in memory
        return y.view(*x.shape[:-1], parts * part_out)
    return y.transpose(0, 1).reshape(*x.shape[:-1], parts * part_out)  # (N, S, out/S) -> (..., out)
