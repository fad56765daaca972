"""``maskwise search|generate|fill-mask|break``: use a model directly, no training."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from maskwise.cli.runtime import in_runtime
from maskwise.cli.summary import summarize
from maskwise.cli.task_flags import add_common_flags, positive
from maskwise.cli.task_inputs import embedder_of, open_model
from maskwise.data.plays import render_play, split_plays
from maskwise.data.task_files import collection_from_file
from maskwise.data.tasks import ict_retrieval
from maskwise.errors import UserError
from maskwise.runs import write_json
from maskwise.tasks.fill_mask import break_exercise, fill_mask
from maskwise.tasks.generate import GenerationConfig, check_generative, generate_text
from maskwise.tasks.reading import device_of
from maskwise.tasks.retrieve import search


def register(subparsers) -> None:
    search = subparsers.add_parser("search", help="nearest passages to a query (exact search)")
    search.add_argument("model", help="run folder (an embed fine-tune, or any body) or HF model folder")
    search.add_argument("--query", required=True)
    search.add_argument("--k", type=positive, default=10)
    search.add_argument(
        "--collection",
        default=None,
        help="text file (one passage per line) or .jsonl/.csv with 'text'; default: the ICT collection",
    )
    search.add_argument("--split", choices=("train", "val", "test"), default="test")
    search.add_argument("--pooling", choices=("cls", "mean", "last"), default=None)
    add_common_flags(search)
    search.set_defaults(handler=in_runtime(run_search))

    generate = subparsers.add_parser("generate", help="continue a prompt (decoder) or map a source (encoder-decoder)")
    generate.add_argument("model", help="run folder or HF model folder")
    generate.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    generate.add_argument("--max-new-tokens", type=positive, default=100)
    _sampling_flags(generate)
    generate.add_argument("--num-beams", type=positive, default=1)
    generate.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    generate.add_argument("--no-cache", dest="use_cache", action="store_false", help="decode without the KV cache")
    add_common_flags(generate)
    generate.set_defaults(handler=in_runtime(run_generate))

    fill = subparsers.add_parser("fill-mask", help="top tokens for each [MASK] (encoder, hybrid decoder)")
    fill.add_argument("model", help="run folder or HF model folder")
    fill.add_argument("text", help='text with one or more "[MASK]"')
    fill.add_argument("--top-k", type=int, default=5)
    add_common_flags(fill)
    fill.set_defaults(handler=in_runtime(run_fill_mask))

    brk = subparsers.add_parser("break", help="make an MLM encoder generate, beside a decoder, with both losses")
    brk.add_argument("encoder", help="encoder run folder")
    brk.add_argument("decoder", help="decoder run folder")
    brk.add_argument("--prompt", default=None, help="default: the start of the held-out text")
    brk.add_argument("--max-new-tokens", type=positive, default=100)
    brk.add_argument("--held-out-chars", type=positive, default=1000, help="characters of a test play to score")
    _sampling_flags(brk)
    brk.add_argument("--results", default=None, help="write the JSON results here")
    add_common_flags(brk)
    brk.set_defaults(handler=in_runtime(run_break))


def _sampling_flags(parser) -> None:
    """How generate and break pick each next token (greedy unless --temperature is set)."""
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)


def run_search(args) -> int:
    if not args.query.strip():
        raise UserError("--query is empty")
    embedder, name = embedder_of(args.model, args, args.progress, args.pooling)
    docs = collection_from_file(args.collection) if args.collection else ict_retrieval(args.split).docs
    scores, indices = search(embedder([args.query]), embedder(list(docs)), args.k)
    print(f"{len(docs)} passages, embedder {name}")
    for rank, (score, index) in enumerate(zip(scores[0].tolist(), indices[0].tolist()), start=1):
        first_line = docs[index].split("\n", 1)[0]
        print(f"{rank:>3}. {score:.4f}  #{index}  {first_line[:100]}")
    return 0


def _generation_config(args, max_new_tokens: int, **extra):
    """The validated ``GenerationConfig`` the sampling flags describe."""
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        **extra,
    ).validate()


def run_generate(args) -> int:
    model, tokenizer, _ = open_model(args.model, args)
    check_generative(model)
    cfg = _generation_config(args, args.max_new_tokens, num_beams=args.num_beams, use_cache=args.use_cache)
    generator = torch.Generator(device=device_of(model)).manual_seed(args.seed)
    texts = generate_text(model, tokenizer, args.prompt, cfg, generator, args.stop)
    for prompt, text in zip(args.prompt, texts):
        if model.cfg.kind.causal:
            print(prompt + text)
        else:
            print(text)
        if len(texts) > 1:
            print("-" * 40)
    return 0


def run_fill_mask(args) -> int:
    model, tokenizer, _ = open_model(args.model, args)
    for i, candidates in enumerate(fill_mask(model, tokenizer, args.text, args.top_k), start=1):
        shown = ", ".join(f"{token!r} {prob:.3f}" for token, prob in candidates)
        print(f"[MASK] {i}: {shown}")
    return 0


def run_break(args) -> int:
    if args.held_out_chars < 10:
        raise UserError(f"--held-out-chars must be at least 10, got {args.held_out_chars}")
    encoder, enc_tok, _ = open_model(args.encoder, args)
    decoder, dec_tok, _ = open_model(args.decoder, args)
    if not encoder.cfg.kind.encoder_only:
        raise UserError(f"{args.encoder} is a {encoder.cfg.family}, not an encoder")
    if not decoder.cfg.kind.causal:
        raise UserError(f"{args.decoder} is a {decoder.cfg.family}, not a decoder")
    play = split_plays()["test"][0]  # test plays are never pretrained on
    text = render_play(play)
    held_out = text[len(play.title) :].lstrip()[: args.held_out_chars]
    prompt = args.prompt if args.prompt is not None else held_out.split("\n\n", 1)[0] + "\n\n"
    cfg = _generation_config(args, args.max_new_tokens)
    results = break_exercise(encoder, enc_tok, decoder, dec_tok, prompt, held_out, args.max_new_tokens, cfg, args.seed)
    results["held_out_from"] = play.slug
    if args.results:
        write_json(Path(args.results), results)
    print(summarize(results))
    if not args.results:
        print(json.dumps(results, indent=2), file=sys.stdout)
    return 0
