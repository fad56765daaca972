"""MLM and CLM objectives: properties of the corruption and of the shift."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from maskwise.config import preset
from maskwise.model.heads import IGNORE_INDEX
from maskwise.model.transformer import build_model
from maskwise.objectives.clm import CLM, clm_inputs_and_labels
from maskwise.objectives.mlm import MLM, mask_tokens

pytestmark = pytest.mark.unit

V, MASK = 60, 3
IS_SPECIAL = torch.zeros(V, dtype=torch.bool)
IS_SPECIAL[:7] = True


def _ids(seed, shape=(64, 50)):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, V, shape, generator=g)
    ids[:, 0] = 2  # a special token in every row ([CLS]-like)
    return ids


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), ratio=st.sampled_from([0.15, 0.3, 0.5]))
def test_rates_within_tolerance(seed, ratio):
    ids = _ids(seed)
    g = torch.Generator().manual_seed(seed)
    inputs, labels = mask_tokens(ids, IS_SPECIAL, MASK, g, ratio=ratio)
    chosen = labels != IGNORE_INDEX
    n = int(chosen.sum())
    candidates = int((~IS_SPECIAL[ids]).sum())
    assert abs(n / candidates - ratio) < 0.05
    masked = (inputs == MASK) & chosen
    unchanged = (inputs == ids) & chosen
    assert abs(int(masked.sum()) / n - 0.8) < 0.08
    # unchanged = 10% kept + random draws that happen to hit the original (1/53 of 10%)
    assert abs(int(unchanged.sum()) / n - 0.1) < 0.07


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), ratio=st.floats(0.01, 0.99))
def test_specials_never_masked_and_one_mask_per_row(seed, ratio):
    ids = _ids(seed, (16, 8))
    inputs, labels = mask_tokens(ids, IS_SPECIAL, MASK, torch.Generator().manual_seed(seed), ratio=ratio)
    chosen = labels != IGNORE_INDEX
    assert not chosen[IS_SPECIAL[ids]].any()
    assert (inputs[IS_SPECIAL[ids]] == ids[IS_SPECIAL[ids]]).all()
    assert chosen.any(dim=1).all()
    assert (labels[chosen] == ids[chosen]).all()
    # random replacements are never special tokens
    assert not IS_SPECIAL[inputs[chosen & (inputs != MASK)]].any()


def test_padding_never_chosen():
    ids = _ids(0, (4, 20))
    attention = torch.ones_like(ids)
    attention[:, 12:] = 0
    _, labels = mask_tokens(ids, IS_SPECIAL, MASK, torch.Generator().manual_seed(0), 0.5, attention_mask=attention)
    assert (labels[:, 12:] == IGNORE_INDEX).all()


class _Tok:
    cls_id, mask_id = 2, 3
    special_ids = frozenset(range(7))


def test_loss_denominator_is_masked_count():
    torch.manual_seed(0)
    cfg = preset("bert", vocab_size=V, d_model=32, n_heads=4, n_layers=1, max_seq_len=32)
    model = build_model(cfg)
    objective = MLM(_Tok(), V, mask_ratio=0.3)
    batch = objective.prepare(_ids(1, (4, 20)), torch.Generator().manual_seed(1))
    parts = objective.loss(model, batch)
    n = int((batch["labels"] != IGNORE_INDEX).sum())
    assert parts.n_positions == n
    out = model(batch["input_ids"], labels=batch["labels"])
    torch.testing.assert_close(out.loss, parts.loss_sum / n)
    assert batch["input_ids"][:, 0].eq(2).all()  # [CLS] first


def test_clm_shift_happens_once():
    ids = torch.arange(10)[None]
    inputs, labels = clm_inputs_and_labels(ids)
    assert inputs.tolist() == [list(range(9))] and labels.tolist() == [list(range(1, 10))]
    assert CLM().raw_length(9) == 10


def test_no_shift_really_predicts_the_current_token():
    """Trained without the shift, a decoder learns the identity: near-zero loss on the current token,
    and the argmax at position t is the token at t, not the next one."""
    torch.manual_seed(0)
    cfg = preset("gpt2", vocab_size=V, d_model=32, n_heads=4, n_layers=1, max_seq_len=32)
    model = build_model(cfg)
    objective = CLM(shift=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        batch = objective.prepare(torch.randint(7, V, (8, 16), generator=g), g)
        parts = objective.loss(model, batch)
        optimizer.zero_grad()
        (parts.loss_sum / parts.n_positions).backward()
        optimizer.step()
    ids = torch.randint(7, V, (2, 16), generator=g)
    logits = model(ids).logits
    assert (logits.argmax(-1) == ids).float().mean() > 0.95
    assert float(parts.loss_sum.detach()) / parts.n_positions < 0.5
