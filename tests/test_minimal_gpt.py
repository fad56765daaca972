"""The nanoGPT reference of ``benchmarks/minimal_gpt.py`` learns, and ``benchmarks/bench_nanogpt.py`` scores
models reproducibly: what its comparison with ``maskwise pretrain`` rests on."""

from itertools import pairwise

import pytest
import torch

from maskwise.config import preset
from maskwise.model.transformer import build_model
from tests.benchmark_modules import load

pytestmark = pytest.mark.unit

minimal_gpt, bench_nanogpt = load("minimal_gpt", "bench_nanogpt")

TINY = minimal_gpt.GPTShape(vocab_size=16, block_size=16, n_layers=2, n_heads=2, d_model=32)


def _cyclic_tokens(length: int = 4000) -> torch.Tensor:
    """A stream a tiny model can learn in a few steps: 0, 1, ..., 15, 0, 1, ..."""
    return torch.arange(length) % TINY.vocab_size


def test_reference_loss_falls():
    torch.manual_seed(0)
    model = minimal_gpt.MinimalGPT(TINY)
    tokens = _cyclic_tokens()
    windows = bench_nanogpt.validation_windows(tokens, 16, TINY.block_size, seed=1)
    before = bench_nanogpt.validation_loss(bench_nanogpt.reference_logits(model), *windows)
    recipe = minimal_gpt.Recipe(iters=40, batch_size=8, block_size=TINY.block_size, lr=1e-2, min_lr=1e-3, warmup=5)
    result = minimal_gpt.train(model, tokens, recipe, seed=0)
    after = bench_nanogpt.validation_loss(bench_nanogpt.reference_logits(model), *windows)
    assert before > 2.5  # about ln 16 untrained
    assert after < 0.5 * before
    assert result.final_train_loss < 0.5 * before
    assert result.optimizer in ("fused", "foreach")


def test_reference_decays_two_dimensional_weights_once():
    model = minimal_gpt.MinimalGPT(TINY)
    optimizer, _ = minimal_gpt.make_adamw(model, minimal_gpt.Recipe())
    decayed, undecayed = (group["params"] for group in optimizer.param_groups)
    assert model.lm_head.weight is model.token_embedding.weight
    assert any(p is model.token_embedding.weight for p in decayed)
    assert all(p.dim() >= 2 for p in decayed) and all(p.dim() < 2 for p in undecayed)
    assert len(decayed) + len(undecayed) == len(list(model.parameters()))


def test_learning_rate_warms_up_then_decays_to_min():
    recipe = minimal_gpt.Recipe(iters=200, warmup=10)
    rates = [minimal_gpt.learning_rate(step, recipe) for step in range(201)]
    assert rates[0] < rates[9] < recipe.lr
    assert rates[10] == pytest.approx(recipe.lr)
    assert all(a >= b for a, b in pairwise(rates[10:]))
    assert rates[200] == pytest.approx(recipe.min_lr)


def test_shared_evaluation_repeats_for_both_sides():
    tokens = _cyclic_tokens()
    windows = bench_nanogpt.validation_windows(tokens, 12, TINY.block_size, seed=3)
    again = bench_nanogpt.validation_windows(tokens, 12, TINY.block_size, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(windows, again))
    torch.manual_seed(0)
    reference = minimal_gpt.MinimalGPT(TINY)
    maskwise_model = build_model(
        preset("gpt2", vocab_size=64, d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=TINY.block_size)
    )
    for logits_of in (bench_nanogpt.reference_logits(reference), bench_nanogpt.maskwise_logits(maskwise_model)):
        first = bench_nanogpt.validation_loss(logits_of, *windows, batch=5)
        assert bench_nanogpt.validation_loss(logits_of, *windows, batch=5) == first
        assert bench_nanogpt.validation_loss(logits_of, *windows, batch=12) == pytest.approx(first, rel=1e-6)


def test_nanogpt_preset_computes_the_reference_models_logits():
    """The ``nanogpt`` preset is nanoGPT's model: given the reference's weights, the same logits."""
    torch.manual_seed(0)
    reference = minimal_gpt.MinimalGPT(TINY).eval()
    maskwise_model = build_model(
        preset(
            "nanogpt",
            vocab_size=TINY.vocab_size,
            d_model=TINY.d_model,
            n_layers=TINY.n_layers,
            n_heads=TINY.n_heads,
            max_seq_len=TINY.block_size,
        )
    ).eval()
    renames = {
        "token_embedding": "embed",
        "position_embedding": "stack.positions",
        "blocks": "stack.blocks",
        "attn.proj": "attn.out",
        "mlp_norm": "ffn_norm",
        "mlp.fc": "ffn.up",
        "mlp.proj": "ffn.down",
        "final_norm": "stack.final_norm",
    }
    weights = {}
    for name, tensor in reference.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied to the token embedding on both sides
        for old, new in renames.items():
            name = name.replace(old, new) if name.startswith(old) or f".{old}." in name else name
        weights[name] = tensor
    maskwise_model.load_state_dict(weights)  # strict: every tensor named, none left over
    ids = torch.randint(0, TINY.vocab_size, (3, TINY.block_size))
    with torch.no_grad():
        assert torch.allclose(maskwise_model(ids).logits, reference(ids), atol=1e-5)
