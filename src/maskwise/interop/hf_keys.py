"""Hugging Face interop tables: BERT, ELECTRA, GPT-2, Llama, Qwen2, T5, BART, ModernBERT and ModernBERT-decoder
as settings of the one block.

The architectures are the one maskwise block with different settings, so converting is two
tables and no model code (``hf_import`` reads them one way, ``hf_export`` the other):

* ``FIXED`` + ``CONFIG_KEYS``: which ``ModelConfig`` settings an architecture fixes (BERT is always
  post-norm, T5 always RMSNorm without biases, ...) and where its HF config keeps the ones it varies.
  Import fills a ``ModelConfig`` from them; export checks a ``ModelConfig`` against them and names every
  setting that has no HF equivalent.
* ``KEY_MAP``: where each maskwise tensor lives in each architecture's state dict, side by side.
  The only layout work is fusing q/k/v (and T5's and Llama's gate/up) into one matrix (with grouped-query
  attention k and v have fewer rows than q: ``fused_rows``), transposing GPT-2's Conv1D weights, and
  BART's (1, V) ``final_logits_bias``. Qwen2 is Llama's rows with biases on q/k/v alone (``qkv_bias``).
  Llama's and ModernBERT's q/k rows need no permutation: maskwise's RoPE rotates the halves
  (x[:hd/2], x[hd/2:]) of each head, their ``rotate_half`` convention, not interleaved pairs.
  ModernBERT's ``Wqkv`` is q;k;v already, and its ``Wi`` is (activated half; multiplying half),
  maskwise's gate;up order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.tasks.registry import TASKS

# ---- the architectures ----------------------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """One HF model class: its column in the tables, its head, and the prefix its base-model
    variant leaves off (``BertModel`` saves ``embeddings.*`` where ``BertForMaskedLM`` saves
    ``bert.embeddings.*``)."""

    column: str  # "bert", "electra", "gpt2", "llama", "qwen2", "t5", "bart", "modernbert" or "modernbert-decoder"
    # "mlm": a dense+act+norm transform before the vocabulary (BERT's, with a vocab bias; ModernBERT's
    # encoder and decoder both predict through one); "rtd"; "lm": a plain projection; "task": a fine-tuned
    # task class (``task_classes()``), its body read with no vocabulary head and its classifier apart
    head: str
    base_prefix: str = ""


# Every class whose layout is one of these architectures, whatever task kinds are registered; a fine-tune's
# task class is ``architectures()``'s on top.
MODEL_ARCHITECTURES = {
    "BertForMaskedLM": Architecture("bert", "mlm"),
    "BertModel": Architecture("bert", "lm", base_prefix="bert."),
    "ElectraForMaskedLM": Architecture("electra", "mlm"),
    "ElectraForPreTraining": Architecture("electra", "rtd"),
    "ElectraModel": Architecture("electra", "lm", base_prefix="electra."),
    "GPT2LMHeadModel": Architecture("gpt2", "lm"),
    "GPT2Model": Architecture("gpt2", "lm", base_prefix="transformer."),
    "LlamaForCausalLM": Architecture("llama", "lm"),
    "LlamaModel": Architecture("llama", "lm", base_prefix="model."),
    "Qwen2ForCausalLM": Architecture("qwen2", "lm"),
    "Qwen2Model": Architecture("qwen2", "lm", base_prefix="model."),
    "T5ForConditionalGeneration": Architecture("t5", "lm"),
    "BartForConditionalGeneration": Architecture("bart", "lm"),
    "ModernBertForMaskedLM": Architecture("modernbert", "mlm"),
    "ModernBertModel": Architecture("modernbert", "lm", base_prefix="model."),
    "ModernBertDecoderForCausalLM": Architecture("modernbert-decoder", "mlm"),
    "ModernBertDecoderModel": Architecture("modernbert-decoder", "lm", base_prefix="model."),
}


# A fine-tune's head (``model.heads.ClassifierHead``, saved beside its body) goes into the HF class of
# (the body's column, the task kind), and such a folder imports back as the body and the head.
# Each task declares its own (``Task.head.hf_classes``). These read the registry when called, never a copy
# made at import: a kind registered later (a plugin's entry point, ``tasks.registry.register``) has its classes too.
def task_classes() -> dict[tuple[str, str], str]:
    """(body column, task kind) -> HF task class, for every registered kind with a head."""
    return dict(
        sorted(
            ((column, t.kind), name)
            for t in TASKS.values()
            if t.head is not None
            for column, name in t.head.hf_classes.items()
        )
    )


def task_class(column: str, kind: str) -> str | None:
    """The HF class a ``kind`` fine-tune's head on a ``column`` body exports as, or None where none computes it."""
    return task_classes().get((column, kind))


def task_of(class_name: str | None) -> tuple[str, str] | None:
    """(body column, task kind) of HF task class ``class_name``, or None for any other class."""
    return {name: key for key, name in task_classes().items()}.get(class_name) if class_name is not None else None


def architectures() -> dict[str, Architecture]:
    """Every HF class maskwise reads and writes: ``MODEL_ARCHITECTURES`` and the registered kinds' task classes."""
    tasks = {name: Architecture(column, "task") for (column, _), name in task_classes().items()}
    return {**MODEL_ARCHITECTURES, **tasks}


def classes_key(kind: str | None) -> str | None:
    """Where a ``kind`` task's record keeps its classes (its ``Task.head.classes_key``), or None for a kind
    without a head (or none registered)."""
    task = TASKS.get(kind) if kind is not None else None
    return task.head.classes_key if task is not None and task.head is not None else None


# Export writes the task class (the one AutoModelForMaskedLM / CausalLM / Seq2SeqLM loads), and an
# encoder-decoder's encoder half (no vocabulary head of its own) as the base class.
EXPORT_CLASS = {
    ("bert", "mlm"): "BertForMaskedLM",
    ("electra", "mlm"): "ElectraForMaskedLM",
    ("electra", "rtd"): "ElectraForPreTraining",
    ("gpt2", "lm"): "GPT2LMHeadModel",
    ("llama", "lm"): "LlamaForCausalLM",
    ("qwen2", "lm"): "Qwen2ForCausalLM",
    ("t5", "lm"): "T5ForConditionalGeneration",
    ("bart", "lm"): "BartForConditionalGeneration",
    ("modernbert", "mlm"): "ModernBertForMaskedLM",
    ("modernbert-decoder", "mlm"): "ModernBertDecoderForCausalLM",
    ("modernbert", "lm"): "ModernBertModel",
}

MODEL_TYPE = {
    "bert": "bert",
    "electra": "electra",
    "gpt2": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "t5": "t5",
    "bart": "bart",
    "modernbert": "modernbert",
    "modernbert-decoder": "modernbert-decoder",
}
MODERNBERTS = ("modernbert", "modernbert-decoder")  # one layout: the encoder and its decoder twin

# ---- config: what each architecture fixes, and where its config keeps the rest --------------

_GLOBAL_ONLY = {"global_every": 1, "local_window": None}  # no sliding-window layers outside ModernBERT
# Every key/value head its own (no grouped-query attention outside Llama and Qwen2), and q/k/v biased
# exactly where the other projections are (Qwen2 alone biases q/k/v only).
_PLAIN_ATTENTION = {"n_kv_heads": None, "qkv_bias": False}
_BERT_BODY = {
    **_GLOBAL_ONLY,
    **_PLAIN_ATTENTION,
    "family": "encoder",
    "pre_norm": False,
    "final_norm": False,
    "embedding_norm": True,
    "norm": "layernorm",
    "gated_ffn": False,
    "bias": True,
    "position": "learned",
    "position_offset": 0,
    "attention_scale": True,
    "embedding_scale": 1.0,
    "lm_head_input_scale": 1.0,
}
# ModernBERT: its one bias setting (attention, MLP and norms alike), decoder_bias and its layer pattern
# (layer_types, local_attention, per-type RoPE bases) are read by hand.
_MODERNBERT_BODY = {
    **_PLAIN_ATTENTION,
    "pre_norm": True,
    "final_norm": True,
    "embedding_norm": True,
    "first_attn_norm": False,
    "norm": "layernorm",
    "gated_ffn": True,
    "position": "rope",
    "position_offset": 0,
    "cross_rope": False,
    "attention_scale": True,
    "embedding_scale": 1.0,
    "type_vocab_size": 0,
    "lm_head_input_scale": 1.0,
}
_LLAMA_BODY = {
    **_GLOBAL_ONLY,
    "family": "decoder",
    "pre_norm": True,
    "final_norm": True,
    "embedding_norm": False,
    "norm": "rmsnorm",
    "gated_ffn": True,
    "position": "rope",
    "position_offset": 0,
    "cross_rope": False,
    "attention_scale": True,
    "embedding_scale": 1.0,
    "type_vocab_size": 0,
    "lm_head_transform": False,
    "lm_head_bias": False,
    "lm_head_input_scale": 1.0,
    "qkv_bias": False,
}
FIXED: dict[str, dict[str, Any]] = {
    "bert": _BERT_BODY,
    "electra": _BERT_BODY,  # ELECTRA's body is BERT's; only the embedding factorisation and heads differ
    # Llama = maskwise's "modern" preset: pre-norm RMSNorm, RoPE, gated FFN, untied head by default.
    "llama": _LLAMA_BODY,
    # Qwen2 = Llama with biases on q/k/v and on no other projection.
    "qwen2": {**_LLAMA_BODY, "bias": False, "qkv_bias": True},
    "gpt2": {
        **_GLOBAL_ONLY,
        **_PLAIN_ATTENTION,
        "family": "decoder",
        "pre_norm": True,
        "final_norm": True,
        "embedding_norm": False,
        "norm": "layernorm",
        "gated_ffn": False,
        "bias": True,
        "position": "learned",
        "position_offset": 0,
        "embedding_scale": 1.0,
        "type_vocab_size": 0,
        "lm_head_transform": False,
        "lm_head_bias": False,
        "lm_head_input_scale": 1.0,
    },
    "t5": {
        **_GLOBAL_ONLY,
        **_PLAIN_ATTENTION,
        "family": "encoder-decoder",
        "pre_norm": True,
        "final_norm": True,
        "embedding_norm": False,
        "norm": "rmsnorm",
        "bias": False,
        "position": "relative",
        "attention_scale": False,
        "embedding_scale": 1.0,
        "type_vocab_size": 0,
        "lm_head_transform": False,
        "lm_head_bias": False,
    },
    "bart": {
        **_GLOBAL_ONLY,
        **_PLAIN_ATTENTION,
        "family": "encoder-decoder",
        "pre_norm": False,
        "final_norm": False,
        "embedding_norm": True,
        "norm": "layernorm",
        "norm_eps": 1e-5,
        "gated_ffn": False,
        "bias": True,
        "position": "learned",
        "position_offset": 2,
        "attention_scale": True,
        "type_vocab_size": 0,
        "lm_head_transform": False,
        "lm_head_bias": True,
        "lm_head_input_scale": 1.0,
    },
    "modernbert": {"family": "encoder", **_MODERNBERT_BODY},
    "modernbert-decoder": {"family": "decoder", **_MODERNBERT_BODY},
}
# BERT and ELECTRA heads: the MLM head has the transform and a vocab bias; the others have neither.
HEAD_FIXED = {
    "mlm": {"lm_head_transform": True, "lm_head_bias": True},
    "rtd": {"lm_head_transform": False, "lm_head_bias": False, "tie_embeddings": True},
    "lm": {"lm_head_transform": False, "lm_head_bias": False},
    "task": {"lm_head_transform": False, "lm_head_bias": False},
}


def head_fixed(arch_column: str, head: str) -> dict[str, Any]:
    """What an architecture's head fixes: BERT's and ELECTRA's all of ``HEAD_FIXED``; ModernBERT's
    the transform, its vocab bias being the config's ``decoder_bias``; the others nothing beyond ``FIXED``."""
    if arch_column in ("bert", "electra"):
        return HEAD_FIXED[head]
    if arch_column in MODERNBERTS:
        return {key: value for key, value in HEAD_FIXED[head].items() if key != "lm_head_bias" or head != "mlm"}
    return {}


# ModelConfig field -> (HF config key, HF's default when the key is absent, as older configs omit them).
_BERT_KEYS = {
    "vocab_size": ("vocab_size", 30522),
    "d_model": ("hidden_size", 768),
    "n_layers": ("num_hidden_layers", 12),
    "n_heads": ("num_attention_heads", 12),
    "d_ff": ("intermediate_size", 3072),
    "max_seq_len": ("max_position_embeddings", 512),
    "norm_eps": ("layer_norm_eps", 1e-12),
    "type_vocab_size": ("type_vocab_size", 2),
    "init_std": ("initializer_range", 0.02),
}
# ModernBERT's biases, head and RoPE theta (nested per attention type) are read and written by hand.
_MODERNBERT_KEYS = {
    "vocab_size": ("vocab_size", 50368),
    "d_model": ("hidden_size", 768),
    "n_layers": ("num_hidden_layers", 22),
    "n_heads": ("num_attention_heads", 12),
    "d_ff": ("intermediate_size", 1152),
    "max_seq_len": ("max_position_embeddings", 8192),
    "norm_eps": ("norm_eps", 1e-5),
    "init_std": ("initializer_range", 0.02),
}
CONFIG_KEYS: dict[str, dict[str, tuple[str, Any]]] = {
    "bert": _BERT_KEYS,
    "electra": {
        **_BERT_KEYS,
        "d_model": ("hidden_size", 256),
        "n_heads": ("num_attention_heads", 4),
        "d_ff": ("intermediate_size", 1024),
    },
    "gpt2": {
        "vocab_size": ("vocab_size", 50257),
        "d_model": ("n_embd", 768),
        "n_layers": ("n_layer", 12),
        "n_heads": ("n_head", 12),
        "d_ff": ("n_inner", None),
        "max_seq_len": ("n_positions", 1024),
        "norm_eps": ("layer_norm_epsilon", 1e-5),
        "init_std": ("initializer_range", 0.02),
        "attention_scale": ("scale_attn_weights", True),
    },
    # Llama's rope_theta (nested in rope_parameters since transformers 5) and its two bias flags are
    # read and written by hand (hf_import / hf_export), as are Qwen2's rope_theta and sliding window;
    # num_key_value_heads equal to num_attention_heads imports as n_kv_heads None (no grouping).
    "llama": {
        "vocab_size": ("vocab_size", 32000),
        "d_model": ("hidden_size", 4096),
        "n_layers": ("num_hidden_layers", 32),
        "n_heads": ("num_attention_heads", 32),
        "n_kv_heads": ("num_key_value_heads", None),
        "d_head": ("head_dim", None),
        "d_ff": ("intermediate_size", 11008),
        "max_seq_len": ("max_position_embeddings", 2048),
        "norm_eps": ("rms_norm_eps", 1e-6),
        "init_std": ("initializer_range", 0.02),
    },
    "qwen2": {
        "vocab_size": ("vocab_size", 151936),
        "d_model": ("hidden_size", 4096),
        "n_layers": ("num_hidden_layers", 32),
        "n_heads": ("num_attention_heads", 32),
        "n_kv_heads": ("num_key_value_heads", None),
        "d_head": ("head_dim", None),
        "d_ff": ("intermediate_size", 22016),
        "max_seq_len": ("max_position_embeddings", 32768),
        "norm_eps": ("rms_norm_eps", 1e-6),
        "init_std": ("initializer_range", 0.02),
    },
    "t5": {
        "vocab_size": ("vocab_size", 32128),
        "d_model": ("d_model", 512),
        "n_layers": ("num_layers", 6),
        "n_decoder_layers": ("num_decoder_layers", None),
        "n_heads": ("num_heads", 8),
        "d_head": ("d_kv", 64),
        "d_ff": ("d_ff", 2048),
        "norm_eps": ("layer_norm_epsilon", 1e-6),
        "relative_buckets": ("relative_attention_num_buckets", 32),
        "relative_max_distance": ("relative_attention_max_distance", 128),
        "max_seq_len": ("n_positions", 512),  # T5 has no position table; older configs record a limit
    },
    "bart": {
        "vocab_size": ("vocab_size", 50265),
        "d_model": ("d_model", 1024),
        "n_layers": ("encoder_layers", 12),
        "n_decoder_layers": ("decoder_layers", 12),
        "n_heads": ("encoder_attention_heads", 16),
        "d_ff": ("encoder_ffn_dim", 4096),
        "max_seq_len": ("max_position_embeddings", 1024),
        "init_std": ("init_std", 0.02),
    },
    "modernbert": _MODERNBERT_KEYS,
    "modernbert-decoder": _MODERNBERT_KEYS,
}
# maskwise has one dropout rate; HF configs spell it out per site. Import reads the first.
DROPOUT_KEYS = {
    "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "electra": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "llama": ("attention_dropout",),  # Llama has no other dropout
    "qwen2": ("attention_dropout",),
    "t5": ("dropout_rate",),
    "bart": ("dropout", "attention_dropout", "activation_dropout"),
    "modernbert": ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"),
    "modernbert-decoder": ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout"),
}
# The rate an HF config means when it omits its first dropout key.
DROPOUT_DEFAULT = {
    "bert": 0.1,
    "electra": 0.1,
    "gpt2": 0.1,
    "llama": 0.0,
    "qwen2": 0.0,
    "t5": 0.1,
    "bart": 0.1,
    "modernbert": 0.0,
    "modernbert-decoder": 0.0,
}
ACTIVATION_KEY = {
    "bert": "hidden_act",
    "electra": "hidden_act",
    "gpt2": "activation_function",
    "llama": "hidden_act",
    "qwen2": "hidden_act",
    "bart": "activation_function",
    "modernbert": "hidden_activation",
    "modernbert-decoder": "hidden_activation",
}  # T5 spells it in feed_forward_proj

# HF activation names -> maskwise, and back. "gelu_new" is the tanh approximation.
FROM_HF_ACTIVATION = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
TO_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}

# ---- fine-tuned task heads ------------------------------------------------------------------

# Where HF's class for (column, task kind) computes something else than maskwise's head (``task_class``), why not.
TASK_UNMAPPED = {
    ("bert", "classify"): "BertForSequenceClassification passes [CLS] through its pooler (dense + tanh) before its "
    "classifier, and maskwise's classifier reads the pooled state directly",
}
# Whether the column's task classes have a dense + act + norm before the classifier (ModernBERT's ``head``).
TASK_HEAD_TRANSFORM = {"bert": False, "modernbert": True}
# ClassifierHead's modules under their HF names (BERT's and ModernBERT's task classes name them alike).
HEAD_KEYS = {"transform.0": "head.dense", "transform.2": "head.norm", "proj": "classifier"}
CLASSIFIER_POOLINGS = ("cls", "mean")  # ModernBertForSequenceClassification's classifier_pooling

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
# rows list BERT only; the head rows and the embedding projection list ELECTRA apart. Likewise
# ModernBERT-decoder's rows are ModernBERT's except its separate q/k/v and its head's name, and Qwen2's
# rows are all Llama's (``ROWS_OF``).
KEY_MAP: dict[str, dict[str, str | Source]] = {
    # embeddings
    "embed": {
        "bert": "{body}.embeddings.word_embeddings",
        "gpt2": "{body}.wte",
        "llama": "{body}.embed_tokens",
        "t5": "shared",
        "bart": "{body}.shared",
        "modernbert": "{body}.embeddings.tok_embeddings",
    },
    "{stack}.positions": {
        "bert": "{body}.embeddings.position_embeddings",
        "gpt2": "{body}.wpe",
        "bart": "{body}.{side}.embed_positions",
    },
    "{stack}.token_types": {"bert": "{body}.embeddings.token_type_embeddings"},
    "{stack}.embedding_norm": {
        "bert": "{body}.embeddings.LayerNorm",
        "bart": "{body}.{side}.layernorm_embedding",
        "modernbert": "{body}.embeddings.norm",
    },
    "{stack}.embedding_project": {"electra": "{body}.embeddings_project"},  # factorised embeddings only
    "{stack}.relative_bias.embedding": {"t5": "{side}.block.0.layer.0.SelfAttention.relative_attention_bias"},
    # self-attention
    "{stack}.blocks.{i}.attn.qkv": {
        "bert": fused(
            "{body}.encoder.layer.{i}.attention.self.query",
            "{body}.encoder.layer.{i}.attention.self.key",
            "{body}.encoder.layer.{i}.attention.self.value",
        ),
        "gpt2": conv1d("{body}.h.{i}.attn.c_attn"),
        "llama": fused(
            "{body}.layers.{i}.self_attn.q_proj",
            "{body}.layers.{i}.self_attn.k_proj",
            "{body}.layers.{i}.self_attn.v_proj",
        ),
        "t5": fused(
            "{side}.block.{i}.layer.0.SelfAttention.q",
            "{side}.block.{i}.layer.0.SelfAttention.k",
            "{side}.block.{i}.layer.0.SelfAttention.v",
        ),
        "bart": fused(
            "{body}.{side}.layers.{i}.self_attn.q_proj",
            "{body}.{side}.layers.{i}.self_attn.k_proj",
            "{body}.{side}.layers.{i}.self_attn.v_proj",
        ),
        "modernbert": "{body}.layers.{i}.attn.Wqkv",
        "modernbert-decoder": fused(
            "{body}.layers.{i}.attn.q_proj", "{body}.layers.{i}.attn.k_proj", "{body}.layers.{i}.attn.v_proj"
        ),
    },
    "{stack}.blocks.{i}.attn.out": {
        "bert": "{body}.encoder.layer.{i}.attention.output.dense",
        "gpt2": conv1d("{body}.h.{i}.attn.c_proj"),
        "llama": "{body}.layers.{i}.self_attn.o_proj",
        "t5": "{side}.block.{i}.layer.0.SelfAttention.o",
        "bart": "{body}.{side}.layers.{i}.self_attn.out_proj",
        "modernbert": "{body}.layers.{i}.attn.Wo",
    },
    "{stack}.blocks.{i}.attn_norm": {  # ModernBERT's layer 0 has none (first_attn_norm)
        "bert": "{body}.encoder.layer.{i}.attention.output.LayerNorm",
        "gpt2": "{body}.h.{i}.ln_1",
        "llama": "{body}.layers.{i}.input_layernorm",
        "t5": "{side}.block.{i}.layer.0.layer_norm",
        "bart": "{body}.{side}.layers.{i}.self_attn_layer_norm",
        "modernbert": "{body}.layers.{i}.attn_norm",
    },
    # cross-attention (decoder of an encoder-decoder)
    "{stack}.blocks.{i}.cross_attn.q": {
        "t5": "{side}.block.{i}.layer.1.EncDecAttention.q",
        "bart": "{body}.{side}.layers.{i}.encoder_attn.q_proj",
    },
    "{stack}.blocks.{i}.cross_attn.kv": {
        "t5": fused("{side}.block.{i}.layer.1.EncDecAttention.k", "{side}.block.{i}.layer.1.EncDecAttention.v"),
        "bart": fused("{body}.{side}.layers.{i}.encoder_attn.k_proj", "{body}.{side}.layers.{i}.encoder_attn.v_proj"),
    },
    "{stack}.blocks.{i}.cross_attn.out": {
        "t5": "{side}.block.{i}.layer.1.EncDecAttention.o",
        "bart": "{body}.{side}.layers.{i}.encoder_attn.out_proj",
    },
    "{stack}.blocks.{i}.cross_norm": {
        "t5": "{side}.block.{i}.layer.1.layer_norm",
        "bart": "{body}.{side}.layers.{i}.encoder_attn_layer_norm",
    },
    # feed-forward (T5 v1.0: wi; a gated T5 v1.1 has T5_GATED_UP instead). Gated: gate first, then up.
    "{stack}.blocks.{i}.ffn.up": {
        "bert": "{body}.encoder.layer.{i}.intermediate.dense",
        "gpt2": conv1d("{body}.h.{i}.mlp.c_fc"),
        "llama": fused("{body}.layers.{i}.mlp.gate_proj", "{body}.layers.{i}.mlp.up_proj"),
        "t5": "{side}.block.{i}.layer.{ffn}.DenseReluDense.wi",
        "bart": "{body}.{side}.layers.{i}.fc1",
        "modernbert": "{body}.layers.{i}.mlp.Wi",
    },
    "{stack}.blocks.{i}.ffn.down": {
        "bert": "{body}.encoder.layer.{i}.output.dense",
        "gpt2": conv1d("{body}.h.{i}.mlp.c_proj"),
        "llama": "{body}.layers.{i}.mlp.down_proj",
        "t5": "{side}.block.{i}.layer.{ffn}.DenseReluDense.wo",
        "bart": "{body}.{side}.layers.{i}.fc2",
        "modernbert": "{body}.layers.{i}.mlp.Wo",
    },
    "{stack}.blocks.{i}.ffn_norm": {
        "bert": "{body}.encoder.layer.{i}.output.LayerNorm",
        "gpt2": "{body}.h.{i}.ln_2",
        "llama": "{body}.layers.{i}.post_attention_layernorm",
        "t5": "{side}.block.{i}.layer.{ffn}.layer_norm",
        "bart": "{body}.{side}.layers.{i}.final_layer_norm",
        "modernbert": "{body}.layers.{i}.mlp_norm",
    },
    "{stack}.final_norm": {
        "gpt2": "{body}.ln_f",
        "llama": "{body}.norm",
        "t5": "{side}.final_layer_norm",
        "modernbert": "{body}.final_norm",
    },
    # heads (bare parameters map to bare tensors)
    "lm_head.transform.0": {
        "bert": "cls.predictions.transform.dense",
        "electra": "generator_predictions.dense",
        "modernbert": "head.dense",
        "modernbert-decoder": "lm_head.dense",
    },
    "lm_head.transform.2": {
        "bert": "cls.predictions.transform.LayerNorm",
        "electra": "generator_predictions.LayerNorm",
        "modernbert": "head.norm",
        "modernbert-decoder": "lm_head.norm",
    },
    "lm_head.bias": {
        "bert": "cls.predictions.bias",
        "electra": "generator_lm_head.bias",
        "bart": Source(("final_logits_bias",), leading_one=True),
        "modernbert": "decoder.bias",
    },
    "lm_head.weight": {
        "bert": "cls.predictions.decoder.weight",
        "electra": "generator_lm_head.weight",
        "gpt2": "lm_head.weight",
        "llama": "lm_head.weight",
        "t5": "lm_head.weight",
        "bart": "lm_head.weight",
        "modernbert": "decoder.weight",
    },
    "rtd_head.dense": {"electra": "discriminator_predictions.dense"},
    "rtd_head.out": {"electra": "discriminator_predictions.dense_prediction"},
}
# T5 v1.1's gated FFN: wi_0 is the gate, wi_1 the up projection; maskwise fuses them gate first.
T5_GATED_UP = fused(
    "{side}.block.{i}.layer.{ffn}.DenseReluDense.wi_0", "{side}.block.{i}.layer.{ffn}.DenseReluDense.wi_1"
)
BODY_PREFIX = {
    "bert": "bert",
    "electra": "electra",
    "gpt2": "transformer",
    "llama": "model",
    "qwen2": "model",
    "t5": "",
    "bart": "model",
    "modernbert": "model",
    "modernbert-decoder": "model",
}
# Columns whose KEY_MAP rows, where they have no entry of their own, are another column's.
ROWS_OF = {"electra": "bert", "modernbert-decoder": "modernbert", "qwen2": "llama"}

# HF tensors that are copies of another (tied weights saved twice, an alias): skipped on import when
# equal to the original, an error when not.
COPIES = {
    "bert": {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    },
    "electra": {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"},
    "gpt2": {"lm_head.weight": "transformer.wte.weight"},
    "llama": {"lm_head.weight": "model.embed_tokens.weight"},
    "qwen2": {"lm_head.weight": "model.embed_tokens.weight"},
    "t5": {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
        "lm_head.weight": "shared.weight",
    },
    "bart": {
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
        "lm_head.weight": "model.shared.weight",
    },
    "modernbert": {"decoder.weight": "model.embeddings.tok_embeddings.weight"},
    "modernbert-decoder": {"decoder.weight": "model.embeddings.tok_embeddings.weight"},
}
# HF tensors maskwise does not use: BERT's pooler and NSP head, buffers old versions saved.
UNUSED = {
    "bert": r"\.pooler\.|embeddings\.position_ids$|^cls\.seq_relationship\.",
    "electra": r"embeddings\.position_ids$",
    "gpt2": r"\.attn\.(masked_)?bias$",
    "llama": r"\.rotary_emb\.inv_freq$",
    "qwen2": r"\.rotary_emb\.inv_freq$",
}


def column_entry(arch: Architecture, row: dict[str, str | Source]) -> str | Source | None:
    """``arch``'s entry in one ``KEY_MAP`` row, or the entry of the column whose rows it shares (``ROWS_OF``:
    ELECTRA's body rows are BERT's, ModernBERT-decoder's ModernBERT's, Qwen2's Llama's)."""
    if arch.column in row:
        return row[arch.column]
    return row.get(ROWS_OF.get(arch.column, arch.column))


def fused_rows(cfg: ModelConfig, key: str, rows: int, parts: int) -> list[int]:
    """How many of the ``rows`` of maskwise tensor ``key`` each of its ``parts`` HF tensors holds:
    self-attention's q;k;v by head count (grouped-query attention's k and v have fewer heads than q),
    anything else fused (cross-attention's k;v, gate;up) in equal parts."""
    if parts == 3 and key.rpartition(".")[0].endswith(".attn.qkv"):
        q_rows, kv_rows = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        return [q_rows, kv_rows, kv_rows]
    return [rows // parts] * parts


def key_map(model: nn.Module, arch: Architecture) -> dict[str, Source]:
    """maskwise module or parameter name -> its HF source, for every tensor of ``model``."""
    cfg = model.cfg
    assert isinstance(cfg, ModelConfig)  # every maskwise model's
    if cfg.kind.two_stacks:
        stacks = {"encoder": ("encoder", cfg.n_layers, 1), "decoder": ("decoder", cfg.decoder_layers, 2)}
    else:
        stacks = {"stack": ("", cfg.n_layers, 1)}
    mapping = {}
    for ours, row in KEY_MAP.items():
        source = column_entry(arch, row)
        if source is None:
            continue
        if ours == "{stack}.blocks.{i}.ffn.up" and arch.column == "t5" and cfg.gated_ffn:
            source = T5_GATED_UP
        source = source if isinstance(source, Source) else Source((source,))
        for stack, (side, n_layers, ffn) in stacks.items():
            for i in range(n_layers if "{i}" in ours else 1):
                values = {"stack": stack, "side": side, "body": BODY_PREFIX[arch.column], "i": i, "ffn": ffn}
                names = tuple(name.format(**values) for name in source.names)
                mapping[ours.format(**values)] = Source(names, source.conv1d, source.leading_one)
    return mapping


def source_of(key: str, mapping: dict[str, Source]) -> tuple[Source, str]:
    """The source of state-dict ``key`` and the suffix to append (".weight"), or "" for bare tensors."""
    if key in mapping:
        return mapping[key], ""
    module, _, suffix = key.rpartition(".")
    if module in mapping:
        return mapping[module], "." + suffix
    raise UserError(f"maskwise tensor {key} has no counterpart in this HF architecture")
