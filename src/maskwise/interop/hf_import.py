"""Import an HF model (a ``transformers`` object or a local folder) into maskwise, logits unchanged.

Nothing here needs ``transformers``: an HF folder is a ``config.json`` plus weights, read with
safetensors (or, for a foreign ``pytorch_model.bin``, ``torch.load(weights_only=True)``, which refuses
any pickle that is not plain tensors). Nothing downloads.
"""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.interop.hf_keys import (
    CLASSIFIER_POOLINGS,
    CONFIG_KEYS,
    COPIES,
    DROPOUT_DEFAULT,
    DROPOUT_KEYS,
    FIXED,
    FROM_HF_ACTIVATION,
    HEAD_KEYS,
    KEY_MAP,
    MODERNBERTS,
    UNUSED,
    Architecture,
    architectures,
    classes_key,
    column_entry,
    head_fixed,
    key_map,
    source_of,
    task_of,
)
from maskwise.model.transformer import Discriminator, Transformer, build_model
from maskwise.runs import CONFIG_FILE, load_weights_into, read_json, read_safetensors

# ---- reading HF folders ------------------------------------------------------------------------

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


# Decoders users have whose block is not maskwise's, and what it lacks (import names it instead of
# "unsupported"). Checked against transformers' modeling code, not against any pretrained weights.
_QK_NORM = "per-head RMSNorm of queries and keys (q_norm, k_norm), which maskwise's attention does not have"
_GEMMA_NORM = "RMSNorm scaled by 1 + weight (maskwise's scales by weight)"
_MOE = "mixture-of-experts MLPs (maskwise has one dense FFN per layer)"
REFUSED_ARCHITECTURES = {
    "Qwen3ForCausalLM": _QK_NORM,
    "Qwen3Model": _QK_NORM,
    "Qwen2MoeForCausalLM": _MOE,
    "Qwen3MoeForCausalLM": _MOE,
    "MixtralForCausalLM": _MOE,
    "GemmaForCausalLM": _GEMMA_NORM,
    "GemmaModel": _GEMMA_NORM,
    "Gemma2ForCausalLM": f"{_GEMMA_NORM}, a norm after each attention and MLP as well as before, and tanh "
    f"soft-capping of attention scores and logits",
    "Gemma3ForCausalLM": f"{_GEMMA_NORM}, a norm after each attention and MLP as well as before, and {_QK_NORM}",
}


def read_hf_folder(folder: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config.json`` and all weights of an HF model folder (safetensors first, sharded or not)."""
    folder = Path(folder).expanduser()
    config = read_json(folder / CONFIG_FILE)
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            weight_map = read_json(path).get("weight_map")
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
        return read_safetensors(path)
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
    supported = architectures()
    if name in supported:
        return supported[name]
    if name in REFUSED_ARCHITECTURES:
        raise UserError(f"{name} is not supported: it has {REFUSED_ARCHITECTURES[name]}")
    known = ", ".join(supported)
    if name is None:
        raise UserError(
            f'HF config names no architecture (model_type {model_type!r}); add "architectures": [one of {known}]'
        )
    raise UserError(f"unsupported HF architecture {name}; supported: {known}")


def _get(hf: dict[str, Any], key: str, default: Any) -> Any:
    value = hf.get(key)
    return default if value is None else value


def _activation(column: str, name: str) -> str:
    if name not in FROM_HF_ACTIVATION:
        raise UserError(
            f"{column}: activation {name!r} has no maskwise equivalent (supported: {', '.join(FROM_HF_ACTIVATION)})"
        )
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
    values: dict[str, Any] = {**FIXED[column], **head_fixed(column, arch.head)}
    for field, (key, default) in CONFIG_KEYS[column].items():
        values[field] = _get(hf, key, default)
    values["dropout"] = float(_get(hf, DROPOUT_KEYS[column][0], DROPOUT_DEFAULT[column]))
    if column in ("bert", "electra"):
        _reject(column, hf, "position_embedding_type", "absolute", "absolute")
        _reject(column, hf, "is_decoder", False, False)
        _reject(column, hf, "add_cross_attention", False, False)
        values["activation"] = _activation(column, _get(hf, "hidden_act", "gelu"))
        if column == "electra":
            embedding_size = _get(hf, "embedding_size", 128)
            values["embedding_size"] = None if embedding_size == values["d_model"] else embedding_size
            if arch.head == "mlm" and values["activation"] != "gelu":
                raise UserError(
                    f"electra: the generator head always uses gelu, so hidden_act="
                    f"{hf.get('hidden_act')!r} has no maskwise equivalent"
                )
    elif column == "gpt2":
        _reject(column, hf, "scale_attn_by_inverse_layer_idx", False, False)
        _reject(column, hf, "add_cross_attention", False, False)
        values["activation"] = _activation(column, _get(hf, "activation_function", "gelu_new"))
        values["d_ff"] = values["d_ff"] or 4 * values["d_model"]
    elif column == "llama":
        biases = (_get(hf, "attention_bias", False), _get(hf, "mlp_bias", False))
        if biases[0] != biases[1]:
            raise UserError(
                f"llama: attention_bias={biases[0]} with mlp_bias={biases[1]} is not supported "
                f"(maskwise has one bias setting for all projections)"
            )
        values["bias"] = biases[0]
        values["activation"] = _activation(column, _get(hf, "hidden_act", "silu"))
        values["rope_theta"] = _llama_rope_theta(column, hf)
    elif column == "qwen2":
        _reject_qwen2_sliding_window(hf, values["n_layers"], values["max_seq_len"])
        values["activation"] = _activation(column, _get(hf, "hidden_act", "silu"))
        values["rope_theta"] = _llama_rope_theta(column, hf)
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
                raise UserError(
                    f"bart: {decoder_key} {_get(hf, decoder_key, default)} != {encoder_key} "
                    f"{values[field]} is not supported (maskwise stacks share one shape)"
                )
        values["activation"] = _activation(column, _get(hf, "activation_function", "gelu"))
        values["embedding_scale"] = math.sqrt(values["d_model"]) if _get(hf, "scale_embedding", False) else 1.0
    elif column in MODERNBERTS:
        values.update(_modernbert_layers(column, hf, values["n_layers"]))
        bias_settings = {key: _get(hf, key, False) for key in ("attention_bias", "mlp_bias", "norm_bias")}
        if len(set(bias_settings.values())) > 1:
            raise UserError(
                f"{column}: {', '.join(f'{k}={v}' for k, v in bias_settings.items())} is not supported "
                f"(maskwise has one bias setting for projections and norms)"
            )
        values["bias"] = bias_settings["attention_bias"]
        values["activation"] = _activation(column, _get(hf, "hidden_activation", "gelu"))
        # ModernBERT's MLM and task heads both begin with a dense + act + norm, its classifier_* settings
        values["lm_head_transform_bias"] = _get(hf, "classifier_bias", False)
        if arch.head in ("mlm", "task"):  # a head computed here, so its activation must be the body's
            head_activation = _get(hf, "classifier_activation", "gelu")
            if _activation(column, head_activation) != values["activation"]:
                raise UserError(
                    f"{column}: classifier_activation={head_activation!r} differs from hidden_activation "
                    f"{_get(hf, 'hidden_activation', 'gelu')!r} (maskwise's head uses the body's)"
                )
        if arch.head == "mlm":
            values["lm_head_bias"] = _get(hf, "decoder_bias", True)
        values["rope_theta"] = _modernbert_rope_theta(column, hf, "full_attention", "global_rope_theta", 160000.0)
        values["local_rope_theta"] = _modernbert_rope_theta(
            column, hf, "sliding_attention", "local_rope_theta", 10000.0
        )
        values["classifier_transform"] = True  # what ModernBERT's task classes put before their classifier
    if arch.head != "rtd":
        values["tie_embeddings"] = _is_tied(arch, tensors)
    if values.get("n_decoder_layers") == values["n_layers"]:
        values["n_decoder_layers"] = None
    if values.get("d_head") is not None and values["d_head"] * values["n_heads"] == values["d_model"]:
        values["d_head"] = None
    if values.get("n_kv_heads") == values["n_heads"]:
        values["n_kv_heads"] = None  # every query head its own key/value head: no grouping
    return ModelConfig.from_dict(values)


def _llama_rope_theta(column: str, hf: dict[str, Any]) -> float:
    """Llama's or Qwen2's RoPE base from ``rope_parameters`` (transformers 5) or the older top-level
    ``rope_theta`` and ``rope_scaling``; any rescaled RoPE (linear, dynamic, llama3, yarn, ...) is refused."""
    rope = {**(hf.get("rope_scaling") or {}), **(hf.get("rope_parameters") or {})}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise UserError(f"{column}: rope_type {kind!r} is not supported (only 'default': plain RoPE)")
    partial = rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise UserError(f"{column}: partial_rotary_factor={partial} is not supported (only 1.0)")
    return float(rope.get("rope_theta") or hf.get("rope_theta") or 10000.0)


def _reject_qwen2_sliding_window(hf: dict[str, Any], n_layers: int, max_positions: int) -> None:
    """Refuse a Qwen2 whose sliding window hides any key: ``use_sliding_window`` with a ``sliding_window``
    shorter than ``max_position_embeddings`` in any layer of type sliding_attention (``layer_types``,
    else layers ``max_window_layers`` on, as Qwen2Config derives them). Why: maskwise's local layers are
    all but layers 0, n, 2n, ..., and Qwen2's are a run from one layer to the last; Qwen2's published
    configs leave the window off."""
    window = _get(hf, "sliding_window", 4096) if _get(hf, "use_sliding_window", False) else None
    first_sliding = _get(hf, "max_window_layers", 28)
    types = hf.get("layer_types") or [
        "sliding_attention" if window is not None and i >= first_sliding else "full_attention" for i in range(n_layers)
    ]
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise UserError(
            f"qwen2: layer type {unknown[0]!r} is not supported (only full_attention and sliding_attention)"
        )
    sliding = [i for i, kind in enumerate(types) if kind == "sliding_attention"]
    if sliding and window is not None and window < max_positions:
        raise UserError(
            f"qwen2: use_sliding_window with sliding_window {window} < max_position_embeddings "
            f"{max_positions} (in {len(sliding)} layer(s) from layer {sliding[0]}) is not supported "
            f"(maskwise's sliding-window layers are all but every n-th, not a run to the last layer)"
        )


def _modernbert_layers(column: str, hf: dict[str, Any], n_layers: int) -> dict[str, Any]:
    """``global_every`` and ``local_window`` from ModernBERT's layer pattern: ``layer_types`` (transformers
    5), else the older ``global_attn_every_n_layers`` (default 3: layers 0, 3, 6, ... global), and its
    ``local_attention`` (default 128). The encoder's local query sees |i - j| <= local_attention // 2,
    the decoder's the keys i - local_attention // 2 < j <= i, one fewer back. A pattern other than
    "global every n-th layer from layer 0" is refused."""
    types = hf.get("layer_types")
    if types is None:
        every = _get(hf, "global_attn_every_n_layers", 3)
        types = ["sliding_attention" if i % every else "full_attention" for i in range(n_layers)]
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise UserError(
            f"{column}: layer type {unknown[0]!r} is not supported (only full_attention and sliding_attention)"
        )
    full = [i for i, kind in enumerate(types) if kind == "full_attention"]
    if len(full) == len(types):
        return {"global_every": 1, "local_window": None}
    every = full[1] if len(full) > 1 else len(types)  # the first global layer after layer 0
    if types != ["sliding_attention" if i % every else "full_attention" for i in range(len(types))]:
        raise UserError(
            f"{column}: layer_types with global layers {full} of {len(types)} are not supported (maskwise "
            f"computes global attention in layers 0, n, 2n, ... and local attention in the others)"
        )
    size = hf.get("local_attention", 128)  # the decoder allows None, which leaves no key (checked below)
    reach = None if size is None else size // 2 - (column == "modernbert-decoder")  # the farthest key's distance
    if reach is None or reach < 0:
        raise UserError(f"{column}: local_attention={size!r} leaves a sliding-window layer no key to attend to")
    return {"global_every": every, "local_window": reach}


def _modernbert_rope_theta(column: str, hf: dict[str, Any], layer_type: str, legacy_key: str, default: float) -> float:
    """The RoPE base of one layer type: ``rope_parameters[layer_type]`` (transformers 5) or the older
    ``global_rope_theta`` / ``local_rope_theta``; any rescaled RoPE is refused."""
    rope = (hf.get("rope_parameters") or {}).get(layer_type) or {}
    kind = rope.get("rope_type", "default")
    if kind != "default" or hf.get("rope_scaling"):
        raise UserError(
            f"{column}: {layer_type} rope_type {kind if kind != 'default' else hf.get('rope_scaling')!r} "
            f"is not supported (only 'default': plain RoPE)"
        )
    return float(rope.get("rope_theta") or hf.get(legacy_key) or default)


def _is_tied(arch: Architecture, tensors: dict[str, torch.Tensor]) -> bool:
    head = column_entry(arch, KEY_MAP["lm_head.weight"])
    embedding = COPIES[arch.column].get(head) if isinstance(head, str) else None  # the row's entries are names
    if head not in tensors or embedding is None:
        return True
    return embedding in tensors and torch.equal(tensors[head], tensors[embedding])


def _read_source(source: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor], str | None, str]:
    """(HF config, tensors, class name, what error messages call it) of a ``transformers`` model object
    or a local HF folder."""
    if hasattr(source, "state_dict") and hasattr(source, "config"):
        return source.config.to_dict(), source.state_dict(), type(source).__name__, type(source).__name__
    hf, tensors = read_hf_folder(source)
    return hf, tensors, (hf.get("architectures") or [None])[0], str(source)


def import_hf(source: Any) -> Transformer:
    """A maskwise model computing what an HF model computes, in eval mode.

    ``source``: a ``transformers`` model object, or a local HF folder (``config.json`` + weights).
    ``ElectraForPreTraining`` becomes a ``Discriminator`` (its logits are (B, T) RTD scores); every
    other supported class becomes an ``Encoder``, ``Decoder`` or ``EncoderDecoder`` whose ``.logits``
    are the HF model's logits (for a base model, e.g. ``BertModel`` or ``LlamaModel``, the tied
    projection onto the vocabulary, which a base ``ElectraModel`` with factorised embeddings lacks;
    use ``hidden_states``). A task class (``hf_keys.task_classes``) gives its body, as a base model;
    ``hf_fine_tune`` reads its head.
    """
    hf, tensors, class_name, where = _read_source(source)
    arch = _architecture(class_name, hf.get("model_type"))
    if arch.head == "task":
        tensors = _split_task_head(tensors)[0]
    if arch.base_prefix:
        tensors = {(k if k.startswith(arch.base_prefix) else arch.base_prefix + k): v for k, v in tensors.items()}
    cfg = config_from_hf(hf, arch, tensors)
    model = Discriminator(cfg) if arch.head == "rtd" else build_model(cfg)
    load_weights_into(model, _to_maskwise(model, arch, tensors, where), where)
    return model.eval()


def hf_fine_tune(source: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor] | None]:
    """An HF task class's fine-tune as ``maskwise finetune`` records one: the task record (its kind, its
    classes in id2label's order, a classifier's pooling) and the head's tensors under ``ClassifierHead``'s
    names; ``({}, None)`` for any other class. A head maskwise's would compute otherwise is a ``UserError``."""
    hf, tensors, class_name, where = _read_source(source)
    found = task_of(class_name)  # (body column, task kind) of a task class
    kind = found[1] if found is not None else None
    field = classes_key(kind)  # where its record keeps its classes: None but for a registered kind's task class
    if class_name is None or field is None:
        return {}, None
    # a config.json omits HF's default labels (two, LABEL_0 and LABEL_1), as transformers 5 saves one
    names = hf.get("id2label") or {i: f"LABEL_{i}" for i in range(_get(hf, "num_labels", 2))}
    task: dict[str, Any] = {"kind": kind, field: [names[key] for key in sorted(names, key=int)]}
    if class_name.endswith("ForSequenceClassification"):  # what HF's sequence classifiers configure
        problem = hf.get("problem_type")
        if problem not in (None, "single_label_classification") or len(names) < 2:
            raise UserError(
                f"{where}: problem_type={problem!r} with {len(names)} label(s) is not supported "
                f"(maskwise's classifier picks one of two or more labels)"
            )
        pooling = _get(hf, "classifier_pooling", "cls")
        if pooling not in CLASSIFIER_POOLINGS:
            raise UserError(
                f"{where}: classifier_pooling={pooling!r} is not supported (only {' or '.join(CLASSIFIER_POOLINGS)})"
            )
        task.update(pooling=pooling, freeze=False)
    return task, _split_task_head(tensors)[1]


_FROM_HEAD_KEYS = {hf: ours for ours, hf in HEAD_KEYS.items()}


def _split_task_head(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the body's tensors, the head's under ``ClassifierHead``'s names) of an HF task class's state dict."""
    body, head = {}, {}
    for name, value in tensors.items():
        module, _, suffix = name.rpartition(".")
        if module in _FROM_HEAD_KEYS:
            head[f"{_FROM_HEAD_KEYS[module]}.{suffix}"] = value
        else:
            body[name] = value
    return body, head


def _to_maskwise(
    model: nn.Module, arch: Architecture, tensors: dict[str, torch.Tensor], where: str
) -> dict[str, torch.Tensor]:
    mapping = key_map(model, arch)
    ours, used = {}, set()
    for key, target in model.state_dict().items():
        source, suffix = source_of(key, mapping)
        names = [name + suffix for name in source.names]
        missing = [name for name in names if name not in tensors]
        if missing:
            raise UserError(f"{where}: missing key {missing[0]} (for maskwise {key})")
        parts = [tensors[name].t() if source.conv1d and tensors[name].dim() == 2 else tensors[name] for name in names]
        value = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
        if source.leading_one:
            value = value.reshape(-1)  # (1, V) -> (V,)
        if value.shape != target.shape:
            raise UserError(
                f"{where}: {' + '.join(names)} has shape {tuple(value.shape)}, "
                f"maskwise {key} needs {tuple(target.shape)}"
            )
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
