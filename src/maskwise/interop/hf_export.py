"""Export a maskwise model as an HF folder that ``transformers`` loads and that gives the same logits."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as save_safetensors_bytes
from tokenizers import Tokenizer as Backend
from tokenizers.processors import TemplateProcessing
from torch import nn

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.families import family_of
from maskwise.interop.hf_keys import (
    ACTIVATION_KEY,
    BODY_PREFIX,
    CLASSIFIER_POOLINGS,
    CONFIG_KEYS,
    DROPOUT_KEYS,
    EXPORT_CLASS,
    FIXED,
    HEAD_KEYS,
    MODEL_ARCHITECTURES,
    MODEL_TYPE,
    MODERNBERTS,
    TASK_HEAD_TRANSFORM,
    TASK_UNMAPPED,
    TO_HF_ACTIVATION,
    Architecture,
    classes_key,
    fused_rows,
    head_fixed,
    key_map,
    source_of,
    task_class,
)
from maskwise.model.transformer import Discriminator, Encoder, EncoderDecoder
from maskwise.runs import (
    CONFIG_FILE,
    HEAD_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    Run,
    atomic_write,
    json_bytes,
    load_run,
    prepare_folder,
    read_safetensors,
)

# Per family, the (column, head) pairs of the key tables that can describe its models, most likely first.
EXPORT_CANDIDATES = {
    "encoder": (("bert", "mlm"), ("electra", "mlm"), ("modernbert", "mlm")),
    "decoder": (("gpt2", "lm"), ("llama", "lm"), ("qwen2", "lm"), ("modernbert-decoder", "mlm")),
    "encoder-decoder": (("t5", "lm"), ("bart", "lm")),
}
# The same for a part exported alone: an encoder-decoder's encoder half is a base model (its vocabulary
# head reads the decoder's output, so it has none of its own).
PART_CANDIDATES = {"encoder": (("modernbert", "lm"),)}
# ModernBERT's special-token ids default to its own 50k vocabulary: each is written, None when unknown.
MODERNBERT_ROLES = ("pad", "bos", "eos", "cls", "sep")


def _candidates(model: nn.Module, cfg: ModelConfig, preferred: str | None, part: str | None) -> list[tuple[str, str]]:
    """(column, head) pairs that could describe ``model`` (a whole model, or the ``part`` of one it is),
    most likely first (``preferred`` column first)."""
    if isinstance(model, Discriminator):
        return [("electra", "rtd")]
    candidates = EXPORT_CANDIDATES[cfg.family] if part is None else PART_CANDIDATES[part]
    return sorted(candidates, key=lambda pair: pair[0] != preferred)  # stable: the table's order otherwise


def _hf_config_or_problems(cfg: ModelConfig, column: str, head: str) -> tuple[dict[str, Any], list[str]]:
    """The HF config for ``cfg`` as ``column``, and every setting that stops it being exact."""
    problems = []
    fixed = {**FIXED[column], **head_fixed(column, head)}
    for field, needed in fixed.items():
        if getattr(cfg, field) != needed:
            problems.append(f"{field}={getattr(cfg, field)!r} (needs {needed!r})")
    if column not in ("t5", "llama", "qwen2") and cfg.head_dim * cfg.n_heads != cfg.d_model:
        problems.append(f"d_head={cfg.d_head} (needs d_model / n_heads)")
    if cfg.factorised_embeddings and column != "electra":
        problems.append(f"embedding_size={cfg.embedding_size} (only ELECTRA has factorised embeddings)")
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
            hf["embedding_size"] = cfg.embedding_width
            if head == "mlm" and cfg.activation != "gelu":
                problems.append(f"activation={cfg.activation!r} (ELECTRA's generator head is always gelu)")
    elif column in ("llama", "qwen2"):
        # bos/eos spelled out (None unless the tokenizer has them): LlamaConfig would otherwise assume 1 and 2;
        # head_dim and num_key_value_heads as numbers, never None: Qwen2's attention takes a head_dim of None as given.
        hf.update(
            num_key_value_heads=cfg.kv_heads,
            head_dim=cfg.head_dim,
            rope_theta=cfg.rope_theta,
            bos_token_id=None,
            eos_token_id=None,
            rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        )
        if column == "llama":
            hf.update(attention_bias=cfg.bias, mlp_bias=cfg.bias)
        else:
            hf.update(use_sliding_window=False, sliding_window=None)
    elif column == "t5":
        hf.update(d_kv=cfg.head_dim, num_decoder_layers=cfg.decoder_layers, is_encoder_decoder=True)
        if cfg.gated_ffn and cfg.activation == "gelu":
            problems.append("gated_ffn with activation='gelu' (T5 reads 'gated-gelu' as the tanh approximation)")
        hf["feed_forward_proj"] = ("gated-" if cfg.gated_ffn else "") + (
            "gelu" if cfg.gated_ffn and cfg.activation == "gelu_tanh" else activation
        )
        scaled = cfg.lm_head_input_scale != 1.0
        if scaled and not math.isclose(cfg.lm_head_input_scale, cfg.d_model**-0.5):
            problems.append(f"lm_head_input_scale={cfg.lm_head_input_scale} (T5 has 1 or d_model ** -0.5)")
        hf["scale_decoder_outputs"] = scaled
    elif column == "bart":
        hf.update(
            decoder_layers=cfg.decoder_layers,
            decoder_attention_heads=cfg.n_heads,
            decoder_ffn_dim=cfg.d_ff,
            is_encoder_decoder=True,
        )
        scale = cfg.embedding_scale
        if scale != 1.0 and not math.isclose(scale, math.sqrt(cfg.d_model)):
            problems.append(f"embedding_scale={scale} (BART has 1 or sqrt(d_model))")
        hf["scale_embedding"] = scale != 1.0
    elif column in MODERNBERTS:
        # The layer pattern said both ways: layer_types and rope_parameters (transformers 5), and the
        # global_attn_every_n_layers / global_rope_theta / local_rope_theta that transformers 4 reads.
        hf.update(
            attention_bias=cfg.bias,
            mlp_bias=cfg.bias,
            norm_bias=cfg.bias,
            classifier_bias=cfg.lm_head_transform_bias,
            decoder_bias=cfg.lm_head_bias,
            classifier_activation=activation,
            layer_types=["sliding_attention" if cfg.local_layer(i) else "full_attention" for i in range(cfg.n_layers)],
            global_attn_every_n_layers=cfg.global_every,
            global_rope_theta=cfg.rope_theta,
            local_rope_theta=cfg.local_rope_theta,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": cfg.rope_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": cfg.local_rope_theta},
            },
            **{f"{role}_token_id": _unknown_id(column, role) for role in MODERNBERT_ROLES},
        )
        if cfg.local_window is not None:
            # the inverse of hf_import's reading: the encoder sees local_attention // 2 tokens either
            # way, the decoder local_attention // 2 - 1 back
            hf["local_attention"] = 2 * (cfg.local_window + (column == "modernbert-decoder"))
    return hf, problems


def _unknown_id(column: str, role: str) -> int | None:
    """What a ModernBERT config says for a special token maskwise does not know: None, except where
    ModernBertDecoderConfig's typed fields require an int (pad, bos, cls, sep), which get 0, an id
    every vocabulary has; it is read only as the embedding's padding_idx and generate's default start."""
    return 0 if column == "modernbert-decoder" and role != "eos" else None


def hf_config(
    model: nn.Module, preferred: str | None = None, part: str | None = None
) -> tuple[dict[str, Any], Architecture]:
    """The HF config (and architecture) that reproduces ``model`` exactly, or a ``UserError`` naming
    every setting of the closest architecture that has no HF equivalent. ``part``: the part of a model
    that ``model`` is (``"encoder"``: ``encoder_half``'s), which only some classes can hold."""
    cfg = model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise model's
    candidates = _candidates(model, cfg, preferred, part)
    if preferred is not None and preferred not in {column for column, _ in candidates}:
        raise UserError(
            f"a {cfg.family} cannot be exported as {preferred}; "
            f"choose from {', '.join(sorted({column for column, _ in candidates}))}"
        )
    attempts = []
    for column, head in candidates:
        hf, problems = _hf_config_or_problems(cfg, column, head)
        if not problems:
            return hf, MODEL_ARCHITECTURES[EXPORT_CLASS[column, head]]
        attempts.append((len(problems), EXPORT_CLASS[column, head], problems))
    _, class_name, problems = min(attempts)
    family = cfg.family if part is None else f"encoder-decoder's {part} half"
    as_decoder = dataclasses.replace(cfg, family="decoder")
    for name, column in (("Llama", "llama"), ("Qwen2", "qwen2")):
        if not cfg.kind.causal and not _hf_config_or_problems(as_decoder, column, "lm")[1]:
            raise UserError(
                f"this {family} has {name}'s layout but no HF equivalent: {EXPORT_CLASS[column, 'lm']} "
                f"is causal-only, so it cannot compute bidirectional attention"
            )
    half_column, half_head = PART_CANDIDATES["encoder"][0]
    if cfg.kind.two_stacks and not _hf_config_or_problems(encoder_half_config(cfg), half_column, half_head)[1]:
        raise UserError(
            f"this {family} has ModernBERT's layout but no HF equivalent: ModernBertForMaskedLM and "
            f"ModernBertDecoderForCausalLM have no cross-attention; its encoder half exports alone as "
            f"{EXPORT_CLASS[half_column, half_head]} (--part encoder)"
        )
    raise UserError(f"this {family} config has no HF equivalent; closest is {class_name}, but: {'; '.join(problems)}")


def encoder_half_config(cfg: ModelConfig) -> ModelConfig:
    """An encoder-decoder's encoder stack as an encoder of its own: no decoder (its depth, cross-attention's
    RoPE) and no vocabulary head (the encoder-decoder's reads the decoder's output)."""
    return dataclasses.replace(
        cfg,
        family="encoder",
        n_decoder_layers=None,
        cross_rope=False,
        tie_embeddings=True,
        lm_head_transform=False,
        lm_head_bias=False,
        lm_head_input_scale=1.0,
    )


def encoder_half(model: nn.Module) -> Encoder:
    """An encoder-decoder's token embeddings and encoder stack as an ``Encoder`` with no vocabulary head
    (the same tensors): the half that reads a text, which HF's encoder classes hold where none has its
    cross-attention; its ``hidden_states`` are the encoder-decoder's ``encode``."""
    cfg = model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise model's
    if not cfg.kind.two_stacks:
        raise UserError(
            f"this {cfg.family} has no encoder half to export alone (only an encoder-decoder has two stacks)"
        )
    assert isinstance(model, EncoderDecoder)  # the family with two stacks
    half = Encoder(encoder_half_config(cfg))
    half.load_state_dict(
        {
            "embed.weight": model.embed.weight,
            **{f"stack.{key}": value for key, value in model.encoder.state_dict().items()},
        }
    )
    return half.eval()


def hf_state_dict(model: nn.Module, arch: Architecture) -> dict[str, torch.Tensor]:
    """``model``'s tensors under the HF names of ``arch`` (the inverse of import)."""
    cfg = model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise model's
    mapping = key_map(model, arch)
    tensors = {}
    for key, value in model.state_dict().items():
        source, suffix = source_of(key, mapping)
        parts = value.detach().cpu().split(fused_rows(cfg, key, value.shape[0], len(source.names)), dim=0)
        for name, part in zip(source.names, parts):
            if source.conv1d and part.dim() == 2:
                part = part.t()
            if source.leading_one:
                part = part[None]  # (V,) -> (1, V)
            tensors[name + suffix] = part.contiguous().clone()  # own storage: safetensors refuses shared
    return tensors


def export_hf(
    run_or_model: Any,
    out_dir: str | Path,
    overwrite: bool = False,
    tokenizer: Any = None,
    architecture: str | None = None,
    extra_files: dict[str, bytes] | None = None,
    part: str | None = None,
) -> Path:
    """Write an HF folder that ``AutoModelForMaskedLM`` / ``ForCausalLM`` / ``ForSeq2SeqLM`` (or, for an
    ELECTRA discriminator, ``AutoModelForPreTraining``) loads and that computes the same logits.

    ``run_or_model``: a run folder, a loaded ``Run``, or a model. Encoders export as BERT unless
    ``architecture="electra"``, the run's preset is "electra" or the embeddings are factorised, or
    with the "modernbert" layout as ``ModernBertForMaskedLM``; decoders as GPT-2 or, with the "modern"
    layout (RMSNorm, RoPE, SwiGLU; grouped-query attention or not), as ``LlamaForCausalLM`` (with
    ``qkv_bias``, as ``Qwen2ForCausalLM``), with the "modernbert" layout as
    ``ModernBertDecoderForCausalLM``. A classify or tag run goes with the head it trained, as the HF
    task class of ``hf_keys.task_class`` (e.g. ``ModernBertForSequenceClassification``).
    ``part="encoder"``: an encoder-decoder's encoder half alone (``encoder_half``), with the "modernbert"
    layout as ``ModernBertModel`` (``AutoModel``), whose hidden states are the encoder-decoder's ``encode``;
    its tokenizer frames a text as the encoder-decoder reads it (bare ids).
    The folder (config.json, model.safetensors, and with a tokenizer tokenizer.json +
    tokenizer_config.json) is assembled under a temporary name and renamed into place; an existing
    non-empty ``out_dir`` is replaced only with ``overwrite``, and only when it is a model folder
    (it holds a config.json). ``extra_files`` (relative path -> bytes) go in the same folder before
    the rename, so a wrapper format (sentence-transformers) is never seen half-written either.
    """
    model = run_or_model
    settings: dict[str, Any] = {}
    task: dict[str, Any] = {}
    head: dict[str, torch.Tensor] | None = None
    if isinstance(run_or_model, (str, Path)):
        run_or_model = load_run(run_or_model)
    if isinstance(run_or_model, Run):
        model, tokenizer = run_or_model.model, tokenizer or run_or_model.tokenizer
        settings, task = run_or_model.config.get("settings", {}), run_or_model.config.get("task") or {}
        if classes_key(task.get("kind")) is not None and (run_or_model.path / HEAD_FILE).is_file():
            head = read_safetensors(run_or_model.path / HEAD_FILE)
    out = prepare_folder(Path(out_dir).expanduser(), overwrite, kind="model folder", what="", create=False)
    family = model.cfg.family  # a text is framed as the whole model reads it
    if part is not None:
        if part not in PART_CANDIDATES:
            raise UserError(f"unknown part {part!r}; known: {', '.join(PART_CANDIDATES)}")
        model = encoder_half(model)
    hf, arch = hf_config(model, architecture or ("electra" if settings.get("preset") == "electra" else None), part)
    tensors = hf_state_dict(model, arch)
    if head is not None:
        hf, tensors = _with_task_head(hf, arch, tensors, task, head)
    elif arch.base_prefix:  # a base class saves its tensors without its task classes' prefix
        tensors = {name.removeprefix(arch.base_prefix): value for name, value in tensors.items()}
    files = {MODEL_FILE: save_safetensors_bytes(tensors, metadata={"format": "pt"})}
    if tokenizer is not None:
        hf.update(_special_ids(tokenizer, MODERNBERT_ROLES if arch.column in MODERNBERTS else ("pad", "bos", "eos")))
        backend = encoder_framing(tokenizer, family)
        if part is not None and backend.post_processor is None:
            # bare ids said explicitly: a reader taking the folder for an encoder's would put [CLS] first
            backend.post_processor = TemplateProcessing(single="$A")
        files[TOKENIZER_FILE] = backend.to_str().encode()
        files["tokenizer_config.json"] = json_bytes(_tokenizer_config(tokenizer, model.cfg))
    files[CONFIG_FILE] = json_bytes(hf)
    _write_folder(out, {**files, **(extra_files or {})})
    return out


def _with_task_head(
    hf: dict[str, Any],
    arch: Architecture,
    tensors: dict[str, torch.Tensor],
    task: dict[str, Any],
    head: dict[str, torch.Tensor],
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The body's HF config and tensors made into the HF task class of ``task``'s fine-tuned ``head``
    (``hf_keys.task_class``): the body's tensors without its pretraining head, and the head's.
    A head HF's class would compute differently is a ``UserError`` naming the part that differs."""
    kind, column = task["kind"], arch.column
    body_class = EXPORT_CLASS[column, arch.head]
    class_name, key = task_class(column, kind), classes_key(kind)
    if class_name is None or key is None:
        raise UserError(
            TASK_UNMAPPED.get((column, kind), f"no HF class computes a maskwise {kind} head on a {body_class} body")
        )
    transform = "transform.0.weight" in head
    if transform != TASK_HEAD_TRANSFORM[column]:
        raise UserError(
            f"{class_name} has {'a' if TASK_HEAD_TRANSFORM[column] else 'no'} dense + act + norm before "
            f"its classifier and this {kind} head has {'one' if transform else 'none'}"
        )
    hf = {**hf, "architectures": [class_name]}
    if class_name == "ModernBertForSequenceClassification":  # the one task class that says how it pools
        if task.get("pooling") not in CLASSIFIER_POOLINGS:
            raise UserError(f"{class_name} pools by {' or '.join(CLASSIFIER_POOLINGS)}, not {task.get('pooling')!r}")
        hf["classifier_pooling"] = task["pooling"]
    classes = task[key]
    hf.update(
        id2label={str(i): name for i, name in enumerate(classes)}, label2id={name: i for i, name in enumerate(classes)}
    )
    body = {name: value for name, value in tensors.items() if name.startswith(BODY_PREFIX[column] + ".")}
    for key, value in head.items():
        module, _, suffix = key.rpartition(".")
        body[f"{HEAD_KEYS[module]}.{suffix}"] = value.contiguous()
    return hf, body


def encoder_framing(tokenizer: Any, family: str):
    """The tokenizer's backend (a copy), framing text as the model reads it.

    maskwise tokenizers add no special tokens (objectives frame their own inputs, and MLM puts
    ``[CLS]`` first: ``tasks.frame``), so for an encoder a tokenizer.json without a post-processor
    gets ``[CLS] $A``: ``tokenizer(text)`` in HF then reads text the way the model was trained. A
    tokenizer that frames text itself (an HF BERT's ``[CLS] $A [SEP]``) keeps its own framing.
    """
    backend = Backend.from_str(tokenizer.backend.to_str())
    if family_of(family).encoder_only and backend.post_processor is None and tokenizer.cls_id is not None:
        cls = tokenizer.id_to_token(tokenizer.cls_id)
        backend.post_processor = TemplateProcessing(single=f"{cls} $A", special_tokens=[(cls, tokenizer.cls_id)])
    return backend


_ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")


def _special_ids(tokenizer: Any, roles: tuple[str, ...]) -> dict[str, int]:
    return {
        f"{role}_token_id": getattr(tokenizer, f"{role}_id")
        for role in roles
        if getattr(tokenizer, f"{role}_id") is not None
    }


def _tokenizer_config(tokenizer: Any, cfg: ModelConfig) -> dict[str, Any]:
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.max_seq_len}
    for role in _ROLES:
        token_id = getattr(tokenizer, f"{role}_id")
        if token_id is not None:
            config[f"{role}_token"] = tokenizer.id_to_token(token_id)
    return config


def _write_folder(out: Path, files: dict[str, bytes]) -> None:
    """Assemble ``files`` in a temporary sibling folder, then rename it to ``out`` (replacing an old
    ``out`` only after the new one is complete), so ``out`` is never half-written."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for name, data in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(tmp / name, data)
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
