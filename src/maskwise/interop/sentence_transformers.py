"""sentence-transformers folders: what one declares about its vectors, and writing one from a run.

A sentence-transformers folder is an HF model folder (its Transformer module, saved in the root)
plus ``modules.json``, the chain that turns the last hidden states into one vector per text:
Transformer -> Pooling (``1_Pooling/config.json``) -> optionally Normalize. maskwise reads and
writes exactly that chain. Any other module (Dense, LayerNorm, a custom class) changes the vectors
in a way maskwise would not reproduce, so such a folder is refused rather than half-read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.interop.hf_export import export_hf
from maskwise.model.heads import pool
from maskwise.runs import CONFIG_FILE, json_bytes, load_run, read_json

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "sentence_bert_config.json"  # the Transformer module's settings
ST_SETTINGS_FILE = "config_sentence_transformers.json"  # the whole model's: its type, prompts, similarity
POOLING_DIR = "1_Pooling"

# sentence-transformers' pooling modes -> maskwise's names for them.
ST_POOLINGS = {"cls": "cls", "mean": "mean", "max": "max", "lasttoken": "last", "mean_sqrt_len_tokens": "mean_sqrt_len"}
# Pooling configs before sentence-transformers 6 set one flag per mode; a vector concatenates the
# chosen modes in this order. maskwise writes this form: every version reads it.
LEGACY_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
CHAINS = (("Transformer", "Pooling"), ("Transformer", "Pooling", "Normalize"))
# modules.json type names maskwise writes: the spelling every sentence-transformers version resolves.
LEGACY_TYPES = {kind: f"sentence_transformers.models.{kind}" for kind in CHAINS[1]}


@dataclass(frozen=True)
class EmbeddingSettings:
    """How a folder says texts become vectors; None where it says nothing (``resolved`` fills the gaps)."""

    max_len: int | None = None  # ids per text, framing included
    pooling: tuple[str, ...] | None = None  # maskwise names; more than one: the poolings concatenated
    normalize: bool | None = None
    lowercase: bool = False  # sentence-transformers' do_lower_case: lowercase before tokenizing
    model_dir: str = ""  # the Transformer module's HF folder, relative to the folder ("": the folder itself)

    def resolved(self, cfg: ModelConfig) -> EmbeddingSettings:
        """These settings with every gap filled as maskwise fills it: the family's default pooling
        (``tasks.embed``), L2 normalisation, and never more ids than the model's context."""

        return replace(
            self,
            max_len=min(self.max_len or cfg.max_seq_len, cfg.max_seq_len),
            pooling=self.pooling or (cfg.kind.embed_pooling,),
            normalize=True if self.normalize is None else self.normalize,
        )


def declared_settings(folder: Path) -> EmbeddingSettings:
    """What ``folder`` declares: a sentence-transformers folder its modules, a ``maskwise finetune
    embed`` run the pooling, normalisation and length it trained with; anything else nothing."""
    if (folder / MODULES_FILE).is_file():
        return _read_modules(folder)
    config = read_json(folder / CONFIG_FILE) if (folder / CONFIG_FILE).is_file() else {}
    task = (config.get("task") or {}) if "model" in config else {}  # an HF config.json has no task
    if task.get("kind") != "embed":
        return EmbeddingSettings()
    return EmbeddingSettings(
        max_len=task.get("max_len"),
        normalize=task.get("normalize"),
        pooling=(task["pooling"],) if task.get("pooling") else None,
    )


def _module_kind(folder: Path, module: Any) -> str:
    type_name = str(module.get("type", "")) if isinstance(module, dict) else ""
    kind = type_name.rpartition(".")[2]
    if not type_name.startswith("sentence_transformers.") or kind not in CHAINS[1]:
        raise UserError(
            f"{folder / MODULES_FILE}: module type {type_name or module!r} is not supported "
            f"(maskwise reads {' -> '.join(CHAINS[1])})"
        )
    return kind


def _read_modules(folder: Path) -> EmbeddingSettings:
    modules = read_json(folder / MODULES_FILE)
    if not isinstance(modules, list):
        raise UserError(f"{folder / MODULES_FILE}: not a list of modules")
    kinds = tuple(_module_kind(folder, module) for module in modules)
    if kinds not in CHAINS:
        raise UserError(
            f"{folder / MODULES_FILE}: modules {' -> '.join(kinds) or 'none'}; maskwise reads "
            f"Transformer -> Pooling, optionally -> Normalize"
        )
    _check_plain_sentence_transformer(folder)
    model_dir = str(modules[0].get("path", ""))
    transformer = folder / model_dir
    config = read_json(transformer / ST_CONFIG_FILE) if (transformer / ST_CONFIG_FILE).is_file() else {}
    if len(kinds) == 3:
        _check_normalize(folder / str(modules[2].get("path", "")))
    return EmbeddingSettings(
        max_len=_max_len(transformer, config),
        normalize=len(kinds) == 3,
        pooling=_poolings(folder / str(modules[1].get("path", ""))),
        lowercase=bool(config.get("do_lower_case", False)),
        model_dir=model_dir,
    )


def _check_plain_sentence_transformer(folder: Path) -> None:
    """A default prompt is prepended to every text and other model types score differently; maskwise
    embeds texts as given, so such a folder would give other vectors."""
    if not (folder / ST_SETTINGS_FILE).is_file():
        return
    settings = read_json(folder / ST_SETTINGS_FILE)
    if settings.get("model_type", "SentenceTransformer") != "SentenceTransformer":
        raise UserError(f"{folder}: a {settings['model_type']}, not a SentenceTransformer")
    if settings.get("default_prompt_name"):
        raise UserError(
            f"{folder}: declares the default prompt {settings['default_prompt_name']!r}; maskwise embeds texts as given"
        )


def _check_normalize(path: Path) -> None:
    if (path / CONFIG_FILE).is_file():
        target = read_json(path / CONFIG_FILE).get("module_input_name", "sentence_embedding")
        if target != "sentence_embedding":
            raise UserError(f"{path}: normalises {target!r}, not the sentence vector")


def _max_len(transformer: Path, config: dict[str, Any]) -> int | None:
    """sentence-transformers' order: the tokenizer setting in sentence_bert_config.json, its
    ``max_seq_length``, then the saved tokenizer's ``model_max_length`` (where version 6 keeps it)."""
    tokenizer_settings = config.get("processor_kwargs") or config.get("tokenizer_args") or {}
    for value in (tokenizer_settings.get("model_max_length"), config.get("max_seq_length")):
        if value is not None:
            return int(value)
    if (transformer / "tokenizer_config.json").is_file():
        value = read_json(transformer / "tokenizer_config.json").get("model_max_length")
        return None if value is None else int(value)
    return None


def _poolings(path: Path) -> tuple[str, ...]:
    config = read_json(path / CONFIG_FILE)
    if not isinstance(config, dict):
        raise UserError(f"{path / CONFIG_FILE}: not a pooling config (a JSON object)")
    declared = config.get("pooling_mode")
    if declared is None:
        modes = [mode for flag, mode in LEGACY_FLAGS.items() if config.get(flag)]
    else:
        modes = [declared] if isinstance(declared, str) else list(declared)
    if not modes:
        raise UserError(f"{path / CONFIG_FILE}: declares no pooling mode")
    for mode in modes:
        if mode not in ST_POOLINGS:
            raise UserError(
                f"{path / CONFIG_FILE}: pooling {mode!r} is not supported (maskwise computes {', '.join(ST_POOLINGS)})"
            )
    return tuple(ST_POOLINGS[mode] for mode in modes)


def pool_sentences(hidden: torch.Tensor, attention_mask: torch.Tensor, poolings: tuple[str, ...]) -> torch.Tensor:
    """``(B, len(poolings) * d)``: each pooling of the ``(B, T, d)`` hidden states over the real
    tokens, concatenated. cls / mean / last are ``tasks.embed``'s own (``model.heads.pool``); max
    and mean_sqrt_len (the sum over sqrt(length)) only sentence-transformers folders declare."""
    real = attention_mask.to(torch.bool)[..., None]  # (B, T, 1)
    vectors = []
    for pooling in poolings:
        if pooling == "max":
            vectors.append(hidden.masked_fill(~real, float("-inf")).max(dim=1).values)
        elif pooling == "mean_sqrt_len":
            vectors.append((hidden * real).sum(1) / real.sum(1).clamp(min=1).to(hidden.dtype).sqrt())
        else:
            vectors.append(pool(hidden, attention_mask, pooling))
    return torch.cat(vectors, dim=-1)


def export_sentence_transformers(
    run_dir: str | Path, out_dir: str | Path, overwrite: bool = False, part: str | None = None
) -> Path:
    """Write an encoder run as a folder that ``SentenceTransformer(out_dir)`` opens and that encodes
    texts to the vectors ``maskwise embed`` gives for the run (``part="encoder"``: an encoder-decoder run,
    through its encoder half, ``hf_export.encoder_half``).

    The Transformer module is ``hf_export.export_hf``'s folder (weights, config, and the tokenizer
    with maskwise's ``[CLS] x`` framing, or an encoder-decoder's bare ids); beside it go modules.json,
    sentence_bert_config.json (the run's length), 1_Pooling/config.json (its pooling) and a Normalize
    module where it normalises.
    ``out_dir`` is guarded as ``export_hf`` guards it (``overwrite`` replaces only a model folder);
    the whole folder is assembled before it is renamed into place.
    """
    run = load_run(Path(run_dir).expanduser())
    cfg = run.model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise model's
    if not cfg.kind.encoder_only and part is None:
        raise UserError(
            f"{run_dir}: a {cfg.family} run; sentence-transformers export takes encoder runs "
            f"(or an encoder-decoder's encoder half: --part encoder)"
        )
    settings = declared_settings(run.path).resolved(cfg)
    to_mode = {name: mode for mode, name in ST_POOLINGS.items()}
    assert settings.pooling is not None  # resolved
    modes = [to_mode[name] for name in settings.pooling]
    modules = [("Transformer", ""), ("Pooling", POOLING_DIR)]
    if settings.normalize:
        modules.append(("Normalize", "2_Normalize"))
    pooling = {
        "word_embedding_dimension": cfg.d_model,
        "include_prompt": True,
        **{flag: mode in modes for flag, mode in LEGACY_FLAGS.items()},
    }
    files = {
        MODULES_FILE: json_bytes(
            [
                {"idx": i, "name": str(i), "path": path, "type": LEGACY_TYPES[kind]}
                for i, (kind, path) in enumerate(modules)
            ]
        ),
        ST_CONFIG_FILE: json_bytes({"max_seq_length": settings.max_len, "do_lower_case": False}),
        ST_SETTINGS_FILE: json_bytes(
            {
                "model_type": "SentenceTransformer",
                "prompts": {},
                "default_prompt_name": None,
                "similarity_fn_name": "cosine",
            }
        ),
        f"{POOLING_DIR}/{CONFIG_FILE}": json_bytes(pooling),
    }
    # export_hf refuses configs with no HF equivalent, and writes the module files with the weights
    out = export_hf(run, out_dir, overwrite=overwrite, extra_files=files, part=part)
    return out
