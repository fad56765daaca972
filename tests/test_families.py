"""The family table: each family's structure and the defaults that follow from it, in one place."""

import pytest

from maskwise.config import preset
from maskwise.errors import UserError
from maskwise.families import DECODER, ENCODER, ENCODER_DECODER, FAMILIES, family_of

pytestmark = pytest.mark.unit


def test_each_family_is_its_structure():
    # (causal, two stacks) -> what it can do
    assert (ENCODER.causal, ENCODER.two_stacks, ENCODER.encoder_only, ENCODER.writes) == (False, False, True, False)
    assert (DECODER.causal, DECODER.two_stacks, DECODER.encoder_only, DECODER.writes) == (True, False, False, True)
    assert (
        ENCODER_DECODER.causal,
        ENCODER_DECODER.two_stacks,
        ENCODER_DECODER.encoder_only,
        ENCODER_DECODER.writes,
    ) == (False, True, False, True)
    assert [f.bidirectional for f in (ENCODER, DECODER, ENCODER_DECODER)] == [True, False, True]


def test_the_defaults_live_in_the_table():
    assert [family_of(name).objective for name in FAMILIES] == ["mlm", "clm", "span"]
    assert [family_of(name).preset for name in FAMILIES] == ["bert", "gpt2", "t5"]
    # a classifier reads [CLS] where MLM framed it; a bi-encoder averages; a decoder's summary is its last token
    assert [family_of(name).classify_pooling for name in FAMILIES] == ["cls", "last", "mean"]
    assert [family_of(name).embed_pooling for name in FAMILIES] == ["mean", "last", "mean"]
    assert [family_of(name).reranker for name in FAMILIES] == ["cross", "generative", "generative"]


def test_a_config_answers_for_its_family_and_an_unknown_name_is_one_line():
    cfg = preset("t5", family="encoder-decoder", n_layers=2, n_decoder_layers=3)
    assert cfg.kind is ENCODER_DECODER and cfg.total_layers == 5
    assert preset("bert", family="encoder", n_layers=2).total_layers == 2
    with pytest.raises(UserError, match="family must be one of encoder, decoder, encoder-decoder, got 'gpt'"):
        family_of("gpt")
