"""The one mask helper: exact grids, padding, prefixes, sliding windows, cached decoding and the SDPA
fast paths.

Grids are written out as text ("#" = may attend, "." = may not; row = query, column = key) so that
a reader checks them by eye, not by re-deriving them with the same arithmetic as the code.
"""

import pytest
import torch
import torch.nn.functional as F

from maskwise.masks import PATTERNS, Mask, build_mask, describe

pytestmark = pytest.mark.unit


def grid(*rows: str) -> torch.Tensor:
    """(T_q, T_k) bool from rows such as "##..": True = may attend."""
    return torch.tensor([[c == "#" for c in row.replace(" ", "")] for row in rows])


# --- each pattern's exact grid, no padding -------------------------------------------------------


def test_bidirectional_grid_is_all_true():
    assert torch.equal(build_mask("bidirectional", 3, 3).dense(3, 3)[0, 0], grid("###", "###", "###"))


def test_causal_grid_is_lower_triangular():
    expected = grid("#...", "##..", "###.", "####")
    assert torch.equal(build_mask("causal", 4, 4).dense(4, 4)[0, 0], expected)


def test_cross_grid_is_rectangular_and_all_true():
    mask = build_mask("cross", 2, 5)  # 2 decoder queries, 5 encoder keys
    assert torch.equal(mask.dense(2, 5)[0, 0], grid("#####", "#####"))


def test_prefix_grid_per_row():
    """Row b sees its whole prefix j < p[b] from every query, and is causal after it."""
    mask = build_mask("prefix", 5, 5, prefix_lengths=torch.tensor([2, 0, 5]))
    assert mask.allowed.shape == (3, 1, 5, 5)
    assert torch.equal(mask.allowed[0, 0], grid("##...", "##...", "###..", "####.", "#####"))
    assert torch.equal(mask.allowed[1, 0], grid("#....", "##...", "###..", "####.", "#####"))  # = causal
    assert torch.equal(mask.allowed[2, 0], grid("#####", "#####", "#####", "#####", "#####"))  # = bidirectional


# --- padding is combined by AND ------------------------------------------------------------------


def test_padding_and_bidirectional():
    padding = torch.tensor([[1, 1, 0], [0, 1, 1]])
    mask = build_mask("bidirectional", 3, 3, key_padding=padding)
    assert mask.allowed.shape == (2, 1, 1, 3)  # one row per sequence, broadcast over the queries
    allowed = mask.allowed.expand(-1, -1, 3, -1)
    assert torch.equal(allowed[0, 0], grid("##.", "##.", "##."))
    assert torch.equal(allowed[1, 0], grid(".##", ".##", ".##"))
    assert torch.equal(
        build_mask("bidirectional", 2, 2, key_padding=torch.tensor([[0, 0]])).allowed[0, 0], grid("##")
    )  # a sequence of padding alone: opened, as a fully masked row would give NaN


def test_padding_and_causal():
    padding = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])
    mask = build_mask("causal", 4, 4, key_padding=padding)
    assert torch.equal(mask.allowed[0, 0], grid("#...", "##..", "###.", "###."))
    # row 1 query 0 is a left-padding query that may see nothing: opened, see the next test
    assert torch.equal(mask.allowed[1, 0], grid("####", ".#..", ".##.", ".###"))


def test_padding_and_prefix():
    padding = torch.tensor([[1, 1, 1, 0]])
    mask = build_mask("prefix", 4, 4, key_padding=padding, prefix_lengths=torch.tensor([3]))
    assert torch.equal(mask.allowed[0, 0], grid("###.", "###.", "###.", "###."))


def test_padding_and_cross():
    padding = torch.tensor([[1, 0, 1, 1, 0]])
    mask = build_mask("cross", 2, 5, key_padding=padding)
    assert torch.equal(mask.allowed.expand(-1, -1, 2, -1)[0, 0], grid("#.##.", "#.##."))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_padding_is_and_of_pattern_and_keys(pattern):
    """Wherever a row keeps at least one key, the mask is exactly pattern AND key padding."""
    torch.manual_seed(0)
    padding = torch.rand(4, 6) > 0.3
    prefix = torch.tensor([0, 2, 3, 6])
    plain = build_mask(pattern, 6, 6, prefix_lengths=prefix).dense(6, 6)
    padded = build_mask(pattern, 6, 6, key_padding=padding, prefix_lengths=prefix).allowed
    expected = plain & padding[:, None, None, :]
    keeps_a_key = expected.any(-1, keepdim=True)
    assert torch.equal(padded & keeps_a_key, expected)


# --- fully masked rows, cached decoding ----------------------------------------------------------


def test_fully_masked_rows_are_opened_and_attention_stays_finite():
    padding = torch.tensor([[0, 0, 1, 1]])  # left padding under a causal mask: queries 0, 1 see nothing
    mask = build_mask("causal", 4, 4, key_padding=padding)
    assert mask.allowed[0, 0, :2].all()
    assert torch.equal(mask.allowed[0, 0, 2:], grid("..#.", "..##"))
    q = k = v = torch.randn(1, 2, 4, 8)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.allowed)
    assert torch.isfinite(y).all()


def test_all_padding_row_is_opened():
    mask = build_mask("bidirectional", 2, 3, key_padding=torch.zeros(1, 3))
    assert mask.allowed.all()


def test_q_offset_aligns_queries_with_cached_keys():
    """Two new queries after three cached tokens are rows 3 and 4 of the full causal grid."""
    mask = build_mask("causal", 2, 5, q_offset=3)
    assert torch.equal(mask.allowed[0, 0], grid("####.", "#####"))
    full = build_mask("causal", 5, 5).dense(5, 5)
    assert torch.equal(mask.allowed, full[:, :, 3:])


def test_q_offset_with_padding_and_prefix():
    padding = torch.tensor([[0, 1, 1, 1, 1]])
    mask = build_mask("prefix", 2, 5, key_padding=padding, prefix_lengths=torch.tensor([5]), q_offset=3)
    assert torch.equal(mask.allowed[0, 0], grid(".####", ".####"))
    mask = build_mask("causal", 1, 5, key_padding=padding, q_offset=4)
    assert torch.equal(mask.allowed[0, 0], grid(".####"))


# --- fast paths: None / is_causal exactly when nothing else is needed ----------------------------


@pytest.mark.parametrize(
    "pattern, q_len, k_len, q_offset, expected",
    [
        ("bidirectional", 4, 4, 0, Mask(None)),
        ("cross", 3, 7, 0, Mask(None)),
        ("causal", 4, 4, 0, Mask(None, is_causal=True)),
        ("causal", 1, 6, 5, Mask(None)),  # one new token after five cached: sees every key
        ("causal", 1, 1, 0, Mask(None)),
    ],
)
def test_fast_paths(pattern, q_len, k_len, q_offset, expected):
    assert build_mask(pattern, q_len, k_len, q_offset=q_offset) == expected


@pytest.mark.parametrize(
    "pattern, q_len, k_len, q_offset, kwargs",
    [
        ("causal", 2, 6, 4, {}),  # a chunk after a cache: SDPA's is_causal would align it wrongly
        ("causal", 1, 6, 3, {}),  # a query that is not the last key
        ("causal", 4, 4, 0, {"key_padding": torch.ones(1, 4)}),
        ("bidirectional", 4, 4, 0, {"key_padding": torch.ones(1, 4)}),
        ("cross", 2, 4, 0, {"key_padding": torch.ones(1, 4)}),
        ("prefix", 4, 4, 0, {"prefix_lengths": torch.tensor([0])}),
    ],
)
def test_explicit_masks_when_needed(pattern, q_len, k_len, q_offset, kwargs):
    mask = build_mask(pattern, q_len, k_len, q_offset=q_offset, **kwargs)
    assert mask.allowed is not None and mask.allowed.dtype == torch.bool and not mask.is_causal
    assert torch.broadcast_shapes(mask.allowed.shape, (1, 1, q_len, k_len))[1:] == (1, q_len, k_len)


def test_dense_materialises_fast_paths():
    assert torch.equal(Mask(None, is_causal=True).dense(3, 3)[0, 0], grid("#..", "##.", "###"))
    assert Mask(None).dense(2, 3).shape == (1, 1, 2, 3) and Mask(None).dense(2, 3).all()


@pytest.mark.parametrize(
    "pattern, kwargs",
    [
        ("causal", {}),
        ("bidirectional", {}),
        ("bidirectional", {"key_padding": torch.tensor([[1, 1, 0, 0]])}),
        ("prefix", {"prefix_lengths": torch.tensor([2])}),
    ],
)
def test_additive_is_zero_where_allowed_and_minus_inf_elsewhere(pattern, kwargs):
    mask = build_mask(pattern, 4, 4, **kwargs)
    additive = mask.additive(4, 4)
    if mask.allowed is None and not mask.is_causal:
        assert additive is None  # nothing to add: every key is allowed
        return
    allowed = mask.dense(4, 4)
    assert additive.dtype == torch.float32 and additive.shape == allowed.shape
    assert (additive[allowed] == 0).all() and (additive[~allowed] == float("-inf")).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown mask pattern"):
        build_mask("sliding", 2, 2)
    with pytest.raises(ValueError, match="prefix_lengths"):
        build_mask("prefix", 2, 2)


# --- sliding windows (local layers), combined by AND too -----------------------------------------


def test_bidirectional_window_is_a_band():
    assert torch.equal(
        build_mask("bidirectional", 5, 5, window=1).dense(5, 5)[0, 0], grid("##...", "###..", ".###.", "..###", "...##")
    )


def test_causal_window_reaches_back_window_tokens():
    assert torch.equal(
        build_mask("causal", 5, 5, window=2).dense(5, 5)[0, 0], grid("#....", "##...", "###..", ".###.", "..###")
    )


def test_window_and_padding_and_a_query_whose_window_holds_only_padding():
    """Padding is removed inside the window; a query whose window holds only padding (row 0,
    query 4 with window 1) sees no key and is opened fully, as every pattern's empty rows are."""
    padding = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    allowed = build_mask("bidirectional", 5, 5, key_padding=padding, window=1).allowed
    assert torch.equal(allowed[0, 0], grid("##...", "###..", ".##..", "..#..", "#####"))
    assert torch.equal(allowed[1, 0], grid(".#...", ".##..", ".###.", "..###", "...##"))


def test_cached_decoding_window_lines_up_with_the_cached_keys():
    """Query 4 (4 tokens cached) with window 2 sees keys 2, 3, 4; two queries 3, 4 their own bands."""
    assert torch.equal(build_mask("causal", 1, 5, q_offset=4, window=2).dense(1, 5)[0, 0], grid("..###"))
    assert torch.equal(build_mask("causal", 2, 5, q_offset=3, window=2).dense(2, 5)[0, 0], grid(".###.", "..###"))


def test_prefix_window_hides_far_prefix_keys_too():
    allowed = build_mask("prefix", 5, 5, prefix_lengths=torch.tensor([3]), window=1).allowed
    assert torch.equal(allowed[0, 0], grid("##...", "###..", ".##..", "..##.", "...##"))


def test_a_window_no_key_is_beyond_keeps_the_fast_paths():
    assert build_mask("causal", 4, 4, window=3).is_causal
    assert build_mask("bidirectional", 4, 4, window=3).allowed is None
    assert build_mask("causal", 1, 5, q_offset=4, window=4).allowed is None
    assert build_mask("causal", 4, 4, window=2).allowed is not None


def test_cross_attention_has_no_window():
    with pytest.raises(ValueError, match="no sliding window"):
        build_mask("cross", 2, 5, window=1)


# --- describe ------------------------------------------------------------------------------------


def test_describe_causal():
    assert describe("causal", 4) == "\n".join(
        [
            "causal (row = query, column = key, # = may attend)",
            "    0 1 2 3",
            "  0 # . . .",
            "  1 # # . .",
            "  2 # # # .",
            "  3 # # # #",
        ]
    )


def test_describe_prefix_and_cross_headers():
    text = describe("prefix", 5, prefix_length=2)
    assert text.splitlines()[0] == "prefix (row = query, column = key, # = may attend), prefix length 2"
    assert text.splitlines()[2:4] == ["  0 # # . . .", "  1 # # . . ."]
    assert describe("prefix", 4).splitlines()[0].endswith("prefix length 2")  # default n // 2
    cross = describe("cross", 3).splitlines()
    assert cross[0] == "cross (row = decoder query, column = encoder key, # = may attend)"
    assert cross[2:] == ["  0 # # #", "  1 # # #", "  2 # # #"]
