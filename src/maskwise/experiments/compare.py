"""``maskwise compare``: the main job. Three families, one budget, every task each can do.

An encoder (MLM), a decoder (CLM) and an encoder-decoder (T5 span corruption) are pretrained for the
same wall-clock on the same data with the same block (pre-norm LayerNorm, GELU, learned positions:
only the mask and the loss differ) at about the same parameter count: 4 bidirectional layers, 4
causal layers, or 2 + 2 layers whose FFN is narrowed to 3d to pay for the decoder's cross-attention
(2 x (4d^2 + 6d^2) + 2 x (8d^2 + 6d^2) = 48 d^2 = 4 x 12 d^2). Then each is measured on every task:

- next-token loss on held-out text (nats per character) and a generated sample;
- filling a blank (one hidden token, both sides visible to whoever can see them);
- genre classification (fine-tuned, same steps), retrieval recall@10 (contrastive, same steps);
- passage -> speakers extraction (fine-tuned, same steps), by generation.

Where a family cannot do a task the cell says why; where it can, only badly (the encoder "generating"
by repeated [MASK], the decoder filling a blank from the left side only), the cell has the number.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import torch

from maskwise.data.plays import load_plays, render_play, split_plays
from maskwise.experiments.report import render, write_results
from maskwise.experiments.runner import Experiment, machine_info
from maskwise.model.accounting import parameter_breakdown
from maskwise.recipes import (
    FAMILY_OBJECTIVE,
    QUICK,
    TASKS,
    CompareSettings,
    pretrain_settings,
    run_task,
)
from maskwise.runtime import Runtime

FAMILIES = ("encoder", "decoder", "encoder-decoder")


def held_out_text(chars: int) -> str:
    """The opening of the first test-split play: text no model saw in pretraining."""
    return render_play(split_plays(load_plays())["test"][0])[:chars]


@torch.no_grad()
def blank_filling_accuracy(model, tokenizer, text: str, n_positions: int, seed: int) -> dict:
    """Hide one token at a time and predict it.

    encoder: ``[MASK]`` in its place, both sides visible; decoder: only what is left of it (its
    next-token prediction from the previous position); encoder-decoder: T5's format, the token
    replaced by sentinel 0 and the decoder asked for the span after ``<extra_id_0>``.
    """
    from maskwise.objectives.span import decoder_start_id
    from maskwise.padding import pad
    from maskwise.tasks.reading import device_of

    family, context, device = model.cfg.family, model.cfg.max_seq_len - 2, device_of(model)
    ids = tokenizer.encode(text)
    rng = random.Random(seed)
    ordinary = [p for p in range(1, len(ids)) if ids[p] not in tokenizer.special_ids]
    positions = sorted(rng.sample(ordinary, min(n_positions, len(ordinary))))
    windows = [(max(0, p - context // 2), p) for p in positions]
    correct = 0
    for chunk in range(0, len(windows), 64):
        batch = windows[chunk:chunk + 64]
        if family == "decoder":
            seqs = [ids[max(0, p - context):p] for _, p in batch]  # left side only, ends just before p
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            logits = model(x, mask).logits  # (B, T, V)
            last = mask.sum(1) - 1
            predicted = logits[torch.arange(len(batch), device=device), last].argmax(-1).cpu()
        elif family == "encoder":
            seqs = [[tokenizer.cls_id, *ids[s:p], tokenizer.mask_id, *ids[p + 1:s + context]] for s, p in batch]
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            logits = model(x, mask).logits
            predicted = logits[torch.arange(len(batch)), torch.tensor([p - s + 1 for s, p in batch])].argmax(-1).cpu()
        else:
            sentinel = tokenizer.sentinel_ids[0]
            seqs = [[*ids[s:p], sentinel, *ids[p + 1:s + context]] for s, p in batch]
            x, mask = pad(seqs, tokenizer.pad_id, "right", device)
            start = torch.tensor([[decoder_start_id(tokenizer), sentinel]] * len(batch), device=device)
            logits = model(x, mask, decoder_input_ids=start).logits  # (B, 2, V)
            predicted = logits[:, 1].argmax(-1).cpu()
        targets = torch.tensor([ids[p] for _, p in batch])
        correct += int((predicted == targets).sum())
    return {"accuracy": correct / max(len(positions), 1), "n": len(positions)}


def _fresh(exp: Experiment, family: str):
    run = exp.load(family)
    return run.model, run.tokenizer


def language_modelling(exp: Experiment, family: str, s: CompareSettings, seed: int) -> dict:
    from maskwise.tasks.fill_mask import (
        decoder_nats_per_char,
        encoder_nats_per_char,
        mlm_continue,
    )
    from maskwise.tasks.generate import GenerationConfig, generate_text
    from maskwise.tasks.reading import seeded_generator

    model, tok = _fresh(exp, family)
    text = held_out_text(s.held_out_chars)
    sampling = GenerationConfig(max_new_tokens=48, temperature=0.8, top_k=40)
    g = seeded_generator(model, seed)
    prompt = "HAMLET\nTo be, or not to be,"
    result = {"blank_filling": blank_filling_accuracy(model, tok, text, s.fill_positions, seed)}
    if family == "decoder":
        result["nats_per_char"] = decoder_nats_per_char(model, tok, text)
        result["sample"] = prompt + generate_text(model, tok, [prompt], sampling, g)[0]
    elif family == "encoder":
        result["nats_per_char"] = encoder_nats_per_char(model, tok, text, both_sides=False)
        result["nats_per_char_both_sides"] = encoder_nats_per_char(model, tok, text, both_sides=True)
        result["sample"] = prompt + mlm_continue(model, tok, prompt, 48, sampling, g)
    else:
        sentinel = tok.id_to_token(tok.sentinel_ids[0])
        source = f"HAMLET\nTo be, or not to be, {sentinel} is the question:"
        result["sample"] = f"{source}\n  -> {sentinel}: " + generate_text(model, tok, [source], sampling, g)[0]
    return result


def fine_tuned(exp: Experiment, task: str, family: str, s: CompareSettings, seed: int) -> dict:
    """The record of ``task`` fine-tuned on a fresh copy of ``family``'s pretrained model."""
    model, tok = _fresh(exp, family)
    return run_task(task, model, tok, s.task(task, family, seed), exp.runtime, label=family).record


CANNOT = {
    ("encoder", "extract"): "cannot: no decoder to write the answer (an encoder labels positions it is given)",
    ("encoder-decoder", "next_token"): "conditional only: its decoder models targets given a source, not the "
                                       "text itself (span loss in the curves)",
}


def _cell(value: float, baseline: float | None = None, digits: int = 3) -> str:
    text = f"{value:.{digits}f}"
    return text + (f" (baseline {baseline:.{digits}f})" if baseline is not None else "")


def run_compare(out: str | Path = "runs/compare", quick: bool = False, seed: int = 0, data: str = "shakespeare",
                overwrite: bool = False, progress: bool = True, settings: CompareSettings | None = None,
                runtime: Runtime | None = None) -> Path:
    s = settings or (QUICK if quick else CompareSettings())
    exp = Experiment(out, overwrite, runtime)
    pre = {f: exp.pretrain(f, progress=progress, **pretrain_settings(s, s.family_arm(f, data), seed))
           for f in FAMILIES}
    params = {}
    for family in FAMILIES:
        model, _ = _fresh(exp, family)
        params[family] = parameter_breakdown(model)
    measured = {}
    for family in FAMILIES:
        measured[family] = {
            "lm": exp.step(f"lm-{family}", lambda f=family: language_modelling(exp, f, s, seed)),
            **{task: exp.step(f"{task}-{family}", lambda t=task, f=family: fine_tuned(exp, t, f, s, seed))
               for task in TASKS if (family, task) not in CANNOT},
        }

    results = _results(s, seed, data, pre, params, measured, exp.elapsed(), quick, exp.runtime)
    write_results(exp.out, results)
    render(exp.out)
    return exp.out


def _results(s, seed, data, pre, params, measured, wall_s, quick, runtime) -> dict:
    rows = []
    last = {f: pre[f]["curve"][-1] for f in FAMILIES}
    rows.append(["pretraining objective"] + [FAMILY_OBJECTIVE[f] for f in FAMILIES])
    rows.append(["parameters"] + [f"{params[f]['total']:,}" for f in FAMILIES])
    rows.append(["tokens seen in pretraining"] + [f"{last[f]['tokens_seen']:,}" for f in FAMILIES])
    rows.append(["pretraining wall-clock (s)"] + [f"{last[f]['wall_s']:.0f}" for f in FAMILIES])
    rows.append(["final validation loss (own objective)"] + [f"{last[f]['val_loss']:.3f}" for f in FAMILIES])
    row = ["held-out next-token loss (nats/char)"]
    for f in FAMILIES:
        lm = measured[f]["lm"]
        if f == "encoder":
            row.append(f"{lm['nats_per_char']:.3f} (poorly: left context only through [MASK]; "
                       f"{lm['nats_per_char_both_sides']:.3f} with both sides)")
        elif f == "decoder":
            row.append(f"{lm['nats_per_char']:.3f}")
        else:
            row.append(CANNOT[(f, "next_token")])
    rows.append(row)
    row = ["fill a blank (token accuracy)"]
    for f in FAMILIES:
        acc = measured[f]["lm"]["blank_filling"]["accuracy"]
        row.append(f"{acc:.3f}" + (" (left side only)" if f == "decoder" else
                                   " (via sentinel span)" if f == "encoder-decoder" else ""))
    rows.append(row)
    rows.append(["genre classification accuracy / macro-F1"] + [
        f"{measured[f]['classify']['accuracy']:.3f} / {measured[f]['classify']['macro_f1']:.3f} "
        f"(majority {measured[f]['classify']['baseline']['accuracy']:.3f})" for f in FAMILIES])
    rows.append(["retrieval recall@10 (ICT)"] + [
        f"{measured[f]['retrieve']['recall@10']:.3f} (random {measured[f]['retrieve']['baseline']['recall@10']:.3f})"
        for f in FAMILIES])
    row = ["passage -> speakers: exact match / speakers F1"]
    for f in FAMILIES:
        if "extract" not in measured[f]:
            row.append(CANNOT[(f, "extract")])
            continue
        e = measured[f]["extract"]
        row.append(f"{e['exact_match']:.3f} / {e['speakers_f1']:.3f} (first-line baseline "
                   f"{e['baseline']['exact_match']:.3f} / {e['baseline']['speakers_f1']:.3f})")
    rows.append(row)

    metrics = {
        "genre accuracy": {f: [measured[f]["classify"]["accuracy"]] for f in FAMILIES},
        "retrieval recall@10": {f: [measured[f]["retrieve"]["recall@10"]] for f in FAMILIES},
        "blank filling accuracy": {f: [measured[f]["lm"]["blank_filling"]["accuracy"]] for f in FAMILIES},
        "speakers exact match": {f: [measured[f]["extract"]["exact_match"]] for f in FAMILIES
                                 if "extract" in measured[f]},
    }
    best = {name: max(groups, key=lambda g: groups[g][0]) for name, groups in metrics.items()}
    summary = (
        f"At {s.seconds:.0f} s of pretraining each on the same machine, the decoder is the only family that "
        f"models text left to right ({measured['decoder']['lm']['nats_per_char']:.3f} nats/char vs the encoder's "
        f"{measured['encoder']['lm']['nats_per_char']:.3f} through repeated [MASK]); best at filling a blank: "
        f"{best['blank filling accuracy']}; best genre classifier: {best['genre accuracy']}; best retriever: "
        f"{best['retrieval recall@10']}; best at passage -> speakers: {best['speakers exact match']}. "
        "Single seed: use `maskwise ablate` for spreads and verdicts.")
    return {
        "title": "maskwise compare: encoder vs decoder vs encoder-decoder at one budget",
        "kind": "compare",
        "machine": machine_info(runtime),
        "wall_s": wall_s,
        "settings": {**dataclasses.asdict(s), "seed": seed, "data": data, "quick": quick},
        "runs": [{"label": f"{f} ({FAMILY_OBJECTIVE[f]})", "group": f, "seed": seed, "curve": pre[f]["curve"]}
                 for f in FAMILIES],
        "metrics": metrics,
        "table": {"columns": ["task", *FAMILIES], "rows": rows},
        "parameters": params,
        "summary": summary,
        "samples": {f"{f} sample": measured[f]["lm"]["sample"] for f in FAMILIES},
        "notes": [
            ("Validation losses of different objectives are not comparable to each other (MLM: per masked "
             "token; CLM: per token; span: per target token); the held-out nats/char row is."),
            ("Every family uses the same block (pre-norm LayerNorm, GELU, learned positions); only the "
             "attention mask and the loss differ. Fine-tuning: the same steps, batch and learning rate."),
        ],
    }
