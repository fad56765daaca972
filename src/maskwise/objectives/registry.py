"""Objective names -> constructors, and which family each one trains.

The CLI and experiments build objectives only through ``build_objective`` so that a nonsense pair
(MLM on a causal decoder, span corruption on an encoder) is rejected in one place, with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from maskwise.errors import UserError
from maskwise.objectives.base import Objective
from maskwise.objectives.clm import CLM
from maskwise.objectives.denoise import Denoising, PromptDenoising
from maskwise.objectives.electra import Electra
from maskwise.objectives.hybrid import Hybrid
from maskwise.objectives.mlm import MLM
from maskwise.objectives.prefix_lm import PrefixLM
from maskwise.objectives.span import SpanCorruption

# name -> (families it applies to, constructor(tokenizer, vocab_size, family, **options))
OBJECTIVES: dict[str, tuple[tuple[str, ...], Callable[..., Objective]]] = {
    "mlm": (MLM.families, lambda tok, vocab, family, **o: MLM(tok, vocab, **o)),
    "clm": (CLM.families, lambda tok, vocab, family, no_shift=False: CLM(shift=not no_shift)),
    "span": (SpanCorruption.families, lambda tok, vocab, family, **o: SpanCorruption(tok, **o)),
    # the same noise for two structures: an encoder-decoder's two stacks, or one decoder's prompt
    "denoise": (
        Denoising.families + PromptDenoising.families,
        lambda tok, vocab, family, **o: (PromptDenoising if family in PromptDenoising.families else Denoising)(
            tok, vocab, **o
        ),
    ),
    "electra": (Electra.families, lambda tok, vocab, family, **o: Electra(tok, vocab, **o)),
    "prefix-lm": (PrefixLM.families, lambda tok, vocab, family: PrefixLM()),
    "hybrid": (Hybrid.families, lambda tok, vocab, family, **o: Hybrid(tok, vocab, **o)),
}

# objective -> {settings key (CLI flag / TOML key): constructor keyword}
OBJECTIVE_OPTIONS: dict[str, dict[str, str]] = {
    "mlm": {"mask_ratio": "mask_ratio", "mask_prob": "p_mask", "random_prob": "p_random"},
    "clm": {"no_shift": "no_shift"},
    "span": {"noise_density": "noise_density", "mean_span": "mean_span_length"},
    "denoise": {
        "denoise_mask": "mask",
        "mask_random": "mask_random",
        "mask_length": "mask_length",
        "poisson_lambda": "poisson_lambda",
        "replace_length": "replace_length",
        "permute_sentences": "permute_sentences",
        "rotate": "rotate",
        "insert": "insert",
    },
    # ELECTRA keeps its own p_mask/p_random (0.85/0.0): only the ratio is shared with MLM's flags.
    "electra": {
        "mask_ratio": "mask_ratio",
        "generator_fraction": "generator_fraction",
        "discriminator_weight": "discriminator_weight",
    },
    "hybrid": {
        "causal_fraction": "causal_fraction",
        "mask_ratio": "mask_ratio",
        "mask_prob": "p_mask",
        "random_prob": "p_random",
    },
}


def check_pair(family: str, objective: str) -> None:
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
    families = OBJECTIVES[objective][0]
    if family not in families:
        raise UserError(
            f"objective {objective} does not apply to the {family} family (it trains: {', '.join(families)})"
        )


def build_objective(name: str, family: str, tokenizer, vocab_size: int, **options: Any) -> Objective:
    """Construct objective ``name`` for ``family``; ``options`` are its knobs (e.g. mask_ratio)."""
    check_pair(family, name)
    return OBJECTIVES[name][1](tokenizer, vocab_size, family, **options)
