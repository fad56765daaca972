"""Tier 3 oracle: the torch forward pass equals the from-scratch NumPy reference.

Every preset layout is run as every family (a layout is norms, activation, positions, biases,
head; the family only picks the masks and the stacks), so that each mask pattern meets each
layout. The torch model runs in fp32, the reference in float64; 1e-5 on logits of size ~1-5
leaves room for fp32 rounding and none for a real difference (a wrong mask, norm or position
moves logits by ~0.1 or more).

The weights are re-drawn away from the model's initialisation (norm gains != 1, biases != 0,
relative bias and embeddings at a visible scale), because a zero bias or unit gain that one side
forgot would otherwise go unnoticed.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from maskwise.config import PRESETS, preset
from maskwise.model.heads import LMHead
from maskwise.model.positions import relative_buckets
from maskwise.model.transformer import build_model
from maskwise.reference import numpy_ref

pytestmark = pytest.mark.unit

FAMILIES = ("encoder", "decoder", "encoder-decoder")
LAYOUTS = sorted(PRESETS.keys() - {"electra"})  # "electra" names the bert layout
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "vocab_size": 50, "max_seq_len": 16}
B, S, T = 3, 10, 8  # batch, source (or only) length, decoder length


def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Draw every parameter so that each one visibly changes the logits, at a scale where fp32
    rounding stays far below 1e-5: linear weights ~ 1/sqrt(fan_in), gains 1 +- 0.1, biases 0.1,
    embeddings 0.2, T5 bias tables 1."""
    g = torch.Generator().manual_seed(seed)

    def draw(p: torch.Tensor, mean: float, std: float) -> None:
        p.copy_(mean + std * torch.randn(p.shape, generator=g))

    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                draw(module.weight, 0.0, module.in_features**-0.5)
                if module.bias is not None:
                    draw(module.bias, 0.0, 0.1)
            elif isinstance(module, nn.Embedding):
                draw(module.weight, 0.0, 1.0 if name.endswith("relative_bias.embedding") else 0.2)
            elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                draw(module.weight, 1.0, 0.1)
                if getattr(module, "bias", None) is not None:
                    draw(module.bias, 0.0, 0.1)
            elif isinstance(module, LMHead):
                if module.weight is not None:
                    draw(module.weight, 0.0, 0.2)
                if module.bias is not None:
                    draw(module.bias, 0.0, 0.1)
    return model.eval()


def inputs(seed: int) -> dict[str, torch.Tensor]:
    """Tokens with right padding in row 1 and left padding in row 2 (source), right padding in
    row 0 (decoder), two segments, and a different prefix length per row."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, :3] = 0
    decoder_mask = torch.ones(B, T, dtype=torch.long)
    decoder_mask[0, 5:] = 0
    return {
        "input_ids": torch.randint(0, TINY["vocab_size"], (B, S), generator=g),
        "attention_mask": mask,
        "token_type_ids": (torch.arange(S) >= 4).long().expand(B, S),
        "prefix_lengths": torch.tensor([4, 0, 6]),
        "decoder_input_ids": torch.randint(0, TINY["vocab_size"], (B, T), generator=g),
        "decoder_attention_mask": decoder_mask,
    }


def both(name: str, family: str, with_prefix: bool = False, seed: int = 0, **overrides):
    """(torch logits, reference logits) as float64 arrays for one layout, family and mask."""
    cfg = preset(name, family=family, **{**TINY, **overrides})
    model = randomize(build_model(cfg), seed)
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    x = inputs(seed)
    if family == "encoder":
        kwargs = {"attention_mask": x["attention_mask"], "token_type_ids": x["token_type_ids"]}
    elif family == "decoder":
        kwargs = {"attention_mask": x["attention_mask"]}
        if with_prefix:
            kwargs["prefix_lengths"] = x["prefix_lengths"]
    else:
        kwargs = {
            "attention_mask": x["attention_mask"],
            "decoder_input_ids": x["decoder_input_ids"],
            "decoder_attention_mask": x["decoder_attention_mask"],
        }
    with torch.no_grad():
        got = model(x["input_ids"], **kwargs).logits.double().numpy()
    expected = numpy_ref.forward(weights, cfg, x["input_ids"].numpy(), **{k: v.numpy() for k, v in kwargs.items()})
    return got, expected


def assert_matches(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", LAYOUTS)
def test_torch_matches_reference(name, family):
    """Bidirectional (encoder), causal (decoder) or bidirectional + causal + cross (encoder-
    decoder), each with left and right padding."""
    assert_matches(*both(name, family))


@pytest.mark.parametrize("name", LAYOUTS)
def test_torch_matches_reference_prefix_lm(name):
    got, expected = both(name, "decoder", with_prefix=True)
    assert_matches(got, expected)
    causal, _ = both(name, "decoder")
    assert np.abs(got - causal).max() > 1e-2  # the prefix really changed what rows see


@pytest.mark.parametrize(
    "name, family, overrides",
    [
        # T5's log-spaced buckets: with 8 buckets and distance 20, offsets >= 2 (encoder) and
        # >= 4 (decoder) fall into the log range, which T <= 12 never reaches with 32 / 128.
        ("t5", "encoder-decoder", {"relative_buckets": 8, "relative_max_distance": 20}),
        # T5's explicit d_kv: inner width H * hd = 64 != d_model; unequal stack depths
        ("t5", "encoder-decoder", {"d_head": 16, "n_decoder_layers": 3}),
        ("modern", "decoder", {"d_head": 16, "rope_theta": 500.0}),
        # grouped-query attention (2 key/value heads for 4 query heads) with Qwen2's q/k/v-only biases
        ("modern", "decoder", {"n_kv_heads": 2, "qkv_bias": True}),
        ("t5", "encoder-decoder", {"n_kv_heads": 1}),
        # BART with scale_embedding
        ("bart", "encoder-decoder", {"embedding_scale": math.sqrt(32)}),
        ("bert", "encoder", {"activation": "silu", "lm_head_input_scale": 0.5}),
    ],
)
def test_torch_matches_reference_variants(name, family, overrides):
    assert_matches(*both(name, family, **overrides))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("n_buckets, max_distance", [(32, 128), (8, 20), (16, 64)])
def test_relative_buckets_match_reference(bidirectional, n_buckets, max_distance):
    """Far offsets, which a tiny forward pass cannot reach, bucket the same in both."""
    offsets = torch.arange(-300, 301)
    got = relative_buckets(offsets, bidirectional, n_buckets, max_distance).numpy()
    expected = numpy_ref.relative_bucket(offsets.numpy(), bidirectional, n_buckets, max_distance)
    np.testing.assert_array_equal(got, expected)
    assert expected.min() == 0 and expected.max() == n_buckets - 1


def test_relative_buckets_known_values():
    """T5's defaults, by hand: exact below 8 per side, log-spaced up to 128, later keys on top."""
    offsets = np.array([0, -1, -7, -8, -16, -127, -128, -1000, 1, 7, 8, 1000])
    expected = np.array([0, 1, 7, 8, 10, 15, 15, 15, 17, 23, 24, 31])
    np.testing.assert_array_equal(numpy_ref.relative_bucket(offsets, True, 32, 128), expected)


def test_reference_masks_and_softmax():
    real = np.array([[True, True, False]])
    allowed = numpy_ref.allowed("causal", 3, 3, real)
    np.testing.assert_array_equal(allowed[0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
    probs = numpy_ref.masked_softmax(np.zeros((1, 3, 3)), allowed)
    np.testing.assert_allclose(probs[0, 2], [0.5, 0.5, 0.0])
    left = numpy_ref.allowed("causal", 2, 2, np.array([[False, True]]))
    np.testing.assert_array_equal(left[0], [[1, 1], [0, 1]])  # a query that sees nothing sees all


def test_reference_refuses_mismatched_weights():
    cfg = preset("gpt2", **TINY)
    weights = {k: v.numpy() for k, v in build_model(cfg).state_dict().items()}
    ids = np.zeros((1, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="never read.*extra"):
        numpy_ref.forward({**weights, "extra": np.zeros(1)}, cfg, ids)
    del weights["stack.final_norm.weight"]
    with pytest.raises(KeyError, match="final_norm"):
        numpy_ref.forward(weights, cfg, ids)
