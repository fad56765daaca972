"""Grouped-query attention (``n_kv_heads``) and q/k/v-only biases (``qkv_bias``) in the one attention module.

Tier 1: shapes, a training step, the cache holding the fewer key/value heads, parameter accounting.
Tier 3: a GQA model equals the multi-head model whose key/value heads are its own repeated per group
(query head h reads key/value head h // group, HF's ``repeat_kv``); cached decoding equals the full
forward pass and cached generation the uncached one. Config: what cannot be grouped is one line.
"""

import copy

import pytest
import torch
from test_model import SCHEDULES, decode_with_cache

from maskwise.config import ModelConfig, preset
from maskwise.errors import UserError
from maskwise.model.accounting import formula_breakdown, parameter_breakdown
from maskwise.model.heads import IGNORE_INDEX
from maskwise.model.transformer import build_model
from maskwise.tasks.generate import GenerationConfig, generate

pytestmark = pytest.mark.unit

V, D, H, HD = 50, 32, 4, 8
TINY = {"d_model": D, "n_layers": 2, "n_heads": H, "vocab_size": V, "max_seq_len": 16, "init_std": 0.2}


def gqa_model(name: str = "modern", kv_heads: int = 2, **overrides):
    torch.manual_seed(0)
    return build_model(preset(name, **TINY, n_kv_heads=kv_heads, **overrides)).eval()


def ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_gqa_projection_and_cache_have_the_fewer_key_value_heads(kv_heads):
    model = gqa_model(kv_heads=kv_heads)
    attn = model.stack.blocks[0].attn
    assert attn.qkv.weight.shape == ((H + 2 * kv_heads) * HD, D) and attn.out.weight.shape == (D, H * HD)
    cache = model.make_cache(batch=3, max_len=10)
    assert cache.k.shape == cache.v.shape == (2, 3, kv_heads, 10, HD)
    with torch.no_grad():
        out = model(ids(3, 4), cache=cache)
    assert out.logits.shape == (3, 4, V) and cache.length == 4


@pytest.mark.parametrize("name, family", [("modern", "decoder"), ("modern", "encoder"), ("t5", "encoder-decoder")])
def test_gqa_model_trains_a_step(name, family):
    model = gqa_model(name, family=family).train()
    x, labels = ids(2, 6), ids(2, 6, seed=1)
    labels[0, :2] = IGNORE_INDEX
    inputs = {"decoder_input_ids": ids(2, 5, seed=2)} if family == "encoder-decoder" else {}
    if inputs:
        labels = labels[:, :5]
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x, torch.ones(2, 6, dtype=torch.long), labels=labels, **inputs).loss
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    optimizer.step()
    changed = [key for key, value in model.state_dict().items() if not torch.equal(value, before[key])]
    assert any(".attn.qkv." in key for key in changed) and torch.isfinite(loss)


def _as_multi_head(model):
    """The multi-head model computing what GQA ``model`` computes: every key/value head's rows
    repeated for each query head of its group, in the uneven fused q;k;v (and cross-attention's k;v)."""
    cfg = model.cfg
    group, kv_rows = cfg.n_heads // cfg.kv_heads, cfg.kv_heads * cfg.head_dim
    mha = build_model(ModelConfig.from_dict({**cfg.to_dict(), "n_kv_heads": None})).eval()

    def repeated(rows: torch.Tensor) -> torch.Tensor:  # (Hkv*hd, ...) -> (H*hd, ...)
        per_head = rows.reshape(cfg.kv_heads, cfg.head_dim, *rows.shape[1:])  # (Hkv, hd, ...)
        return per_head.repeat_interleave(group, dim=0).reshape(-1, *rows.shape[1:])

    state = {}
    for key, value in model.state_dict().items():
        if ".attn.qkv." in key:
            q, k, v = value.split([cfg.n_heads * cfg.head_dim, kv_rows, kv_rows])
            value = torch.cat([q, repeated(k), repeated(v)])
        elif ".cross_attn.kv." in key:
            k, v = value.split([kv_rows, kv_rows])
            value = torch.cat([repeated(k), repeated(v)])
        state[key] = value
    mha.load_state_dict(state)
    return mha


@pytest.mark.parametrize(
    "name, family", [("modern", "decoder"), ("gpt2", "decoder"), ("modern", "encoder"), ("t5", "encoder-decoder")]
)
def test_gqa_equals_multi_head_attention_with_repeated_key_value_heads(name, family):
    model = gqa_model(name, family=family, **({"qkv_bias": True} if name == "modern" else {}))
    mha = _as_multi_head(model)
    x, mask = ids(2, 7), torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    inputs = {"decoder_input_ids": ids(2, 5, seed=2)} if family == "encoder-decoder" else {}
    with torch.no_grad():
        got, expected = model(x, mask, **inputs).logits, mha(x, mask, **inputs).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("name", ["modern", "t5"])
def test_gqa_kv_cache_matches_full_forward(name, schedule):
    model = gqa_model(name)
    tokens = ids(2, 8)
    with torch.no_grad():
        if model.family == "encoder-decoder":
            src, src_mask = ids(2, 6, seed=1), torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
            full = model(src, src_mask, decoder_input_ids=tokens).logits
            cached = decode_with_cache(model, tokens, SCHEDULES[schedule], src=src, src_mask=src_mask)
        else:
            mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8])  # left padding in row 0
            full = model(tokens, mask).logits[mask.bool()]
            cached = decode_with_cache(model, tokens, SCHEDULES[schedule], mask=mask)[mask.bool()]
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["modern", "t5"])
def test_gqa_cached_generation_equals_uncached(name):
    model = gqa_model(name)
    prompts = [[5, 9, 12], [7, 3, 30, 41, 2]]
    outputs = [
        generate(model, prompts, GenerationConfig(max_new_tokens=6, use_cache=use_cache), None, 0, start_id=1).tokens
        for use_cache in (True, False)
    ]
    assert outputs[0] == outputs[1] and all(len(row) == 6 for row in outputs[0])


def test_qkv_bias_is_on_the_query_key_value_projections_alone():
    model = gqa_model(qkv_bias=True)
    biased = sorted({name.split(".", 3)[-1] for name, _ in model.named_parameters() if name.endswith(".bias")})
    assert biased == ["attn.qkv.bias"]
    assert model.stack.blocks[0].attn.qkv.bias.shape == ((H + 2 * 2) * HD,)


@pytest.mark.parametrize("kv_heads", [None, 1, 2])
@pytest.mark.parametrize("name", ["modern", "t5"])
def test_accounting_counts_the_fewer_key_value_heads(name, kv_heads):
    model = gqa_model(name, kv_heads=kv_heads)
    formula, real = formula_breakdown(model.cfg), parameter_breakdown(model)
    kv_heads = kv_heads or H
    assert formula["attention"] == 2 * D * (H + kv_heads) * HD * model.cfg.total_layers
    relative_bias = model.cfg.relative_buckets * H * 2 if name == "t5" else 0  # one table per stack
    assert real["attention"] == formula["attention"] + relative_bias
    assert real["cross_attention"] == formula["cross_attention"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"n_heads": 4, "n_kv_heads": 3}, "n_kv_heads 3 does not divide n_heads 4"),
        ({"n_heads": 4, "n_kv_heads": 8}, "n_kv_heads 8 does not divide n_heads 4"),
        ({"n_kv_heads": 0}, "n_kv_heads must be positive"),
        ({"bias": True, "qkv_bias": True}, "qkv_bias=true with bias=true"),
    ],
)
def test_validate_rejects_what_cannot_be_grouped(overrides, message):
    with pytest.raises(UserError, match=message) as error:
        ModelConfig(**overrides).validate()
    assert "\n" not in str(error.value)


def test_from_dict_reads_n_kv_heads_and_rejects_a_wrong_type():
    assert ModelConfig.from_dict({"n_heads": 4, "n_kv_heads": 2}).kv_heads == 2
    assert ModelConfig.from_dict({"n_heads": 4}).kv_heads == 4
    with pytest.raises(UserError, match="n_kv_heads must be an integer or null"):
        ModelConfig.from_dict({"n_kv_heads": "2"})
