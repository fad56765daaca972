"""Fine-tuning throughput: maskwise against HF transformers on the same weights, task and batch.

    python benchmarks/bench_finetune.py [--tasks classify,tag,embed,seq2seq] [--shape compare|wide|both]
                                        [--rounds 5] [--steps 20] [--warmup 2] [--threads N] [--quick]

Why: the issue "Fast on every CPU kind" asks that maskwise fine-tune at least 1.5x as fast as the usual way,
an HF ``*For*`` class in a PyTorch loop, on any CPU. ``bench_train.py`` times pretraining; this times the
four fine-tunes ``compare`` runs, at the batch sizes of ``recipes.DEFAULT_FINETUNES``, on sequences of 128 tokens.

Same weights: every worker builds the maskwise model with seed 0 (``config.preset``, ``build_model``, then
seed 0 again before the fresh head, as ``train_classifier`` does) and reports a hash of it; the hashes must
agree. The HF worker exports the body with ``interop.hf_export.export_hf``, loads the folder with the
``AutoModelFor*`` class, puts the head under HF's names (``hf_keys.HEAD_KEYS``) and reports the largest
difference between its outputs and maskwise's (eval mode, fp32) in the HF row's note.

A timed step is a fine-tuning step but for drawing the batch (32 random-id batches made before timing and
cycled, the same on both sides; rows of 64-128 tokens, right-padded to 128). 32, not a few: a real fine-tune
draws a new batch every step, and with 4 recurring ones the timing hid what a new shape costs (maskwise packs
each batch's real tokens, so its row count changes with the batch; docs/results.md, 2026-12-06 fourth session):
- maskwise: ``tasks.finetune.fine_tune``'s loop body (``set_lr``, then ``train.step.OptimizerStep`` over
  ``finetune_optimizer``: begin, backward under the runtime's autocast, apply: clip 1.0, fused AdamW)
  around the task's own model and loss: classify ``SequenceClassifier`` ([CLS], 2 labels, batch 32) +
  cross-entropy; tag ``TokenTagger`` (7 tags on ~1 token in 5, batch 16) + cross-entropy; embed
  ``BiEncoder`` (mean pooling) + ``info_nce`` over 32 (query, passage) pairs; seq2seq the decoder on
  ``source [SEP] target [EOS]`` (48-96 + 8-32 tokens, batch 16), labels on the target (``seq2seq_batch``).
- HF: ModernBertForSequenceClassification / ModernBertForTokenClassification (``labels=``), ModernBertModel
  + masked mean + normalise + the same InfoNCE, ModernBertDecoderForCausalLM (``labels=``, -100 on the
  source), then ``clip_grad_norm_(1.0)``, ``AdamW(fused=True)`` (HF Trainer's default), a linear schedule.

Shapes: ``compare``, ``recipes.DEFAULT``'s block (modernbert preset, d 64, 4 layers, 4 heads, context 256,
the plays' char vocabulary rounded up to 64 as pretraining does); ``wide``, the same at d 256, where the
matmuls dominate. fp32, and where ``maskwise.runtime.resolve("cpu", "auto")`` picks bf16, both sides under
bf16 autocast too. Rates: examples/s (embed: pairs/s), medians over rounds that alternate the sides
(common.py); ratios: median and range of each round's maskwise/HF. As in ``fine_tune``, the maskwise side
has glibc keep freed memory; the HF side is a plain process (``bench_train.py``'s ``hf``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import torch
import torch.nn.functional as F

from maskwise.config import preset
from maskwise.data.corpus import load_corpus
from maskwise.data.tokenizers import build_tokenizer
from maskwise.kernels.memory import retain_freed_memory
from maskwise.model.transformer import build_model
from maskwise.recipes import DEFAULT, DEFAULT_FINETUNES
from maskwise.runtime import detect_hardware
from maskwise.tasks.classify import SequenceClassifier
from maskwise.tasks.embed import BiEncoder, info_nce
from maskwise.tasks.finetune import finetune_optimizer
from maskwise.tasks.tag import TokenTagger
from maskwise.train.optim import lr_factor, set_lr
from maskwise.train.step import OptimizerStep

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

KINDS = ("classify", "tag", "embed", "seq2seq")  # the fine-tunes compare runs
SEQ, N_LABELS, N_TAGS, POOL, TARGET = 128, 2, 7, 32, ">= 1.5x"
WARMUP, TOTAL = 100, 10_000  # the learning-rate schedule's (its values do not change a step's cost)
HF_CLASS = {
    "classify": "AutoModelForSequenceClassification",
    "tag": "AutoModelForTokenClassification",
    "embed": "AutoModel",
    "seq2seq": "AutoModelForCausalLM",
}


def task_config(task: str, bf16: bool):
    return dataclasses.replace(DEFAULT_FINETUNES[task], precision="bf16" if bf16 else "fp32", progress=False)


def tokenizer():
    return build_tokenizer(DEFAULT.tokenizer, load_corpus("shakespeare"), DEFAULT.vocab_size)


def maskwise_model(task: str, shape: str, tok, cfg):
    """The task's maskwise model, seeded as ``run_task``'s fine-tunes seed it."""
    d_model = {"compare": DEFAULT.d_model, "wide": 256}[shape]
    torch.manual_seed(0)
    body = build_model(
        preset(
            DEFAULT.preset,
            family="decoder" if task == "seq2seq" else "encoder",
            vocab_size=-(-tok.vocab_size // 64) * 64,
            d_model=d_model,
            n_heads=DEFAULT.heads,
            n_layers=DEFAULT.layers,
            max_seq_len=DEFAULT.block_size,
        )
    )
    torch.manual_seed(cfg.seed)
    if task == "classify":
        return SequenceClassifier(body, [str(i) for i in range(N_LABELS)], cfg.pooling, cfg.freeze, cfg.dropout)
    if task == "tag":
        return TokenTagger(body, [str(i) for i in range(N_TAGS)], cfg.dropout)
    return BiEncoder(body, cfg.pooling) if task == "embed" else body


def fingerprint(model) -> str:
    digest = hashlib.sha1()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode() + tensor.detach().float().numpy().tobytes())
    return digest.hexdigest()[:12]


def make_batches(task: str, tok, size: int) -> list[dict]:
    """``POOL`` batches of random ids (the same on every side): rows of random length, right-padded, one
    at full length; an encoder's rows open with [CLS] as ``tasks.reading.frame`` puts it."""
    g = torch.Generator().manual_seed(1)
    first = max(tok.pad_id, tok.cls_id, tok.sep_id, tok.eos_id) + 1

    def rows(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lengths[0] = SEQ
        mask = torch.arange(SEQ) < lengths[:, None]
        ids = torch.randint(first, tok.vocab_size, (len(lengths), SEQ), generator=g).masked_fill(~mask, tok.pad_id)
        if task != "seq2seq":
            ids[:, 0] = tok.cls_id
        return ids, mask.long()

    def draw() -> dict:
        ids, mask = rows(torch.randint(SEQ // 2, SEQ + 1, (size,), generator=g))
        if task == "classify":
            return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(N_LABELS, (size,), generator=g)}
        if task == "tag":
            labelled = mask.bool() & (torch.rand(ids.shape, generator=g) < 0.2)
            tags = torch.randint(N_TAGS, ids.shape, generator=g)
            return {"input_ids": ids, "attention_mask": mask, "labels": tags.masked_fill(~labelled, -100)}
        if task == "embed":
            docs, doc_mask = rows(torch.randint(SEQ // 2, SEQ + 1, (size,), generator=g))
            return {"input_ids": ids, "attention_mask": mask, "doc_ids": docs, "doc_mask": doc_mask}
        source = torch.randint(48, 97, (size,), generator=g)  # source tokens, [SEP] included
        target = torch.randint(8, 33, (size,), generator=g)  # target tokens, [EOS] included
        source[0], target[0] = 96, 32
        ids, mask = rows(source + target)
        rows_ = torch.arange(size)
        ids[rows_, source - 1], ids[rows_, source + target - 1] = tok.sep_id, tok.eos_id
        position = torch.arange(SEQ)
        on_target = (position >= source[:, None]) & (position < (source + target)[:, None])
        hf_labels = ids.masked_fill(~on_target, -100)  # HF: token t's label is token t; the model shifts
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = hf_labels[:, 1:]  # maskwise: position t predicts label t (seq2seq_batch)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels, "hf_labels": hf_labels}

    return [draw() for _ in range(POOL)]


def maskwise_output(task: str, model, b: dict, cfg):
    """(loss, the output HF's must equal) of one batch, as the task's ``train_*`` step_loss computes it."""
    if task == "seq2seq":
        out = model(b["input_ids"], b["attention_mask"], labels=b["labels"])
        return out.loss, out.logits  # (labelled positions, V): the sparse head's
    if task == "tag":
        logits, targets = model.labelled_logits(b["input_ids"], b["attention_mask"], b["labels"])
        return F.cross_entropy(logits.float(), targets), logits  # (labelled positions, tags)
    out = model(b["input_ids"], b["attention_mask"])
    if task == "classify":
        return F.cross_entropy(out, b["labels"]), out
    return info_nce(out, model(b["doc_ids"], b["doc_mask"]), cfg.temperature), out


def hf_output(task: str, model, b: dict, cfg):
    """(loss, output) of the HF model, as a plain HF fine-tuning loop computes them."""
    if task == "embed":

        def embed(ids, mask):
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state
            weights = mask[..., None].to(h.dtype)
            return F.normalize((h * weights).sum(1) / weights.sum(1), dim=-1)

        queries, docs = embed(b["input_ids"], b["attention_mask"]), embed(b["doc_ids"], b["doc_mask"])
        logits = queries @ docs.T / cfg.temperature
        return F.cross_entropy(logits, torch.arange(len(queries))), queries
    labels = b["hf_labels"] if task == "seq2seq" else b["labels"]
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=labels)
    return out.loss, out.logits[b["labels"] != -100] if task in ("seq2seq", "tag") else out.logits


def export_to_hf(task: str, mw, cfg):
    """``mw`` as the HF class a plain loop would fine-tune: the body through ``export_hf``, the head's tensors
    under HF's names."""
    import transformers

    from maskwise.interop.hf_export import export_hf
    from maskwise.interop.hf_keys import HEAD_KEYS

    transformers.logging.set_verbosity_error()
    auto = getattr(transformers, HF_CLASS[task])
    extra = {}
    if task in ("classify", "tag"):
        extra = {"num_labels": N_LABELS if task == "classify" else N_TAGS, "classifier_dropout": cfg.dropout}
        if task == "classify":
            extra["classifier_pooling"] = mw.pooling
    with tempfile.TemporaryDirectory() as tmp:
        model = auto.from_pretrained(export_hf(mw if task == "seq2seq" else mw.body, Path(tmp) / "model"), **extra)
    if task in ("classify", "tag"):
        head = {
            f"{HEAD_KEYS[key.rpartition('.')[0]]}.{key.rpartition('.')[2]}": value
            for key, value in mw.head.state_dict().items()
        }
        if unexpected := model.load_state_dict(head, strict=False).unexpected_keys:
            raise RuntimeError(f"{type(model).__name__} has no {unexpected}")
    return model


class MaskwiseSide(common.Side):
    def __init__(self, args, bf16: bool):
        tok, self.task = tokenizer(), args.task
        self.cfg = task_config(args.task, bf16)
        self.model = maskwise_model(args.task, args.shape, tok, self.cfg)
        runtime = self.cfg.runtime(self.model)
        retain_freed_memory(runtime.device_type)
        heads = ("head.",) if args.task in ("classify", "tag") else ()  # classify/tag's HEAD_PREFIX
        self.optimizer_step = OptimizerStep(
            self.model, finetune_optimizer(self.model, self.cfg, heads), runtime, self.cfg.grad_clip
        )
        self.batches, self.n = make_batches(args.task, tok, self.cfg.batch_size), 0
        self.info = {
            "weights": fingerprint(self.model),
            "class": type(self.model).__name__,
            "precision": runtime.precision,
        }

    def step(self) -> int:
        batch = self.batches[self.n % POOL]
        set_lr(self.optimizer_step.optimizer, lr_factor(self.n, WARMUP, TOTAL, min_ratio=0.0))
        self.n += 1
        self.optimizer_step.begin()
        loss = self.optimizer_step.backward(
            lambda: maskwise_output(self.task, self.model, batch, self.cfg)[0], lambda loss: loss
        ).detach()
        if not self.optimizer_step.apply(loss):
            raise RuntimeError(f"maskwise {self.task}: non-finite loss {float(loss)}")
        float(loss)  # fine_tune records every step's loss
        return len(batch["input_ids"])


class HFSide(common.Side):
    def __init__(self, args, bf16: bool):
        import transformers

        tok, self.task, self.bf16 = tokenizer(), args.task, bf16
        self.cfg = task_config(args.task, bf16)
        mw = maskwise_model(args.task, args.shape, tok, self.cfg)
        self.model = export_to_hf(args.task, mw, self.cfg)
        self.batches, self.n = make_batches(args.task, tok, self.cfg.batch_size), 0
        with torch.no_grad():
            mw.eval()
            self.model.eval()
            diff = (
                (
                    maskwise_output(args.task, mw, self.batches[0], self.cfg)[1]
                    - hf_output(args.task, self.model, self.batches[0], self.cfg)[1]
                )
                .abs()
                .max()
                .item()
            )
        self.info = {
            "weights": fingerprint(mw),
            "class": type(self.model).__name__,
            "max_output_diff": diff,
            "attention": self.model.config._attn_implementation,
        }
        del mw
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay, fused=True
        )
        self.schedule = transformers.get_linear_schedule_with_warmup(self.optimizer, WARMUP, TOTAL)

    def step(self) -> int:
        batch = self.batches[self.n % POOL]
        self.n += 1
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            loss = hf_output(self.task, self.model, batch, self.cfg)[0]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        return len(batch["input_ids"])


def build(side: str, args) -> common.Side:
    return (HFSide if side.startswith("hf") else MaskwiseSide)(args, bf16=side.endswith("bf16"))


def machine(runtime) -> str:
    flags = detect_hardware().cpu_flags
    have = " ".join(f"{f}{'+' if f in flags else '-'}" for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16"))
    return (
        f"{common.machine(runtime)}; flags {have}; oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'}"
        f"; transformers {version('transformers')}"
    )


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0], rounds=5, steps=20, warmup=2)
    parser.add_argument("--tasks", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    parser.add_argument("--shape", choices=("compare", "wide", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1 step: the plumbing, not numbers")
    parser.add_argument("--task", choices=KINDS, help=argparse.SUPPRESS)  # a worker's
    args = parser.parse_args()
    if args.worker:
        common.serve(build, args.worker, args)
        return
    tasks = args.tasks.split(",")
    if unknown := sorted(set(tasks) - set(KINDS)):
        raise SystemExit(f"error: unknown task(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    if args.quick:
        args.rounds, args.steps, args.warmup = 2, 1, 1
    runtime = common.device_runtime("cpu")
    bf16 = common.bf16_fast(runtime)
    sides = ["hf", "maskwise"] + (["hf-bf16", "maskwise-bf16"] if bf16 else [])
    skipped = [] if bf16 else [common.skipped_line("hf-bf16 and maskwise-bf16", runtime)]
    tokenizer()  # the plays' corpus read once before the workers need it
    rows, summary = (
        [],
        [
            "| task | shape | precision | HF examples/s | maskwise examples/s | maskwise/HF | target |",
            "|---|---|---|---|---|---|---|",
        ],
    )
    for shape in ("compare", "wide") if args.shape == "both" else (args.shape,):
        for task in tasks:
            args.task, args.shape = task, shape
            workers = common.start(__file__, sides, common.worker_args(args, ("task", "shape")))
            infos = {side: worker.ready["info"] for side, worker in workers.items()}
            if len({info["weights"] for info in infos.values()}) != 1:
                common.kill_all(workers)
                raise SystemExit(f"error: {task} {shape}: the sides built different weights: {infos}")
            name = f"{task} ({shape}, batch {task_config(task, False).batch_size})"
            result = common.compare(workers, name, "hf", args.rounds, args.steps, args.warmup, (), "examples/s")
            common.close_all(workers)
            for precision, (hf, mw) in (("fp32", ("hf", "maskwise")), ("bf16", ("hf-bf16", "maskwise-bf16"))):
                if hf not in result.sides:
                    continue
                pair = dataclasses.replace(result, reference=hf, sides={s: result.sides[s] for s in (hf, mw)})
                notes = {
                    hf: f"{infos[hf]['class']} ({infos[hf]['attention']}), fused AdamW; outputs differ from "
                    f"maskwise's by <= {infos[hf]['max_output_diff']:.1e} (fp32)",
                    mw: f"{infos[mw]['class']}, fine_tune's step",
                }
                pair_rows = common.rows_of(
                    pair,
                    {mw: TARGET},
                    {s: "bfloat16" for s in (hf, mw) if precision == "bf16"},
                    notes,
                    {mw: ["finetune", "--task", task, "--shape", shape, "--sides", hf, mw]},
                )
                rows += pair_rows
                median, low, high = pair.ratio(mw)
                summary.append(
                    f"| {task} | {shape} | {precision} | {pair.sides[hf].rate:,.1f} | "
                    f"{pair.sides[mw].rate:,.1f} | {median:.2f}x ({low:.2f}-{high:.2f}) | "
                    f"{'met' if pair_rows[-1].met else 'missed'} |"
                )
    header = [
        f"machine: {machine(runtime)}",
        f"command: python benchmarks/bench_finetune.py {' '.join(sys.argv[1:])}",
        (
            f"{args.rounds} rounds x {args.steps} steps per side after {args.warmup} warm-up; sequences {SEQ} "
            f"tokens; target maskwise/HF {TARGET}"
        ),
    ]
    common.emit(rows, header, args.json, extra=["\n".join(summary)], skipped=skipped)


if __name__ == "__main__":
    main()
