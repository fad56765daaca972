"""Where the parameters go: the textbook formulas beside the model's real count.

Per layer, attention has 4 d^2 (Q, K, V, output; with grouped-query attention K and V shrink by
n_kv_heads / n_heads, so 2 d^2 (1 + n_kv_heads / n_heads)), a plain FFN 2 x d x d_ff = 8 d^2 at d_ff = 4d,
a gated FFN 3 x d x d_ff (= 8 d^2 at d_ff = 8d/3), and every decoder layer of an encoder-decoder
adds 4 d^2 of cross-attention. Embeddings are V x d (plus positions); biases and norms are the small
remainder. Comparing families "at equal size" means equal totals here, not equal layer counts.
"""

from __future__ import annotations

from torch import nn

from maskwise.config import ModelConfig
from maskwise.model.transformer import Stack

CATEGORIES = ("embeddings", "attention", "cross_attention", "ffn", "norms", "lm_head")


def formula_breakdown(cfg: ModelConfig) -> dict[str, int]:
    """Matrix parameters by the textbook formulas (weights only, no biases or norms)."""
    attention_per_layer = _attention_per_layer(cfg)
    d = cfg.d_model
    ffn_per_layer = (3 if cfg.gated_ffn else 2) * d * cfg.d_ff
    layers = cfg.total_layers
    n_stacks = 2 if cfg.kind.two_stacks else 1
    e = cfg.embedding_width  # factorised embeddings: tables e wide, then an e x d projection per stack
    positions = (cfg.max_seq_len + cfg.position_offset) * e * n_stacks if cfg.position == "learned" else 0
    projection = e * d * n_stacks if cfg.factorised_embeddings else 0
    head_width = e if cfg.lm_head_transform else d
    return {
        "embeddings": cfg.vocab_size * e + positions + projection,
        "attention": attention_per_layer * layers,
        "cross_attention": attention_per_layer * cfg.decoder_layers if cfg.kind.two_stacks else 0,
        "ffn": ffn_per_layer * layers,
        "lm_head": 0 if cfg.tie_embeddings else cfg.vocab_size * head_width,
    }


def _attention_per_layer(cfg: ModelConfig) -> int:
    """One attention's matrix parameters: Q and output d x H hd each, K and V d x Hkv hd each."""
    inner, kv_inner = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return 2 * cfg.d_model * (inner + kv_inner)


def _category(name: str, module: nn.Module) -> str:
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
        return "norms"
    if ".cross_attn." in f".{name}.":
        return "cross_attention"
    if ".attn." in f".{name}." or "relative_bias" in name:
        return "attention"
    if ".ffn." in f".{name}.":
        return "ffn"
    if name.startswith("lm_head"):
        return "lm_head"
    return "embeddings"


def parameter_breakdown(model: nn.Module) -> dict[str, int]:
    """The model's real parameters by category (each shared tensor counted once)."""
    counts = dict.fromkeys(CATEGORIES, 0)
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for param in module.parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            counts[_category(module_name, module)] += param.numel()
    counts["total"] = sum(counts[c] for c in CATEGORIES)
    return counts


def breakdown_table(cfg: ModelConfig, model: nn.Module) -> str:
    formula, real = formula_breakdown(cfg), parameter_breakdown(model)
    lines = [f"{'part':<16}{'formula':>14}{'real':>14}", f"{'-' * 44}"]
    for category in CATEGORIES:
        expected = formula.get(category)
        lines.append(f"{category:<16}{'' if expected is None else f'{expected:,}':>14}{real[category]:>14,}")
    lines.append(f"{'total':<16}{sum(formula.values()):>14,}{real['total']:>14,}")
    per_layer_attn = _attention_per_layer(cfg)
    attn_rule = "4d^2" if cfg.kv_heads == cfg.n_heads else f"2d^2 (1 + {cfg.kv_heads}/{cfg.n_heads} kv heads)"
    ffn_rule = f"{3 if cfg.gated_ffn else 2} x d x d_ff = {(3 if cfg.gated_ffn else 2) * cfg.d_model * cfg.d_ff:,}"
    lines.append(
        f"per layer: attention {attn_rule} = {per_layer_attn:,}; FFN {ffn_rule}"
        + (f"; cross-attention {attn_rule} = {per_layer_attn:,} per decoder layer" if cfg.kind.two_stacks else "")
    )
    return "\n".join(lines)


def _block_parameters(stack: Stack) -> int:
    return sum(p.numel() for p in stack.blocks.parameters())


def stack_flops(stack: Stack, context: int, attended: int = 1) -> float:
    """Training FLOPs per token of one stack: 6 x its block weights, plus the attention scores and
    their weighted sum (12 x layers x context x width) over ``attended`` attentions per layer."""
    width = stack.cfg.n_heads * stack.cfg.head_dim
    return 6.0 * _block_parameters(stack) + 12.0 * len(stack.blocks) * attended * context * width
