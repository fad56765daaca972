"""Open any model folder: a maskwise run folder or a local HF model folder (``maskwise.load``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import torch

from maskwise.data.tokenizers import Tokenizer
from maskwise.errors import UserError
from maskwise.interop.hf_import import import_hf
from maskwise.runs import CONFIG_FILE, TOKENIZER_FILE, load_run, read_json


class Loaded(NamedTuple):
    """What ``maskwise.load`` returns: unpack as ``model, tokenizer = maskwise.load(path)``."""

    model: torch.nn.Module
    tokenizer: Any  # maskwise.data.tokenizers.Tokenizer, or None for an HF folder without tokenizer.json


def load(path: str | Path) -> Loaded:
    """Open a maskwise run folder or a local HF model folder.

    Either way the model (eval mode) answers ``model(input_ids, attention_mask=None,
    decoder_input_ids=None)`` with an output whose ``.logits`` are vocabulary logits (RTD scores for
    an ELECTRA discriminator); encoder-decoders need ``decoder_input_ids``, the others refuse them.
    """
    path = Path(path).expanduser()
    if not path.is_dir():
        raise UserError(f"{path}: not a folder (expected a maskwise run folder or an HF model folder)")
    config = read_json(path / CONFIG_FILE)
    if "model_type" in config:
        tokenizer = None
        if (path / TOKENIZER_FILE).is_file():
            tokenizer = Tokenizer.load(path)
            # An HF tokenizer.json may carry its own padding and truncation (MiniLM's pads every text
            # to 128 ids); maskwise frames, truncates and pads ids itself.
            tokenizer.backend.no_padding()
            tokenizer.backend.no_truncation()
        return Loaded(import_hf(path), tokenizer)
    if "model" in config:
        run = load_run(path)
        return Loaded(run.model, run.tokenizer)
    raise UserError(f"{path / CONFIG_FILE}: neither a maskwise run config (no \"model\") nor an HF "
                    f"config (no \"model_type\")")
