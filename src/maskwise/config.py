"""Typed model configuration and the named presets.

One ``ModelConfig`` describes all three families. The fields are exactly the knobs on which BERT,
GPT-2, T5 and BART differ (norm placement and kind, activation, gating, position scheme, biases,
embedding extras), so that their weights can be imported by a key map and the computation matches.

Configs are data: ``ModelConfig.from_dict`` rejects unknown keys loudly instead of ignoring them
(a typo must not silently train the wrong model), and ``validate`` rejects impossible values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from maskwise.errors import UserError
from maskwise.families import FAMILIES, Family, family_of

NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
POSITIONS = ("learned", "relative", "rope", "none")


@dataclass
class ModelConfig:
    family: str = "decoder"
    vocab_size: int = 8192
    d_model: int = 256
    n_layers: int = 4  # encoder layers, or decoder layers for the decoder family
    n_decoder_layers: int | None = None  # encoder-decoder only; None = same as n_layers
    n_heads: int = 4
    # Grouped-query attention (Llama 2/3, Qwen2): each key/value head serves n_heads / n_kv_heads query
    # heads, so the KV cache holds n_kv_heads heads. None = n_heads (ordinary multi-head attention).
    n_kv_heads: int | None = None
    d_head: int | None = None  # None = d_model // n_heads; T5 sets it explicitly (d_kv)
    d_ff: int = 1024
    max_seq_len: int = 256  # learned positions table size; also the generation context limit
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    pre_norm: bool = True  # GPT-2/T5/modern: x + f(norm(x)); BERT/BART: norm(x + f(x))
    final_norm: bool = True  # a norm after the last block (pre-norm models need one)
    embedding_norm: bool = False  # BERT and BART normalise the summed embeddings
    first_attn_norm: bool = True  # ModernBERT: layer 0 reads the normalised embeddings with no attention norm
    activation: str = "gelu"
    gated_ffn: bool = False  # SwiGLU / GEGLU: act(x W_gate) * (x W_up)
    bias: bool = True  # biases in attention/FFN projections and norms (T5 and modern: none)
    qkv_bias: bool = False  # Qwen2: biases on the q/k/v projections alone, in a model without other biases
    position: str = "learned"
    position_offset: int = 0  # BART's learned positions start at index 2
    relative_buckets: int = 32  # T5 relative attention bias
    relative_max_distance: int = 128
    rope_theta: float = 10000.0  # RoPE base (of the global layers where some are local)
    # Sliding-window layers (ModernBERT, Ettin): layers 0, n, 2n, ... attend globally, the others locally.
    global_every: int = 1  # n above; 1 = every layer global (local_window unset)
    local_window: int | None = None  # a local query sees keys at most this many tokens away (causal: earlier only)
    local_rope_theta: float = 10000.0  # RoPE base of the local layers (ModernBERT's 10k beside 160k global)
    cross_rope: bool = False  # rotary positions in cross-attention too: queries at decoder, keys at source positions
    attention_scale: bool = True  # divide scores by sqrt(d_head); T5 folds the scale into its init
    embedding_scale: float = 1.0  # BART with scale_embedding multiplies token embeddings by sqrt(d)
    type_vocab_size: int = 0  # BERT token-type (segment) embeddings; 0 = none
    # ELECTRA-small's factorised embeddings: token, position and segment tables (and their norm) this
    # wide, projected to d_model before the first block; the LM head's transform maps back to it.
    embedding_size: int | None = None  # None = d_model (no projection)
    tie_embeddings: bool = True
    lm_head_transform: bool = False  # BERT/ELECTRA-generator: dense + act + norm before the vocab
    lm_head_transform_bias: bool = True  # BERT's transform dense has a bias; ModernBERT's (classifier_bias) none
    classifier_transform: bool = False  # ModernBERT's task heads: dense + act + norm before the classifier
    lm_head_bias: bool = False
    lm_head_input_scale: float = 1.0  # tied T5 multiplies the decoder output by d_model ** -0.5
    dropout: float = 0.0
    init_std: float = 0.02
    # A decoder trained by the hybrid objective: tasks read it with a bidirectional mask, it writes causally.
    reads_bidirectionally: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads per attention: n_kv_heads, or n_heads without grouped-query attention."""
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def embedding_width(self) -> int:
        return self.embedding_size if self.embedding_size is not None else self.d_model

    @property
    def factorised_embeddings(self) -> bool:
        """Whether the embeddings are narrower or wider than d_model and need a projection."""
        return self.embedding_width != self.d_model

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers if self.n_decoder_layers is not None else self.n_layers

    @property
    def kind(self) -> Family:
        """What this family is (``maskwise.families``): asked instead of comparing ``family`` to names."""
        family = family_of(self.family)
        return family.reading_bidirectionally() if self.reads_bidirectionally else family

    @property
    def total_layers(self) -> int:
        """Every block of the model: the encoder's and, with two stacks, the decoder's."""
        return self.n_layers + (self.decoder_layers if self.kind.two_stacks else 0)

    def local_layer(self, i: int) -> bool:
        """Whether layer ``i`` of a stack attends through the sliding window (each stack counts from 0)."""
        return self.local_window is not None and i % self.global_every != 0

    def validate(self) -> ModelConfig:
        """Reject values that cannot describe a model; returns self so calls can chain."""
        _choice("family", self.family, FAMILIES)
        _choice("norm", self.norm, NORMS)
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("position", self.position, POSITIONS)
        if self.reads_bidirectionally and not family_of(self.family).causal:
            raise UserError(
                f"model config: reads_bidirectionally is for a decoder (an {self.family} reads bidirectionally already)"
            )
        if self.reads_bidirectionally and self.position == "relative":
            raise UserError(
                "model config: reads_bidirectionally needs a position other than 'relative' (a causal "
                "stack's relative bias has no buckets for later keys)"
            )
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise UserError(f"model config: {name} must be positive, got {getattr(self, name)}")
        for name in ("n_decoder_layers", "n_kv_heads", "d_head", "embedding_size"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise UserError(f"model config: {name} must be positive, got {getattr(self, name)}")
        if not self.norm_eps > 0:
            raise UserError(f"model config: norm_eps must be positive, got {self.norm_eps}")
        if self.position == "relative" and self.relative_buckets < 4:
            raise UserError(f"model config: relative_buckets must be at least 4, got {self.relative_buckets}")
        for name in ("type_vocab_size", "position_offset"):
            if getattr(self, name) < 0:
                raise UserError(f"model config: {name} must be >= 0, got {getattr(self, name)}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise UserError(f"model config: d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise UserError(
                f"model config: n_kv_heads {self.n_kv_heads} does not divide n_heads {self.n_heads} "
                f"(each key/value head serves an equal group of query heads)"
            )
        if self.qkv_bias and self.bias:
            raise UserError(
                "model config: qkv_bias=true with bias=true (qkv_bias adds q/k/v biases to a model "
                "without biases; with bias=true they are there already)"
            )
        if self.cross_rope and (self.position != "rope" or not self.kind.two_stacks):
            raise UserError("model config: cross_rope needs an encoder-decoder with position 'rope'")
        if not self.first_attn_norm and not self.pre_norm:
            raise UserError(
                "model config: first_attn_norm=false needs pre_norm (a post-norm layer's norm is its output)"
            )
        if self.global_every < 1:
            raise UserError(f"model config: global_every must be >= 1, got {self.global_every}")
        if (self.global_every == 1) != (self.local_window is None):
            raise UserError(
                f"model config: global_every={self.global_every} with local_window={self.local_window} "
                f"(local layers need both: global_every > 1 and a local_window)"
            )
        if self.local_window is not None and self.local_window < 0:
            raise UserError(f"model config: local_window must be >= 0, got {self.local_window}")
        if not self.local_rope_theta > 0:
            raise UserError(f"model config: local_rope_theta must be positive, got {self.local_rope_theta}")
        if self.position == "rope" and self.head_dim % 2:
            raise UserError(f"model config: RoPE needs an even head dim, got {self.head_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"model config: dropout must be in [0, 1), got {self.dropout}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        return from_dict(cls, data, "model config").validate()


def from_dict(cls, data: dict[str, Any], what: str):
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and wrongly typed values."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UserError(f"{what}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    defaults = cls()
    values = {}
    for key, value in data.items():
        default = getattr(defaults, key)
        values[key] = _coerce(what, key, value, default, optional_bool=known[key].type == "bool | None")
    return dataclasses.replace(defaults, **values)


def _coerce(what: str, key: str, value: Any, default: Any, optional_bool: bool = False) -> Any:
    """Check a config value against the type of its default. Fields whose default is None are
    optional integers (optional booleans where annotated ``bool | None``); every other field must
    have its default's type (ints widen to floats)."""
    if default is None:
        if value is None or (
            isinstance(value, bool) if optional_bool else isinstance(value, int) and not isinstance(value, bool)
        ):
            return value
        kind = "true, false" if optional_bool else "an integer"
        raise UserError(f"{what}: {key} must be {kind} or null, got {type(value).__name__} ({value!r})")
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
    elif isinstance(default, (list, tuple)):
        if isinstance(value, (list, tuple)):
            return type(default)(value)
    else:
        return value
    raise UserError(f"{what}: {key} must be {type(default).__name__}, got {type(value).__name__} ({value!r})")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"model config: {name} must be one of {', '.join(allowed)}, got {value!r}")


# Each preset is the layout of the model it is named after; sizes are small defaults that the CLI
# flags override. "Exactly" matters: interop imports these models' weights into these layouts.
# BERT: post-norm, LayerNorm(eps 1e-12) on the embeddings, GELU (erf), learned positions,
# token types, MLM head with a dense+GELU+LayerNorm transform and a vocab bias.
_BERT = {
    "family": "encoder",
    "pre_norm": False,
    "final_norm": False,
    "embedding_norm": True,
    "norm_eps": 1e-12,
    "activation": "gelu",
    "position": "learned",
    "type_vocab_size": 2,
    "lm_head_transform": True,
    "lm_head_bias": True,
}

PRESETS: dict[str, dict[str, Any]] = {
    "bert": _BERT,
    # ELECTRA's discriminator is BERT's body exactly (its generator is a narrower BERT,
    # objectives/electra.py): one layout under the name users and HF checkpoints know it by.
    "electra": _BERT,
    # GPT-2: pre-norm LayerNorm, GELU (tanh approximation), learned positions, tied head, final norm.
    "gpt2": {
        "family": "decoder",
        "pre_norm": True,
        "final_norm": True,
        "activation": "gelu_tanh",
        "position": "learned",
        "tie_embeddings": True,
    },
    # nanoGPT's GPT (Karpathy's train.py defaults): GPT-2's layout without biases in any linear layer or
    # norm, and with the exact (erf) GELU of its nn.GELU(); its recipe is benchmarks/bench_nanogpt.py's.
    "nanogpt": {
        "family": "decoder",
        "pre_norm": True,
        "final_norm": True,
        "activation": "gelu",
        "bias": False,
        "position": "learned",
        "tie_embeddings": True,
    },
    # T5 v1.0: pre-norm RMSNorm (eps 1e-6), ReLU, no biases, relative position bias, unscaled
    # attention, tied embeddings with the d_model ** -0.5 rescale before the head.
    "t5": {
        "family": "encoder-decoder",
        "pre_norm": True,
        "final_norm": True,
        "norm": "rmsnorm",
        "norm_eps": 1e-6,
        "activation": "relu",
        "bias": False,
        "position": "relative",
        "attention_scale": False,
        "tie_embeddings": True,
        "lm_head_input_scale": -1.0,
        "dropout": 0.0,
    },
    # T5 v1.1: gated GELU (tanh), untied head, otherwise T5.
    "t5.1.1": {
        "family": "encoder-decoder",
        "pre_norm": True,
        "final_norm": True,
        "norm": "rmsnorm",
        "norm_eps": 1e-6,
        "activation": "gelu_tanh",
        "gated_ffn": True,
        "bias": False,
        "position": "relative",
        "attention_scale": False,
        "tie_embeddings": False,
    },
    # BART: post-norm, LayerNorm on embeddings, GELU, learned positions offset by 2, final logits bias.
    "bart": {
        "family": "encoder-decoder",
        "pre_norm": False,
        "final_norm": False,
        "embedding_norm": True,
        "activation": "gelu",
        "position": "learned",
        "position_offset": 2,
        "tie_embeddings": True,
        "lm_head_bias": True,
    },
    # modern (Llama-style): pre-norm RMSNorm, RoPE, SwiGLU at 8d/3, no biases, untied head.
    "modern": {
        "family": "decoder",
        "pre_norm": True,
        "final_norm": True,
        "norm": "rmsnorm",
        "norm_eps": 1e-6,
        "activation": "silu",
        "gated_ffn": True,
        "bias": False,
        "position": "rope",
        "tie_embeddings": False,
    },
    # ModernBERT, and ModernBERT-decoder (Ettin's paired encoders and decoders) as family "decoder":
    # pre-norm LayerNorm, no biases, the embeddings normed and read by layer 0 without an attention
    # norm, GeGLU (erf GELU), RoPE with ModernBERT's global theta 160k (global attention in every
    # layer; ModernBERT-base's own pattern is global_every=3, local_window=64, local_rope_theta 10k),
    # a final norm, and a tied head: bias-free dense + GELU + norm, then a vocab bias.
    "modernbert": {
        "family": "encoder",
        "pre_norm": True,
        "final_norm": True,
        "embedding_norm": True,
        "first_attn_norm": False,
        "norm": "layernorm",
        "norm_eps": 1e-5,
        "activation": "gelu",
        "gated_ffn": True,
        "bias": False,
        "position": "rope",
        "rope_theta": 160000.0,
        "tie_embeddings": True,
        "lm_head_transform": True,
        "lm_head_transform_bias": False,
        "lm_head_bias": True,
        "classifier_transform": True,
    },
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """The named preset with ``overrides`` applied (unknown keys rejected).

    ``d_ff`` defaults to 4d, or to 8d/3 rounded up to a multiple of 64 for gated FFNs so that
    the gated FFN has about the parameters of a plain 4d one. T5's head rescale is d ** -0.5.
    """
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    values = dict(PRESETS[name])
    values.update(overrides)
    d_model = values.get("d_model", ModelConfig.d_model)
    if "d_ff" not in overrides:
        values["d_ff"] = _gated_width(d_model) if values.get("gated_ffn") else 4 * d_model
    if values.get("lm_head_input_scale") == -1.0:
        values["lm_head_input_scale"] = d_model**-0.5
    return ModelConfig.from_dict(values)


def _gated_width(d_model: int) -> int:
    return -(-(8 * d_model // 3) // 64) * 64
