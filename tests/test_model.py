"""The torch model, heads and config.

Tier 1: shapes and backward for every preset layout in every family (tiny configs, milliseconds).
Properties: the sparse LM head equals the dense one, pooling is right under either padding side,
padding never leaks into real positions, a decoder never sees the future (hypothesis).
A packed training pass equals the padded one. Tier 3: decoding with the KV cache equals the full forward pass.
Config: presets, from_dict and validate reject what cannot be a model.
"""

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from maskwise import kernels
from maskwise.config import PRESETS, ModelConfig, preset
from maskwise.errors import UserError
from maskwise.kernels import cpu
from maskwise.masks import build_mask
from maskwise.model.heads import IGNORE_INDEX, ClassifierHead, pool
from maskwise.model.layers import RMSNorm
from maskwise.model.packing import Packing
from maskwise.model.positions import RotaryAngles, rotate
from maskwise.model.transformer import build_model

pytestmark = pytest.mark.unit

FAMILIES = ("encoder", "decoder", "encoder-decoder")
LAYOUTS = sorted(PRESETS.keys() - {"electra"})  # "electra" names the bert layout
V = 50
# init_std 0.2 (not 0.02) so that every token and position visibly moves the outputs
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "vocab_size": V, "max_seq_len": 16, "init_std": 0.2}


@functools.cache
def tiny_model(name: str, family: str | None = None):
    """One eval-mode model per (preset, family), shared by tests that only read it."""
    torch.manual_seed(0)
    overrides = dict(TINY, family=family) if family else TINY
    return build_model(preset(name, **overrides)).eval()


def ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


# --- tier 1: shapes and backward -----------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", LAYOUTS)
def test_shapes_and_backward(name, family, device):
    torch.manual_seed(0)
    model = build_model(preset(name, **dict(TINY, family=family))).to(device)
    B, S, T, d = 2, 7, 5, TINY["d_model"]
    x = ids(B, S).to(device)
    mask = torch.ones(B, S, dtype=torch.long, device=device)
    mask[1, 5:] = 0
    labels = ids(B, T, seed=1).to(device)
    labels[0, :2] = IGNORE_INDEX
    labels[1, 4] = IGNORE_INDEX
    if family == "encoder-decoder":
        inputs = {"attention_mask": mask, "decoder_input_ids": ids(B, T, seed=2).to(device)}
    else:
        inputs = {"attention_mask": mask[:, :T]}
        x = x[:, :T]

    with torch.no_grad():
        full = model(x, **inputs)
    assert full.logits.shape == (B, T, V) and full.loss is None
    if family == "encoder-decoder":
        assert full.encoder_hidden_states.shape == (B, S, d)

    out = model(x, **inputs, labels=labels)
    n = int((labels != IGNORE_INDEX).sum())
    assert out.logits.shape == (n, V) and out.n_loss_positions == n
    assert out.hidden_states.shape == (B, T, d)
    assert torch.isfinite(out.loss) and torch.allclose(out.loss, out.loss_sum / n)
    out.loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname


def test_classifier_head_shapes_and_backward():
    model = tiny_model("bert")
    head = ClassifierHead(TINY["d_model"], n_classes=3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    with torch.no_grad():
        h = model.hidden_states(ids(2, 4), mask)  # (B, T, d)
    logits = head(pool(h, mask, "cls"))
    assert logits.shape == (2, 3)
    logits.sum().backward()
    assert head.proj.weight.grad is not None


# --- LM head: sparse == dense --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bert", "t5", "modern"])  # transform + bias; input scale; untied
def test_sparse_lm_head_equals_dense(name):
    model = build_model(preset(name, **TINY))
    head = model.lm_head
    h = torch.randn(3, 6, TINY["d_model"], generator=torch.Generator().manual_seed(0), requires_grad=True)
    labels = ids(3, 6, seed=1)
    labels[torch.rand(3, 6, generator=torch.Generator().manual_seed(2)) < 0.5] = IGNORE_INDEX
    labels[2] = IGNORE_INDEX  # a row without any loss position

    results = []
    for sparse in (True, False):
        model.zero_grad()
        h.grad = None
        out = head(h, labels, sparse=sparse)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out, h.grad.clone(), grads))
    (s, s_h, s_grads), (d, d_h, d_grads) = results
    assert s.n_loss_positions == d.n_loss_positions == int((labels != IGNORE_INDEX).sum())
    torch.testing.assert_close(s.loss, d.loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(s.loss_sum, d.loss_sum, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(s_h, d_h, rtol=1e-5, atol=1e-7)
    assert s_grads.keys() == d_grads.keys() and s_grads
    for n in s_grads:
        torch.testing.assert_close(s_grads[n], d_grads[n], rtol=1e-5, atol=1e-7, msg=n)


def test_logits_with_labels_are_the_labelled_positions_in_row_major_order():
    model = tiny_model("gpt2")
    x = ids(2, 5)
    labels = torch.full((2, 5), IGNORE_INDEX)
    positions = [(0, 3), (0, 4), (1, 0), (1, 2)]  # row-major
    for b, t in positions:
        labels[b, t] = 7
    with torch.no_grad():
        full = model(x).logits  # (B, T, V)
        out = model(x, labels=labels)
    assert out.logits.shape == (len(positions), V)
    torch.testing.assert_close(out.logits, torch.stack([full[b, t] for b, t in positions]))
    expected = -torch.log_softmax(out.logits, -1)[:, 7].mean()
    torch.testing.assert_close(out.loss, expected)


# --- attention under CPU autocast: explicit bf16 matmuls (short) or fp32 flash (long) ---------------


def _attention_case(kind: str, keys: int):
    """q, k, v (fp32, requiring grad), the Mask and bias the model would pass, and the fp32 SDPA
    arguments that say the same thing."""
    g = torch.Generator().manual_seed(0)
    B, H, hd = 2, 2, 16
    queries = keys if kind != "cross" else 5
    q, k, v = (torch.randn(B, H, n, hd, generator=g).requires_grad_() for n in (queries, keys, keys))
    bias = None
    if kind == "causal":
        mask = build_mask("causal", queries, keys)
        reference = {"is_causal": True}
    elif kind == "padding":
        padding = torch.ones(B, keys, dtype=torch.long)
        padding[1, keys // 2 :] = 0
        mask = build_mask("bidirectional", queries, keys, key_padding=padding)
        reference = {"attn_mask": mask.allowed}
    elif kind == "t5-bias":  # a relative bias with the causal mask folded in, as Stack passes it
        with torch.no_grad():
            q /= hd**0.5  # T5 does not scale its scores; its initialisation keeps them O(1)
        mask = build_mask("causal", queries, keys)
        bias = torch.randn(1, H, queries, keys, generator=g).masked_fill(~mask.dense(queries, keys), float("-inf"))
        reference = {"attn_mask": bias, "scale": 1.0}
    else:  # cross: no mask
        mask = build_mask("cross", queries, keys)
        reference = {}
    return q, k, v, mask, bias, reference


@pytest.mark.parametrize("kind", ["causal", "padding", "t5-bias", "cross"])
@pytest.mark.parametrize("keys", [24, 16 * cpu.QUERY_SCALING_KEYS_PER_HEAD_WIDTH, cpu.EXPLICIT_ATTENTION_MAX_KEYS + 8])
@pytest.mark.parametrize("autocast", [True, False])
def test_explicit_attention_equals_fp32_sdpa(kind, keys, autocast):
    """Short attention (explicit matmuls, fp32 softmax; the scale on the scores at 24 keys, on q from
    ``QUERY_SCALING_KEYS_PER_HEAD_WIDTH`` keys per unit of the 16-wide heads) agrees with fp32 SDPA,
    outputs and gradients: to bf16 precision under bf16 autocast, to fp32 precision without; long
    attention (which ``kernels.attention`` hands to SDPA in fp32) to fp32 precision."""
    long = keys > cpu.EXPLICIT_ATTENTION_MAX_KEYS
    q, k, v, mask, bias, reference = _attention_case(kind, keys)
    scale = reference.get("scale")
    expected = F.scaled_dot_product_attention(q, k, v, **reference)
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad_out)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = (kernels.attention if long else cpu.explicit_attention)(q, k, v, mask, bias, 0.0, scale)
    got_grads = torch.autograd.grad(got, (q, k, v), grad_out)
    bf16 = autocast and not long
    tolerance = {"atol": 3e-2, "rtol": 3e-2} if bf16 else {"atol": 1e-5, "rtol": 1e-5}
    assert got.dtype == (torch.bfloat16 if bf16 else torch.float32)
    torch.testing.assert_close(got.float(), expected, **tolerance)
    for name, a, b in zip("qkv", got_grads, expected_grads):
        torch.testing.assert_close(a, b, **tolerance, msg=name)


# --- LM head: the fused, chunked loss (return_logits=False) == logits + F.cross_entropy -------------


def _loss_and_grads(loss_fn, *tensors):
    """loss_fn's value and the gradients of 3 x loss (an incoming gradient != 1) w.r.t. tensors."""
    for t in tensors:
        t.grad = None
    loss = loss_fn()
    (loss * 3).backward()
    return loss.detach(), [t.grad.clone() for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_equals_torch_rmsnorm(dtype):
    """The CPU RMSNorm's hand-written backward: outputs and gradients equal nn.RMSNorm's (fp32, and
    bf16 inputs computed in fp32 inside), and gradcheck passes in float64."""
    torch.manual_seed(0)
    ours, theirs = RMSNorm(32, eps=1e-6), torch.nn.RMSNorm(32, eps=1e-6)
    torch.nn.init.normal_(ours.weight)
    theirs.load_state_dict(ours.state_dict())
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    x = (torch.randn(3, 5, 32) * 4).to(dtype)
    grad = torch.randn(3, 5, 32).to(dtype)
    results = []
    for norm in (ours, theirs):
        xi = x.clone().requires_grad_()
        y = norm(xi)
        y.backward(grad)
        results.append((y, xi.grad, norm.weight.grad))
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for a, b in zip(*results):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **tol)
    x64 = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    w64 = torch.randn(7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, w: cpu.rms_norm(a, w, 1e-6), (x64, w64))


@pytest.mark.parametrize("chunk_rows", [1, 4, 7, 64])  # 4 and 7: a ragged last chunk; 64 > N
@pytest.mark.parametrize("with_ignored", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_cross_entropy_equals_plain_cross_entropy(chunk_rows, with_ignored, with_bias):
    g = torch.Generator().manual_seed(0)
    N, d = 18, 8
    h = torch.randn(N, d, generator=g, requires_grad=True)
    weight = torch.randn(V, d, generator=g).requires_grad_()
    bias = torch.randn(V, generator=g).requires_grad_() if with_bias else None
    targets = torch.randint(0, V, (N,), generator=g)
    if with_ignored:
        targets[torch.tensor([0, 5, 6, 17])] = IGNORE_INDEX
    tensors = [h, weight] + ([bias] if with_bias else [])

    plain, plain_grads = _loss_and_grads(
        lambda: F.cross_entropy(F.linear(h, weight, bias), targets, ignore_index=IGNORE_INDEX, reduction="sum"),
        *tensors,
    )
    fused, fused_grads = _loss_and_grads(
        lambda: cpu.linear_cross_entropy(h, weight, bias, targets, IGNORE_INDEX, chunk_rows), *tensors
    )
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    for name, f, p in zip(("h", "weight", "bias"), fused_grads, plain_grads):
        torch.testing.assert_close(f, p, rtol=1e-5, atol=1e-5, msg=name)
    if with_ignored:
        assert (fused_grads[0][targets == IGNORE_INDEX] == 0).all()


@pytest.mark.parametrize("name", ["bert", "t5", "modern", "gpt2"])  # transform + bias; input scale; untied; tied
@pytest.mark.parametrize("sparse", [True, False])
def test_lm_head_without_logits_equals_with_logits(name, sparse):
    """Same loss and gradients for h and every head parameter, the tied embedding included."""
    model = build_model(preset(name, **TINY))
    h = torch.randn(3, 6, TINY["d_model"], generator=torch.Generator().manual_seed(0), requires_grad=True)
    labels = ids(3, 6, seed=1)
    labels[torch.rand(3, 6, generator=torch.Generator().manual_seed(2)) < 0.3] = IGNORE_INDEX

    results = []
    for return_logits in (True, False):
        model.zero_grad()
        h.grad = None
        out = model.lm_head(h, labels, sparse=sparse, return_logits=return_logits)
        (out.loss * 3).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out, h.grad.clone(), grads))
    (w, w_h, w_grads), (f, f_h, f_grads) = results
    assert f.logits is None and w.logits is not None
    assert f.n_loss_positions == w.n_loss_positions == int((labels != IGNORE_INDEX).sum())
    torch.testing.assert_close(f.loss_sum, w.loss_sum, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(f.loss, w.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(f_h, w_h, rtol=1e-5, atol=1e-6)
    vocab_weight = "embed.weight" if model.cfg.tie_embeddings else "lm_head.weight"
    assert f_grads.keys() == w_grads.keys() and vocab_weight in f_grads
    for n in f_grads:
        torch.testing.assert_close(f_grads[n], w_grads[n], rtol=1e-5, atol=1e-6, msg=n)


def test_linear_cross_entropy_under_bf16_autocast_matches_the_autocast_path():
    """bf16 matmuls, fp32 loss: the same logits are rounded the same way on both paths, so the loss
    agrees to fp32 precision; gradients agree to bf16 precision, in the parameters' own dtype."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(40, 16, generator=g, requires_grad=True)
    weight = torch.randn(V, 16, generator=g).requires_grad_()
    bias = torch.randn(V, generator=g).requires_grad_()
    targets = torch.randint(0, V, (40,), generator=g)
    targets[3] = IGNORE_INDEX

    def autocast(fn):
        def run():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return fn()

        return run

    plain, plain_grads = _loss_and_grads(
        autocast(
            lambda: F.cross_entropy(
                F.linear(h, weight, bias).float(), targets, ignore_index=IGNORE_INDEX, reduction="sum"
            )
        ),
        h,
        weight,
        bias,
    )
    fused, fused_grads = _loss_and_grads(
        autocast(lambda: cpu.linear_cross_entropy(h, weight, bias, targets, IGNORE_INDEX, 16)), h, weight, bias
    )
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-4)
    for name, f, p in zip(("h", "weight", "bias"), fused_grads, plain_grads):
        assert f.dtype == torch.float32, name
        torch.testing.assert_close(f, p, rtol=2e-2, atol=2e-2, msg=name)


def test_linear_cross_entropy_where_the_target_probability_underflows_fp32():
    """Rows whose target sits > 87 nats below the best logit have p = 0 in fp32; the loss must still
    be the exact log-softmax there (finite, ~150 nats), not log(0), and the gradient p - onehot."""
    g = torch.Generator().manual_seed(0)
    N, d = 6, 4
    h = torch.randn(N, d, generator=g)
    h[1] *= 60.0  # large activations: very peaked rows
    h[4] *= 60.0
    h.requires_grad_()
    weight = torch.randn(V, d, generator=g).requires_grad_()
    with torch.no_grad():
        logits = h @ weight.T
    targets = logits.argmin(-1)  # the least likely token: underflows in the peaked rows
    targets[2] = IGNORE_INDEX
    with torch.no_grad():
        row_logp = torch.log_softmax(logits, -1).gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
    assert row_logp[1] < -104 and row_logp[4] < -104  # below fp32's smallest subnormal: exp() is 0

    plain, plain_grads = _loss_and_grads(
        lambda: F.cross_entropy(h @ weight.T, targets, ignore_index=IGNORE_INDEX, reduction="sum"), h, weight
    )
    fused, fused_grads = _loss_and_grads(
        lambda: cpu.linear_cross_entropy(h, weight, None, targets, IGNORE_INDEX, 4), h, weight
    )
    assert torch.isfinite(fused)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-4)
    for name, f, p in zip(("h", "weight"), fused_grads, plain_grads):
        torch.testing.assert_close(f, p, rtol=1e-5, atol=1e-4, msg=name)


def test_linear_cross_entropy_without_grad_computes_the_loss_only():
    g = torch.Generator().manual_seed(0)
    h, weight = torch.randn(9, 8, generator=g, requires_grad=True), torch.randn(V, 8, generator=g)
    targets = torch.randint(0, V, (9,), generator=g)
    with torch.no_grad():
        loss = cpu.linear_cross_entropy(h, weight, None, targets, IGNORE_INDEX, 4)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, F.cross_entropy(h.detach() @ weight.T, targets, reduction="sum"))


def test_lm_head_without_logits_needs_labels():
    with pytest.raises(ValueError, match="needs labels"):
        tiny_model("gpt2").lm_head(torch.zeros(1, 2, TINY["d_model"]), return_logits=False)


# --- pooling -------------------------------------------------------------------------------------


def test_pooling_under_left_and_right_padding():
    h = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor(
        [
            [1, 1, 1, 0, 0],  # right padding: real tokens 0..2
            [0, 0, 1, 1, 1],  # left padding: real tokens 2..4
            [1, 1, 1, 1, 1],
        ]
    )
    torch.testing.assert_close(pool(h, mask, "cls"), torch.stack([h[0, 0], h[1, 2], h[2, 0]]))
    torch.testing.assert_close(pool(h, mask, "last"), torch.stack([h[0, 2], h[1, 4], h[2, 4]]))
    mean = torch.stack([(h[0, 0] + h[0, 1] + h[0, 2]) / 3, (h[1, 2] + h[1, 3] + h[1, 4]) / 3, h[2].sum(0) / 5])
    torch.testing.assert_close(pool(h, mask, "mean"), mean)
    torch.testing.assert_close(pool(h, None, "last"), h[:, -1])
    torch.testing.assert_close(pool(h, None, "mean"), h.mean(1))
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(h, mask, "max")


# --- reading some positions alone (read_at): the last layer skips the other queries ----------------


def _padded_batch(B: int = 3, T: int = 12):
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:] = 0  # right padding
    mask[2, :3] = 0  # left padding
    return ids(B, T, seed=3), mask


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", [*LAYOUTS, "windowed"])  # windowed: modernbert with its last layer local
def test_reading_some_positions_equals_reading_all(name, family):
    overrides = dict(TINY, family=family)
    if name == "windowed":
        name, overrides = "modernbert", dict(overrides, local_window=3, global_every=2)
    torch.manual_seed(0)
    model = build_model(preset(name, **overrides)).eval()
    x, mask = _padded_batch()
    read_at = torch.tensor([[0, 5, 11], [8, 2, 2], [3, 11, 10]])  # any order, repeats, padding positions
    last_ffn = (model.encoder if family == "encoder-decoder" else model.stack).blocks[-1].ffn
    widths = []
    last_ffn.register_forward_hook(lambda module, inputs, output: widths.append(inputs[0].shape[1]))
    with torch.no_grad():
        full = model.read(x, mask)  # (B, T, d)
        some = model.read(x, mask, read_at=read_at)  # (B, R, d)
    expected = full.gather(1, read_at[..., None].expand(-1, -1, full.shape[2]))
    torch.testing.assert_close(some, expected, rtol=1e-5, atol=1e-5)
    assert widths == [12, 3]  # the last layer's FFN ran on the positions read alone


@pytest.mark.parametrize("name, family", [("modernbert", "encoder"), ("bert", "encoder"), ("gpt2", "decoder")])
def test_lm_loss_reads_the_labelled_positions_alone(name, family, monkeypatch):
    """Loss, logits and every gradient as when every position is read; no hidden states are returned then."""
    from maskwise.model import heads

    model = build_model(preset(name, **dict(TINY, family=family))).eval()
    x, mask = _padded_batch()
    labels = torch.full(x.shape, IGNORE_INDEX)
    for b, t in [(0, 1), (0, 7), (1, 4), (2, 3), (2, 6), (2, 11)]:
        labels[b, t] = int(x[b, t])
    assert heads.labelled_reading(labels)[0].shape == (3, 3)

    def run():
        model.zero_grad()
        out = model(x, mask, labels=labels)
        out.loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    some, some_grads = run()
    monkeypatch.setattr(heads, "READ_LABELLED_SHARE", 0.0)  # every position read
    every, every_grads = run()
    assert some.hidden_states is None and every.hidden_states.shape == (*x.shape, TINY["d_model"])
    torch.testing.assert_close(some.logits, every.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(some.loss, every.loss)
    assert some_grads.keys() == every_grads.keys()
    for n in some_grads:
        torch.testing.assert_close(some_grads[n], every_grads[n], rtol=1e-4, atol=1e-6, msg=n)


def test_labelled_reading_keeps_order_and_reads_all_where_most_are_labelled():
    from maskwise.model.heads import READ_LABELLED_SHARE, labelled_reading

    labels = torch.full((2, 8), IGNORE_INDEX)
    labels[0, [6, 2]] = torch.tensor([5, 4])
    labels[1, 3] = 9
    read_at, at = labelled_reading(labels)
    assert read_at[0].tolist() == [2, 6] and at[0].tolist() == [4, 5]
    assert read_at[1, 0] == 3 and at[1].tolist() == [9, IGNORE_INDEX]  # a shorter row's slot: unlabelled
    assert labelled_reading(torch.full((2, 8), IGNORE_INDEX))[0] is None  # nothing labelled
    most = torch.zeros(2, 8, dtype=torch.long)
    most[:, : int(8 * (1 - READ_LABELLED_SHARE)) - 1] = IGNORE_INDEX  # more than the share labelled
    assert labelled_reading(most)[0] is None and labelled_reading(None) == (None, None)


# --- packing: a training pass's token-wise work on the real tokens alone ---------------------------


@pytest.mark.parametrize("multiple, rows", [(1, 5), (4, 8)])  # 4: three rows round the 5 real ones up to 8
def test_packing_moves_rows_and_their_gradients(multiple, rows, monkeypatch):
    """Each direction and its gradient, where nothing reads the padding (the rounding rows copy its first position)."""
    monkeypatch.setattr(cpu, "PACK_ROW_MULTIPLE", multiple)
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])  # 5 real of 10; the first padding at 2
    packing = Packing.of(mask)
    assert packing.taken.tolist() == [0, 1, 6, 7, 8] + [2] * (rows - 5)
    assert packing.placed.tolist() == [0, 1, rows, rows, rows, rows, 2, 3, 4, rows]
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    packed = packing.pack(x)  # (rows, 3)
    assert torch.equal(packed, x.reshape(10, 3)[packing.taken])
    assert torch.equal(packing.unpack(packed), x * mask[..., None])  # zeros at the padding
    spread = packing.for_attention(packed)  # a real row's copy at the padding
    assert torch.equal(spread * mask[..., None], x * mask[..., None]) and torch.isfinite(spread).all()
    assert torch.autograd.gradcheck(lambda x: packing.pack(x)[:5], (x,))  # the padding's gradient zero
    rows_in = packed.detach().requires_grad_()
    assert torch.autograd.gradcheck(packing.unpack, (rows_in,))  # the rounding rows' gradient zero
    assert torch.autograd.gradcheck(lambda p: packing.for_attention(p) * mask[..., None], (rows_in,))


def test_packing_applies_to_a_cpu_training_pass_with_enough_padding(monkeypatch):
    monkeypatch.setattr(cpu, "PACK_ROW_MULTIPLE", 1)
    some = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])  # 5 of 8 real
    assert Packing.of(some) is not None
    assert Packing.of(None) is None and Packing.of(torch.ones(2, 4)) is None and Packing.of(torch.zeros(2, 4)) is None
    with torch.no_grad():
        assert Packing.of(some) is None  # inference gives every position's outputs
    nearly_full = torch.ones(2, 10)
    nearly_full[0, -1] = 0  # 19 of 20 real: above the share, the copies would cost more than they save
    assert Packing.of(nearly_full) is None
    assert not kernels.packed_rows(torch.device("cuda"), 5, 8)  # measured on CPUs alone
    monkeypatch.setattr(cpu, "PACK_ROW_MULTIPLE", 4)
    assert kernels.packed_rows(torch.device("cpu"), 5, 12) == 8
    assert kernels.packed_rows(torch.device("cpu"), 5, 8) is None  # rounded up, nothing left to save


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", [*LAYOUTS, "windowed"])
def test_a_packed_training_pass_equals_the_padded_one(name, family, monkeypatch):
    """Outputs at the real tokens and every gradient, with and without packing; read_at too (the last layer
    unpacks); an encoder-decoder's decoder packs its own padding and reads the source through cross-attention."""
    overrides = dict(TINY, family=family, dropout=0.0)
    if name == "windowed":
        name, overrides = "modernbert", dict(overrides, local_window=3, global_every=2)
    torch.manual_seed(0)
    model = build_model(preset(name, **overrides))
    x, mask = _padded_batch()
    y, y_mask = ids(3, 7, seed=4), torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    read_at = torch.tensor([[0, 5], [8, 2], [3, 11]])
    rows = []
    first_ffn = (model.encoder if family == "encoder-decoder" else model.stack).blocks[0].ffn
    first_ffn.register_forward_hook(lambda module, inputs, output: rows.append(inputs[0].shape[:-1]))

    def run():
        model.zero_grad()
        h = model.read(x, mask)
        some = model.read(x, mask, read_at=read_at)
        outputs = [h * mask[..., None], some]
        if family == "encoder-decoder":
            outputs.append(
                model(x, mask, decoder_input_ids=y, decoder_attention_mask=y_mask).logits * y_mask[..., None]
            )
        sum(o.pow(2).mean() for o in outputs).backward()
        return outputs, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    monkeypatch.setattr(cpu, "PACK_ROW_MULTIPLE", 8)  # 30 real tokens in 32 rows: two zero rows round them up
    monkeypatch.setattr(cpu, "PACK_MAX_REAL_SHARE", 0.0)
    padded, padded_grads = run()
    assert rows[0] == x.shape
    monkeypatch.setattr(cpu, "PACK_MAX_REAL_SHARE", 1.0)
    rows.clear()
    packed, packed_grads = run()
    assert rows[0] == (32,)  # the first layer's FFN ran on the real tokens (and the zero rows) alone
    for got, expected in zip(packed, padded, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert packed_grads.keys() == padded_grads.keys()
    for n in packed_grads:
        torch.testing.assert_close(packed_grads[n], padded_grads[n], rtol=1e-4, atol=1e-6, msg=n)


# --- padding invariance and causality -------------------------------------------------------------


@pytest.mark.parametrize("name", LAYOUTS)
def test_encoder_outputs_ignore_appended_padding(name):
    """Every layout as an encoder: real positions are unchanged when padding is appended."""
    model = tiny_model(name, "encoder")
    x = ids(2, 6)
    padded = torch.cat([x, ids(2, 4, seed=1)], dim=1)  # arbitrary tokens in the padding
    mask = torch.cat([torch.ones(2, 6), torch.zeros(2, 4)], dim=1).long()
    with torch.no_grad():
        plain = model(x).logits
        with_padding = model(padded, mask).logits
    torch.testing.assert_close(with_padding[:, :6], plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["t5", "t5.1.1", "bart"])
def test_encoder_decoder_ignores_source_padding(name):
    model = tiny_model(name)
    src, tgt = ids(2, 6), ids(2, 4, seed=1)
    padded = torch.cat([src, ids(2, 3, seed=2)], dim=1)
    mask = torch.cat([torch.ones(2, 6), torch.zeros(2, 3)], dim=1).long()
    with torch.no_grad():
        plain = model(src, decoder_input_ids=tgt).logits
        with_padding = model(padded, mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(with_padding, plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "modern", "t5", "bart"])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_decoder_output_at_t_ignores_later_tokens(name, data):
    model = tiny_model(name)
    n = data.draw(st.integers(2, 12), label="length")
    tokens = data.draw(st.lists(st.integers(0, V - 1), min_size=n, max_size=n), label="tokens")
    t = data.draw(st.integers(0, n - 2), label="t")
    later = data.draw(st.lists(st.integers(0, V - 1), min_size=n - t - 1, max_size=n - t - 1), label="later")
    a = torch.tensor([tokens])
    b = torch.tensor([tokens[: t + 1] + later])
    with torch.no_grad():
        if model.family == "encoder-decoder":
            src = ids(1, 5)
            out_a, out_b = model(src, decoder_input_ids=a).logits, model(src, decoder_input_ids=b).logits
        else:
            out_a, out_b = model(a).logits, model(b).logits
    torch.testing.assert_close(out_a[:, : t + 1], out_b[:, : t + 1], rtol=0, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_prefix_lm_output_at_t_ignores_tokens_after_t_and_prefix(data):
    model = tiny_model("gpt2")
    n = data.draw(st.integers(2, 12), label="length")
    prefix = data.draw(st.integers(0, n), label="prefix")
    t = data.draw(st.integers(0, n - 1), label="t")
    seen = max(t + 1, prefix)  # tokens position t may read
    tokens = data.draw(st.lists(st.integers(0, V - 1), min_size=n, max_size=n), label="tokens")
    later = data.draw(st.lists(st.integers(0, V - 1), min_size=n - seen, max_size=n - seen), label="later")
    lengths = torch.tensor([prefix])
    with torch.no_grad():
        out_a = model(torch.tensor([tokens]), prefix_lengths=lengths).logits
        out_b = model(torch.tensor([tokens[:seen] + later]), prefix_lengths=lengths).logits
    torch.testing.assert_close(out_a[:, t], out_b[:, t], rtol=0, atol=1e-5)


def test_prefix_lets_early_positions_see_the_whole_prefix():
    model = tiny_model("gpt2")
    a, b = ids(1, 6), ids(1, 6)
    b[0, :3] = a[0, :3]
    b[0, 3] = (a[0, 3] + 1) % V  # differs inside the prefix, after position 0
    with torch.no_grad():
        out_a = model(a, prefix_lengths=torch.tensor([4])).logits
        out_b = model(b, prefix_lengths=torch.tensor([4])).logits
    assert (out_a[0, 0] - out_b[0, 0]).abs().max() > 1e-3


# --- KV cache == full forward --------------------------------------------------------------------

SCHEDULES = {"token-by-token": [1] * 8, "chunked": [3, 2, 1, 1, 1]}


def decode_with_cache(model, tokens, chunks, src=None, src_mask=None, mask=None, reorder=None):
    """Feed ``tokens`` (B, T) in ``chunks`` through one cache; logits of every step, concatenated.

    ``reorder`` = (step, index): after that many chunks, keep batch rows ``index`` (beam search)."""
    cache = model.make_cache(tokens.shape[0], max_len=tokens.shape[1])
    logits, start = [], 0
    for step, size in enumerate(chunks):
        if reorder is not None and step == reorder[0]:
            cache.reorder(reorder[1])
            tokens, src, src_mask, mask = (None if v is None else v[reorder[1]] for v in (tokens, src, src_mask, mask))
            logits = [piece[reorder[1]] for piece in logits]
        chunk = tokens[:, start : start + size]
        if model.family == "encoder-decoder":
            out = model(src, src_mask, decoder_input_ids=chunk, cache=cache)
        else:
            out = model(chunk, mask[:, : start + size] if mask is not None else None, cache=cache)
        logits.append(out.logits)
        start += size
    assert cache.length == tokens.shape[1]
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("name", ["gpt2", "modern", "t5", "bart"])
def test_kv_cache_matches_full_forward(name, schedule, device):
    model = copy.deepcopy(tiny_model(name)).to(device)
    tokens = ids(2, 8).to(device)
    with torch.no_grad():
        if model.family == "encoder-decoder":
            src = ids(2, 6, seed=1).to(device)
            src_mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6], device=device)
            full = model(src, src_mask, decoder_input_ids=tokens).logits
            cached = decode_with_cache(model, tokens, SCHEDULES[schedule], src=src, src_mask=src_mask)
        else:
            mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8], device=device)  # left padding in row 0
            full = model(tokens, mask).logits
            cached = decode_with_cache(model, tokens, SCHEDULES[schedule], mask=mask)
            # a padding query sees no real key, so its row is opened over whatever keys exist at
            # that step: its output differs with the cache and is, by design, never read
            full, cached = full[mask.bool()], cached[mask.bool()]
    assert cached.shape == full.shape
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "modern"])
def test_a_prompt_read_at_its_last_position_fills_the_cache_as_a_full_read_does(name):
    """Generation's prefill: the last layer computes the prompt's last query alone, yet caches every key."""
    model = tiny_model(name)
    tokens, mask = ids(2, 8), torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8])
    with torch.no_grad():
        full = model.lm_head.logits(model.hidden_states(tokens, mask))  # (B, 8, V)
        cache = model.make_cache(2, max_len=8)
        prompt = model.hidden_states(tokens[:, :5], mask[:, :5], cache=cache, read_at=torch.full((2, 1), 4))
        steps = [prompt[:, 0]] + [
            model.hidden_states(tokens[:, t : t + 1], mask[:, : t + 1], cache=cache)[:, 0] for t in range(5, 8)
        ]
    torch.testing.assert_close(model.lm_head.logits(torch.stack(steps, 1)), full[:, 4:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "t5"])
def test_kv_cache_reorder_follows_the_kept_rows(name):
    """Beam search keeps rows [1, 1, 0] mid-way: the result is the full forward of those rows."""
    model = tiny_model(name)
    tokens, index = ids(2, 8), torch.tensor([1, 1, 0])
    with torch.no_grad():
        if model.family == "encoder-decoder":
            src = ids(2, 6, seed=1)
            full = model(src[index], decoder_input_ids=tokens[index]).logits
            cached = decode_with_cache(model, tokens, SCHEDULES["chunked"], src=src, reorder=(2, index))
        else:
            full = model(tokens[index]).logits
            cached = decode_with_cache(model, tokens, SCHEDULES["chunked"], reorder=(2, index))
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)


def test_kv_cache_full_raises():
    model = tiny_model("gpt2")
    cache = model.make_cache(1, max_len=2)
    with torch.no_grad():
        model(ids(1, 2), cache=cache)
        with pytest.raises(ValueError, match="KV cache full"):
            model(ids(1, 1), cache=cache)


# --- config: presets, from_dict, validate --------------------------------------------------------


@pytest.mark.parametrize("d_model, d_ff", [(32, 128), (64, 192), (96, 256), (256, 704), (4096, 10944)])
def test_modern_d_ff_is_8d_over_3_rounded_up_to_64(d_model, d_ff):
    assert preset("modern", d_model=d_model, n_heads=4).d_ff == d_ff


def test_preset_values():
    assert preset("gpt2", d_model=48, n_heads=4).d_ff == 4 * 48
    assert preset("modern", d_ff=100).d_ff == 100  # an explicit width is kept
    assert preset("t5", d_model=64).lm_head_input_scale == pytest.approx(64**-0.5)
    assert preset("t5").lm_head_input_scale == pytest.approx(ModelConfig.d_model**-0.5)
    assert preset("t5.1.1").lm_head_input_scale == 1.0  # untied: no rescale
    assert preset("bart").position_offset == 2 and preset("bert").norm_eps == 1e-12
    assert preset("gpt2", family="encoder").activation == "gelu_tanh"  # layout kept across families
    for name in PRESETS:
        assert ModelConfig.from_dict(preset(name).to_dict()) == preset(name)
    assert preset("electra") == preset("bert")  # one layout under two names


def test_preset_rejects_unknown_names_and_keys():
    with pytest.raises(UserError, match="unknown preset 'gpt3'"):
        preset("gpt3")
    with pytest.raises(UserError, match="unknown key.*d_modle"):
        preset("gpt2", d_modle=64)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(UserError, match="unknown key.*heads, layers"):
        ModelConfig.from_dict({"layers": 2, "heads": 4, "d_model": 64})


@pytest.mark.parametrize(
    "key, value",
    [
        ("vocab_size", "8192"),
        ("vocab_size", 8.0),
        ("d_model", True),
        ("pre_norm", 1),
        ("pre_norm", "yes"),
        ("norm_eps", "1e-5"),
        ("norm_eps", False),
        ("activation", 3),
        ("dropout", [0.1]),
    ],
)
def test_from_dict_rejects_wrong_types(key, value):
    with pytest.raises(UserError, match=key):
        ModelConfig.from_dict({key: value})


def test_from_dict_coerces_ints_to_floats():
    cfg = ModelConfig.from_dict({"norm_eps": 1, "rope_theta": 500})
    assert isinstance(cfg.norm_eps, float) and cfg.rope_theta == 500.0


@pytest.mark.parametrize(
    "key, value", [("d_head", "8"), ("n_decoder_layers", 1.5), ("pre_norm", None), ("vocab_size", None)]
)
def test_from_dict_rejects_wrong_types_of_optional_and_none(key, value):
    with pytest.raises(UserError, match=key):
        ModelConfig.from_dict({key: value})


@pytest.mark.parametrize(
    "key", ["vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "n_decoder_layers"]
)
@pytest.mark.parametrize("value", [0, -1])
def test_validate_rejects_non_positive_sizes(key, value):
    with pytest.raises(UserError, match=f"{key} must be positive"):
        ModelConfig(**{key: value}).validate()
    with pytest.raises(UserError):
        build_model(ModelConfig(**{key: value}))


def test_validate_rejects_non_positive_d_head():
    with pytest.raises(UserError, match="d_head"):
        ModelConfig(d_head=0).validate()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 30, "n_heads": 4}, "not divisible by n_heads"),
        ({"position": "rope", "d_model": 36, "n_heads": 4}, "even head dim"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": -0.1}, "dropout"),
        ({"family": "seq2seq"}, "family"),
        ({"norm": "batchnorm"}, "norm"),
        ({"activation": "tanh"}, "activation"),
        ({"position": "alibi"}, "position"),
    ],
)
def test_validate_rejections(overrides, message):
    with pytest.raises(UserError, match=message):
        ModelConfig(**overrides).validate()


def test_validate_accepts_explicit_head_width():
    """T5 sets d_kv explicitly, so d_model need not divide by the heads then."""
    cfg = ModelConfig(d_model=30, n_heads=4, d_head=8).validate()
    assert cfg.head_dim == 8


@pytest.mark.parametrize("positions", [torch.arange(5), torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])])
def test_rope_rotates_each_half_pair_and_its_backward_is_the_inverse_rotation(positions):
    """Pair (x_i, x_{i+hd/2}) turned by position * theta^(-i/(hd/2)); the hand-written backward
    against autograd through that formula, in fp64."""
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    angles = positions.double()[..., None] * 100.0 ** (-torch.arange(4, dtype=torch.float64) / 4)  # (B?, T, 4)
    if angles.dim() == 3:
        angles = angles[:, None]
    x1, x2 = x[..., :4], x[..., 4:]
    expected = torch.cat([x1 * angles.cos() - x2 * angles.sin(), x2 * angles.cos() + x1 * angles.sin()], -1)
    got = rotate(x, RotaryAngles(positions), 100.0)
    torch.testing.assert_close(got, expected)
    grad_out = torch.randn_like(got)
    torch.testing.assert_close(torch.autograd.grad(got, x, grad_out)[0], torch.autograd.grad(expected, x, grad_out)[0])
