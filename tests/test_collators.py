"""Collators: HF-style batches from the objectives' corruptions, and tiny HF T5 / BART / BERT / GPT-2
models trained or run on them through a DataLoader."""

import pytest
import torch
from test_objectives_span import restore
from torch.utils.data import DataLoader

from maskwise.model.heads import IGNORE_INDEX
from maskwise.objectives.collators import (
    DenoisingCollator,
    ElectraCollator,
    MLMCollator,
    PrefixLMCollator,
    SpanCorruptionCollator,
    SpecialIds,
)

transformers = pytest.importorskip("transformers")

V = 100
# HF T5's layout: pad 0, EOS 1, unk 2, <extra_id_0> the last id and counting down.
T5_IDS = SpecialIds(
    vocab_size=V, pad_id=0, eos_id=1, special_ids=frozenset({2}), sentinel_ids=tuple(range(V - 1, V - 21, -1))
)
# HF BART's layout: <s> 0, pad 1, </s> 2, unk 3, <mask> the last id.
BART_IDS = SpecialIds(vocab_size=V, bos_id=0, pad_id=1, eos_id=2, mask_id=V - 1, special_ids=frozenset({3}))
FIRST, LAST = 5, 79  # ordinary ids used in the data
FULL_STOP = 10


def _examples(n: int, seed: int, frame=None) -> list[dict]:
    """Variable-length examples cut from one repeated random sentence (learnable), as HF datasets
    rows; ``frame`` = (bos, eos) to wrap them as a tokenizer would."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(FIRST, LAST, (29,), generator=torch.Generator().manual_seed(0))
    base[[9, 19, 28]] = FULL_STOP
    stream = base.repeat(4)
    rows = []
    for _ in range(n):
        start, length = int(torch.randint(0, 29, (1,), generator=g)), int(torch.randint(20, 41, (1,), generator=g))
        ids = stream[start : start + length].tolist()
        rows.append({"input_ids": [frame[0], *ids, frame[1]] if frame else ids})
    return rows


@pytest.mark.unit
def test_special_ids_from_an_hf_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "hello": 3, ".": 4, "<extra_id_1>": 5, "<extra_id_0>": 6}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=["<extra_id_0>", "<extra_id_1>"],
    )
    ids = SpecialIds.of(hf)
    assert (ids.vocab_size, ids.pad_id, ids.eos_id, ids.mask_id) == (7, 0, 1, None)
    assert ids.sentinel_ids == (6, 5) and ids.special_ids == {0, 1, 2, 5, 6}
    assert ids.decode([4]) == "."
    assert SpecialIds.of(hf, mask_id=3).mask_id == 3
    with pytest.raises(ValueError, match="no mask_id"):
        MLMCollator(hf)
    batch = SpanCorruptionCollator(hf, decoder_start_token_id=0, seed=0)([hf("hello . hello hello .")])
    assert batch["input_ids"][0, -1] == 1 and 6 in batch["labels"][0].tolist()


@pytest.mark.unit
def test_span_batch_layout():
    raw = [example["input_ids"] for example in _examples(5, 0)]
    examples = [{"input_ids": raw[0]}, raw[1], torch.tensor(raw[2] + [T5_IDS.eos_id]), *raw[3:]]  # any form;
    batch = SpanCorruptionCollator(T5_IDS, decoder_start_token_id=0, seed=0)(examples)  # a final EOS is dropped
    labels, attention = batch["labels"], batch["attention_mask"]
    assert (batch["decoder_input_ids"][:, 0] == 0).all()
    assert torch.equal(batch["decoder_input_ids"][:, 1:], labels[:, :-1].clamp(min=0))  # -100 read as pad
    for row, ids in enumerate(raw):
        n, m = int(attention[row].sum()), int((labels[row] != IGNORE_INDEX).sum())
        assert (batch["input_ids"][row, n:] == T5_IDS.pad_id).all()
        assert (labels[row, m:] == IGNORE_INDEX).all()
        assert (
            restore(batch["input_ids"][row, :n].tolist(), labels[row, :m].tolist(), T5_IDS.sentinel_ids, T5_IDS.eos_id)
            == ids
        )


@pytest.mark.unit
def test_denoising_batch_layout():
    examples = _examples(4, 1, frame=(0, 2))
    batch = DenoisingCollator(BART_IDS, decoder_start_token_id=2, sentence_end_ids=[FULL_STOP], seed=0)(examples)
    for row, example in enumerate(examples):
        ids = example["input_ids"]
        assert batch["labels"][row, : len(ids)].tolist() == ids
        n = int(batch["attention_mask"][row].sum())
        assert batch["input_ids"][row, 0] == 0 and batch["input_ids"][row, n - 1] == 2  # <s>, </s> in place
    assert (batch["decoder_input_ids"][:, 0] == 2).all()  # HF BART starts from </s>
    assert (batch["input_ids"] == BART_IDS.mask_id).any()


def _train(model, collator, examples, steps=30, lr=3e-3):
    torch.manual_seed(0)
    loader = DataLoader(examples, batch_size=8, shuffle=True, collate_fn=collator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    while len(losses) < steps:
        for batch in loader:
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return losses


@pytest.mark.integration
def test_hf_t5_learns_from_span_collator():
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=V,
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        dropout_rate=0.0,
    )
    model = transformers.T5ForConditionalGeneration(config)
    losses = _train(model, SpanCorruptionCollator(T5_IDS, decoder_start_token_id=0, seed=0), _examples(64, 2))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


@pytest.mark.integration
def test_hf_bart_learns_from_denoising_collator():
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=V,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        dropout=0.0,
    )
    model = transformers.BartForConditionalGeneration(config)
    collator = DenoisingCollator(BART_IDS, decoder_start_token_id=2, sentence_end_ids=[FULL_STOP], seed=0)
    losses = _train(model, collator, _examples(64, 3, frame=(0, 2)))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


@pytest.mark.integration
def test_hf_bert_runs_on_mlm_and_electra_collators():
    torch.manual_seed(0)
    ids = SpecialIds(vocab_size=V, pad_id=0, cls_id=2, sep_id=3, mask_id=4)
    config = transformers.BertConfig(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = transformers.BertForMaskedLM(config)
    examples = _examples(8, 4, frame=(2, 3))
    for collator in (MLMCollator(ids, seed=0), ElectraCollator(ids, seed=0)):
        batch = collator(examples)
        chosen = batch["labels"] != IGNORE_INDEX
        assert not chosen[:, 0].any() and not chosen[batch["attention_mask"] == 0].any()
        loss = model(**batch).loss
        loss.backward()
        assert torch.isfinite(loss)
    electra = ElectraCollator(ids, seed=0)(_examples(64, 5, frame=(2, 3)))
    chosen = electra["labels"] != IGNORE_INDEX
    assert float((electra["input_ids"][chosen] == 4).float().mean()) == pytest.approx(0.85, abs=0.06)
    assert torch.equal(
        electra["input_ids"][chosen & (electra["input_ids"] != 4)],
        electra["labels"][chosen & (electra["input_ids"] != 4)],
    )  # the rest unchanged


@pytest.mark.integration
def test_prefix_collator_with_hf_gpt2():
    torch.manual_seed(0)
    examples = _examples(6, 6)
    collator = PrefixLMCollator(SpecialIds(vocab_size=V, pad_id=0), return_prefix_lengths=True, seed=0)
    batch = collator(examples)
    p = batch.pop("prefix_lengths")
    t = torch.arange(batch["input_ids"].shape[1])
    lengths = batch["attention_mask"].sum(1)
    assert ((1 <= p) & (p < lengths)).all()
    carries = (t[None] >= p[:, None]) & (t[None] < lengths[:, None])
    assert torch.equal(batch["labels"][carries], batch["input_ids"][carries])
    assert (batch["labels"][~carries] == IGNORE_INDEX).all()
    config = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    loss = transformers.GPT2LMHeadModel(config)(**batch).loss
    assert torch.isfinite(loss)
