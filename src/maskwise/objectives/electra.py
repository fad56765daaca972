"""ELECTRA replaced-token detection: a small MLM generator proposes tokens, an encoder spots them.

A generator trained by MLM fills the masked positions with samples from its softmax; the
discriminator reads the resulting text and classifies *every* token as original or replaced. The
discriminator's loss covers all positions rather than MLM's ~15%, which is why ELECTRA learns more
per token; only the discriminator is kept for fine-tuning.

    masked     = mask_tokens(text)                          (ELECTRA's rates: 15%, all [MASK] but 15% kept)
    sampled    ~ softmax(generator(masked))                 at masked positions, no gradient
    corrupted  = text with the sampled tokens put in
    labels     = corrupted != text                          a sample equal to the original counts as original
    loss       = MLM(generator) mean + 50 * BCE(discriminator, labels) mean

``ElectraModel`` holds both networks; ``Electra`` is the objective (the masking comes from
``mlm.mask_tokens``, the sampling noise from ``prepare``'s generator, so a run is reproducible).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from maskwise.config import ModelConfig
from maskwise.errors import UserError
from maskwise.model.accounting import stack_flops
from maskwise.model.heads import IGNORE_INDEX, LMHead, LMOutput, labelled_reading
from maskwise.model.layers import ACTIVATIONS, make_norm
from maskwise.model.transformer import Discriminator, Encoder, Stack
from maskwise.objectives.base import LossParts, correct_predictions
from maskwise.objectives.mlm import MLM

# ELECTRA's masking: 15% of the tokens are chosen; 85% of those are shown as [MASK] and the rest
# unchanged; none random, since the generator supplies the replacements.
MASK_RATIO, P_MASK, P_RANDOM = 0.15, 0.85, 0.0


def generator_config(cfg: ModelConfig, fraction: float = 0.25, n_layers: int | None = None) -> ModelConfig:
    """The generator's body: width d * fraction, heads H * fraction (so the head width stays about
    d / H, and always an integer; each its own key/value head, as a grouped discriminator's groups
    need not divide them), FFN d_ff * fraction, the discriminator's depth unless ``n_layers``.

    It reads the discriminator's embeddings (positions and segments included) through a projection,
    so its own stack has no learned position table, segment table or embedding norm; rotary or
    relative positions live in attention and stay.
    """
    if not 0.0 < fraction <= 1.0:
        raise UserError(f"generator_fraction must be in (0, 1], got {fraction}")
    d_gen = round(cfg.d_model * fraction)
    heads = max(1, round(cfg.n_heads * fraction))
    if d_gen < 1 or d_gen % heads:
        raise UserError(
            f"generator width round({cfg.d_model} x {fraction}) = {d_gen} does not split into "
            f"{heads} heads of integer width"
        )
    return dataclasses.replace(
        cfg,
        d_model=d_gen,
        n_heads=heads,
        n_kv_heads=None,
        d_head=None,
        d_ff=max(1, round(cfg.d_ff * fraction)),
        n_layers=n_layers or cfg.n_layers,
        position="none" if cfg.position == "learned" else cfg.position,
        type_vocab_size=0,
        embedding_norm=False,
    ).validate()


def sample_tokens(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One id per row of (N, V) logits, drawn from their softmax by inverse CDF: the first id whose
    cumulative probability exceeds ``uniform`` (N,) in [0, 1). Deterministic given ``uniform``; no
    gradient flows through the draw (the generator learns from its MLM loss only)."""
    with torch.no_grad():
        cdf = logits.float().softmax(-1).cumsum(-1)  # (N, V)
        ids = torch.searchsorted(cdf, uniform.to(cdf.dtype)[:, None], right=True).squeeze(1)  # (N,)
        return ids.clamp(max=logits.shape[-1] - 1)  # rounding can leave cdf[-1] a hair below 1


@dataclass
class ElectraOutput:
    """``generator``: its MLM output (sparse logits (N, V) at the N masked positions, loss_sum);
    ``logits``: (B, T) discriminator logits, > 0 = "replaced"; ``corrupted``: (B, T) the text the
    discriminator read; ``replaced``: (B, T) bool, exactly ``corrupted != original``;
    ``disc_loss_sum`` over the ``n_disc_positions`` real tokens."""

    generator: LMOutput
    logits: torch.Tensor
    corrupted: torch.Tensor
    replaced: torch.Tensor
    disc_loss_sum: torch.Tensor
    n_disc_positions: int


class ElectraModel(nn.Module):
    """Generator and discriminator with shared embeddings.

    The discriminator is a maskwise ``Discriminator`` (an ``Encoder`` with the RTD head) of ``cfg``,
    and owns the embeddings: token table, learned positions, segments and embedding norm, all
    d-wide. As in ELECTRA's code with ``embedding_size`` = d, the narrower generator reads those
    same embeddings through a linear projection d -> d_gen (``generator_in``), and its MLM head maps
    back up (dense d_gen -> d, activation, norm) onto the shared token table, with its own bias.
    So one embedding matrix is trained by both losses.

    The discriminator's own LM head is given no parameters (tied, no transform, no bias): it is
    never used. ``discriminator_encoder()`` exports a plain ``Encoder`` of ``cfg`` for fine-tuning.
    The config is kept as ``config``, not ``cfg``: this pair is not a plain family model, and it
    counts its own training FLOPs (``flops_per_token``) for the budget.
    """

    def __init__(self, cfg: ModelConfig, generator_fraction: float = 0.25, generator_layers: int | None = None):
        super().__init__()
        if not cfg.validate().kind.encoder_only:
            raise UserError(f"ELECTRA trains an encoder, not the {cfg.family} family")
        if cfg.factorised_embeddings:  # the generator reads the d-wide shared embeddings
            raise UserError("ELECTRA pretraining shares d_model-wide embeddings; embedding_size is not supported")
        self.config = cfg
        self.discriminator = Discriminator(
            dataclasses.replace(cfg, tie_embeddings=True, lm_head_transform=False, lm_head_bias=False)
        )
        gen = generator_config(cfg, generator_fraction, generator_layers)
        self.generator_in = nn.Linear(cfg.d_model, gen.d_model)
        self.generator = Stack(gen, gen.n_layers, "bidirectional")
        self.generator_dense = nn.Linear(gen.d_model, cfg.d_model)
        self.generator_act = ACTIVATIONS[cfg.activation]
        self.generator_norm = make_norm(cfg)
        head_cfg = dataclasses.replace(cfg, lm_head_transform=False, lm_head_bias=True, lm_head_input_scale=1.0)
        self.generator_head = LMHead(head_cfg, tied_to=self.discriminator.embed)
        for module in (self.generator_in, self.generator, self.generator_dense):
            for layer in module.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.normal_(layer.weight, 0.0, cfg.init_std)
                    if layer.bias is not None:
                        nn.init.zeros_(layer.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        sample_uniform: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> ElectraOutput:
        """input_ids: (B, T) masked text; labels: (B, T) original ids at the masked positions and
        -100 elsewhere (``mask_tokens``' output); sample_uniform: (B, T) in [0, 1), the draws that
        pick the generator's samples; attention_mask: (B, T) 1 = real token."""
        disc = self.discriminator
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (T,)
        # The shared embeddings, computed exactly as the discriminator's stack computes its own.
        shared = disc.stack.embed(disc._embed(input_ids), positions, token_type_ids)  # (B, T, d)
        # The generator's last layer reads the masked positions alone (``Stack``'s ``read_at``).
        read_at, at_read = labelled_reading(labels)  # (B, R) positions and their labels, or (None, labels)
        h = self.generator(self.generator_in(shared), attention_mask, read_at=read_at)  # (B, T or R, d_gen)
        h = self.generator_norm(self.generator_act(self.generator_dense(h)))  # (B, T or R, d)
        generated = self.generator_head(h, at_read)  # logits (N, V) at the N masked positions

        masked = labels != IGNORE_INDEX  # (B, T)
        original = torch.where(masked, labels, input_ids)
        corrupted = original.clone()
        corrupted[masked] = sample_tokens(generated.logits, sample_uniform[masked])
        replaced = corrupted != original
        rtd_labels = replaced.long()
        if attention_mask is not None:
            rtd_labels = rtd_labels.masked_fill(~attention_mask.bool(), IGNORE_INDEX)
        judged = disc(corrupted, attention_mask, labels=rtd_labels, token_type_ids=token_type_ids)
        n_scored = int((rtd_labels != IGNORE_INDEX).sum())
        return ElectraOutput(
            generator=generated,
            logits=judged.logits,
            corrupted=corrupted,
            replaced=replaced,
            disc_loss_sum=judged.loss * n_scored,
            n_disc_positions=n_scored,
        )

    def flops_per_token(self, context: int) -> tuple[float, float, float]:
        """``train.budget.flops_per_token``'s triple: both stacks (weights and attention) and the
        projections between them per token, all encoder tokens; the generator's MLM head per masked
        position."""
        projections = sum(p.numel() for m in (self.generator_in, self.generator_dense) for p in m.parameters())
        per_token = (
            stack_flops(self.discriminator.stack, context) + stack_flops(self.generator, context) + 6.0 * projections
        )
        return per_token, 0.0, 6.0 * self.config.d_model * self.config.vocab_size

    def discriminator_encoder(self) -> Encoder:
        """The discriminator as a plain ``Encoder`` of the original config: what fine-tunes after
        pretraining, and what ``load_run`` rebuilds from a run folder. Embeddings and stack are
        copied; an LM head with parameters of its own (a BERT-style transform, a bias) is left as
        freshly initialised, since the discriminator never trained one. Save its ``state_dict()``.
        """
        encoder = Encoder(self.config).to(self.discriminator.embed.weight.device)
        encoder.embed.load_state_dict(self.discriminator.embed.state_dict())
        encoder.stack.load_state_dict(self.discriminator.stack.state_dict())
        return encoder


class Electra(MLM):
    """The objective: MLM's ``[CLS]`` + window and masking (at ELECTRA's rates), plus the uniform
    draws for the generator's samples; the model is an ``ElectraModel`` from ``build_model``.

    ``loss_sum / n_positions`` (n_positions = all tokens, which the discriminator scores) equals
    generator MLM mean + ``discriminator_weight`` x discriminator BCE mean: the generator's summed
    loss is rescaled by n_tokens / n_masked within each micro-batch.
    """

    name = "electra"
    families = ("encoder",)

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        mask_ratio: float = MASK_RATIO,
        p_mask: float = P_MASK,
        p_random: float = P_RANDOM,
        generator_fraction: float = 0.25,
        generator_layers: int | None = None,
        discriminator_weight: float = 50.0,
    ):
        super().__init__(tokenizer, vocab_size, mask_ratio, p_mask, p_random)
        self.generator_fraction, self.generator_layers = generator_fraction, generator_layers
        self.discriminator_weight = discriminator_weight

    def build_model(self, cfg: ModelConfig) -> ElectraModel:
        return ElectraModel(cfg, self.generator_fraction, self.generator_layers)

    def final_model(self, model: nn.Module) -> Encoder:
        """What a run saves as its model: the discriminator, as a plain ``Encoder``."""
        assert isinstance(model, ElectraModel)  # what ``build_model`` made
        return model.discriminator_encoder()

    def prepare(self, windows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        batch = super().prepare(windows, generator)
        batch["sample_uniform"] = torch.rand(batch["input_ids"].shape, generator=generator)  # (B, T)
        return batch

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossParts:
        out: ElectraOutput = model(batch["input_ids"], batch["labels"], batch["sample_uniform"])
        generated, n_masked, n_tokens = out.generator, out.generator.n_loss_positions, out.n_disc_positions
        assert generated.loss_sum is not None and generated.logits is not None  # labels given: a loss and logits
        loss_sum = generated.loss_sum * (n_tokens / max(n_masked, 1)) + self.discriminator_weight * out.disc_loss_sum
        metrics = {
            "generator_correct": correct_predictions(generated.logits, batch["labels"]),
            "generator_positions": float(n_masked),
            "generator_loss_sum": float(generated.loss_sum.detach()),
            "discriminator_correct": float(((out.logits > 0) == out.replaced).sum()),
            "discriminator_loss_sum": float(out.disc_loss_sum.detach()),
            "replaced": float(out.replaced.sum()),
        }
        return LossParts(loss_sum, n_tokens, encoder_tokens=batch["input_ids"].numel(), metrics=metrics)

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        tokens, masked = max(totals["n_positions"], 1), max(totals["generator_positions"], 1)
        return {
            "generator_acc": totals["generator_correct"] / masked,
            "generator_loss": totals["generator_loss_sum"] / masked,
            "discriminator_acc": totals["discriminator_correct"] / tokens,
            "discriminator_loss": totals["discriminator_loss_sum"] / tokens,
            "replaced_fraction": totals["replaced"] / tokens,
        }
