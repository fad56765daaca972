"""Greedy decoding with a KV cache: maskwise ``tasks.generate`` against HF ``generate``, same weights.

    python benchmarks/bench_decode.py [--new-tokens 112] [--prompt 16] [--curve 16,32,64,128,224]

The weights are one randomly initialised GPT2LMHeadModel (4 layers, d_model 256, 4 heads, FFN 1024,
vocab 8192, 256 positions), saved once; HF loads it with ``from_pretrained`` and maskwise imports
it with ``maskwise.interop.hf_import.import_hf``, so both decode the very same function. Prompts are
windows of the embedded plays; nothing stops early (no EOS), so every call writes exactly
``--new-tokens`` tokens per row, and the two sides' tokens are compared.

Two measurements, each alternating between the sides:

1. throughput (new tokens per second) at batch 1 and batch 8 with the cache;
2. the cost curve: seconds to write n tokens at batch 1, with and without the cache. With the cache
   a step reads the cached keys once, so time grows linearly in n; without it each step re-reads the
   whole sequence, so time grows quadratically (time / n grows linearly);
3. the weight-streaming floor: the matrix-vector products alone, as ``generate`` splits them over
   the threads, which bound a batch-1 decoder built on them from below (each step reads every weight
   once; at these shapes that is ~21 MB of fp32).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common


def make_weights(folder: str, args) -> None:
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.positions,
        n_embd=args.d_model,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=args.d_ff,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    GPT2LMHeadModel(cfg).save_pretrained(folder)


class Decode(common.Side):
    """One side's decoder and prompts; ``step`` is one ``generate`` call at the configured batch."""

    def __init__(self, side: str, args):
        _, _, val = common.shakespeare(args.vocab)
        generator = torch.Generator().manual_seed(1)
        self.prompts = val.windows(8, args.prompt, generator)  # (8, prompt)
        self.side, self.new_tokens, self.batch = side, args.new_tokens, 1
        if side == "hf":
            import transformers
            from transformers import GPT2LMHeadModel

            transformers.logging.set_verbosity_error()
            self.model = GPT2LMHeadModel.from_pretrained(args.weights).eval()
            self.model.generation_config.eos_token_id = None
            self.model.generation_config.pad_token_id = 0
        else:
            from maskwise.interop.hf_import import import_hf

            self.model = import_hf(args.weights)
        self.info = {"parameters": sum(p.numel() for p in self.model.parameters())}

    def configure(self, batch: int) -> None:
        self.batch = batch

    def generate(self, n: int, use_cache: bool = True) -> list[list[int]]:
        prompts = self.prompts[: self.batch]
        if self.side == "hf":
            with torch.inference_mode():
                out = self.model.generate(
                    prompts,
                    attention_mask=torch.ones_like(prompts),
                    max_new_tokens=n,
                    do_sample=False,
                    use_cache=use_cache,
                )
            return out[:, prompts.shape[1] :].tolist()
        from maskwise.tasks.generate import GenerationConfig, generate

        cfg = GenerationConfig(max_new_tokens=n, use_cache=use_cache)
        return generate(self.model, prompts.tolist(), cfg, eos_id=None, pad_id=0).tokens

    def step(self) -> int:
        return sum(len(row) for row in self.generate(self.new_tokens))

    def seconds(self, n: int, use_cache: bool, repeats: int) -> float:
        """Median wall seconds of ``repeats`` generate calls writing n tokens per row (the cost curve)."""
        return common.median_seconds(lambda: self.generate(n, use_cache), repeats)

    @torch.no_grad()
    def weight_floor_ms(self, repeats: int = 200) -> float:
        """Milliseconds per token for the matrix products alone: every weight matrix of the model
        (the LM head included) times one vector, back to back, split over the threads as
        ``generate`` multiplies them on a CPU (``maskwise.kernels.cpu``). Each step streams every weight
        once, so this bounds a batch-1 decoding loop built on these products from below. Asked of
        the maskwise side, whose projections are ``nn.Linear`` layers (HF's GPT-2 uses ``Conv1D``)."""
        from maskwise.kernels import project
        from maskwise.kernels.cpu import split_for_decoding

        weights = [m.weight for m in self.model.modules() if isinstance(m, torch.nn.Linear)]
        weights.append(self.model.lm_head.vocab_weight)  # tied to the embedding: no Linear of its own
        split = [split_for_decoding(w, None, torch.get_num_threads()) for w in weights]
        rows = [torch.randn(1, w.shape[1]) for w in weights]
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeats):
                for x, w, blocks in zip(rows, weights, split):
                    project(x, w, None, blocks)
            best = min(best, (time.perf_counter() - start) / repeats * 1e3)
        return best


def build(side: str, args) -> common.Side:
    return Decode(side, args)


SHAPE_OPTIONS = ("vocab", "d_model", "layers", "heads", "d_ff", "positions", "prompt", "new_tokens")
OPTIONS = (*SHAPE_OPTIONS, "weights")


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0], rounds=5, steps=1, warmup=1)
    for name, default in (
        ("vocab", 8192),
        ("d_model", 256),
        ("layers", 4),
        ("heads", 4),
        ("d_ff", 1024),
        ("positions", 256),
        ("prompt", 16),
        ("new_tokens", 112),
    ):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    parser.add_argument("--weights", help=argparse.SUPPRESS)  # the parent's saved weights, for workers
    parser.add_argument("--curve", default="16,32,64,128,224", help="lengths for the cost curve ('' = skip)")
    parser.add_argument("--curve-repeats", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        common.serve(build, args.worker, args)
        return
    common.shakespeare(args.vocab)
    with tempfile.TemporaryDirectory(prefix="maskwise-decode-") as folder:
        make_weights(folder, args)
        args.weights = folder
        workers = common.start(__file__, ["hf", "maskwise"], common.worker_args(args, OPTIONS))
        try:
            rows, same = [], []
            for batch, target in ((1, ">= 2x"), (8, "")):
                for worker in workers.values():
                    worker.ask(cmd="call", name="configure", kwargs={"batch": batch})
                tokens = {
                    s: w.ask(cmd="call", name="generate", kwargs={"n": args.new_tokens})["result"]
                    for s, w in workers.items()
                }
                agree = sum(a == b for x, y in zip(tokens["hf"], tokens["maskwise"]) for a, b in zip(x, y))
                total = sum(len(x) for x in tokens["hf"])
                same.append(f"batch {batch}: {agree}/{total} greedy tokens identical")
                comparison = common.compare(
                    workers, f"decode, batch {batch}", "hf", args.rounds, args.steps, args.warmup, unit="new tokens/s"
                )
                rows += common.rows_of(
                    comparison,
                    targets={"maskwise": target} if target else None,
                    profiles={"maskwise": ["decode", "--batch", str(batch), *common.flags(args, SHAPE_OPTIONS)]},
                    notes={
                        "hf": "GPT2LMHeadModel.generate, DynamicCache",
                        "maskwise": "tasks.generate, static KVCache",
                    },
                )
            for worker in workers.values():
                worker.ask(cmd="call", name="configure", kwargs={"batch": 1})
            curve = cost_curve(workers, [int(n) for n in args.curve.split(",") if n], args.curve_repeats)
            floor = workers["maskwise"].ask(cmd="call", name="weight_floor_ms")["result"]
        finally:
            common.close_all(workers)
    header = [
        f"machine: {common.machine()}",
        f"command: python benchmarks/bench_decode.py {' '.join(sys.argv[1:])}",
        f"prompt {args.prompt} tokens, {args.new_tokens} new tokens per row, greedy, {args.rounds} rounds; "
        + "; ".join(same),
        (
            f"weight-streaming floor at batch 1: {floor:.2f} ms/token = {1e3 / floor:,.0f} new tokens/s (every "
            f"weight matrix times one vector, split over the threads as generate does, nothing else)"
        ),
    ]
    common.emit(rows, header, args.json, [curve] if curve else [])


def cost_curve(workers, lengths: list[int], repeats: int) -> str:
    """Markdown table: seconds to write n tokens at batch 1, each side with and without the cache,
    measured alternately (side by side per length), and the per-token cost (seconds / n)."""
    if not lengths:
        return ""
    lines = [
        "| new tokens | " + " | ".join(f"{s} {c} s (ms/token)" for s in workers for c in ("cached", "uncached")) + " |",
        "|---|" + "---|" * (2 * len(workers)),
    ]
    for n in lengths:
        cells = []
        for worker in workers.values():
            for use_cache in (True, False):
                seconds = worker.ask(
                    cmd="call", name="seconds", kwargs={"n": n, "use_cache": use_cache, "repeats": repeats}
                )["result"]
                cells.append(f"{seconds:.3f} ({1000 * seconds / n:.2f})")
        print(f"  curve n={n}: {' '.join(cells)}", file=sys.stderr, flush=True)
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
