"""Can a pretrained model copy from what it reads? Structured extraction needs that skill.

    python benchmarks/copy_probe.py RUN [RUN ...] [--passages 40] [--chars 120]

Passages are windows of the held-out test plays. For each run folder:

* a decoder reads ``P + "\\n\\n" + P``: the loss per token on the second copy against the first.
  A model with induction heads predicts the repeat almost exactly (ratio far below 1); a model
  without them does no better than on first reading (ratio near 1).
* an encoder-decoder writes P given P as its source, against P given another passage of the same
  split as its source. A decoder whose cross-attention copies makes the first loss far lower.

Extracting speakers is copying names from the passage: a model that cannot copy can only guess
names it memorised, which is how the extraction rows of ``tasks_quality.py`` fail.
"""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F

from maskwise.data.plays import render_play, split_plays
from maskwise.interop.folders import load
from maskwise.objectives.span import decoder_start_id


def passages(n: int, chars: int, seed: int = 0) -> list[str]:
    texts = [render_play(play) for play in split_plays()["test"]]
    rng = random.Random(seed)
    chosen = []
    for _ in range(n):
        text = rng.choice(texts)
        start = rng.randrange(len(text) - chars)
        chosen.append(text[start : start + chars])
    return chosen


@torch.no_grad()
def decoder_losses(model, tokenizer, texts: list[str]) -> tuple[float, float]:
    """Mean loss per token on the first and on the second reading of each passage."""
    first, second = [], []
    for text in texts:
        once, gap = tokenizer.encode(text), tokenizer.encode("\n\n")
        ids = torch.tensor([once + gap + once])  # (1, T)
        losses = F.cross_entropy(model(ids).logits[0, :-1], ids[0, 1:], reduction="none")  # (T-1,)
        first.append(losses[: len(once) - 1].mean())  # predictions of tokens 1.. of the first copy
        second.append(losses[len(once) + len(gap) - 1 :].mean())  # every token of the second copy
    return float(torch.stack(first).mean()), float(torch.stack(second).mean())


@torch.no_grad()
def encoder_decoder_losses(model, tokenizer, texts: list[str]) -> tuple[float, float]:
    """Mean loss per token of writing each passage given another passage, and given itself."""
    start, other_source, own_source = decoder_start_id(tokenizer), [], []
    for i, text in enumerate(texts):
        target = torch.tensor([tokenizer.encode(text)])  # (1, T)
        decoder_input = torch.cat([torch.full((1, 1), start), target[:, :-1]], dim=1)  # (1, T)
        for source, bucket in ((texts[(i + 1) % len(texts)], other_source), (text, own_source)):
            ids = torch.tensor([tokenizer.encode(source)])
            bucket.append(model(ids, decoder_input_ids=decoder_input, labels=target).loss)
    return float(torch.stack(other_source).mean()), float(torch.stack(own_source).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders of decoders or encoder-decoders")
    parser.add_argument("--passages", type=int, default=40)
    parser.add_argument("--chars", type=int, default=120)
    args = parser.parse_args()
    texts = passages(args.passages, args.chars)
    print(f"{'run':<40} {'family':<16} {'without':>8} {'with':>8} {'ratio':>6}   (nats per token)")
    for run in args.runs:
        model, tokenizer = load(run)
        model.eval()
        if model.cfg.family == "decoder":
            without, with_copy = decoder_losses(model, tokenizer, texts)
            how = "first vs second reading"
        elif model.cfg.family == "encoder-decoder":
            without, with_copy = encoder_decoder_losses(model, tokenizer, texts)
            how = "other vs own passage as source"
        else:
            print(f"{run:<40} encoder: no generation, nothing to copy into")
            continue
        print(f"{run:<40} {model.cfg.family:<16} {without:8.3f} {with_copy:8.3f} {with_copy / without:6.2f}   {how}")


if __name__ == "__main__":
    main()
