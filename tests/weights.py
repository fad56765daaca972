"""What the interop tests share: random weights large enough that a wrong mapping shows in the
logits, exact state-dict equality for round trips, an exported folder's check, and a run folder as
pretraining writes one."""

import tokenizers
import torch
from tokenizers import models, pre_tokenizers

from maskwise import runs
from maskwise.data.tokenizers import SPECIAL_TOKENS, Tokenizer
from maskwise.interop.folders import load


def randomized(model, seed=0):
    """Every parameter ~ N(0, 0.2^2), eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
    return model.eval()


def state_dicts_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(value, b[key]) for key, value in a.items())


def check_export(out, ours, auto_class, class_name, tokenizer, ids, mask, atol=1e-4):
    """The HF folder ``out`` loads as ``class_name`` with every key used, gives ``ours``'s logits on a
    padded batch, and loads back into maskwise identical, with its tokenizer."""

    hf, info = auto_class.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == class_name
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        torch.testing.assert_close(
            hf.eval()(input_ids=ids, attention_mask=mask).logits, ours(ids, mask).logits, atol=atol, rtol=0
        )
    back, loaded_tokenizer = load(out)
    assert type(back) is type(ours) and back.cfg == ours.cfg
    assert state_dicts_equal(back.state_dict(), ours.state_dict())
    assert loaded_tokenizer.encode("w1 w2") == tokenizer.encode("w1 w2")


# The tiny decoder checkpoints the Llama-layout tests (Llama, Qwen2) build: a padded batch, maskwise's sizes, HF's.
ATOL = 1e-4  # logits against HF's, fp32
DECODER_VOCAB, DECODER_WIDTH = 64, 32
DECODER_IDS = torch.randint(7, DECODER_VOCAB, (3, 7), generator=torch.Generator().manual_seed(3))
DECODER_MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
DECODER_SIZES = {"vocab_size": DECODER_VOCAB, "d_model": DECODER_WIDTH, "n_heads": 4, "n_layers": 2, "max_seq_len": 32}
HF_DECODER_SIZES = {
    "vocab_size": DECODER_VOCAB,
    "hidden_size": DECODER_WIDTH,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "max_position_embeddings": 32,
}


def make_run(folder, model, tokenizer, preset_name):
    """A run folder as pretraining writes one (config, final weights, tokenizer)."""
    folder.mkdir()
    runs.write_json(folder / runs.CONFIG_FILE, {"model": model.cfg.to_dict(), "settings": {"preset": preset_name}})
    runs.save_weights(model, folder / runs.MODEL_FILE)
    tokenizer.save(folder / runs.TOKENIZER_FILE)
    return folder


def word_level_tokenizer(size):
    """Word-level: maskwise's special tokens, then w0, w1, ... up to ``size`` ids."""
    vocab = {
        token: i for i, token in enumerate([*SPECIAL_TOKENS, *(f"w{i}" for i in range(size - len(SPECIAL_TOKENS)))])
    }
    backend = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return Tokenizer(backend, "file")
