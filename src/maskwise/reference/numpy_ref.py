"""A from-scratch NumPy forward pass of every maskwise layout: the test oracle for the torch model.

Why it exists: a model that is only ever compared with itself can be consistently wrong (a mask off
by one, a norm on the wrong side of the residual, a RoPE half swapped). This module recomputes the
logits with nothing in common with ``maskwise.model`` — no torch, its own masks, its own masked
softmax, norms, activations, RoPE and T5 bucketing — in float64, from the same weights. Where the
two agree to fp32 rounding, both compute the layout that ``ModelConfig`` describes; where they
disagree, one of them has a bug.

It reads the weights by their ``state_dict`` names (``{k: v.numpy() for k, v in
model.state_dict().items()}``; a tied LM head has no entry of its own and reads ``embed.weight``),
and refuses a weight it never read: an unread weight means the two implementations disagree about
what the layout contains.

Written to be read, not to be fast: a loop over layers and plain matrix products, no KV cache.
Shapes: B batch, T sequence, S source sequence, d model width, H heads, hd head width, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from maskwise.config import ModelConfig

# Python's erf is correctly rounded to double precision; vectorised it is slow but exact, and the
# oracle runs on tiny inputs only (scipy is deliberately not a dependency).
_erf = np.vectorize(math.erf, otypes=[np.float64])


class _Weights:
    """The state dict as float64 arrays, remembering which entries were read."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self._arrays = {name: np.asarray(value, dtype=np.float64) for name, value in arrays.items()}
        self._read: set[str] = set()

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            raise KeyError(f"the reference needs weight {name!r}, which the state dict lacks")
        self._read.add(name)
        return self._arrays[name]

    def unread(self) -> list[str]:
        return sorted(set(self._arrays) - self._read)


def forward(
    weights: dict[str, np.ndarray],
    cfg: ModelConfig,
    input_ids: np.ndarray,
    attention_mask: np.ndarray | None = None,
    *,
    token_type_ids: np.ndarray | None = None,
    prefix_lengths: np.ndarray | None = None,
    decoder_input_ids: np.ndarray | None = None,
    decoder_attention_mask: np.ndarray | None = None,
) -> np.ndarray:
    """Vocabulary logits (B, T, V) of the model described by ``cfg`` with ``weights``.

    ``input_ids`` (B, T) are the encoder's (or the decoder-only model's) tokens; ``attention_mask``
    (B, T) is 1 for a real token and 0 for padding. A decoder-only model with ``prefix_lengths``
    (B,) is a prefix LM: keys before ``prefix_lengths[b]`` are visible to every query of row b.
    An encoder-decoder also takes ``decoder_input_ids`` (B, T) and ``decoder_attention_mask``, and
    returns the decoder's logits; its cross-attention hides the source padding.
    """
    w = _Weights(weights)
    ids = np.asarray(input_ids)
    padding = _real(attention_mask, ids)
    if cfg.kind.encoder_only:
        h = _stack(w, "stack.", cfg, cfg.n_layers, ids, padding, "bidirectional", token_type_ids=token_type_ids)
    elif cfg.kind.causal:
        pattern = "causal" if prefix_lengths is None else "prefix"
        h = _stack(w, "stack.", cfg, cfg.n_layers, ids, padding, pattern, prefix_lengths=prefix_lengths)
    elif cfg.kind.two_stacks:
        if decoder_input_ids is None:
            raise ValueError("an encoder-decoder needs decoder_input_ids")
        source = _stack(w, "encoder.", cfg, cfg.n_layers, ids, padding, "bidirectional")  # (B, S, d)
        dec_ids = np.asarray(decoder_input_ids)
        n_decoder = cfg.n_layers if cfg.n_decoder_layers is None else cfg.n_decoder_layers
        h = _stack(
            w,
            "decoder.",
            cfg,
            n_decoder,
            dec_ids,
            _real(decoder_attention_mask, dec_ids),
            "causal",
            context=source,
            context_padding=padding,
        )
    else:
        raise ValueError(f"unknown family {cfg.family!r}")
    logits = _lm_head(w, cfg, h)
    unread = w.unread()
    if unread:
        raise ValueError(f"weights the reference never read (layouts disagree): {', '.join(unread)}")
    return logits


def _real(mask: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """(B, T) bool, True = a real token."""
    return np.ones(ids.shape, dtype=bool) if mask is None else np.asarray(mask).astype(bool)


def allowed(
    pattern: str,
    q_len: int,
    k_len: int,
    key_real: np.ndarray,
    prefix_lengths: np.ndarray | None = None,
    window: int | None = None,
) -> np.ndarray:
    """(B, T_q, T_k) bool: True at [b, i, j] = query i of row b may attend to key j.

    Self-attention without a cache, so query i and key i are the same position. A local layer's
    ``window`` keeps, of what the pattern allows, the keys at most ``window`` tokens away. A query that may
    attend to nothing (a left-padding query under a causal mask) attends to every key instead:
    maskwise defines it so, because its output is never read and an all-masked softmax is NaN.
    """
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    if pattern in ("bidirectional", "cross"):
        grid = np.ones((1, q_len, k_len), dtype=bool)
    elif pattern == "causal":
        grid = (j <= i)[None]
    elif pattern == "prefix":
        grid = (j <= i)[None] | (j[None] < np.asarray(prefix_lengths)[:, None, None])  # (B, Tq, Tk)
    else:
        raise ValueError(f"unknown mask pattern {pattern!r}")
    if window is not None:
        grid = grid & (np.abs(i - j) <= window)[None]  # (B or 1, Tq, Tk)
    grid = grid & key_real[:, None, :]  # (B, Tq, Tk)
    return grid | ~grid.any(axis=-1, keepdims=True)


def masked_softmax(scores: np.ndarray, may_attend: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in which forbidden entries get exactly zero weight."""
    scores = np.where(may_attend, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=-1, keepdims=True)


def relative_bucket(offset: np.ndarray, bidirectional: bool, n_buckets: int, max_distance: int) -> np.ndarray:
    """T5's bucket of each key-minus-query ``offset``.

    Of the buckets on one side, the first half are the exact distances 0 .. exact-1; the second
    half split exact .. max_distance on a log scale, and all farther distances share the last one.
    Bidirectional attention gives half the buckets to keys after the query (offset > 0).
    """
    offset = np.asarray(offset)
    if bidirectional:
        side = n_buckets // 2
        base = np.where(offset > 0, side, 0)
        distance = np.abs(offset)
    else:
        side = n_buckets
        base = np.zeros_like(offset)
        distance = np.maximum(-offset, 0)
    exact = side // 2
    # fraction of the way from `exact` to `max_distance` on a log scale, spread over the log buckets
    log_steps = np.log(np.maximum(distance, exact) / exact) / math.log(max_distance / exact)
    far = np.minimum(exact + np.floor(log_steps * (side - exact)).astype(np.int64), side - 1)
    return base + np.where(distance < exact, distance, far)


def _activation(name: str, x: np.ndarray) -> np.ndarray:
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    raise ValueError(f"unknown activation {name!r}")


def _norm(w: _Weights, name: str, cfg: ModelConfig, x: np.ndarray) -> np.ndarray:
    if cfg.norm == "rmsnorm":  # T5 / Llama: rescale by the root mean square, no centring, no bias
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + cfg.norm_eps) * w[f"{name}.weight"]
    centred = x - x.mean(axis=-1, keepdims=True)
    y = centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + cfg.norm_eps)
    y = y * w[f"{name}.weight"]
    return y + w[f"{name}.bias"] if cfg.bias else y


def _linear(w: _Weights, name: str, x: np.ndarray, bias: bool) -> np.ndarray:
    y = x @ w[f"{name}.weight"].T
    return y + w[f"{name}.bias"] if bias else y


def _rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Rotate pairs (x[i], x[i + hd/2]) by position * theta^(-2i/hd), as a complex multiplication.

    x: (B, H, T, hd); positions: (T,).
    """
    half = x.shape[-1] // 2
    frequency = theta ** (-np.arange(half) / half)  # (hd/2,)
    angle = positions[:, None] * frequency[None, :]  # (T, hd/2)
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * angle)  # (B, H, T, hd/2)
    return np.concatenate([z.real, z.imag], axis=-1)


def _heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    B, T, inner = x.shape
    return x.reshape(B, T, n_heads, inner // n_heads).transpose(0, 2, 1, 3)  # (B, H, T, hd)


def _attention(
    w: _Weights,
    name: str,
    cfg: ModelConfig,
    x: np.ndarray,
    may_attend: np.ndarray,
    context: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    rope_theta: float | None = None,
) -> np.ndarray:
    """Self-attention (context None) or cross-attention; x: (B, T, d), may_attend: (B, T, T_k);
    ``rope_theta``: this layer's RoPE base (a local layer's differs)."""
    H = cfg.n_heads
    H_kv = cfg.n_kv_heads if cfg.n_kv_heads is not None else H  # grouped-query attention: fewer k/v heads
    hd = cfg.d_head if cfg.d_head is not None else cfg.d_model // H
    inner, kv_inner = H * hd, H_kv * hd
    qkv_bias = cfg.bias or cfg.qkv_bias
    if context is None:
        qkv = _linear(w, f"{name}.qkv", x, qkv_bias)  # (B, T, inner + 2 * kv_inner), rows q | k | v
        q, k, v = qkv[..., :inner], qkv[..., inner : inner + kv_inner], qkv[..., inner + kv_inner :]
    else:
        q = _linear(w, f"{name}.q", x, qkv_bias)  # (B, T, inner)
        kv = _linear(w, f"{name}.kv", context, qkv_bias)  # (B, S, 2 * kv_inner), rows k | v
        k, v = kv[..., :kv_inner], kv[..., kv_inner:]
    q, k, v = _heads(q, H), _heads(k, H_kv), _heads(v, H_kv)  # (B, H or H_kv, T or S, hd)
    # query head h reads key/value head h // (H / H_kv)
    k, v = np.repeat(k, H // H_kv, axis=1), np.repeat(v, H // H_kv, axis=1)  # (B, H, T or S, hd)
    if cfg.position == "rope" and context is None:
        assert rope_theta is not None  # self-attention is given its layer's base
        positions = np.arange(x.shape[1], dtype=np.float64)
        q, k = _rope(q, positions, rope_theta), _rope(k, positions, rope_theta)
    scores = q @ k.transpose(0, 1, 3, 2)  # (B, H, T, T_k)
    if cfg.attention_scale:
        scores = scores / math.sqrt(hd)
    if bias is not None:
        scores = scores + bias  # (H, T, T_k) broadcast over B
    y = masked_softmax(scores, may_attend[:, None]) @ v  # (B, H, T, hd)
    y = y.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], inner)  # (B, T, inner)
    return _linear(w, f"{name}.out", y, cfg.bias)


def _ffn(w: _Weights, name: str, cfg: ModelConfig, x: np.ndarray) -> np.ndarray:
    h = _linear(w, f"{name}.up", x, cfg.bias)  # (B, T, d_ff), or (B, T, 2 d_ff) gated: gate | up
    if cfg.gated_ffn:
        h = _activation(cfg.activation, h[..., : cfg.d_ff]) * h[..., cfg.d_ff :]
    else:
        h = _activation(cfg.activation, h)
    return _linear(w, f"{name}.down", h, cfg.bias)


def _stack(
    w: _Weights,
    p: str,
    cfg: ModelConfig,
    n_layers: int,
    ids: np.ndarray,
    key_real: np.ndarray,
    pattern: str,
    token_type_ids: np.ndarray | None = None,
    prefix_lengths: np.ndarray | None = None,
    context: np.ndarray | None = None,
    context_padding: np.ndarray | None = None,
) -> np.ndarray:
    """Token ids (B, T) -> hidden states (B, T, d) of the stack whose weights start with ``p``."""
    T = ids.shape[1]
    x = w["embed.weight"][ids] * cfg.embedding_scale  # (B, T, e), e = d unless factorised
    if cfg.position == "learned":
        x = x + w[f"{p}positions.weight"][np.arange(T) + cfg.position_offset]
    if cfg.type_vocab_size and pattern == "bidirectional":  # segments exist in encoder stacks only
        types = np.zeros_like(ids) if token_type_ids is None else np.asarray(token_type_ids)
        x = x + w[f"{p}token_types.weight"][types]
    if cfg.embedding_norm:
        x = _norm(w, f"{p}embedding_norm", cfg, x)
    embedding_width = cfg.d_model if cfg.embedding_size is None else cfg.embedding_size
    if embedding_width != cfg.d_model:  # factorised embeddings (ELECTRA-small): (B, T, e) -> (B, T, d)
        x = _linear(w, f"{p}embedding_project", x, cfg.bias)

    may_attend = allowed(pattern, T, T, key_real, prefix_lengths)  # (B, T, T)
    local_may_attend = allowed(pattern, T, T, key_real, prefix_lengths, cfg.local_window)  # sliding-window layers
    bias = None
    if cfg.position == "relative":  # one table per stack, shared by all its layers
        offsets = np.arange(T)[None, :] - np.arange(T)[:, None]  # key - query, (T, T)
        buckets = relative_bucket(offsets, pattern == "bidirectional", cfg.relative_buckets, cfg.relative_max_distance)
        bias = w[f"{p}relative_bias.embedding.weight"][buckets].transpose(2, 0, 1)  # (H, T, T)
    cross_may_attend = None
    if context is not None:
        assert context_padding is not None  # given with the context
        cross_may_attend = allowed("cross", T, context.shape[1], context_padding)  # (B, T, S)

    def residual(x: np.ndarray, norm_name: str | None, branch: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        if cfg.pre_norm:
            return x + branch(x if norm_name is None else _norm(w, norm_name, cfg, x))
        assert norm_name is not None  # only a pre-norm layer 0 goes without one (``first_attn_norm``)
        return _norm(w, norm_name, cfg, x + branch(x))

    for layer in range(n_layers):
        b = f"{p}blocks.{layer}."
        attn_norm = None if layer == 0 and not cfg.first_attn_norm else b + "attn_norm"  # ModernBERT's layer 0
        # layers 0, n, 2n, ... (n = global_every) attend globally; where local_window is set the rest locally
        local = cfg.local_window is not None and layer % cfg.global_every > 0
        sees, theta = (local_may_attend, cfg.local_rope_theta) if local else (may_attend, cfg.rope_theta)
        attend = partial(_attention, w, b + "attn", cfg, may_attend=sees, bias=bias, rope_theta=theta)
        x = residual(x, attn_norm, attend)
        if cross_may_attend is not None:  # cross-attention, to the context
            cross = partial(_attention, w, b + "cross_attn", cfg, may_attend=cross_may_attend, context=context)
            x = residual(x, b + "cross_norm", cross)
        x = residual(x, b + "ffn_norm", partial(_ffn, w, b + "ffn", cfg))
    if cfg.final_norm:
        x = _norm(w, f"{p}final_norm", cfg, x)
    return x


def _lm_head(w: _Weights, cfg: ModelConfig, h: np.ndarray) -> np.ndarray:
    """(B, T, d) -> (B, T, V): optional input scale (tied T5), optional BERT transform, vocab matrix."""
    h = h * cfg.lm_head_input_scale
    if cfg.lm_head_transform:
        h = _activation(cfg.activation, _linear(w, "lm_head.transform.0", h, bias=cfg.lm_head_transform_bias))
        h = _norm(w, "lm_head.transform.2", cfg, h)
    vocab = w["embed.weight"] if cfg.tie_embeddings else w["lm_head.weight"]  # (V, d)
    logits = h @ vocab.T
    return logits + w["lm_head.bias"] if cfg.lm_head_bias else logits
