"""``maskwise export`` (a run -> an HF or sentence-transformers folder) and ``maskwise embed`` (lines -> vectors)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from maskwise.cli.runtime import in_runtime, runtime_flags, runtime_of
from maskwise.errors import UserError
from maskwise.interop.hf_export import PART_CANDIDATES, export_hf
from maskwise.interop.pretrained import embed_texts
from maskwise.interop.sentence_transformers import export_sentence_transformers
from maskwise.runs import CONFIG_FILE, atomic_write, read_json

EXPORT_FORMATS = ("hf", "sentence-transformers")


def register(subparsers) -> None:
    export = subparsers.add_parser("export", help="write a run as a folder transformers or sentence-transformers loads")
    export.add_argument("run_dir", help="maskwise run folder")
    export.add_argument("--to", required=True, choices=EXPORT_FORMATS, help="target format")
    export.add_argument("out", help="folder to write (must not exist or be empty, unless --overwrite)")
    export.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")
    export.add_argument(
        "--part",
        choices=tuple(PART_CANDIDATES),
        default=None,
        help="export one part alone: 'encoder', an encoder-decoder's encoder half (ModernBertModel)",
    )
    export.set_defaults(handler=run_export)

    embed = subparsers.add_parser("embed", help="sentence vectors for each line of a text file")
    embed.add_argument(
        "--model",
        required=True,
        help="all-MiniLM-L6-v2, an HF or sentence-transformers folder, or a maskwise run folder",
    )
    embed.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
    embed.add_argument("--output", required=True, help=".npy file to write: (lines, d) float32")
    embed.add_argument("--batch-size", type=int, default=32)
    embed.add_argument(
        "--no-normalize",
        action="store_true",
        help="keep raw pooled vectors (default: L2-normalised, unless the folder's modules say not)",
    )
    runtime_flags(embed)
    embed.set_defaults(handler=in_runtime(run_embed))


def run_export(args) -> int:
    exporters: dict[str, tuple[Callable[..., Path], str]] = {
        "hf": (export_hf, "Hugging Face format"),
        "sentence-transformers": (export_sentence_transformers, "sentence-transformers format"),
    }
    exporter, label = exporters[args.to]
    out = exporter(args.run_dir, args.out, overwrite=args.overwrite, part=args.part)
    architecture = read_json(out / CONFIG_FILE)["architectures"][0]
    what = f"the {args.part} half of {args.run_dir}" if args.part else args.run_dir
    print(f"exported {what} -> {out} ({label}, {architecture})")
    return 0


def run_embed(args) -> int:
    path = Path(args.input)
    try:
        texts = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (UnicodeDecodeError, IsADirectoryError) as error:
        raise UserError(f"{path}: not a UTF-8 text file ({error.__class__.__name__})") from None
    if not texts:
        raise UserError(f"{path}: no lines to embed")
    normalize = False if args.no_normalize else None  # None: as the folder declares
    vectors = embed_texts(
        args.model, texts, batch_size=args.batch_size, normalize=normalize, device=runtime_of(args).device
    )
    buffer = io.BytesIO()
    np.save(buffer, vectors)
    atomic_write(args.output, buffer.getvalue())
    print(
        f"embedded {len(texts)} lines with {args.model} -> {args.output} "
        f"({vectors.shape[0]} x {vectors.shape[1]} float32)"
    )
    return 0
