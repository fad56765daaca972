"""A minimal plain-PyTorch GPT and its training loop: what nanoGPT is, written here as the reference
that ``bench_nanogpt.py`` runs back to back with ``maskwise pretrain``.

The model: token and learned position embeddings, pre-LayerNorm blocks of causal self-attention
(one fused q;k;v projection, ``scaled_dot_product_attention(is_causal=True)``) and a GELU MLP of
width 4d, a final LayerNorm, and an LM head tied to the token embedding. No biases (nanoGPT's
``bias=False``, the default of its training script) unless ``bias=True``; no dropout (the recipe's 0).
Initialisation: every weight N(0, 0.02), the two residual output projections of each block
N(0, 0.02 / sqrt(2 * layers)), biases zero, LayerNorm gains one.
``GPTShape.bias``, ``GPTShape.gelu_tanh``, a padded ``vocab_size`` and ``Recipe.decay_embeddings``
switch on maskwise's choices one at a time, to tell which of them explains a gap in loss.

The loop: random windows of the token stream (nanoGPT's ``get_batch``), mean cross-entropy, AdamW
with weight decay on the >= 2-D parameters only (so the tied embedding and the positions decay,
norms and biases do not), linear warmup then cosine decay to ``min_lr``, gradient clipping.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTShape:
    """The model's sizes: nanoGPT's CPU recipe by default (4 layers, 4 heads, d 128, block 64)."""

    vocab_size: int
    block_size: int = 64
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    bias: bool = False
    gelu_tanh: bool = False  # GPT-2's tanh approximation of GELU instead of nanoGPT's exact one


@dataclass(frozen=True)
class Recipe:
    """nanoGPT's CPU training recipe for the character-level plays."""

    iters: int = 2000
    batch_size: int = 12
    block_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup: int = 100
    beta2: float = 0.99
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    decay_embeddings: bool = True  # nanoGPT decays every >= 2-D parameter, the embeddings too


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with q, k and v from one fused projection."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.n_heads = shape.n_heads
        self.qkv = nn.Linear(shape.d_model, 3 * shape.d_model, bias=shape.bias)
        self.proj = nn.Linear(shape.d_model, shape.d_model, bias=shape.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, d); SDPA's causal path, so no mask tensor is built."""
        B, T, d = x.shape
        q, k, v = (
            part.view(B, T, self.n_heads, d // self.n_heads).transpose(1, 2) for part in self.qkv(x).split(d, dim=2)
        )  # 3 x (B, H, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    """d -> 4d -> GELU (exact, as nanoGPT's ``nn.GELU()``, unless ``gelu_tanh``) -> d."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.approximate = "tanh" if shape.gelu_tanh else "none"
        self.fc = nn.Linear(shape.d_model, 4 * shape.d_model, bias=shape.bias)
        self.proj = nn.Linear(4 * shape.d_model, shape.d_model, bias=shape.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, d), position by position."""
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class Block(nn.Module):
    """Pre-LayerNorm residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.attn_norm = nn.LayerNorm(shape.d_model, bias=shape.bias)
        self.attn = CausalSelfAttention(shape)
        self.mlp_norm = nn.LayerNorm(shape.d_model, bias=shape.bias)
        self.mlp = MLP(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, d): each branch reads a normalised copy and adds to the residual stream."""
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class MinimalGPT(nn.Module):
    """The reference decoder: embeddings, blocks, final norm, LM head tied to the token embedding."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.shape = shape
        self.token_embedding = nn.Embedding(shape.vocab_size, shape.d_model)
        self.position_embedding = nn.Embedding(shape.block_size, shape.d_model)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.n_layers))
        self.final_norm = nn.LayerNorm(shape.d_model, bias=shape.bias)
        self.lm_head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied: one matrix reads and writes tokens
        self._initialise()

    def _initialise(self) -> None:
        """nanoGPT's init: N(0, 0.02) everywhere, residual projections shrunk by sqrt(2 * layers) so
        the residual stream's variance does not grow with depth."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        residual_std = 0.02 / math.sqrt(2 * self.shape.n_layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.proj.weight, 0.0, residual_std)
            nn.init.normal_(block.mlp.proj.weight, 0.0, residual_std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, V) next-token logits."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.final_norm(x))

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over every position of the batch, as nanoGPT's training loss."""
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make_adamw(model: nn.Module, recipe: Recipe) -> tuple[torch.optim.AdamW, str]:
    """AdamW with decay on >= 2-D parameters only (less the embeddings unless ``decay_embeddings``),
    and which implementation runs: "fused" where torch has the fused kernel for the parameters'
    device (CPU since torch 2.4), else "foreach". (nanoGPT itself asks for fused on CUDA only; on a
    CPU it runs torch's default, foreach.)"""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied matrix appears once
    kept = set() if recipe.decay_embeddings else {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decayed = [p for p in params if p.dim() >= 2 and id(p) not in kept]
    groups = [
        {"params": decayed, "weight_decay": recipe.weight_decay},
        {"params": [p for p in params if all(p is not q for q in decayed)], "weight_decay": 0.0},
    ]
    betas = (0.9, recipe.beta2)
    try:
        return torch.optim.AdamW(groups, lr=recipe.lr, betas=betas, fused=True), "fused"
    except RuntimeError:
        return torch.optim.AdamW(groups, lr=recipe.lr, betas=betas, foreach=True), "foreach"


def learning_rate(step: int, recipe: Recipe) -> float:
    """nanoGPT's schedule: linear warmup to ``lr`` over ``warmup`` steps, cosine to ``min_lr`` at
    ``iters`` (its ``lr_decay_iters``), flat after."""
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / (recipe.warmup + 1)
    if step >= recipe.iters:
        return recipe.min_lr
    progress = (step - recipe.warmup) / max(1, recipe.iters - recipe.warmup)
    return recipe.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (recipe.lr - recipe.min_lr)


def random_windows(
    tokens: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's ``get_batch``: ``batch_size`` windows at uniform random offsets, inputs and the
    same windows shifted by one as targets, each (B, block_size)."""
    starts = torch.randint(len(tokens) - block_size, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(block_size + 1)  # (B, block + 1)
    windows = tokens[index]
    return windows[:, :-1], windows[:, 1:]


@dataclass
class TrainResult:
    """What ``train`` measured: the loop's wall seconds and the last step's training loss."""

    seconds: float
    final_train_loss: float
    optimizer: str


def train(model: MinimalGPT, tokens: torch.Tensor, recipe: Recipe, seed: int) -> TrainResult:
    """Train ``model`` on random windows of ``tokens`` (1-D int64) for ``recipe.iters`` steps; the
    timer covers the whole loop (batches, schedule, forward, backward, clipping, AdamW), nothing else."""
    optimizer, which = make_adamw(model, recipe)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.zeros(())
    started = time.perf_counter()
    for step in range(recipe.iters):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, recipe)
        inputs, targets = random_windows(tokens, recipe.batch_size, recipe.block_size, generator)
        loss = model.loss(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - started
    return TrainResult(seconds, loss.item(), which)
