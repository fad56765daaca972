"""The one place that builds attention masks.

Convention everywhere in maskwise: a boolean mask where ``True`` in row ``i``, column ``j`` means
"query token i may attend to key token j". Masks have shape ``(B or 1, 1, T_q, T_k)`` so they
broadcast over heads inside ``scaled_dot_product_attention``.

The four patterns that separate the families are small predicates on (query position, key position):

- bidirectional (BERT, the T5/BART encoder): every query sees every key;
- causal (GPT, every decoder): query i sees keys j <= i;
- prefix (prefix LM / non-causal decoder): causal, plus every query sees the whole prefix j < p;
- cross (decoder -> encoder states): every query sees every encoder key; only padding is removed.

Each is combined with key padding by "and". ``None`` means "no mask needed" so that attention can
take the fast path (SDPA without a mask, or with ``is_causal=True``).

A sliding window (the local layers of ModernBERT / Ettin) is one more "and" on any self-attention
pattern: query i sees key j only where |i - j| <= window, so a bidirectional window is symmetric and
a causal one reaches back ``window`` tokens (positions in the key sequence, i.e. cache slots).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PATTERNS = ("bidirectional", "causal", "prefix", "cross")


@dataclass(frozen=True)
class Mask:
    """What attention needs: an explicit boolean mask, or ``None`` plus a causal flag for SDPA.

    ``allowed``: ``(B or 1, 1, T_q, T_k)`` bool, True in row i, column j = query i may attend to key j;
    ``(B, 1, 1, T_k)`` where every query sees the same keys (key padding alone), broadcast over the queries.
    ``is_causal``: True only when the pattern is plain causal with T_q == T_k and nothing else,
    so SDPA can use its built-in causal kernel without materialising a mask.
    """

    allowed: torch.Tensor | None
    is_causal: bool = False

    def dense(self, q_len: int, k_len: int, device=None) -> torch.Tensor:
        """The mask as an explicit bool tensor (materialising the fast-path cases)."""
        if self.allowed is not None:
            return self.allowed
        if self.is_causal:
            return _causal(q_len, k_len, 0, device)[None, None]
        return torch.ones(1, 1, q_len, k_len, dtype=torch.bool, device=device)

    def additive(self, q_len: int, k_len: int, device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
        """The mask as terms of ``dtype`` to add to attention scores (0 where allowed, -inf where not), or
        None when every key is allowed. Why: adding this small broadcast tensor to (B, H, T, S)
        scores measured several times faster on a CPU than ``masked_fill_`` with the boolean mask
        (docs/results.md, Performance: attention on the explicit path)."""
        if self.allowed is None and not self.is_causal:
            return None
        allowed = self.dense(q_len, k_len, device)
        return torch.zeros(allowed.shape, device=device, dtype=dtype).masked_fill_(~allowed, float("-inf"))

    def rows(self, queries: torch.Tensor, q_len: int, k_len: int) -> Mask:
        """The mask of the queries at ``queries`` ((B, R) positions among the ``q_len``) alone: a stack
        that reads only some positions' outputs (``transformer.Stack``'s ``read_at``) asks its last
        layer for those queries only. A mask the same for every query (none, key padding) stays as it is."""
        if (self.allowed is None and not self.is_causal) or (self.allowed is not None and self.allowed.shape[2] == 1):
            return self  # every query alike
        return Mask(query_rows(self.dense(q_len, k_len, queries.device), queries))  # (B, 1, R, T_k)


def query_rows(t: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """(B or 1, X, T_q, Y) -> (B, X, R, Y): the rows of the query positions ``queries`` (B, R) of each
    batch row; a mask, an attention bias, or the queries themselves."""
    B, R = queries.shape
    t = t.expand(B, *t.shape[1:])  # (B, X, T_q, Y)
    return t.gather(2, queries[:, None, :, None].expand(B, t.shape[1], R, t.shape[3]))  # (B, X, R, Y)


def _causal(q_len: int, k_len: int, q_offset: int, device) -> torch.Tensor:
    """(T_q, T_k): query at absolute position q_offset + i may attend to keys j <= q_offset + i."""
    q_pos = torch.arange(q_len, device=device)[:, None] + q_offset
    k_pos = torch.arange(k_len, device=device)[None, :]
    return k_pos <= q_pos


def _within(q_len: int, k_len: int, q_offset: int, window: int, device) -> torch.Tensor:
    """(T_q, T_k): query at absolute position q_offset + i may attend to keys j with |q_offset + i - j| <= window."""
    q_pos = torch.arange(q_len, device=device)[:, None] + q_offset
    k_pos = torch.arange(k_len, device=device)[None, :]
    return (q_pos - k_pos).abs() <= window


def build_mask(
    pattern: str,
    q_len: int,
    k_len: int,
    key_padding: torch.Tensor | None = None,
    prefix_lengths: torch.Tensor | None = None,
    q_offset: int = 0,
    device: torch.device | None = None,
    window: int | None = None,
) -> Mask:
    """Build the attention mask for one of ``PATTERNS``.

    Args:
        pattern: "bidirectional", "causal", "prefix" or "cross".
        q_len, k_len: query and key lengths.
        key_padding: ``(B, T_k)`` bool or 0/1, True/1 = a real token that may be attended to
            (the HF ``attention_mask`` convention). ``None`` = no padding.
        prefix_lengths: ``(B,)`` int, for "prefix": keys ``j < prefix_lengths[b]`` are visible to
            every query of row b.
        q_offset: absolute position of the first query (decoding with a KV cache: the number of
            tokens already cached), so that causal masks line up with the cached keys.
        window: a local layer's sliding window: keys more than ``window`` positions from the query
            are hidden too (not for "cross"). None = no window.

    Rows in which no key is allowed (a padding query under a causal mask, say) are opened fully:
    their outputs are never used, and a fully masked row would make softmax return NaN.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown mask pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    device = device if device is not None else (key_padding.device if key_padding is not None else None)
    if pattern == "prefix" and prefix_lengths is None:
        raise ValueError("the prefix pattern needs prefix_lengths")
    if window is not None and pattern == "cross":
        raise ValueError("cross-attention has no sliding window")
    if window is not None and window >= max(q_offset + q_len - 1, k_len - 1 - q_offset):
        window = None  # no key is farther than the window from any query: the plain pattern, fast paths kept

    causal_needed = pattern in ("causal", "prefix") and not (q_len == 1 and q_offset == k_len - 1)
    if key_padding is None and window is None and pattern in ("bidirectional", "cross"):
        return Mask(None)
    if key_padding is None and window is None and pattern == "causal":
        if not causal_needed:
            return Mask(None)  # one new token attends to every cached key
        if q_offset == 0 and q_len == k_len:
            return Mask(None, is_causal=True)

    if pattern in ("bidirectional", "cross") and window is None:
        # Key padding alone: one row per sequence, broadcast over the queries, where a (B, 1, Tq, Tk) copy cost
        # each attention call a pass over it (SDPA's conversion to an additive mask, the explicit path's add).
        assert key_padding is not None  # without it (and no window) these patterns returned Mask(None) above
        allowed = key_padding.to(device=device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, Tk)
        return Mask(allowed | ~allowed.any(dim=-1, keepdim=True))
    allowed = torch.ones(1, 1, q_len, k_len, dtype=torch.bool, device=device)
    if pattern in ("causal", "prefix"):
        allowed = _causal(q_len, k_len, q_offset, device)[None, None]  # (1, 1, Tq, Tk)
    if pattern == "prefix":
        assert prefix_lengths is not None  # refused above
        k_pos = torch.arange(k_len, device=device)
        in_prefix = k_pos[None, :] < prefix_lengths.to(device)[:, None]  # (B, Tk)
        allowed = allowed | in_prefix[:, None, None, :]  # (B, 1, Tq, Tk)
    if window is not None:
        allowed = allowed & _within(q_len, k_len, q_offset, window, device)[None, None]  # (B or 1, 1, Tq, Tk)
    if key_padding is not None:
        allowed = allowed & key_padding.to(device=device, dtype=torch.bool)[:, None, None, :]
    allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
    return Mask(allowed)


def describe(pattern: str, n: int, prefix_length: int | None = None) -> str:
    """A text grid of one pattern for ``maskwise masks``: rows are queries, columns keys."""
    prefix = torch.tensor([prefix_length if prefix_length is not None else n // 2])
    allowed = build_mask(pattern, n, n, prefix_lengths=prefix).dense(n, n)[0, 0]
    lines = [f"{pattern} (row = query, column = key, # = may attend)"]
    if pattern == "prefix":
        lines[0] += f", prefix length {int(prefix[0])}"
    if pattern == "cross":
        lines[0] = "cross (row = decoder query, column = encoder key, # = may attend)"
    lines.append("    " + " ".join(str(j % 10) for j in range(n)))
    for i in range(n):
        row = " ".join("#" if bool(allowed[i, j]) else "." for j in range(n))
        lines.append(f"{i:>3} {row}")
    return "\n".join(lines)
