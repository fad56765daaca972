"""``maskwise masks`` and ``maskwise params``: look at the one mechanical difference and the sizes."""

from __future__ import annotations

from maskwise.errors import UserError
from maskwise.masks import PATTERNS, describe
from maskwise.model.accounting import breakdown_table
from maskwise.model.transformer import build_model
from maskwise.train.pretrain import PretrainConfig, model_config
from maskwise.train.settings import TrainConfig


def register(subparsers) -> None:
    masks = subparsers.add_parser("masks", help="print the attention patterns as grids")
    masks.add_argument("--n", type=int, default=4, help="sequence length to draw (default 4)")
    masks.add_argument("--prefix", type=int, default=None, help="prefix length for the prefix pattern")
    masks.set_defaults(handler=run_masks)

    params = subparsers.add_parser("params", help="parameter accounting of a model config")
    params.add_argument("--family", default="decoder", choices=("encoder", "decoder", "encoder-decoder"))
    params.add_argument("--preset", default="")
    for flag, default in (
        ("--layers", 4),
        ("--decoder-layers", 0),
        ("--heads", 4),
        ("--d-model", 128),
        ("--d-ff", 0),
        ("--vocab-size", 8192),
        ("--block-size", 128),
    ):
        params.add_argument(flag, type=int, default=default)
    params.set_defaults(handler=run_params)


def run_masks(args) -> int:
    if not 1 <= args.n <= 64:
        raise UserError(f"--n must be between 1 and 64, got {args.n}")
    if args.prefix is not None and not 0 <= args.prefix <= args.n:
        raise UserError(f"--prefix must be between 0 and --n, got {args.prefix}")
    print("\n\n".join(describe(p, args.n, args.prefix) for p in PATTERNS))
    return 0


def run_params(args) -> int:
    settings = PretrainConfig(
        family=args.family,
        preset=args.preset,
        layers=args.layers,
        decoder_layers=args.decoder_layers,
        heads=args.heads,
        d_model=args.d_model,
        d_ff=args.d_ff,
        train=TrainConfig(block_size=args.block_size),
    ).resolved()
    cfg = model_config(settings, args.vocab_size)
    print(
        f"{cfg.family} ({settings.preset} layout): d_model {cfg.d_model}, layers {cfg.n_layers}"
        + (f"+{cfg.decoder_layers}" if cfg.kind.two_stacks else "")
        + f", heads {cfg.n_heads}, d_ff {cfg.d_ff}, vocab {cfg.vocab_size}"
    )
    print(breakdown_table(cfg, build_model(cfg)))
    return 0
