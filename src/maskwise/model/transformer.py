"""The whole forward pass of all three families, top to bottom.

One ``Attention`` (``model.attention``) serves self- and cross-attention; one ``Block`` is every layer
of every model (cross-attention is switched on for decoder layers of an encoder-decoder); one ``Stack`` turns token
embeddings into hidden states. ``Encoder``, ``Decoder`` and ``EncoderDecoder`` are thin presets that
differ only in the mask pattern their stack uses and in whether a second stack is read through
cross-attention. The masks come from ``maskwise.masks`` and nowhere else.
Position encodings (RoPE, T5's relative bias) are in ``model.positions``, the decoding KV cache in
``model.cache``.

Shapes: B batch, T sequence, S encoder (source) sequence, d model width, H heads, hd head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from maskwise.config import ModelConfig
from maskwise.masks import Mask, build_mask
from maskwise.model.attention import Attention
from maskwise.model.cache import KVCache
from maskwise.model.heads import (
    IGNORE_INDEX,
    LMHead,
    LMOutput,
    RTDHead,
    RTDOutput,
    labelled_reading,
)
from maskwise.model.layers import ACTIVATIONS, dropout, make_norm
from maskwise.model.layout import Linear
from maskwise.model.packing import Packing
from maskwise.model.positions import (
    RelativePositionBias,
    RotaryAngles,
    positions_from_mask,
)


class FeedForward(nn.Module):
    """Position-wise FFN: act(x W_up) W_down, or gated act(x W_gate) * (x W_up) W_down.

    The gated form keeps gate and up in one fused matrix (gate first) so it is one matmul.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gated = cfg.gated_ffn
        self.up = Linear(cfg.d_model, (2 if self.gated else 1) * cfg.d_ff, bias=cfg.bias)
        self.down = Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.act = ACTIVATIONS[cfg.activation]
        self.dropout_p = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.act(gate) * up
        else:
            h = self.act(h)
        return self.down(dropout(h, self.dropout_p, self.training))


class Block(nn.Module):
    """One transformer layer: self-attention, optional cross-attention, FFN, each a residual branch.

    Pre-norm (GPT-2, T5, modern): x + f(norm(x)). Post-norm (BERT, BART): norm(x + f(x)).
    The first layer of a stack has no attention norm where ``first_attn_norm`` is off (ModernBERT:
    its embedding norm already normalised the input). A ``local`` layer's self-attention reads the
    stack's sliding-window mask (``cfg.local_window``) and its own RoPE base.
    """

    def __init__(self, cfg: ModelConfig, cross: bool, first: bool = False, local: bool = False):
        super().__init__()
        self.pre_norm, self.local = cfg.pre_norm, local
        self.attn = Attention(cfg, local=local)
        self.attn_norm = nn.Identity() if first and not cfg.first_attn_norm else make_norm(cfg)
        self.cross_attn = Attention(cfg, cross=True) if cross else None
        self.cross_norm = make_norm(cfg) if cross else None
        self.ffn = FeedForward(cfg)
        self.ffn_norm = make_norm(cfg)
        self.dropout_p = cfg.dropout

    def _residual(
        self,
        x: torch.Tensor,
        norm: nn.Module,
        branch: Callable[[torch.Tensor], torch.Tensor],
        read_at: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        """x + branch, normed before or after; ``read_at`` (B, R): the branch gives those positions' outputs
        alone (self-attention reading every position's keys), so the residual takes x at them too (from the
        real tokens' rows where x is packed)."""
        kept = x
        if read_at is not None:
            kept = (
                packing.at(x, read_at)
                if packing is not None
                else x.gather(1, read_at[..., None].expand(-1, -1, x.shape[2]))
            )  # (B, R, d)
        if self.pre_norm:
            return kept + dropout(branch(norm(x)), self.dropout_p, self.training)
        return norm(kept + dropout(branch(x), self.dropout_p, self.training))

    def forward(
        self,
        x: torch.Tensor,
        mask: Mask,
        context: torch.Tensor | None = None,
        context_mask: Mask | None = None,
        bias: torch.Tensor | None = None,
        rotary: RotaryAngles | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        read_at: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d), or (B, R, d) at the positions ``read_at`` (B, R) only (no cross-attention);
        with ``packing``, the real tokens alone, (N, d) -> (N, d) (or (B, R, d) with ``read_at``)."""
        x = self._residual(
            x,
            self.attn_norm,
            lambda h: self.attn(
                h, mask, bias=bias, rotary=rotary, cache=cache, layer=layer, queries=read_at, packing=packing
            ),
            read_at,
            packing,
        )
        cross_attn, cross_norm = self.cross_attn, self.cross_norm
        if cross_attn is not None:
            assert cross_norm is not None and context_mask is not None  # made with it; the stack masks the source
            x = self._residual(
                x,
                cross_norm,
                lambda h: cross_attn(
                    h, context_mask, context=context, rotary=rotary, cache=cache, layer=layer, packing=packing
                ),
            )
        return self._residual(x, self.ffn_norm, self.ffn)


class Stack(nn.Module):
    """Token embeddings in, hidden states out: positions, segments, blocks, final norm.

    ``pattern`` is the self-attention mask pattern ("bidirectional" for encoders, "causal" for
    decoders; a causal stack also accepts ``prefix_lengths`` for prefix-LM). ``cross`` adds
    cross-attention to every layer. The token embedding matrix is owned by the model, not the
    stack, because encoder-decoders share it between their two stacks.
    """

    def __init__(self, cfg: ModelConfig, n_layers: int, pattern: str, cross: bool = False):
        super().__init__()
        self.cfg, self.pattern = cfg, pattern
        width = cfg.embedding_width
        self.positions = (
            nn.Embedding(cfg.max_seq_len + cfg.position_offset, width) if cfg.position == "learned" else None
        )
        self.token_types = (
            nn.Embedding(cfg.type_vocab_size, width) if cfg.type_vocab_size and pattern == "bidirectional" else None
        )
        self.embedding_norm = make_norm(cfg, width) if cfg.embedding_norm else None
        self.embedding_project = Linear(width, cfg.d_model, bias=cfg.bias) if cfg.factorised_embeddings else None
        self.relative_bias = (
            RelativePositionBias(cfg, bidirectional=pattern == "bidirectional") if cfg.position == "relative" else None
        )
        self.dropout_p = cfg.dropout
        self.blocks = nn.ModuleList(Block(cfg, cross, first=i == 0, local=cfg.local_layer(i)) for i in range(n_layers))
        self.final_norm = make_norm(cfg) if cfg.final_norm else None

    def embed(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        positions_checked: bool = False,
    ) -> torch.Tensor:
        """(B, T, e) token embeddings -> the first block's input (B, T, d) (before dropout): learned
        positions and segment embeddings added, then the embedding norm, then (factorised
        embeddings, e != d) the projection to d. ``positions``: (T,) or (B, T). Public so that
        ELECTRA's generator can read the discriminator's embeddings. ``positions_checked``: the caller
        bounded them already (``forward``'s own range), so the check that reads a tensor is skipped."""
        if self.positions is not None:
            if not positions_checked and positions.max() >= self.cfg.max_seq_len:
                raise ValueError(f"position {int(positions.max())} beyond max_seq_len {self.cfg.max_seq_len}")
            offset = self.cfg.position_offset  # BART's 2; an add less a step where it is 0
            x = x + self.positions(positions + offset if offset else positions)
        if self.token_types is not None:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(positions)
            x = x + self.token_types(types)
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        if self.embedding_project is not None:
            x = self.embedding_project(x)  # (B, T, e) -> (B, T, d)
        return x

    def forward(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prefix_lengths: torch.Tensor | None = None,
        cache: KVCache | None = None,
        pattern: str | None = None,
        read_at: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: (B, T, e) token embeddings (e = d unless factorised); attention_mask: (B, T_keys)
        1 = real token (with a cache, it covers the cached keys too); context: (B, S, d) encoder
        states; context_mask: (B, S); pattern: this pass's self-attention pattern where it is not the
        stack's own (a hybrid decoder's bidirectional pass).

        ``read_at``: (B, R) positions, the only ones whose outputs the caller reads (a [CLS] readout, the
        labelled positions of an MLM batch): the last layer computes its queries, FFN and the final norm
        there alone, and the stack returns (B, R, d). Why: that layer's other positions feed nothing;
        skipping them took 14% off compare's classifier fine-tuning step, 11% off its seq2seq one and
        8-19% off a 200-token prompt's prefill (docs/results.md, 2026-12-06 third session).

        A training pass over a padded batch packs its real tokens (``model.packing``): every layer's token-wise
        work runs on them alone, attention on the padded layout, and the padding's outputs come back zero."""
        if read_at is not None and context is not None:
            raise ValueError("read_at selects self-attention's queries: a stack with cross-attention reads every one")
        T = x.shape[1]
        offset = cache.length if cache is not None else 0
        own_positions = positions is None
        if positions is None:
            if self.positions is not None and offset + T > self.cfg.max_seq_len:
                raise ValueError(f"position {offset + T - 1} beyond max_seq_len {self.cfg.max_seq_len}")
            positions = torch.arange(offset, offset + T, device=x.device)  # (T,)
        x = dropout(
            self.embed(x, positions, token_type_ids, positions_checked=own_positions), self.dropout_p, self.training
        )

        pattern = pattern or ("prefix" if prefix_lengths is not None else self.pattern)
        k_len = offset + T
        # One self-attention mask per kind of layer in the stack: global (False) and sliding-window (True).
        masks = {
            local: build_mask(
                pattern,
                T,
                k_len,
                key_padding=attention_mask,
                prefix_lengths=prefix_lengths,
                q_offset=offset,
                device=x.device,
                window=self.cfg.local_window if local else None,
            )
            for local in {block.local for block in self.blocks}
        }
        s_len: int | None = None  # the source's length, where there is one to cross-attend to
        if context is not None:
            s_len = context.shape[1]
        elif cache is not None and (cached := cache.cross[0]) is not None:
            s_len = cached[0].shape[2]
        cross_mask = None if s_len is None else build_mask("cross", T, s_len, key_padding=context_mask, device=x.device)
        biases = dict.fromkeys(masks)
        if self.relative_bias is not None:
            # Bias and mask combined once per stack (and kind of layer) rather than in every layer:
            # (B or 1, H, T, k_len), -inf where the mask forbids attending.
            bias = self.relative_bias(T, k_len, offset, x.device)
            biases = {
                local: bias.masked_fill(~mask.dense(T, k_len, x.device), float("-inf")) for local, mask in masks.items()
            }

        rotary = RotaryAngles(positions)  # RoPE's angles, made by the first layer that asks, shared by the rest
        packing = Packing.of(attention_mask) if cache is None else None
        if packing is not None:
            x = packing.pack(x)  # (N, d)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                masks[block.local],
                context=context,
                context_mask=cross_mask,
                bias=biases[block.local],
                rotary=rotary,
                cache=cache,
                layer=i,
                read_at=read_at if i == last else None,
                packing=packing,
            )
        if cache is not None:
            cache.length += T
        if self.final_norm is not None:
            x = self.final_norm(x)
        return packing.unpack(x) if packing is not None and read_at is None else x


@dataclass
class Seq2SeqOutput(LMOutput):
    encoder_hidden_states: torch.Tensor | None = None


class Transformer(nn.Module):
    """What every family has: the token embedding matrix and the LM head (tied to it or not)."""

    family: str

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embedding_width)
        self.lm_head = LMHead(cfg, self.embed if cfg.tie_embeddings else None)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        return x * self.cfg.embedding_scale if self.cfg.embedding_scale != 1.0 else x

    def init_weights(self) -> Transformer:
        """GPT-2/BERT initialisation: N(0, 0.02) weights, zero biases, unit norms; residual output
        projections scaled by 1/sqrt(2 * layers) so the residual stream does not grow with depth."""
        n_layers = self.cfg.total_layers
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = self.cfg.init_std
                if name.endswith(("attn.out", "ffn.down")):
                    std /= math.sqrt(2 * n_layers)
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, self.cfg.init_std)
        self.lm_head.reset_bias()
        return self

    def num_parameters(self, exclude_positions: bool = False) -> int:
        total = sum(p.numel() for p in self.parameters())
        if exclude_positions:
            total -= sum(
                m.positions.weight.numel() for m in self.modules() if isinstance(m, Stack) and m.positions is not None
            )
        return total

    def read(self, input_ids, attention_mask, read_at=None) -> torch.Tensor:
        """``(B, T, d)`` hidden states of a text as every task reads it; each family says how. ``read_at``
        (B, R): those positions' states alone, (B, R, d) (``Stack.forward``)."""
        raise NotImplementedError

    def make_cache(self, batch: int, max_len: int) -> KVCache:
        p = next(self.parameters())
        n_layers = self.cfg.decoder_layers if self.cfg.kind.two_stacks else self.cfg.n_layers
        return KVCache(self.cfg, n_layers, batch, max_len, p.dtype, p.device)


class Encoder(Transformer):
    """BERT-style: one bidirectional stack; the LM head is used for MLM."""

    family = "encoder"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.stack = Stack(cfg, cfg.n_layers, "bidirectional")
        self.init_weights()

    def hidden_states(self, input_ids, attention_mask=None, token_type_ids=None, read_at=None) -> torch.Tensor:
        return self.stack(self._embed(input_ids), attention_mask, token_type_ids=token_type_ids, read_at=read_at)

    def read(self, input_ids, attention_mask, read_at=None) -> torch.Tensor:
        """``(B, T, d)``: how every task reads a text with this family (``Transformer.read``)."""
        return self.hidden_states(input_ids, attention_mask, read_at=read_at)

    def forward(
        self,
        input_ids,
        attention_mask=None,
        labels=None,
        token_type_ids=None,
        decoder_input_ids=None,
        return_logits: bool = True,
    ) -> LMOutput:
        """``decoder_input_ids`` is accepted so that every family can be called the same way
        (``maskwise.load``); an encoder has no decoder, so anything but None is an error.
        ``return_logits=False``: the loss alone (see ``LMHead.forward``). With labels, only the labelled
        positions are read (``heads.labelled_reading``)."""
        _no_decoder(self, decoder_input_ids)
        read_at, labels = labelled_reading(labels)
        h = self.hidden_states(input_ids, attention_mask, token_type_ids, read_at)  # (B, T or R, d)
        return _lm_output(self, h, labels, read_at, return_logits)


class Discriminator(Encoder):
    """ELECTRA's discriminator: an encoder whose RTD head scores every token as original or
    replaced. The inherited LM head is unused (give it no parameters: tied, no transform, no bias)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.rtd_head = RTDHead(cfg)
        self.init_weights()

    def forward(  # type: ignore[override]  # an encoder body with the RTD head's output in place of the LM head's
        self, input_ids, attention_mask=None, labels=None, token_type_ids=None, decoder_input_ids=None
    ) -> RTDOutput:
        """labels: (B, T), 1 = replaced, 0 = original, -100 = no loss."""
        _no_decoder(self, decoder_input_ids)
        h = self.hidden_states(input_ids, attention_mask, token_type_ids)  # (B, T, d)
        logits = self.rtd_head(h)  # (B, T)
        loss = None
        if labels is not None:
            scored = labels != IGNORE_INDEX
            loss = F.binary_cross_entropy_with_logits(logits[scored].float(), labels[scored].float())
        return RTDOutput(logits=logits, loss=loss, hidden_states=h)


class Decoder(Transformer):
    """GPT-style: one causal stack (prefix-LM when ``prefix_lengths`` is given; read bidirectionally
    when ``bidirectional``, the hybrid objective's masked batches)."""

    family = "decoder"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.stack = Stack(cfg, cfg.n_layers, "causal")
        self.init_weights()

    def hidden_states(
        self,
        input_ids,
        attention_mask=None,
        positions=None,
        prefix_lengths=None,
        cache=None,
        bidirectional: bool = False,
        read_at=None,
    ) -> torch.Tensor:
        if bidirectional and (prefix_lengths is not None or cache is not None):
            raise ValueError("a bidirectional pass reads the whole text at once: no prefix_lengths, no cache")
        return self.stack(
            self._embed(input_ids),
            attention_mask,
            positions=positions,
            prefix_lengths=prefix_lengths,
            cache=cache,
            pattern="bidirectional" if bidirectional else None,
            read_at=read_at,
        )

    def read(self, input_ids, attention_mask, read_at=None) -> torch.Tensor:
        """``(B, T, d)`` with positions from the mask, so left and right padding read alike; with the
        bidirectional mask where the model was trained to read so (``cfg.reads_bidirectionally``)."""
        return self.hidden_states(
            input_ids,
            attention_mask,
            positions=positions_from_mask(attention_mask),
            bidirectional=self.cfg.reads_bidirectionally,
            read_at=read_at,
        )

    def forward(
        self,
        input_ids,
        attention_mask=None,
        labels=None,
        positions=None,
        prefix_lengths=None,
        cache=None,
        decoder_input_ids=None,
        return_logits: bool = True,
        bidirectional: bool = False,
    ) -> LMOutput:
        """``decoder_input_ids``: accepted for a family-independent call signature; must be None
        (a decoder-only model reads everything through ``input_ids``). ``return_logits=False``:
        the loss alone (see ``LMHead.forward``). ``bidirectional``: every position sees every other
        (the hybrid objective's masked batches). With labels, only the labelled positions are read
        (``heads.labelled_reading``)."""
        _no_decoder(self, decoder_input_ids)
        read_at, labels = labelled_reading(labels)
        h = self.hidden_states(
            input_ids, attention_mask, positions, prefix_lengths, cache, bidirectional, read_at
        )  # (B, T or R, d)
        return _lm_output(self, h, labels, read_at, return_logits)


class EncoderDecoder(Transformer):
    """T5/BART-style: a bidirectional encoder stack read once, and a causal decoder stack that
    cross-attends to its output in every layer. Token embeddings are shared by both stacks."""

    family = "encoder-decoder"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.encoder = Stack(cfg, cfg.n_layers, "bidirectional")
        self.decoder = Stack(cfg, cfg.decoder_layers, "causal", cross=True)
        self.init_weights()

    def encode(self, input_ids, attention_mask=None, read_at=None) -> torch.Tensor:
        return self.encoder(self._embed(input_ids), attention_mask, read_at=read_at)  # (B, S or R, d)

    def read(self, input_ids, attention_mask, read_at=None) -> torch.Tensor:
        """``(B, T, d)``: a text is read by the encoder."""
        return self.encode(input_ids, attention_mask, read_at)

    def decode(
        self, decoder_input_ids, encoder_hidden_states, attention_mask=None, decoder_attention_mask=None, cache=None
    ) -> torch.Tensor:
        return self.decoder(
            self._embed(decoder_input_ids),
            decoder_attention_mask,
            context=encoder_hidden_states,
            context_mask=attention_mask,
            cache=cache,
        )

    def forward(
        self,
        input_ids,
        attention_mask=None,
        decoder_input_ids=None,
        labels=None,
        decoder_attention_mask=None,
        encoder_hidden_states=None,
        cache=None,
        return_logits: bool = True,
    ) -> Seq2SeqOutput:
        """``return_logits=False``: the loss alone (see ``LMHead.forward``)."""
        if decoder_input_ids is None:
            raise ValueError("an encoder-decoder needs decoder_input_ids")
        if encoder_hidden_states is None and not (cache is not None and cache.cross[0] is not None):
            encoder_hidden_states = self.encode(input_ids, attention_mask)
        h = self.decode(
            decoder_input_ids, encoder_hidden_states, attention_mask, decoder_attention_mask, cache
        )  # (B, T, d)
        out = self.lm_head(h, labels, return_logits=return_logits)
        return Seq2SeqOutput(
            logits=out.logits,
            loss=out.loss,
            loss_sum=out.loss_sum,
            n_loss_positions=out.n_loss_positions,
            hidden_states=h,
            encoder_hidden_states=encoder_hidden_states,
        )


def _lm_output(model: Transformer, h: torch.Tensor, labels, read_at, return_logits: bool) -> LMOutput:
    """The LM head on the states the forward read; ``hidden_states`` only where they are every position's."""
    out = model.lm_head(h, labels, return_logits=return_logits)
    out.hidden_states = h if read_at is None else None
    return out


def _no_decoder(model: Transformer, decoder_input_ids) -> None:
    if decoder_input_ids is not None:
        raise ValueError(f"decoder_input_ids given to a {model.family} model, which has no separate decoder")


MODEL_CLASSES = {"encoder": Encoder, "decoder": Decoder, "encoder-decoder": EncoderDecoder}


def build_model(cfg: ModelConfig) -> Transformer:
    """The model of ``cfg.family``, freshly initialised."""
    return MODEL_CLASSES[cfg.validate().family](cfg)
