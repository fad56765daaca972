"""Compare's own models leave maskwise and come back: issue 34's claims checked on a finished compare folder.

    OMP_NUM_THREADS=1 python benchmarks/export_check.py COMPARE_OUT [--out /tmp/export_check] [--lines 8]

COMPARE_OUT is a ``maskwise compare`` output folder. Its runs/encoder-seed0, runs/decoder-seed0 and
runs/encoder-decoder-seed0 are exported with the library's exporters (``export_hf``, the
sentence-transformers export, ``part="encoder"`` for the encoder-decoder's encoder half) into --out,
loaded with transformers and sentence-transformers, and set against maskwise on lines of the held-out
test plays, in fp32. Every number is printed with the bound it must meet; the exit status is 1 if one
misses it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import sentence_transformers
import torch
import transformers

from maskwise.data.plays import load_plays, render_play, split_plays
from maskwise.errors import UserError
from maskwise.interop.folders import load
from maskwise.interop.hf_export import encoder_half, export_hf
from maskwise.interop.pretrained import embed_texts
from maskwise.interop.sentence_transformers import export_sentence_transformers
from maskwise.tasks.fill_mask import MASK_TEXT, fill_mask
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.reading import encode_texts

ATOL = 1e-4  # logits and hidden states, HF against maskwise
MIN_COSINE = 0.99999  # sentence-transformers against maskwise's embedding
NEW_TOKENS = 20  # greedy tokens per prompt
failures: list[str] = []


def report(claim: str, value: str, ok: bool) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {claim}: {value}")
    if not ok:
        failures.append(claim)


def held_out_lines(n: int, skip: int = 0) -> list[str]:
    """``n`` distinct lines of at least 12 characters from the test plays, after the first ``skip``."""
    lines = []
    for play in split_plays(load_plays())["test"]:
        for line in render_play(play).splitlines():
            if len(line.strip()) >= 12 and line not in lines:
                lines.append(line)
    return lines[skip : skip + n]


def max_diff(theirs: torch.Tensor, ours: torch.Tensor, mask: torch.Tensor) -> float:
    """The largest absolute difference over the real (not padding) positions."""
    return float((theirs - ours)[mask.bool()].abs().max())


def identical(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return a.cfg == b.cfg and sa.keys() == sb.keys() and all(torch.equal(v, sb[k]) for k, v in sa.items())


def worst_cosine(run: Path, folder: Path, lines: list[str]) -> float:
    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(lines)
    ours = embed_texts(run, lines)
    return float(((ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)).min())


@torch.inference_mode()
def check_encoder(run: Path, out: Path, lines: list[str]) -> None:
    ours, tokenizer = load(run)
    folder = export_hf(run, out / "encoder-hf", overwrite=True)
    hf = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    ids, mask = encode_texts(tokenizer, lines, ours.cfg.family, ours.cfg.max_seq_len)  # (B, T) each
    diff = max_diff(hf(input_ids=ids, attention_mask=mask).logits, ours(ids, mask).logits, mask)
    report(
        f"encoder -> {type(hf).__name__}, max |logit diff| on {len(lines)} padded lines ({ids.shape[1]} ids at most)",
        f"{diff:.3g} (<= {ATOL})",
        diff <= ATOL,
    )
    same = identical(load(folder).model, ours)
    report("encoder maskwise -> HF -> maskwise identical", str(same), same)
    cosine = worst_cosine(run, export_sentence_transformers(run, out / "encoder-st", overwrite=True), lines)
    report(
        "encoder SentenceTransformer(export).encode vs maskwise embed, worst cosine",
        f"{cosine:.7f} (>= {MIN_COSINE})",
        cosine >= MIN_COSINE,
    )
    pipe = transformers.pipeline("fill-mask", model=str(folder), device="cpu")
    masked = [line[: len(line) // 2] + MASK_TEXT + line[len(line) // 2 + 1 :] for line in lines]
    same = sum(
        tokenizer.decode([pipe(text, top_k=1)[0]["token"]], skip_special=False)
        == fill_mask(ours, tokenizer, text, top_k=1)[0][0][0]
        for text in masked
    )
    report(
        "encoder fill-mask, HF pipeline top token == maskwise's",
        f"{same} of {len(masked)} masked lines",
        same == len(masked),
    )


@torch.inference_mode()
def check_decoder(run: Path, out: Path, lines: list[str], prompts: list[str]) -> None:
    ours, tokenizer = load(run)
    folder = export_hf(run, out / "decoder-hf", overwrite=True)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids, mask = encode_texts(tokenizer, lines, ours.cfg.family, ours.cfg.max_seq_len)  # (B, T) each
    diff = max_diff(hf(input_ids=ids, attention_mask=mask).logits, ours(ids, mask).logits, mask)
    report(
        f"decoder -> {type(hf).__name__}, max |logit diff| on {len(lines)} padded lines",
        f"{diff:.3g} (<= {ATOL})",
        diff <= ATOL,
    )
    same = identical(load(folder).model, ours)
    report("decoder maskwise -> HF -> maskwise identical", str(same), same)
    same = 0
    for prompt in prompts:
        prompt_ids = tokenizer.encode(prompt)
        row = torch.tensor([prompt_ids])  # (1, T)
        theirs = hf.generate(row, attention_mask=torch.ones_like(row), max_new_tokens=NEW_TOKENS, do_sample=False)
        expected = generate(
            ours, [prompt_ids], GenerationConfig(max_new_tokens=NEW_TOKENS), tokenizer.eos_id, tokenizer.pad_id
        ).tokens[0]
        same += theirs[0, len(prompt_ids) :].tolist() == expected
    report(
        f"decoder HF greedy generate == maskwise's ({NEW_TOKENS} new tokens)",
        f"{same} of {len(prompts)} prompts",
        same == len(prompts),
    )


@torch.inference_mode()
def check_encoder_half(run: Path, out: Path, lines: list[str]) -> None:
    ours, tokenizer = load(run)
    try:
        export_hf(run, out / "encoder-decoder-hf", overwrite=True)
        report("encoder-decoder whole: refused in one line", "it exported", False)
    except UserError as error:
        report("encoder-decoder whole: refused in one line", str(error), "\n" not in str(error))
    folder = export_hf(run, out / "encoder-decoder-encoder-hf", overwrite=True, part="encoder")
    hf = transformers.AutoModel.from_pretrained(folder).eval()
    ids, mask = encode_texts(tokenizer, lines, ours.cfg.family, ours.cfg.max_seq_len)  # (B, T): bare ids
    diff = max_diff(hf(input_ids=ids, attention_mask=mask).last_hidden_state, ours.encode(ids, mask), mask)
    report(
        f"encoder-decoder's encoder half -> {type(hf).__name__}, max |hidden diff| vs maskwise encode on "
        f"{len(lines)} padded lines",
        f"{diff:.3g} (<= {ATOL})",
        diff <= ATOL,
    )
    same = identical(load(folder).model, encoder_half(ours))
    report("encoder half maskwise -> HF -> maskwise identical", str(same), same)
    st = export_sentence_transformers(run, out / "encoder-decoder-encoder-st", overwrite=True, part="encoder")
    cosine = worst_cosine(run, st, lines)
    report(
        "encoder half SentenceTransformer(export).encode vs maskwise embed of the encoder-decoder, worst cosine",
        f"{cosine:.7f} (>= {MIN_COSINE})",
        cosine >= MIN_COSINE,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("compare_out", type=Path, help="a `maskwise compare` output folder")
    parser.add_argument("--out", type=Path, default=Path("/tmp/export_check"), help="where the exports go")
    parser.add_argument("--lines", type=int, default=8, help="test-play lines in the padded batch")
    parser.add_argument("--prompts", type=int, default=20, help="greedy generation prompts")
    args = parser.parse_args()
    runs = {
        family: args.compare_out / "runs" / f"{family}-seed0" for family in ("encoder", "decoder", "encoder-decoder")
    }
    for family, run in runs.items():
        if not (run / "model.safetensors").is_file():
            sys.exit(f"{run}: no finished {family} run (is {args.compare_out} a finished compare folder?)")
    lines = held_out_lines(args.lines)
    prompts = [line[:24] for line in held_out_lines(args.prompts, skip=args.lines)]
    print(
        f"transformers {transformers.__version__}, sentence-transformers {sentence_transformers.__version__}, "
        f"torch {torch.__version__}; {torch.get_default_dtype()} on cpu, {torch.get_num_threads()} thread(s)"
    )
    check_encoder(runs["encoder"], args.out, lines)
    check_decoder(runs["decoder"], args.out, lines, prompts)
    check_encoder_half(runs["encoder-decoder"], args.out, lines)
    print(f"{len(failures)} claim(s) missed" if failures else "every claim held")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
