"""Hugging Face interop: import BERT, ELECTRA, GPT-2, T5 and BART into maskwise, export back.

The five architectures are the one maskwise block with different settings, so converting is two
tables and no model code:

* ``FIXED`` + ``CONFIG_KEYS``: which ``ModelConfig`` settings an architecture fixes (BERT is always
  post-norm, T5 always RMSNorm without biases, ...) and where its HF config keeps the ones it varies.
  Import fills a ``ModelConfig`` from them; export checks a ``ModelConfig`` against them and names every
  setting that has no HF equivalent.
* ``KEY_MAP``: where each maskwise tensor lives in each architecture's state dict, side by side.
  The only layout work is fusing q/k/v (and T5's gate/up) into one matrix, transposing GPT-2's
  Conv1D weights, and BART's (1, V) ``final_logits_bias``.

Nothing here needs ``transformers``: an HF folder is a ``config.json`` plus weights, read with
safetensors (or, for a foreign ``pytorch_model.bin``, ``torch.load(weights_only=True)``, which refuses
any pickle that is not plain tensors). Nothing downloads.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import save as save_safetensors_bytes
from torch import nn

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.model.transformer import Discriminator, Transformer, build_model
from maskwise.train import checkpoint as ckpt

# ---- the architectures ----------------------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """One HF model class: its column in the tables, its head, and the prefix its base-model
    variant leaves off (``BertModel`` saves ``embeddings.*`` where ``BertForMaskedLM`` saves
    ``bert.embeddings.*``)."""

    column: str  # "bert", "electra", "gpt2", "t5" or "bart"
    head: str  # "mlm": BERT's dense+act+norm transform and a vocab bias; "rtd"; "lm": a plain projection
    base_prefix: str = ""


ARCHITECTURES = {
    "BertForMaskedLM": Architecture("bert", "mlm"),
    "BertModel": Architecture("bert", "lm", base_prefix="bert."),
    "ElectraForMaskedLM": Architecture("electra", "mlm"),
    "ElectraForPreTraining": Architecture("electra", "rtd"),
    "ElectraModel": Architecture("electra", "lm", base_prefix="electra."),
    "GPT2LMHeadModel": Architecture("gpt2", "lm"),
    "GPT2Model": Architecture("gpt2", "lm", base_prefix="transformer."),
    "T5ForConditionalGeneration": Architecture("t5", "lm"),
    "BartForConditionalGeneration": Architecture("bart", "lm"),
}

# Export writes the task class (the one AutoModelForMaskedLM / CausalLM / Seq2SeqLM loads).
EXPORT_CLASS = {
    ("bert", "mlm"): "BertForMaskedLM",
    ("electra", "mlm"): "ElectraForMaskedLM",
    ("electra", "rtd"): "ElectraForPreTraining",
    ("gpt2", "lm"): "GPT2LMHeadModel",
    ("t5", "lm"): "T5ForConditionalGeneration",
    ("bart", "lm"): "BartForConditionalGeneration",
}

MODEL_TYPE = {"bert": "bert", "electra": "electra", "gpt2": "gpt2", "t5": "t5", "bart": "bart"}

# ---- config: what each architecture fixes, and where its config keeps the rest --------------

_BERT_BODY = dict(
    family="encoder", pre_norm=False, final_norm=False, embedding_norm=True, norm="layernorm",
    gated_ffn=False, bias=True, position="learned", position_offset=0, attention_scale=True,
    embedding_scale=1.0, lm_head_input_scale=1.0,
)
FIXED: dict[str, dict[str, Any]] = {
    "bert": _BERT_BODY,
    "electra": _BERT_BODY,  # ELECTRA's body is BERT's; only the embedding factorisation and heads differ
    "gpt2": dict(
        family="decoder", pre_norm=True, final_norm=True, embedding_norm=False, norm="layernorm",
        gated_ffn=False, bias=True, position="learned", position_offset=0, embedding_scale=1.0,
        type_vocab_size=0, lm_head_transform=False, lm_head_bias=False, lm_head_input_scale=1.0,
    ),
    "t5": dict(
        family="encoder-decoder", pre_norm=True, final_norm=True, embedding_norm=False, norm="rmsnorm",
        bias=False, position="relative", attention_scale=False, embedding_scale=1.0, type_vocab_size=0,
        lm_head_transform=False, lm_head_bias=False,
    ),
    "bart": dict(
        family="encoder-decoder", pre_norm=False, final_norm=False, embedding_norm=True, norm="layernorm",
        norm_eps=1e-5, gated_ffn=False, bias=True, position="learned", position_offset=2,
        attention_scale=True, type_vocab_size=0, lm_head_transform=False, lm_head_bias=True,
        lm_head_input_scale=1.0,
    ),
}
# BERT and ELECTRA heads: the MLM head has the transform and a vocab bias; the others have neither.
HEAD_FIXED = {
    "mlm": dict(lm_head_transform=True, lm_head_bias=True),
    "rtd": dict(lm_head_transform=False, lm_head_bias=False, tie_embeddings=True),
    "lm": dict(lm_head_transform=False, lm_head_bias=False),
}

# ModelConfig field -> (HF config key, HF's default when the key is absent, as older configs omit them).
_BERT_KEYS = {
    "vocab_size": ("vocab_size", 30522), "d_model": ("hidden_size", 768),
    "n_layers": ("num_hidden_layers", 12), "n_heads": ("num_attention_heads", 12),
    "d_ff": ("intermediate_size", 3072), "max_seq_len": ("max_position_embeddings", 512),
    "norm_eps": ("layer_norm_eps", 1e-12), "type_vocab_size": ("type_vocab_size", 2),
    "init_std": ("initializer_range", 0.02),
}
CONFIG_KEYS: dict[str, dict[str, tuple[str, Any]]] = {
    "bert": _BERT_KEYS,
    "electra": {**_BERT_KEYS, "d_model": ("hidden_size", 256), "n_heads": ("num_attention_heads", 4),
                "d_ff": ("intermediate_size", 1024)},
    "gpt2": {
        "vocab_size": ("vocab_size", 50257), "d_model": ("n_embd", 768), "n_layers": ("n_layer", 12),
        "n_heads": ("n_head", 12), "d_ff": ("n_inner", None), "max_seq_len": ("n_positions", 1024),
        "norm_eps": ("layer_norm_epsilon", 1e-5), "init_std": ("initializer_range", 0.02),
        "attention_scale": ("scale_attn_weights", True),
    },
    "t5": {
        "vocab_size": ("vocab_size", 32128), "d_model": ("d_model", 512), "n_layers": ("num_layers", 6),
        "n_decoder_layers": ("num_decoder_layers", None), "n_heads": ("num_heads", 8),
        "d_head": ("d_kv", 64), "d_ff": ("d_ff", 2048), "norm_eps": ("layer_norm_epsilon", 1e-6),
        "relative_buckets": ("relative_attention_num_buckets", 32),
        "relative_max_distance": ("relative_attention_max_distance", 128),
        "max_seq_len": ("n_positions", 512),  # T5 has no position table; older configs record a limit
    },
    "bart": {
        "vocab_size": ("vocab_size", 50265), "d_model": ("d_model", 1024), "n_layers": ("encoder_layers", 12),
        "n_decoder_layers": ("decoder_layers", 12), "n_heads": ("encoder_attention_heads", 16),
        "d_ff": ("encoder_ffn_dim", 4096), "max_seq_len": ("max_position_embeddings", 1024),
        "init_std": ("init_std", 0.02),
    },
}
# maskwise has one dropout rate; HF configs spell it out per site. Import reads the first.
DROPOUT_KEYS = {
    "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "electra": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "t5": ("dropout_rate",),
    "bart": ("dropout", "attention_dropout", "activation_dropout"),
}
ACTIVATION_KEY = {"bert": "hidden_act", "electra": "hidden_act", "gpt2": "activation_function",
                  "bart": "activation_function"}  # T5 spells it in feed_forward_proj

# HF activation names -> maskwise, and back. "gelu_new" is the tanh approximation.
FROM_HF_ACTIVATION = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                      "relu": "relu", "silu": "silu", "swish": "silu"}
TO_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}

# ---- weights: where each maskwise tensor lives, side by side -----------------------------------


@dataclass(frozen=True)
class Source:
    """The HF tensor(s) behind one maskwise tensor. Several names are fused: concatenated along
    the output dimension, in order (maskwise keeps q;k;v and gate;up in one matrix)."""

    names: tuple[str, ...]
    conv1d: bool = False  # GPT-2's Conv1D stores weights as (in, out), nn.Linear as (out, in)
    leading_one: bool = False  # BART stores final_logits_bias as (1, V)


def fused(*names: str) -> Source:
    return Source(names)


def conv1d(name: str) -> Source:
    return Source((name,), conv1d=True)


# Rows: maskwise module (or bare parameter). Placeholders: {stack} the maskwise stack ("stack", or
# "encoder"/"decoder"); {side} the HF stack of an encoder-decoder; {body} the base model's prefix in
# the task model (BODY_PREFIX); {i} the layer; {ffn} T5's FFN sub-layer (1 in the encoder, 2 after
# the decoder's cross-attention). ELECTRA's body rows are BERT's (under {body} = "electra"), so body
# rows list BERT only; the head rows list ELECTRA apart.
KEY_MAP: dict[str, dict[str, str | Source]] = {
    # embeddings
    "embed": dict(bert="{body}.embeddings.word_embeddings", gpt2="{body}.wte", t5="shared",
                  bart="{body}.shared"),
    "{stack}.positions": dict(bert="{body}.embeddings.position_embeddings", gpt2="{body}.wpe",
                              bart="{body}.{side}.embed_positions"),
    "{stack}.token_types": dict(bert="{body}.embeddings.token_type_embeddings"),
    "{stack}.embedding_norm": dict(bert="{body}.embeddings.LayerNorm", bart="{body}.{side}.layernorm_embedding"),
    "{stack}.relative_bias.embedding": dict(t5="{side}.block.0.layer.0.SelfAttention.relative_attention_bias"),
    # self-attention
    "{stack}.blocks.{i}.attn.qkv": dict(
        bert=fused("{body}.encoder.layer.{i}.attention.self.query", "{body}.encoder.layer.{i}.attention.self.key",
                   "{body}.encoder.layer.{i}.attention.self.value"),
        gpt2=conv1d("{body}.h.{i}.attn.c_attn"),
        t5=fused("{side}.block.{i}.layer.0.SelfAttention.q", "{side}.block.{i}.layer.0.SelfAttention.k",
                 "{side}.block.{i}.layer.0.SelfAttention.v"),
        bart=fused("{body}.{side}.layers.{i}.self_attn.q_proj", "{body}.{side}.layers.{i}.self_attn.k_proj",
                   "{body}.{side}.layers.{i}.self_attn.v_proj"),
    ),
    "{stack}.blocks.{i}.attn.out": dict(
        bert="{body}.encoder.layer.{i}.attention.output.dense", gpt2=conv1d("{body}.h.{i}.attn.c_proj"),
        t5="{side}.block.{i}.layer.0.SelfAttention.o", bart="{body}.{side}.layers.{i}.self_attn.out_proj"),
    "{stack}.blocks.{i}.attn_norm": dict(
        bert="{body}.encoder.layer.{i}.attention.output.LayerNorm", gpt2="{body}.h.{i}.ln_1",
        t5="{side}.block.{i}.layer.0.layer_norm", bart="{body}.{side}.layers.{i}.self_attn_layer_norm"),
    # cross-attention (decoder of an encoder-decoder)
    "{stack}.blocks.{i}.cross_attn.q": dict(
        t5="{side}.block.{i}.layer.1.EncDecAttention.q", bart="{body}.{side}.layers.{i}.encoder_attn.q_proj"),
    "{stack}.blocks.{i}.cross_attn.kv": dict(
        t5=fused("{side}.block.{i}.layer.1.EncDecAttention.k", "{side}.block.{i}.layer.1.EncDecAttention.v"),
        bart=fused("{body}.{side}.layers.{i}.encoder_attn.k_proj", "{body}.{side}.layers.{i}.encoder_attn.v_proj")),
    "{stack}.blocks.{i}.cross_attn.out": dict(
        t5="{side}.block.{i}.layer.1.EncDecAttention.o", bart="{body}.{side}.layers.{i}.encoder_attn.out_proj"),
    "{stack}.blocks.{i}.cross_norm": dict(
        t5="{side}.block.{i}.layer.1.layer_norm", bart="{body}.{side}.layers.{i}.encoder_attn_layer_norm"),
    # feed-forward (T5 v1.0: wi; a gated T5 v1.1 has T5_GATED_UP instead)
    "{stack}.blocks.{i}.ffn.up": dict(
        bert="{body}.encoder.layer.{i}.intermediate.dense", gpt2=conv1d("{body}.h.{i}.mlp.c_fc"),
        t5="{side}.block.{i}.layer.{ffn}.DenseReluDense.wi", bart="{body}.{side}.layers.{i}.fc1"),
    "{stack}.blocks.{i}.ffn.down": dict(
        bert="{body}.encoder.layer.{i}.output.dense", gpt2=conv1d("{body}.h.{i}.mlp.c_proj"),
        t5="{side}.block.{i}.layer.{ffn}.DenseReluDense.wo", bart="{body}.{side}.layers.{i}.fc2"),
    "{stack}.blocks.{i}.ffn_norm": dict(
        bert="{body}.encoder.layer.{i}.output.LayerNorm", gpt2="{body}.h.{i}.ln_2",
        t5="{side}.block.{i}.layer.{ffn}.layer_norm", bart="{body}.{side}.layers.{i}.final_layer_norm"),
    "{stack}.final_norm": dict(gpt2="{body}.ln_f", t5="{side}.final_layer_norm"),
    # heads (bare parameters map to bare tensors)
    "lm_head.transform.0": dict(bert="cls.predictions.transform.dense", electra="generator_predictions.dense"),
    "lm_head.transform.2": dict(bert="cls.predictions.transform.LayerNorm",
                                electra="generator_predictions.LayerNorm"),
    "lm_head.bias": dict(bert="cls.predictions.bias", electra="generator_lm_head.bias",
                         bart=Source(("final_logits_bias",), leading_one=True)),
    "lm_head.weight": dict(bert="cls.predictions.decoder.weight", electra="generator_lm_head.weight",
                           gpt2="lm_head.weight", t5="lm_head.weight", bart="lm_head.weight"),
    "rtd_head.dense": dict(electra="discriminator_predictions.dense"),
    "rtd_head.out": dict(electra="discriminator_predictions.dense_prediction"),
}
# T5 v1.1's gated FFN: wi_0 is the gate, wi_1 the up projection; maskwise fuses them gate first.
T5_GATED_UP = fused("{side}.block.{i}.layer.{ffn}.DenseReluDense.wi_0",
                    "{side}.block.{i}.layer.{ffn}.DenseReluDense.wi_1")
BODY_PREFIX = {"bert": "bert", "electra": "electra", "gpt2": "transformer", "t5": "", "bart": "model"}

# HF tensors that are copies of another (tied weights saved twice, an alias): skipped on import when
# equal to the original, an error when not.
COPIES = {
    "bert": {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
             "cls.predictions.decoder.bias": "cls.predictions.bias"},
    "electra": {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"},
    "gpt2": {"lm_head.weight": "transformer.wte.weight"},
    "t5": {"encoder.embed_tokens.weight": "shared.weight", "decoder.embed_tokens.weight": "shared.weight",
           "lm_head.weight": "shared.weight"},
    "bart": {"model.encoder.embed_tokens.weight": "model.shared.weight",
             "model.decoder.embed_tokens.weight": "model.shared.weight", "lm_head.weight": "model.shared.weight"},
}
# HF tensors maskwise does not use: BERT's pooler and NSP head, buffers old versions saved.
UNUSED = {
    "bert": r"\.pooler\.|embeddings\.position_ids$|^cls\.seq_relationship\.",
    "electra": r"embeddings\.position_ids$",
    "gpt2": r"\.attn\.(masked_)?bias$",
}


def _column(arch: Architecture, row: dict[str, str | Source]) -> str | Source | None:
    if arch.column == "electra" and "electra" not in row:
        return row.get("bert")  # a body row
    return row.get(arch.column)


def key_map(model: nn.Module, arch: Architecture) -> dict[str, Source]:
    """maskwise module or parameter name -> its HF source, for every tensor of ``model``."""
    cfg: ModelConfig = model.cfg
    if cfg.family == "encoder-decoder":
        stacks = {"encoder": ("encoder", cfg.n_layers, 1), "decoder": ("decoder", cfg.decoder_layers, 2)}
    else:
        stacks = {"stack": ("", cfg.n_layers, 1)}
    mapping = {}
    for ours, row in KEY_MAP.items():
        source = _column(arch, row)
        if source is None:
            continue
        if ours == "{stack}.blocks.{i}.ffn.up" and arch.column == "t5" and cfg.gated_ffn:
            source = T5_GATED_UP
        source = source if isinstance(source, Source) else Source((source,))
        for stack, (side, n_layers, ffn) in stacks.items():
            for i in range(n_layers if "{i}" in ours else 1):
                values = dict(stack=stack, side=side, body=BODY_PREFIX[arch.column], i=i, ffn=ffn)
                names = tuple(name.format(**values) for name in source.names)
                mapping[ours.format(**values)] = Source(names, source.conv1d, source.leading_one)
    return mapping


def _source_of(key: str, mapping: dict[str, Source]) -> tuple[Source, str]:
    """The source of state-dict ``key`` and the suffix to append (".weight"), or "" for bare tensors."""
    if key in mapping:
        return mapping[key], ""
    module, _, suffix = key.rpartition(".")
    if module in mapping:
        return mapping[module], "." + suffix
    raise UserError(f"maskwise tensor {key} has no counterpart in this HF architecture")


# ---- reading HF folders ------------------------------------------------------------------------

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def read_hf_folder(folder: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config.json`` and all weights of an HF model folder (safetensors first, sharded or not)."""
    folder = Path(folder).expanduser()
    config = ckpt.read_json(folder / ckpt.CONFIG_FILE)
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            weight_map = ckpt.read_json(path).get("weight_map")
            if not isinstance(weight_map, dict):
                raise UserError(f"{path}: no weight_map")
            tensors = {}
            for shard in sorted(set(weight_map.values())):
                tensors.update(_read_weights(folder / shard))
            return config, tensors
        return config, _read_weights(path)
    raise UserError(f"{folder}: no weights (looked for {', '.join(WEIGHT_FILES)})")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return ckpt.read_safetensors(path)
    return read_pytorch_bin(path)


def read_pytorch_bin(path: str | Path) -> dict[str, torch.Tensor]:
    """A foreign ``pytorch_model.bin``: loaded with ``weights_only=True``, so a pickle that would
    construct anything but tensors and plain containers (i.e. run code) is refused, not executed."""
    try:
        tensors = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{path}: refused or unreadable pickle (loaded with weights_only=True): {reason}") from None
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise UserError(f"{path}: not a state dict of tensors")
    return tensors


# ---- import ---------------------------------------------------------------------------------------


def _architecture(name: str | None, model_type: str | None) -> Architecture:
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    known = ", ".join(ARCHITECTURES)
    if name is None:
        raise UserError(f"HF config names no architecture (model_type {model_type!r}); "
                        f"add \"architectures\": [one of {known}]")
    raise UserError(f"unsupported HF architecture {name}; supported: {known}")


def _get(hf: dict[str, Any], key: str, default: Any) -> Any:
    value = hf.get(key)
    return default if value is None else value


def _activation(column: str, name: str) -> str:
    if name not in FROM_HF_ACTIVATION:
        raise UserError(f"{column}: activation {name!r} has no maskwise equivalent "
                        f"(supported: {', '.join(FROM_HF_ACTIVATION)})")
    return FROM_HF_ACTIVATION[name]


def _reject(column: str, hf: dict[str, Any], key: str, default: Any, supported: Any) -> None:
    value = _get(hf, key, default)
    if value != supported:
        raise UserError(f"{column}: {key}={value!r} is not supported (only {supported!r})")


def config_from_hf(hf: dict[str, Any], arch: Architecture, tensors: dict[str, torch.Tensor]) -> ModelConfig:
    """Translate an HF config (dict) into the maskwise ``ModelConfig`` that computes the same function.

    Whether the output projection is tied is read from the weights: tied when the checkpoint has no
    separate head matrix or its head matrix equals the embedding (T5 configs of transformers 5 say
    ``tie_word_embeddings: true`` even for v1.1, whose head is separate).
    """
    column = arch.column
    values: dict[str, Any] = dict(FIXED[column])
    for field, (key, default) in CONFIG_KEYS[column].items():
        values[field] = _get(hf, key, default)
    values["dropout"] = float(_get(hf, DROPOUT_KEYS[column][0], 0.1))  # 0.1: every HF default
    if column in ("bert", "electra"):
        values.update(HEAD_FIXED[arch.head])
        _reject(column, hf, "position_embedding_type", "absolute", "absolute")
        _reject(column, hf, "is_decoder", False, False)
        _reject(column, hf, "add_cross_attention", False, False)
        values["activation"] = _activation(column, _get(hf, "hidden_act", "gelu"))
        if column == "electra":
            if _get(hf, "embedding_size", 128) != values["d_model"]:
                raise UserError(f"electra: embedding_size {_get(hf, 'embedding_size', 128)} != hidden_size "
                                f"{values['d_model']} (factorised embeddings) is not supported")
            if arch.head == "mlm" and values["activation"] != "gelu":
                raise UserError(f"electra: the generator head always uses gelu, so hidden_act="
                                f"{hf.get('hidden_act')!r} has no maskwise equivalent")
    elif column == "gpt2":
        _reject(column, hf, "scale_attn_by_inverse_layer_idx", False, False)
        _reject(column, hf, "add_cross_attention", False, False)
        values["activation"] = _activation(column, _get(hf, "activation_function", "gelu_new"))
        values["d_ff"] = values["d_ff"] or 4 * values["d_model"]
    elif column == "t5":
        proj = _get(hf, "feed_forward_proj", "relu")
        gated, _, act = proj.rpartition("-")
        if gated not in ("", "gated"):
            raise UserError(f"t5: feed_forward_proj {proj!r} is not supported")
        values["gated_ffn"] = gated == "gated"
        values["activation"] = _activation(column, "gelu_new" if proj == "gated-gelu" else act)
        scale = _get(hf, "scale_decoder_outputs", _get(hf, "tie_word_embeddings", True))
        values["lm_head_input_scale"] = values["d_model"] ** -0.5 if scale else 1.0
    elif column == "bart":
        for field, decoder_key in (("n_heads", "decoder_attention_heads"), ("d_ff", "decoder_ffn_dim")):
            encoder_key, default = CONFIG_KEYS["bart"][field]
            if _get(hf, decoder_key, default) != values[field]:
                raise UserError(f"bart: {decoder_key} {_get(hf, decoder_key, default)} != {encoder_key} "
                                f"{values[field]} is not supported (maskwise stacks share one shape)")
        values["activation"] = _activation(column, _get(hf, "activation_function", "gelu"))
        values["embedding_scale"] = math.sqrt(values["d_model"]) if _get(hf, "scale_embedding", False) else 1.0
    if arch.head != "rtd":
        values["tie_embeddings"] = _is_tied(arch, tensors)
    if values.get("n_decoder_layers") == values["n_layers"]:
        values["n_decoder_layers"] = None
    if values.get("d_head") is not None and values["d_head"] * values["n_heads"] == values["d_model"]:
        values["d_head"] = None
    return ModelConfig.from_dict(values)


def _is_tied(arch: Architecture, tensors: dict[str, torch.Tensor]) -> bool:
    head = KEY_MAP["lm_head.weight"].get(arch.column)
    embedding = COPIES[arch.column].get(head) if head else None
    if head not in tensors or embedding is None:
        return True
    return embedding in tensors and torch.equal(tensors[head], tensors[embedding])


def import_hf(source: Any) -> Transformer:
    """A maskwise model computing what an HF model computes, in eval mode.

    ``source``: a ``transformers`` model object, or a local HF folder (``config.json`` + weights).
    ``ElectraForPreTraining`` becomes a ``Discriminator`` (its logits are (B, T) RTD scores); every
    other supported class becomes an ``Encoder``, ``Decoder`` or ``EncoderDecoder`` whose ``.logits``
    are the HF model's logits (for a base model, e.g. ``BertModel``, the tied projection onto the
    vocabulary; use ``hidden_states``).
    """
    if hasattr(source, "state_dict") and hasattr(source, "config"):
        hf, tensors, class_name = source.config.to_dict(), source.state_dict(), type(source).__name__
        where = class_name  # names the model in error messages
    else:
        hf, tensors = read_hf_folder(source)
        class_name = (hf.get("architectures") or [None])[0]
        where = str(source)
    arch = _architecture(class_name, hf.get("model_type"))
    if arch.base_prefix:
        tensors = {(k if k.startswith(arch.base_prefix) else arch.base_prefix + k): v for k, v in tensors.items()}
    cfg = config_from_hf(hf, arch, tensors)
    model = Discriminator(cfg) if arch.head == "rtd" else build_model(cfg)
    ckpt.load_weights_into(model, _to_maskwise(model, arch, tensors, where), where)
    return model.eval()


def _to_maskwise(model: nn.Module, arch: Architecture, tensors: dict[str, torch.Tensor],
                 where: str) -> dict[str, torch.Tensor]:
    mapping = key_map(model, arch)
    ours, used = {}, set()
    for key, target in model.state_dict().items():
        source, suffix = _source_of(key, mapping)
        names = [name + suffix for name in source.names]
        missing = [name for name in names if name not in tensors]
        if missing:
            raise UserError(f"{where}: missing key {missing[0]} (for maskwise {key})")
        parts = [tensors[name].t() if source.conv1d and tensors[name].dim() == 2 else tensors[name]
                 for name in names]
        value = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
        if source.leading_one:
            value = value.reshape(-1)  # (1, V) -> (V,)
        if value.shape != target.shape:
            raise UserError(f"{where}: {' + '.join(names)} has shape {tuple(value.shape)}, "
                            f"maskwise {key} needs {tuple(target.shape)}")
        ours[key] = value.to(target.dtype)
        used.update(names)
    leftover = []
    for name in sorted(set(tensors) - used):
        original = COPIES[arch.column].get(name)
        unused = arch.column in UNUSED and re.search(UNUSED[arch.column], name)
        if unused or (original in tensors and torch.equal(tensors[name], tensors[original])):
            continue
        leftover.append(name)
    if leftover:
        raise UserError(f"{where}: {len(leftover)} unexpected key(s) maskwise cannot place, e.g. {leftover[0]}")
    return ours


# ---- export ---------------------------------------------------------------------------------------


def _candidates(model: nn.Module, preferred: str | None) -> list[tuple[str, str]]:
    """(column, head) pairs that could describe ``model``, most likely first."""
    if isinstance(model, Discriminator):
        return [("electra", "rtd")]
    family = model.cfg.family
    if family == "encoder":
        return [("electra", "mlm"), ("bert", "mlm")] if preferred == "electra" else [("bert", "mlm"),
                                                                                    ("electra", "mlm")]
    if family == "decoder":
        return [("gpt2", "lm")]
    return [("t5", "lm"), ("bart", "lm")]


def _hf_config_or_problems(cfg: ModelConfig, column: str, head: str) -> tuple[dict[str, Any], list[str]]:
    """The HF config for ``cfg`` as ``column``, and every setting that stops it being exact."""
    problems = []
    fixed = {**FIXED[column], **(HEAD_FIXED[head] if column in ("bert", "electra") else {})}
    for field, needed in fixed.items():
        if getattr(cfg, field) != needed:
            problems.append(f"{field}={getattr(cfg, field)!r} (needs {needed!r})")
    if column != "t5" and cfg.head_dim * cfg.n_heads != cfg.d_model:
        problems.append(f"d_head={cfg.d_head} (needs d_model / n_heads)")
    hf: dict[str, Any] = {"model_type": MODEL_TYPE[column], "architectures": [EXPORT_CLASS[column, head]]}
    for field, (key, _) in CONFIG_KEYS[column].items():
        hf[key] = getattr(cfg, field)
    for key in DROPOUT_KEYS[column]:
        hf[key] = cfg.dropout
    activation = TO_HF_ACTIVATION[cfg.activation]
    if column in ACTIVATION_KEY:
        hf[ACTIVATION_KEY[column]] = activation
    hf["tie_word_embeddings"] = cfg.tie_embeddings
    if column in ("bert", "electra"):
        if cfg.type_vocab_size < 1:
            problems.append("type_vocab_size=0 (BERT and ELECTRA always have token-type embeddings)")
        if column == "electra":
            hf["embedding_size"] = cfg.d_model
            if head == "mlm" and cfg.activation != "gelu":
                problems.append(f"activation={cfg.activation!r} (ELECTRA's generator head is always gelu)")
    elif column == "t5":
        hf.update(d_kv=cfg.head_dim, num_decoder_layers=cfg.decoder_layers, is_encoder_decoder=True)
        if cfg.gated_ffn and cfg.activation == "gelu":
            problems.append("gated_ffn with activation='gelu' (T5 reads 'gated-gelu' as the tanh approximation)")
        hf["feed_forward_proj"] = ("gated-" if cfg.gated_ffn else "") + (
            "gelu" if cfg.gated_ffn and cfg.activation == "gelu_tanh" else activation)
        scaled = cfg.lm_head_input_scale != 1.0
        if scaled and not math.isclose(cfg.lm_head_input_scale, cfg.d_model ** -0.5):
            problems.append(f"lm_head_input_scale={cfg.lm_head_input_scale} (T5 has 1 or d_model ** -0.5)")
        hf["scale_decoder_outputs"] = scaled
    elif column == "bart":
        hf.update(decoder_layers=cfg.decoder_layers, decoder_attention_heads=cfg.n_heads,
                  decoder_ffn_dim=cfg.d_ff, is_encoder_decoder=True)
        scale = cfg.embedding_scale
        if scale != 1.0 and not math.isclose(scale, math.sqrt(cfg.d_model)):
            problems.append(f"embedding_scale={scale} (BART has 1 or sqrt(d_model))")
        hf["scale_embedding"] = scale != 1.0
    return hf, problems


def hf_config(model: nn.Module, preferred: str | None = None) -> tuple[dict[str, Any], Architecture]:
    """The HF config (and architecture) that reproduces ``model`` exactly, or a ``UserError`` naming
    every setting of the closest architecture that has no HF equivalent."""
    candidates = _candidates(model, preferred)
    if preferred is not None and preferred not in {column for column, _ in candidates}:
        raise UserError(f"a {model.cfg.family} cannot be exported as {preferred}; "
                        f"choose from {', '.join(sorted({column for column, _ in candidates}))}")
    attempts = []
    for column, head in candidates:
        hf, problems = _hf_config_or_problems(model.cfg, column, head)
        if not problems:
            return hf, ARCHITECTURES[EXPORT_CLASS[column, head]]
        attempts.append((len(problems), EXPORT_CLASS[column, head], problems))
    _, class_name, problems = min(attempts)
    raise UserError(f"this {model.cfg.family} config has no HF equivalent; closest is {class_name}, "
                    f"but: {'; '.join(problems)}")


def hf_state_dict(model: nn.Module, arch: Architecture) -> dict[str, torch.Tensor]:
    """``model``'s tensors under the HF names of ``arch`` (the inverse of import)."""
    mapping = key_map(model, arch)
    tensors = {}
    for key, value in model.state_dict().items():
        source, suffix = _source_of(key, mapping)
        parts = value.detach().cpu().chunk(len(source.names), dim=0)
        for name, part in zip(source.names, parts):
            if source.conv1d and part.dim() == 2:
                part = part.t()
            if source.leading_one:
                part = part[None]  # (V,) -> (1, V)
            tensors[name + suffix] = part.contiguous().clone()  # own storage: safetensors refuses shared
    return tensors


def export_hf(run_or_model: Any, out_dir: str | Path, overwrite: bool = False, tokenizer: Any = None,
              architecture: str | None = None) -> Path:
    """Write an HF folder that ``AutoModelForMaskedLM`` / ``ForCausalLM`` / ``ForSeq2SeqLM`` (or, for an
    ELECTRA discriminator, ``AutoModelForPreTraining``) loads and that computes the same logits.

    ``run_or_model``: a run folder, a loaded ``Run``, or a model. Encoders export as BERT unless
    ``architecture="electra"`` or the run's preset is "electra". The folder (config.json,
    model.safetensors, and with a tokenizer tokenizer.json + tokenizer_config.json) is assembled
    under a temporary name and renamed into place; an existing non-empty ``out_dir`` is replaced
    only with ``overwrite``.
    """
    model, settings = run_or_model, {}
    if isinstance(run_or_model, (str, Path)):
        run_or_model = ckpt.load_run(run_or_model)
    if isinstance(run_or_model, ckpt.Run):
        model, tokenizer = run_or_model.model, tokenizer or run_or_model.tokenizer
        settings = run_or_model.config.get("settings", {})
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{out} exists and is not empty; pass --overwrite to replace it")
    hf, arch = hf_config(model, architecture or ("electra" if settings.get("preset") == "electra" else None))
    files = {ckpt.MODEL_FILE: save_safetensors_bytes(hf_state_dict(model, arch), metadata={"format": "pt"})}
    if tokenizer is not None:
        hf.update(_special_ids(tokenizer))
        files[ckpt.TOKENIZER_FILE] = encoder_framing(tokenizer, model.cfg.family).to_str().encode()
        files["tokenizer_config.json"] = _json_bytes(_tokenizer_config(tokenizer, model.cfg))
    files[ckpt.CONFIG_FILE] = _json_bytes(hf)
    _write_folder(out, files)
    return out


def encoder_framing(tokenizer: Any, family: str):
    """The tokenizer's backend (a copy), framing text as the model reads it.

    maskwise tokenizers add no special tokens (objectives frame their own inputs, and MLM puts
    ``[CLS]`` first: ``tasks.frame``), so for an encoder a tokenizer.json without a post-processor
    gets ``[CLS] $A``: ``tokenizer(text)`` in HF then reads text the way the model was trained. A
    tokenizer that frames text itself (an HF BERT's ``[CLS] $A [SEP]``) keeps its own framing.
    """
    from tokenizers import Tokenizer as Backend
    from tokenizers.processors import TemplateProcessing

    backend = Backend.from_str(tokenizer.backend.to_str())
    if family == "encoder" and backend.post_processor is None and tokenizer.cls_id is not None:
        cls = tokenizer.id_to_token(tokenizer.cls_id)
        backend.post_processor = TemplateProcessing(single=f"{cls} $A", special_tokens=[(cls, tokenizer.cls_id)])
    return backend


_ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")


def _special_ids(tokenizer: Any) -> dict[str, int]:
    return {f"{role}_token_id": getattr(tokenizer, f"{role}_id") for role in ("pad", "bos", "eos")
            if getattr(tokenizer, f"{role}_id") is not None}


def _tokenizer_config(tokenizer: Any, cfg: ModelConfig) -> dict[str, Any]:
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.max_seq_len}
    for role in _ROLES:
        token_id = getattr(tokenizer, f"{role}_id")
        if token_id is not None:
            config[f"{role}_token"] = tokenizer.id_to_token(token_id)
    return config


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def _write_folder(out: Path, files: dict[str, bytes]) -> None:
    """Assemble ``files`` in a temporary sibling folder, then rename it to ``out`` (replacing an old
    ``out`` only after the new one is complete), so ``out`` is never half-written."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for name, data in files.items():
            ckpt.atomic_write(tmp / name, data)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    except OSError as error:
        if old.exists() and not out.exists():
            os.replace(old, out)
        raise UserError(f"cannot write {out}: {error.strerror or error}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


# ---- one entry point for both kinds of folder ---------------------------------------------------


class Loaded(NamedTuple):
    """What ``maskwise.load`` returns: unpack as ``model, tokenizer = maskwise.load(path)``."""

    model: nn.Module
    tokenizer: Any  # maskwise.data.tokenizers.Tokenizer, or None for an HF folder without tokenizer.json


def load(path: str | Path) -> Loaded:
    """Open a maskwise run folder or a local HF model folder.

    Either way the model (eval mode) answers ``model(input_ids, attention_mask=None,
    decoder_input_ids=None)`` with an output whose ``.logits`` are vocabulary logits (RTD scores for
    an ELECTRA discriminator); encoder-decoders need ``decoder_input_ids``, the others refuse them.
    """
    from maskwise.data.tokenizers import Tokenizer

    path = Path(path).expanduser()
    if not path.is_dir():
        raise UserError(f"{path}: not a folder (expected a maskwise run folder or an HF model folder)")
    config = ckpt.read_json(path / ckpt.CONFIG_FILE)
    if "model_type" in config:
        tokenizer = None
        if (path / ckpt.TOKENIZER_FILE).is_file():
            tokenizer = Tokenizer.load(path)
            # An HF tokenizer.json may carry its own padding and truncation (MiniLM's pads every text
            # to 128 ids); maskwise frames, truncates and pads ids itself.
            tokenizer.backend.no_padding()
            tokenizer.backend.no_truncation()
        return Loaded(import_hf(path), tokenizer)
    if "model" in config:
        run = ckpt.load_run(path)
        return Loaded(run.model, run.tokenizer)
    raise UserError(f"{path / ckpt.CONFIG_FILE}: neither a maskwise run config (no \"model\") nor an HF "
                    f"config (no \"model_type\")")
