"""ELECTRA's factorised embeddings (``embedding_size`` < ``hidden_size``, as ELECTRA-small has): the
setting, its NumPy oracle, and HF interop both ways for the discriminator and the generator.

Tier 3 (oracles). Tiny random configs (hidden 64, embeddings 32, 2 layers) with every parameter
drawn at random, right-padded batches, logits within 1e-5 of HF's.
"""

import os

import numpy as np
import pytest
import torch
from weights import randomized, state_dicts_equal

from maskwise.config import ModelConfig, preset
from maskwise.errors import UserError
from maskwise.interop.hf_export import export_hf
from maskwise.interop.hf_import import import_hf
from maskwise.model.transformer import Discriminator, build_model
from maskwise.objectives.electra import ElectraModel
from maskwise.reference import numpy_ref

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tf = pytest.importorskip("transformers")

V, D, E = 64, 64, 32
ATOL = 1e-5
IDS = torch.randint(7, V, (3, 7), generator=torch.Generator().manual_seed(5))
MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
SIZES = {
    "vocab_size": V,
    "hidden_size": D,
    "embedding_size": E,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 16,
}
SMALL = {"vocab_size": V, "d_model": D, "embedding_size": E, "n_heads": 4, "n_layers": 2, "max_seq_len": 16}


HF_ELECTRAS = {  # name: (builder, maskwise class)
    "discriminator": (lambda: tf.ElectraForPreTraining(tf.ElectraConfig(**SIZES)), Discriminator),
    "generator": (lambda: tf.ElectraForMaskedLM(tf.ElectraConfig(**SIZES)), None),
    "generator-untied": (lambda: tf.ElectraForMaskedLM(tf.ElectraConfig(**SIZES, tie_word_embeddings=False)), None),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", HF_ELECTRAS)
def test_factorised_electra_imports_exports_and_round_trips(name, tmp_path):
    build, cls = HF_ELECTRAS[name]
    hf = randomized(build())
    ours = import_hf(hf)
    assert ours.cfg.embedding_size == E and ours.cfg.d_model == D
    assert ours.cfg.tie_embeddings == (name != "generator-untied")
    assert cls is None or type(ours) is cls
    with torch.no_grad():
        expected, got = hf(input_ids=IDS, attention_mask=MASK).logits, ours(IDS, MASK).logits
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)

    out = export_hf(ours, tmp_path / "hf")
    again, info = type(hf).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(input_ids=IDS, attention_mask=MASK).logits, got, atol=ATOL, rtol=0)
    back = import_hf(out)
    assert type(back) is type(ours) and back.cfg == ours.cfg
    assert state_dicts_equal(back.state_dict(), ours.state_dict())


@pytest.mark.integration
def test_maskwise_factorised_encoder_exports_as_electra_without_being_asked(tmp_path):
    ours = randomized(build_model(preset("electra", **SMALL)))
    out = export_hf(ours, tmp_path / "hf")  # BERT has no factorised embeddings, so ELECTRA it is
    hf = tf.AutoModelForMaskedLM.from_pretrained(out).eval()
    assert type(hf).__name__ == "ElectraForMaskedLM" and hf.config.embedding_size == E
    with torch.no_grad():
        torch.testing.assert_close(
            hf(input_ids=IDS, attention_mask=MASK).logits, ours(IDS, MASK).logits, atol=ATOL, rtol=0
        )


@pytest.mark.integration
def test_base_electra_model_gives_hidden_states_and_names_its_missing_projection(tmp_path):
    hf = randomized(tf.ElectraModel(tf.ElectraConfig(**SIZES)))
    ours = import_hf(hf)
    with torch.no_grad():
        torch.testing.assert_close(
            ours.hidden_states(IDS, MASK), hf(input_ids=IDS, attention_mask=MASK).last_hidden_state, atol=ATOL, rtol=0
        )
        with pytest.raises(ValueError, match="no vocabulary projection"):
            ours(IDS, MASK)


@pytest.mark.unit
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_factorised_embeddings_match_the_numpy_reference(family):
    cfg = preset("electra" if family == "encoder" else "modern", **SMALL, family=family)
    model = randomized(build_model(cfg))
    assert model.embed.weight.shape == (V, E) and model.stack.embedding_project.weight.shape == (D, E)
    weights = {key: value.numpy() for key, value in model.state_dict().items()}
    with torch.no_grad():
        got = model(IDS, MASK).logits.numpy()
    expected = numpy_ref.forward(weights, cfg, IDS.numpy(), MASK.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.unit
def test_embedding_size_setting_is_checked_and_defaults_to_no_projection():
    for bad, problem in [(0, "embedding_size must be positive"), ("32", "integer or null"), (1.5, "integer or null")]:
        with pytest.raises(UserError, match=problem):
            ModelConfig.from_dict({"embedding_size": bad})
    plain = build_model(preset("bert", vocab_size=V, d_model=D, n_heads=4, n_layers=1, max_seq_len=16))
    same = build_model(preset("bert", vocab_size=V, d_model=D, n_heads=4, n_layers=1, max_seq_len=16, embedding_size=D))
    assert plain.state_dict().keys() == same.state_dict().keys()
    assert not any("embedding_project" in key for key in plain.state_dict())


@pytest.mark.unit
def test_electra_pretraining_refuses_factorised_embeddings():
    with pytest.raises(UserError, match="embedding_size"):
        ElectraModel(preset("electra", **SMALL))
