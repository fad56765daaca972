"""The three families as one table: what differs between an encoder, a decoder and an
encoder-decoder, asked by tasks and experiments instead of switching on the family's name.

The structure (which positions a stack sees, whether a second stack writes) is all a family is;
the defaults below follow from it and are kept here, once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from maskwise.errors import UserError


@dataclass(frozen=True)
class Family:
    name: str
    causal: bool  # one stack that sees only the left context (a decoder)
    two_stacks: bool  # an encoder reads the source, a decoder writes with cross-attention
    objective: str  # its classic pretraining objective
    preset: str  # its classic block (the paper it comes from)
    classify_pooling: str  # the summary a classifier reads by default: [CLS], the last token, or the mean
    embed_pooling: str  # the summary a bi-encoder reads by default
    reranker: str  # "cross" (one pass scores a pair) or "generative" (scores a written judgement)
    reads_bidirectionally: bool = False  # a causal stack that reads with a bidirectional mask (the hybrid)

    @property
    def bidirectional(self) -> bool:
        """Reads a text with a bidirectional mask (an encoder, an encoder-decoder's encoder, a hybrid decoder)."""
        return not self.causal or self.reads_bidirectionally

    @property
    def fills_masks(self) -> bool:
        """One stack that reads bidirectionally and predicts masked tokens: an MLM encoder at the
        [MASK], a hybrid decoder from the position before it (``tasks.fill_mask``)."""
        return self.bidirectional and not self.two_stacks

    @property
    def writes(self) -> bool:
        """Can generate text: a causal stack, or a decoder beside the encoder."""
        return self.causal or self.two_stacks

    @property
    def encoder_only(self) -> bool:
        """One bidirectional stack (BERT): it reads ``[CLS] x`` as MLM pretrained it, fills masks and
        cross-encodes pairs, and cannot write."""
        return not self.causal and not self.two_stacks

    def reading_bidirectionally(self) -> Family:
        """This causal family read with a bidirectional mask for understanding and written causally (a
        decoder trained by the hybrid objective, GPT-BERT): every position then sees the whole text,
        so a summary is the mean of them, as for an encoder's bi-encoder."""
        if not self.causal:
            raise ValueError(f"the {self.name} family reads bidirectionally already")
        return replace(
            self, reads_bidirectionally=True, objective="hybrid", classify_pooling="mean", embed_pooling="mean"
        )


ENCODER = Family(
    "encoder",
    causal=False,
    two_stacks=False,
    objective="mlm",
    preset="bert",
    classify_pooling="cls",
    embed_pooling="mean",
    reranker="cross",
)
DECODER = Family(
    "decoder",
    causal=True,
    two_stacks=False,
    objective="clm",
    preset="gpt2",
    classify_pooling="last",
    embed_pooling="last",
    reranker="generative",
)
ENCODER_DECODER = Family(
    "encoder-decoder",
    causal=False,
    two_stacks=True,
    objective="span",
    preset="t5",
    classify_pooling="mean",
    embed_pooling="mean",
    reranker="generative",
)
FAMILY = {f.name: f for f in (ENCODER, DECODER, ENCODER_DECODER)}
FAMILIES = tuple(FAMILY)


def family_of(name: str) -> Family:
    """The family called ``name`` (a one-line error for any other name)."""
    if name not in FAMILY:
        raise UserError(f"family must be one of {', '.join(FAMILIES)}, got {name!r}")
    return FAMILY[name]
