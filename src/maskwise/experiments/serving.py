"""What each checkpoint of ``compare --model`` costs to serve, measured on the device the command ran on, warmed up:
parameters, throughput at a fixed batch, latency p50/p99 at batch 1 (the first token for a writer), peak memory."""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from maskwise.experiments.arms import Setup
from maskwise.experiments.compare_report import (
    cannot,
)
from maskwise.experiments.held_out import held_out_text
from maskwise.objectives.span import decoder_start_id
from maskwise.padding import pad
from maskwise.tasks.generate import GenerationConfig, generate
from maskwise.tasks.reading import body_of, frame
from maskwise.tasks.seq2seq import source_ids

COST_CHARS = 200  # characters of held-out text per timed item: a sentence or two, what one request carries
COST_BATCH = 32  # items per call when throughput is timed
WARM_UP = 3  # calls before any timing, not kept (the first calls allocate and pick kernels)
LATENCY_CALLS = 100  # timed calls at batch 1: p99 is then the second slowest, not the slowest alone


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile: of 100 timings, p99 is the second slowest."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def timed_calls(call, repeats: int, device: torch.device, warm_up: int = WARM_UP) -> list[float]:
    """Seconds of each of ``repeats`` calls after ``warm_up`` untimed ones, a GPU's queue drained in each."""

    def done() -> None:
        call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the call has only queued its kernels until then

    for _ in range(warm_up):
        done()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        done()
        seconds.append(time.perf_counter() - started)
    return seconds


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """The process' stderr sent to the null device: torch's profiler prints its start and stop from C++ straight to
    it (and, on a CUDA build with no GPU, an "ERROR" about counting GPUs), which a run that succeeded should not
    show. Python's own errors are raised, not printed, inside it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(call, device: torch.device) -> tuple[float, str]:
    """(MB of tensors ``call`` allocated, at their peak, beyond what was held before; how it was measured): the CUDA
    allocator's peak on a GPU; on a CPU the running sum of the profiler's allocation and free events in time order
    (the process' resident set says nothing here: a batch reuses memory earlier fine-tunes left resident)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        call()
        torch.cuda.synchronize(device)
        return (
            (torch.cuda.max_memory_allocated(device) - before) / 2**20,
            "CUDA allocator peak above what it held before: the weights",
        )
    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        call()
    live = peak = 0
    for event in sorted(profiled.events(), key=lambda e: e.time_range.start):
        # a free outside any op is its own "[memory]" event; an op's own allocations less its frees, its self usage
        live += event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak / 2**20, "peak of the tensors allocated during the batch, from torch.profiler's memory events"


@torch.no_grad()
def serving_costs(setup: Setup, name: str, seed: int) -> dict:
    """What the model costs to serve, measured here, warmed up (``WARM_UP`` calls first), on items of
    ``COST_CHARS`` characters of the held-out text, each read through its own tokenizer and cut to its context:
    latency per item at batch 1 (p50, p99 of ``LATENCY_CALLS`` calls: reading for every model, the first token
    of an answer for a writer), throughput at batch ``COST_BATCH`` (items/s), and the peak memory of one such batch."""
    s, run = setup.scale, setup.exp.load(name)
    model, tok, device = body_of(run.model.eval()), run.tokenizer, setup.exp.runtime.torch_device
    text = held_out_text(s.held_out_chars, setup.plan.data)
    items = [text[i : i + COST_CHARS] for i in range(0, max(len(text) - COST_CHARS // 2, 1), COST_CHARS)]
    family = model.cfg.kind.name
    reads = [frame(tok, tok.encode(item)[: model.cfg.max_seq_len - 2], family) for item in items]
    batch = [reads[i % len(reads)] for i in range(COST_BATCH)]
    ids, mask = pad(batch, tok.pad_id, "right", device)  # (B, T) each
    at = iter(range(10**9))

    def read_one() -> None:
        x, m = pad([reads[next(at) % len(reads)]], tok.pad_id, "right", device)  # (1, T) each
        model.read(x, m)

    with setup.exp.runtime.inference().autocast():
        latency = timed_calls(read_one, LATENCY_CALLS, device)
        batches = timed_calls(lambda: model.read(ids, mask), 5, device)
        memory, how = peak_memory(lambda: model.read(ids, mask), device)
        costs = {
            "read_ms": [1000 * t for t in latency],
            "items_per_s": COST_BATCH / statistics.median(batches),
            "peak_mb": memory,
            "memory_measured": how,
            "items": len(items),
            "weights_mb": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20,
        }
        if cannot(model.cfg.kind, "ttft") is None:
            one = GenerationConfig(max_new_tokens=1)
            sources = [source_ids(model, tok, item, 8) for item in items]
            first = iter(range(10**9))
            costs["first_token_ms"] = [
                1000 * t
                for t in timed_calls(
                    lambda: generate(
                        model, [sources[next(first) % len(sources)]], one, tok.eos_id, tok.pad_id, decoder_start_id(tok)
                    ),
                    LATENCY_CALLS,
                    device,
                )
            ]
    return costs
