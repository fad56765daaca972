"""``maskwise.kernels``: on a CPU its own implementations (equal to torch's ops, values and gradients),
on any other device torch's ops. The "meta" device stands in for a GPU: it shows which op the
dispatch picks without computing anything."""

import pytest
import torch
import torch.nn.functional as F

from maskwise import kernels
from maskwise.config import preset
from maskwise.kernels import cpu
from maskwise.masks import build_mask
from maskwise.model.layers import RMSNorm
from maskwise.model.transformer import build_model

pytestmark = pytest.mark.unit

IGNORE = -100
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "vocab_size": 50, "max_seq_len": 16}
BF16 = {"rtol": 2e-2, "atol": 2e-2}
FP32 = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture
def calls(monkeypatch):
    """The names of the CPU implementations and torch ops called, in order."""
    seen = []

    def spy(module, name, label):
        original = getattr(module, name)

        def recorded(*args, **kwargs):
            seen.append(label)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, recorded)

    for name in ("rms_norm", "explicit_attention", "linear_cross_entropy", "split_for_decoding", "split_project"):
        spy(cpu, name, f"cpu.{name}")
    for name in ("rms_norm", "scaled_dot_product_attention", "cross_entropy"):
        spy(F, name, f"F.{name}")
    return seen


def _grads(out, inputs, grad_out):
    return torch.autograd.grad(out, inputs, grad_out)


# --- off the CPU: torch's own kernels ------------------------------------------------------------


@pytest.mark.parametrize("autocast", [False, True])
def test_off_cpu_every_operation_is_torchs(calls, autocast):
    """Even under CPU autocast and with T5's bias, the conditions that pick the CPU paths."""
    meta = {"device": "meta"}
    q = torch.empty(2, 2, 5, 4, **meta)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        kernels.rms_norm(torch.empty(2, 5, 8, **meta), torch.empty(8, **meta), 1e-6)
        kernels.attention(q, q, q, build_mask("causal", 5, 5, device="meta"), None, 0.0, None)
        kernels.attention(
            q, q, q, build_mask("bidirectional", 5, 5, device="meta"), torch.empty(1, 2, 5, 5, **meta), 0.0, 1.0
        )
        h, weight = torch.empty(6, 8, **meta), torch.empty(50, 8, **meta)
        loss = kernels.linear_cross_entropy(h, weight, None, torch.zeros(6, dtype=torch.long, **meta), IGNORE)
        assert kernels.decoding_split(weight, None) is None
        kernels.project(h, weight, None, None)
    assert loss.shape == () and loss.dtype == torch.float32
    assert calls == [
        "F.rms_norm",
        "F.scaled_dot_product_attention",
        "F.scaled_dot_product_attention",
        "F.cross_entropy",
    ]


@pytest.mark.parametrize("name", ["t5", "modern"])  # RMSNorm, T5's bias; RMSNorm, RoPE
def test_off_cpu_a_model_calls_no_cpu_implementation(calls, name):
    model = build_model(preset(name, **TINY)).to("meta")
    ids = torch.zeros(2, 6, dtype=torch.long, device="meta")
    extra = {"decoder_input_ids": ids} if model.family == "encoder-decoder" else {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids, **extra).logits
    assert logits.shape == (2, 6, TINY["vocab_size"])
    assert calls and not any(c.startswith("cpu.") for c in calls)


# --- on the CPU: the CPU implementations, equal to torch's ops -----------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_on_cpu_is_the_cpu_backward_and_equals_torch(calls, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 5, 32, generator=g) * 4).to(dtype).requires_grad_()
    w = torch.randn(32, generator=g).to(dtype).requires_grad_()
    grad_out = torch.randn(3, 5, 32, generator=g).to(dtype)
    got = kernels.rms_norm(x, w, 1e-6)
    assert calls == ["cpu.rms_norm"]
    expected = F.rms_norm(x, (32,), w, 1e-6)
    tol = FP32 if dtype == torch.float32 else BF16
    assert got.dtype == expected.dtype == dtype
    torch.testing.assert_close(got, expected, **tol)
    for a, b in zip(_grads(got, (x, w), grad_out), _grads(expected, (x, w), grad_out)):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **tol)


def test_rmsnorm_module_is_an_nn_rmsnorm_with_its_state_dict(calls):
    ours, theirs = RMSNorm(32, eps=1e-6), torch.nn.RMSNorm(32, eps=1e-6)
    assert isinstance(ours, torch.nn.RMSNorm)
    torch.nn.init.normal_(theirs.weight)
    ours.load_state_dict(theirs.state_dict())
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    x = torch.randn(2, 32)
    torch.testing.assert_close(ours(x), theirs(x), **FP32)
    assert calls[0] == "cpu.rms_norm"


def _attention_inputs(keys: int):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, keys, 16, generator=g, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn(2, 2, keys, 16, generator=g)


@pytest.mark.parametrize("autocast", [False, True])
def test_attention_with_t5_bias_on_cpu_is_explicit_and_equals_sdpa(calls, autocast):
    q, k, v, grad_out = _attention_inputs(24)
    mask = build_mask("causal", 24, 24)
    bias = torch.randn(1, 2, 24, 24).masked_fill(~mask.dense(24, 24), float("-inf"))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = kernels.attention(q, k, v, mask, bias, 0.0, 0.25)
    assert calls == ["cpu.explicit_attention"]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.25)  # fp32
    tol = BF16 if autocast else FP32
    assert got.dtype == (torch.bfloat16 if autocast else torch.float32)
    torch.testing.assert_close(got.float(), expected, **tol)
    for a, b in zip(_grads(got, (q, k, v), grad_out), _grads(expected, (q, k, v), grad_out)):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize(
    "keys, expected_calls",
    [
        (24, ["cpu.explicit_attention"]),
        (cpu.EXPLICIT_ATTENTION_MAX_KEYS + 8, ["F.scaled_dot_product_attention"]),  # long: fp32 SDPA
    ],
)
def test_attention_under_cpu_autocast(calls, keys, expected_calls):
    q, k, v, grad_out = _attention_inputs(keys)
    mask = build_mask("causal", keys, keys)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = kernels.attention(q, k, v, mask, None, 0.0, None)
    assert calls == expected_calls
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # fp32
    tol = BF16 if got.dtype == torch.bfloat16 else FP32
    assert got.dtype == (torch.bfloat16 if keys <= cpu.EXPLICIT_ATTENTION_MAX_KEYS else torch.float32)
    torch.testing.assert_close(got.float(), expected, **tol)
    for a, b in zip(_grads(got, (q, k, v), grad_out), _grads(expected, (q, k, v), grad_out)):
        torch.testing.assert_close(a, b, **tol)


def test_attention_on_cpu_without_autocast_or_bias_is_sdpa(calls):
    q, k, v, _ = _attention_inputs(24)
    kernels.attention(q, k, v, build_mask("causal", 24, 24), None, 0.0, None)
    assert calls == ["F.scaled_dot_product_attention"]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("autocast", [False, True])
def test_linear_cross_entropy_on_cpu_is_fused_for_many_logits_and_equals_torch(calls, autocast, fused, monkeypatch):
    """The fused path where the 20 x 50 logits exceed ``LOSS_FUSED_MIN_LOGITS`` (lowered here), torch's below it."""
    monkeypatch.setattr(cpu, "LOSS_FUSED_MIN_LOGITS", 20 * 50 - 1 if fused else 20 * 50)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(20, 16, generator=g, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, requires_grad=True)
    bias = torch.randn(50, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (20,), generator=g)
    targets[[2, 7]] = IGNORE
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = kernels.linear_cross_entropy(h, weight, bias, targets, IGNORE)
        assert calls == (["cpu.linear_cross_entropy"] if fused else ["F.cross_entropy"])
        expected = F.cross_entropy(F.linear(h, weight, bias).float(), targets, ignore_index=IGNORE, reduction="sum")
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
    tol = BF16 if autocast else FP32
    params = (h, weight, bias)
    for a, b in zip(torch.autograd.grad(got * 3, params), torch.autograd.grad(expected * 3, params)):
        torch.testing.assert_close(a, b, **tol)


def test_decoding_split_on_cpu_projects_as_f_linear(calls):
    weight, bias = torch.randn(64, 16), torch.randn(64)
    for with_bias in (bias, None):
        calls.clear()
        split = kernels.decoding_split(weight, with_bias)
        assert calls == ["cpu.split_for_decoding"]
        assert split.weight.shape == (torch.get_num_threads(), 16, 64 // torch.get_num_threads())
        for x in (torch.randn(3, 16), torch.randn(2, 5, 16), torch.randn(1, 5, 16), torch.randn(1, 1, 16)):
            torch.testing.assert_close(
                kernels.project(x, weight, with_bias, split), F.linear(x, weight, with_bias), **FP32
            )
            assert calls[-1] == "cpu.split_project"


def _tanh_gelu_fp64(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))


def test_gelu_tanh_in_fp32_is_torchs_tanh_gelu():
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3
    torch.testing.assert_close(kernels.gelu_tanh(x), F.gelu(x, approximate="tanh"), rtol=0, atol=0)
    assert kernels.gelu_tanh(x.to("meta", torch.bfloat16)).shape == x.shape  # off the CPU: torch's tanh form


def test_gelu_tanh_in_bf16_on_cpu_is_within_the_gap_at_every_bf16_input():
    """Every bf16 value of magnitude under 2^127 (from there torch's exact GELU overflows to inf):
    each output within GELU_TANH_MAX_GAP of the tanh GELU in fp64, plus the half step of rounding."""
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = x[x.abs() < 2.0**127]
    got, expected = kernels.gelu_tanh(x).double(), _tanh_gelu_fp64(x)
    half_step = expected.abs().clamp_min(torch.finfo(torch.bfloat16).tiny) * 2.0**-8
    assert ((got - expected).abs() <= kernels.GELU_TANH_MAX_GAP + half_step).all()
    assert not torch.equal(got, F.gelu(x, approximate="tanh").double())  # the exact GELU, not the tanh form
    wide = x[
        expected.abs() >= 0.125
    ]  # where the gap is under half a step, rounding picks the same value or a neighbour
    steps = (kernels.gelu_tanh(wide).double() - _tanh_gelu_fp64(wide).to(torch.bfloat16).double()).abs()
    assert (steps <= _tanh_gelu_fp64(wide).abs() * 2.0**-7).all()
