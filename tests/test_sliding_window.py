"""Sliding-window (local) layers, as ModernBERT and Ettin interleave them with global ones.

Unit: the config's validation, that every attention path of the CPU dispatch honours a windowed
mask (the mask helper's window grids are in test_masks.py). Tier 3: the torch model equals the
NumPy oracle with local layers in every family (and with T5's bias and a prefix LM), and decoding
with the KV cache equals the full forward pass with prompts longer than the window.
"""

import copy

import pytest
import torch
from test_numpy_reference import assert_matches, both

from maskwise import kernels
from maskwise.config import ModelConfig, preset
from maskwise.errors import UserError
from maskwise.kernels import cpu
from maskwise.masks import build_mask
from maskwise.model.transformer import build_model
from maskwise.tasks.generate import GenerationConfig, generate

pytestmark = pytest.mark.unit

LOCAL = {"global_every": 2, "local_window": 2}  # layer 1 of 2 sees keys at most 2 tokens away


# --- the config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"global_every": 0}, "global_every must be >= 1"),
        ({"global_every": 3}, "local layers need both"),
        ({"local_window": 8}, "local layers need both"),
        ({"global_every": 3, "local_window": -1}, "local_window must be >= 0"),
        ({"local_rope_theta": 0.0}, "local_rope_theta must be positive"),
    ],
)
def test_validate_rejects_bad_local_settings(overrides, message):
    with pytest.raises(UserError, match=message) as error:
        ModelConfig(**overrides).validate()
    assert "\n" not in str(error.value)


def test_layers_0_n_2n_are_global():
    cfg = preset("modernbert", n_layers=7, global_every=3, local_window=4)
    assert [cfg.local_layer(i) for i in range(7)] == [False, True, True, False, True, True, False]
    assert not any(preset("modernbert").local_layer(i) for i in range(4))


# --- every attention path of the CPU dispatch honours the window ----------------------------------


@pytest.mark.precision("fp32")
@pytest.mark.parametrize("keys, autocast", [(24, False), (24, True), (cpu.EXPLICIT_ATTENTION_MAX_KEYS + 8, True)])
def test_dispatch_honours_a_windowed_mask(keys, autocast):
    """SDPA with the bool mask (fp32), the explicit path (bf16 autocast, short) and fp32 SDPA (bf16
    autocast, long) all equal a masked softmax written out here, and differ from the unwindowed one."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, keys, 8, generator=g) for _ in range(3))  # (B, H, T, hd)
    padding = torch.ones(2, keys, dtype=torch.long)
    padding[1, keys - 5 :] = 0
    mask = build_mask("causal", keys, keys, key_padding=padding, window=3)
    scores = (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(~mask.allowed, float("-inf"))
    expected = torch.softmax(scores, -1) @ v
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = kernels.attention(q, k, v, mask, None, 0.0, None)
    tolerance = 3e-2 if autocast and keys <= cpu.EXPLICIT_ATTENTION_MAX_KEYS else 1e-5
    torch.testing.assert_close(got.float(), expected, atol=tolerance, rtol=tolerance)
    unwindowed = kernels.attention(q, k, v, build_mask("causal", keys, keys, key_padding=padding), None, 0.0, None)
    assert (unwindowed - expected).abs().max() > 0.1


# --- the NumPy oracle ----------------------------------------------------------------------------


@pytest.mark.precision("fp32")
@pytest.mark.parametrize(
    "name, family, overrides, prefix",
    [
        ("modernbert", "encoder", {"local_rope_theta": 50.0}, False),
        ("modernbert", "decoder", {"local_rope_theta": 50.0}, False),
        ("modernbert", "decoder", {}, True),
        ("t5", "encoder-decoder", {}, False),  # the relative bias with each kind of layer's mask folded in
        ("modern", "encoder-decoder", {"n_layers": 3, "global_every": 3, "local_window": 1}, False),
    ],
)
def test_torch_matches_reference_with_local_layers(name, family, overrides, prefix):
    got, expected = both(name, family, with_prefix=prefix, **{**LOCAL, **overrides})
    assert_matches(got, expected)
    global_only, _ = both(name, family, with_prefix=prefix, **{**overrides, "global_every": 1, "local_window": None})
    assert abs(got - global_only).max() > 1e-2  # the window really changed what rows see


# --- decoding with the KV cache ------------------------------------------------------------------


def _local_decoder(seed: int = 0):
    torch.manual_seed(seed)
    cfg = preset(
        "modernbert",
        family="decoder",
        vocab_size=50,
        d_model=32,
        n_heads=4,
        n_layers=3,
        max_seq_len=40,
        global_every=3,
        local_window=3,
        local_rope_theta=100.0,
        init_std=0.2,
    )
    return build_model(cfg).eval()


@pytest.mark.precision("fp32")
@pytest.mark.parametrize("chunks", [[1] * 12, [7, 1, 3, 1]])
def test_kv_cache_with_local_layers_matches_full_forward(chunks, device):
    """Prompts longer than the window, left padding in row 0, fed whole, token by token or in chunks."""
    model = _local_decoder().to(device)
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1)).to(device)
    mask = torch.tensor([[0, 0] + [1] * 10, [1] * 12], device=device)
    cache, logits, start = model.make_cache(2, max_len=12), [], 0
    with torch.no_grad():
        full = model(tokens, mask).logits
        for size in chunks:
            logits.append(model(tokens[:, start : start + size], mask[:, : start + size], cache=cache).logits)
            start += size
    cached = torch.cat(logits, dim=1)
    torch.testing.assert_close(cached[mask.bool()], full[mask.bool()], rtol=0, atol=1e-5)


@pytest.mark.precision("fp32")
def test_cached_greedy_generation_equals_uncached_with_local_layers():
    model = _local_decoder(seed=2)
    prompts = [
        [int(t) for t in torch.randint(7, 50, (n,), generator=torch.Generator().manual_seed(n))] for n in (9, 4, 12)
    ]  # longer and shorter than the window of 3; batched, so left-padded
    outputs = [
        generate(model, prompts, GenerationConfig(max_new_tokens=10, use_cache=use_cache), None, 0).tokens
        for use_cache in (True, False)
    ]
    assert outputs[0] == outputs[1]
    assert all(len(tokens) == 10 for tokens in outputs[0]) and len({tuple(t) for t in outputs[0]}) > 1


def test_local_layers_train():
    """A backward pass reaches every parameter of a model with local layers."""
    model = copy.deepcopy(_local_decoder()).train()
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    model(tokens, labels=tokens).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
