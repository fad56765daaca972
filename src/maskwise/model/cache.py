"""The static key/value cache decoding writes into, so a generation step reuses every earlier
token's keys and values instead of recomputing them."""

from __future__ import annotations

import torch

from maskwise.config import ModelConfig


class KVCache:
    """Static key/value buffers for decoding, allocated once for the whole generation.

    Self-attention keys/values of every layer live in ``(L, B, Hkv, max_len, hd)`` tensors written in
    place (Hkv = ``cfg.kv_heads``: grouped-query attention's fewer key/value heads, the point of it), so
    a decoding step allocates nothing and costs O(current length), not O(length^2).
    Cross-attention keys/values (encoder-decoder) are computed from the encoder output on the first
    step and reused: the source is read once. Sliding-window (local) layers keep every key as well:
    their mask hides the ones beyond the window, so one buffer shape serves every layer.
    """

    def __init__(self, cfg: ModelConfig, n_layers: int, batch: int, max_len: int, dtype, device):
        shape = (n_layers, batch, cfg.kv_heads, max_len, cfg.head_dim)
        self._keep(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        self.cross: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * n_layers
        self.length = 0  # tokens already written
        self.max_len = max_len

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's (B, Hkv, T, hd) keys/values; return all keys/values so far."""
        end = self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} tokens > max_len {self.max_len}")
        keys, values = self.layer_k[layer], self.layer_v[layer]  # (B, Hkv, max_len, hd)
        keys.narrow(2, self.length, k.shape[2]).copy_(k)
        values.narrow(2, self.length, v.shape[2]).copy_(v)
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)

    def _keep(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Hold the buffers and each layer's view of them. Why the views: slicing ``k[layer, :, :, a:b]``
        anew in every layer of every decoding step was a measurable part of a step's Python time."""
        self.k, self.v = k, v
        self.layer_k, self.layer_v = k.unbind(0), v.unbind(0)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (beam search reorders hypotheses every step)."""
        self._keep(self.k.index_select(1, index), self.v.index_select(1, index))
        self.cross = [
            None if kv is None else (kv[0].index_select(0, index), kv[1].index_select(0, index)) for kv in self.cross
        ]
