"""Training throughput, maskwise against the HF model of the same family, on identical shapes.

    python benchmarks/bench_train.py --objective mlm    # vs BertForMaskedLM + DataCollatorForLanguageModeling
    python benchmarks/bench_train.py --objective clm    # vs GPT2LMHeadModel
    python benchmarks/bench_train.py --objective span   # vs T5ForConditionalGeneration, fed SpanCorruption

Shapes (issue 7): 4 layers (T5: 4 + 4), d_model 256, 4 heads, FFN 1024, vocab 8192, sequence 128
(the T5 encoder input; its target is 29 tokens), batch 16, dropout 0 on both sides. A step is
everything a training loop does: make the batch (maskwise: ``Trainer.train_step`` draws windows and
corrupts them; HF: the collator masks them), forward, backward, gradient clipping at 1.0, AdamW.
The HF side uses ``AdamW(fused=True)``, which is what HF's ``Trainer`` picks by default
("adamw_torch_fused"), so the reference is HF as it is normally run, not a weakened one.

Sides: ``hf`` (the reference, fp32), ``maskwise`` (fp32), ``maskwise-bf16`` (``TrainConfig
(precision="bf16")``: bf16 autocast), and with ``--compile`` ``maskwise-compile`` and
``maskwise-bf16-compile`` (``TrainConfig.compile``; warm-up steps include the compilation, so give
``--warmup`` >= 2); with ``--hf-bf16`` also ``hf-bf16``, HF's model under the same bf16 autocast.
maskwise's ``Trainer`` sets glibc's allocator to keep freed memory (``maskwise.kernels.memory``), which
HF does not; ``hf-retain`` is HF in a process with the same setting, so the table shows how much of
the ratio that setting is, and the targets are judged against plain ``hf`` (on a GPU, where the
setting does not apply, ``hf-retain`` is left out).

The bf16 sides and the bf16 matmul peak run only where the device runs bf16 fast, which is where
``maskwise.runtime.resolve(device, "auto")`` picks bf16 (a CPU with native bf16 that a probe finds
faster in bf16; a CUDA GPU of compute capability 8.0 or newer). Elsewhere, e.g. a CPU with AVX2
only, whose bf16 matmuls are emulated ~90x slower than fp32, they are skipped, with one line in the
report saying which and why; ``--no-bf16`` skips them anywhere.

``--device`` (default auto: CUDA if present, else the CPU) puts both sides' models and batches on
that device; on a GPU every timer is read after ``torch.cuda.synchronize()`` and the table's note
gives each side's peak GPU memory.
Tokens/s counts the tokens each step reads (T5: encoder + decoder tokens). GFLOP/s counts what
each side *executes*: both sides' blocks alike, and the LM head at every position for HF (dense)
but only at labelled positions for maskwise (sparse); bf16 sides are compared to the bf16 peak.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

REFERENCE = {"mlm": "BertForMaskedLM", "clm": "GPT2LMHeadModel", "span": "T5ForConditionalGeneration"}
PRESET = {"mlm": "bert", "clm": "gpt2", "span": "t5"}
TARGETS = {"mlm": ("1.5x", "2.5x"), "clm": ("1.2x", "2.5x"), "span": ("1.2x", "")}


def shapes(args) -> dict:
    return {
        "vocab_size": args.vocab,
        "d_model": args.d_model,
        "n_layers": args.layers,
        "n_heads": args.heads,
        "d_ff": args.d_ff,
        "max_seq_len": args.seq,
    }


def maskwise_objective(name: str, tokenizer, vocab: int):
    from maskwise.objectives.clm import CLM
    from maskwise.objectives.mlm import MLM
    from maskwise.objectives.span import SpanCorruption

    return {"mlm": lambda: MLM(tokenizer, vocab), "clm": CLM, "span": lambda: SpanCorruption(tokenizer)}[name]()


class MaskwiseTrain(common.Side):
    """``Trainer.train_step`` on the embedded plays, exactly as ``maskwise pretrain`` runs it."""

    def __init__(self, args, bf16: bool, compile: bool):
        from maskwise.config import preset
        from maskwise.model.transformer import build_model
        from maskwise.train.loop import Trainer
        from maskwise.train.settings import TrainConfig

        tokenizer, train, val = common.shakespeare(args.vocab)
        torch.manual_seed(0)
        self.device = args.device
        self.model = build_model(preset(PRESET[args.objective], **shapes(args))).to(args.device)
        objective = maskwise_objective(args.objective, tokenizer, args.vocab)
        cfg = TrainConfig(
            batch_size=args.batch,
            block_size=args.seq,
            device=args.device,
            precision="bf16" if bf16 else "fp32",
            compile=compile,
            progress=False,
            lr=1e-3,
            warmup=0,
        )
        self.trainer = Trainer(self.model, objective, train, val, cfg)
        self.args, self.positions, self.enc, self.dec = args, 0, 0, 0
        self.info = {"parameters": sum(p.numel() for p in self.model.parameters())}

    def step(self) -> int:
        c = self.trainer.counters
        enc, dec = c.encoder_tokens, c.decoder_tokens
        _, positions, _ = self.trainer.train_step()
        self.positions += positions
        self.enc += c.encoder_tokens - enc
        self.dec += c.decoder_tokens - dec
        return c.encoder_tokens - enc + c.decoder_tokens - dec

    def flops(self, units: int) -> float:
        m, a = self.model, self.args
        width = a.d_model
        if a.objective == "span":
            dec_len = self.dec // max(1, self.enc // a.seq)  # decoder tokens per row
            total = common.train_flops(
                common.block_params(m.encoder.blocks), self.enc, a.layers, a.seq, width
            ) + common.train_flops(common.block_params(m.decoder.blocks), self.dec, a.layers, dec_len + a.seq, width)
        else:
            total = common.train_flops(common.block_params(m.stack.blocks), units, a.layers, a.seq, width)
        total += common.head_flops(a.d_model, a.vocab, self.positions, m.cfg.lm_head_transform)
        self.positions = self.enc = self.dec = 0
        return total


class HFTrain(common.Side):
    """The HF model of the same family in a plain training loop (HF's ``Trainer`` adds only
    bookkeeping around the same calls)."""

    def __init__(self, args, retain_memory: bool, bf16: bool = False):
        import transformers

        if retain_memory:
            from maskwise.kernels.memory import retain_freed_memory

            retain_freed_memory()

        transformers.logging.set_verbosity_error()
        tokenizer, train, _ = common.shakespeare(args.vocab)
        self.args, self.train = args, train
        self.generator = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        a = args
        if a.objective == "mlm":
            from transformers import (
                BertConfig,
                BertForMaskedLM,
                DataCollatorForLanguageModeling,
                PreTrainedTokenizerFast,
            )

            cfg = BertConfig(
                vocab_size=a.vocab,
                hidden_size=a.d_model,
                num_hidden_layers=a.layers,
                num_attention_heads=a.heads,
                intermediate_size=a.d_ff,
                max_position_embeddings=a.seq,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
            self.model = BertForMaskedLM(cfg)
            self.blocks = self.model.bert.encoder.layer
            hf_tok = PreTrainedTokenizerFast(
                tokenizer_object=tokenizer.backend,
                unk_token="[UNK]",
                pad_token="[PAD]",
                cls_token="[CLS]",
                sep_token="[SEP]",
                mask_token="[MASK]",
            )
            self.collator = DataCollatorForLanguageModeling(hf_tok, mlm=True, mlm_probability=0.15, seed=0)
            self.cls_id = tokenizer.cls_id
        elif a.objective == "clm":
            from transformers import GPT2Config, GPT2LMHeadModel

            cfg = GPT2Config(
                vocab_size=a.vocab,
                n_positions=a.seq,
                n_embd=a.d_model,
                n_layer=a.layers,
                n_head=a.heads,
                n_inner=a.d_ff,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
            )
            self.model = GPT2LMHeadModel(cfg)
            self.blocks = self.model.transformer.h
        else:
            from transformers import T5Config, T5ForConditionalGeneration

            cfg = T5Config(
                vocab_size=a.vocab,
                d_model=a.d_model,
                d_kv=a.d_model // a.heads,
                d_ff=a.d_ff,
                num_layers=a.layers,
                num_decoder_layers=a.layers,
                num_heads=a.heads,
                dropout_rate=0.0,
                feed_forward_proj="relu",
                tie_word_embeddings=True,
                decoder_start_token_id=tokenizer.pad_id,
                pad_token_id=tokenizer.pad_id,
            )
            self.model = T5ForConditionalGeneration(cfg)
            self.span = maskwise_objective("span", tokenizer, a.vocab)
            self.raw = self.span.raw_length(a.seq)
        self.device = args.device
        self.model.to(args.device).train()
        self.autocast_dtype = torch.bfloat16 if bf16 else None
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, fused=True
        )
        self.info = {
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "attention": getattr(self.model.config, "_attn_implementation", "?"),
        }
        self.flop_total = 0.0

    def _batch(self) -> dict:
        a = self.args
        if a.objective == "mlm":
            windows = self.train.windows(a.batch, a.seq - 1, self.generator)
            examples = [{"input_ids": [self.cls_id, *row]} for row in windows.tolist()]
            return self.collator(examples)
        if a.objective == "clm":
            windows = self.train.windows(a.batch, a.seq, self.generator)
            return {"input_ids": windows, "labels": windows}
        batch = self.span.prepare(self.train.windows(a.batch, self.raw, self.generator), self.generator)
        return {"input_ids": batch["input_ids"], "labels": batch["labels"]}

    def step(self) -> int:
        a, m = self.args, self.model
        batch = {key: value.to(self.device) for key, value in self._batch().items()}
        with torch.autocast(
            torch.device(self.device).type,
            dtype=self.autocast_dtype or torch.bfloat16,
            enabled=self.autocast_dtype is not None,
        ):
            loss = m(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if a.objective == "span":
            enc, dec = batch["input_ids"].numel(), batch["labels"].numel()
            self.flop_total += (
                common.train_flops(common.block_params(m.encoder.block), enc, a.layers, a.seq, a.d_model)
                + common.train_flops(
                    common.block_params(m.decoder.block), dec, a.layers, batch["labels"].shape[1] + a.seq, a.d_model
                )
                + common.head_flops(a.d_model, a.vocab, dec, False)
            )
            return enc + dec
        tokens = batch["input_ids"].numel()
        self.flop_total += common.train_flops(
            common.block_params(self.blocks), tokens, a.layers, a.seq, a.d_model
        ) + common.head_flops(a.d_model, a.vocab, tokens, a.objective == "mlm")
        return tokens

    def flops(self, units: int) -> float:
        total, self.flop_total = self.flop_total, 0.0
        return total


def build(side: str, args) -> common.Side:
    if side.startswith("hf"):
        return HFTrain(args, retain_memory=side == "hf-retain", bf16=side == "hf-bf16")
    return MaskwiseTrain(args, bf16="bf16" in side, compile="compile" in side)


# run_all's shapes, at which TARGETS hold; at any other shape the table reports the share of the peak alone.
SHAPE_DEFAULTS = (
    ("vocab", 8192),
    ("d_model", 256),
    ("layers", 4),
    ("heads", 4),
    ("d_ff", 1024),
    ("seq", 128),
    ("batch", 16),
)
OPTIONS = ("objective", "vocab", "d_model", "layers", "heads", "d_ff", "seq", "batch", "device")


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0], rounds=6, steps=2, warmup=2)
    parser.add_argument("--objective", choices=tuple(REFERENCE), default="mlm")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="add torch.compile sides, fp32 and bf16 (each compiles for minutes first)",
    )
    parser.add_argument(
        "--no-bf16",
        action="store_true",
        help="leave out the bf16 sides and the bf16 peak (they are left out anyway where the device runs bf16 slowly)",
    )
    parser.add_argument("--hf-bf16", action="store_true", help="add HF's model under bf16 autocast as a side")
    parser.add_argument(
        "--device", default="auto", help="auto (default: CUDA if present, else the CPU), cpu, cuda, cuda:N"
    )
    for name, default in SHAPE_DEFAULTS:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args()
    if args.worker:
        common.serve(build, args.worker, args)
        return
    runtime = common.device_runtime(args.device)
    args.device = runtime.device  # the workers get the device itself ("cuda:0"), not "auto"
    on_cpu = runtime.device_type == "cpu"
    bf16 = not args.no_bf16 and common.bf16_fast(runtime)
    candidates = (
        ["hf", "hf-retain", "maskwise", "maskwise-bf16"]
        + (["maskwise-compile", "maskwise-bf16-compile"] if args.compile else [])
        + (["hf-bf16"] if args.hf_bf16 else [])
    )
    sides = [s for s in candidates if (on_cpu or s != "hf-retain") and (bf16 or "bf16" not in s)]
    skipped = []
    if not on_cpu:
        skipped.append(
            f"skipped hf-retain: device {runtime.device}: glibc's allocator setting concerns CPU memory only"
        )
    if not bf16:
        what = f"{', '.join(s for s in candidates if 'bf16' in s)} and the bf16 peak"
        skipped.append(f"skipped {what}: --no-bf16" if args.no_bf16 else common.skipped_line(what, runtime))
    for line in skipped:
        print(line, file=sys.stderr, flush=True)
    common.shakespeare(args.vocab)  # build the tokenizer and id cache once, before the workers need them
    at_target_shape = all(getattr(args, name) == default for name, default in SHAPE_DEFAULTS)
    name = f"{args.objective} train" + ("" if at_target_shape else f", d {args.d_model} x {args.layers} layers")
    peak_dtypes = ("float32",) + (("bfloat16",) if "maskwise-bf16" in sides else ())
    workers = common.start(__file__, sides, common.worker_args(args, OPTIONS))
    comparison = common.compare(
        workers, name, "hf", args.rounds, args.steps, args.warmup, peak_dtypes, device=runtime.device
    )
    common.close_all(workers)
    fp32_target, bf16_target = TARGETS[args.objective] if at_target_shape else ("", "")
    rows = common.rows_of(
        comparison,
        targets={
            "maskwise": f">= {fp32_target}" if fp32_target else "",
            "maskwise-bf16": f">= {bf16_target}" if bf16_target else "",
        },
        dtypes={side: "bfloat16" for side in sides if "bf16" in side},
        profiles={
            side: ["train", "--objective", args.objective, "--sides", "hf", side]
            for side in ("maskwise", "maskwise-bf16")
            if on_cpu and at_target_shape
        },
        notes={
            "hf": f"{REFERENCE[args.objective]}, {comparison.sides['hf'].info.get('attention')}, fused AdamW",
            "hf-retain": "the same, glibc keeping freed memory as maskwise's Trainer does",
            "hf-bf16": "the same under bf16 autocast",
        },
    )
    header = [
        f"machine: {common.machine(runtime)}",
        f"command: python benchmarks/bench_train.py {' '.join(sys.argv[1:])}",
        (
            f"{common.peaks_line(comparison)}; {args.rounds} rounds x {args.steps} steps per side, batch "
            f"{args.batch} x {args.seq}, {args.layers} layers, d_model {args.d_model}, vocab {args.vocab}"
        ),
    ]
    common.emit(rows, header, args.json, skipped=skipped)


if __name__ == "__main__":
    main()
