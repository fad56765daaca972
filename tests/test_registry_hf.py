"""A task kind registered after every maskwise module is imported (as a plugin's entry point or a user's
``registry.register`` line registers one) has HF keys: ``interop.hf_keys`` reads the registry when it is called,
never a table copied at import, so the kind's fine-tune exports as its HF task class and comes back as its kind,
with its head and its classes."""

import json
import sys
from dataclasses import dataclass

import pytest
import torch
from weights import randomized, state_dicts_equal, word_level_tokenizer

from maskwise.config import preset
from maskwise.interop.folders import load_fine_tuned
from maskwise.interop.hf_export import export_hf
from maskwise.interop.hf_import import hf_fine_tune
from maskwise.model.transformer import build_model
from maskwise.tasks.registry import TASKS, register, save_fine_tune
from maskwise.tasks.tag import Tag, TagConfig, TokenTagger
from maskwise.tasks.unit import Head

pytestmark = [pytest.mark.integration, pytest.mark.precision("fp32")]

V = 64
SMALL = {"vocab_size": V, "d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 32}
IDS = torch.randint(7, V, (2, 6), generator=torch.Generator().manual_seed(5))
MASK = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
CHUNKS = ["B-NP", "I-NP", "B-VP", "O"]
# The plugin's own HF task classes (transformers need not know them: the round trip is maskwise's both ways).
CHUNK_CLASSES = {"bert": "BertForChunking", "modernbert": "ModernBertForChunking"}


@dataclass
class ChunkConfig(TagConfig):
    """The kind's own config type (the registry finds a kind by its config's type)."""


class Chunk(Tag):
    """A plugin's kind with a head: phrase chunks, one tag per word, under an HF task class of its own."""

    kind = "chunk"
    config = ChunkConfig
    head = Head(TokenTagger, {"tags": (True, True)}, classes_key="tags", hf_classes=CHUNK_CLASSES)


@pytest.fixture
def chunk_registered():
    interop = ("maskwise.interop.hf_keys", "maskwise.interop.hf_export", "maskwise.interop.hf_import")
    assert all(name in sys.modules for name in interop)  # imported (their tables built) before the kind exists
    assert "chunk" not in TASKS
    register(Chunk())  # the one line a plugin's entry point stands for
    yield
    del TASKS["chunk"]


@pytest.mark.parametrize("column", sorted(CHUNK_CLASSES))
def test_a_kind_registered_after_import_round_trips_through_its_hf_class(column, tmp_path, chunk_registered):
    tagger = randomized(TokenTagger(build_model(preset(column, **SMALL)), CHUNKS))
    run = tmp_path / "run"
    run.mkdir()
    save_fine_tune(run, tagger.body, word_level_tokenizer(V), {"kind": "chunk", "tags": CHUNKS}, tagger.head)

    out = export_hf(run, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [CHUNK_CLASSES[column]]  # its head went with it, as its kind's class
    assert config["id2label"] == {str(i): tag for i, tag in enumerate(CHUNKS)}

    task, head = hf_fine_tune(out)
    assert task == {"kind": "chunk", "tags": CHUNKS}  # the kind recognised, its classes in the head's order
    assert head is not None and state_dicts_equal(head, tagger.head.state_dict())
    back, _ = load_fine_tuned(out)
    assert type(back) is TokenTagger and back.tags == CHUNKS
    with torch.no_grad():  # the body's and the head's weights came back as they went
        torch.testing.assert_close(back(IDS, MASK), tagger(IDS, MASK), atol=0, rtol=0)
