"""What every side-by-side benchmark shares: worker processes, alternating timing, FLOP accounting,
the machine's matmul peak, and the Markdown table.

Why workers: each side (maskwise, the HF reference, a bf16 variant) lives in its own Python process,
so its peak RSS is its own and not the sum of both models. Why alternating: the machine is shared
and its speed drifts by tens of percent within a minute; timing A for a minute and then B for a
minute measures the drift, not the code. The parent therefore keeps all workers alive and asks
them in turn, round after round, to time a few steps, and reports medians over rounds; ratios are
medians of the per-round ratios, taken between neighbours in time. The parent measures the matmul
peak in every round too, between the workers' turns, so "% of peak" compares numbers taken under
the same load.

A worker is the benchmark script itself started with ``--worker SIDE``: it builds that side and
answers one JSON request per stdin line on stdout (the ``Side`` protocol below).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from maskwise.experiments.serving import timed_calls
from maskwise.runtime import matmul_peak

# The shapes of issue 7: every training benchmark uses these unless told otherwise.
SHAPES = {"n_layers": 4, "d_model": 256, "n_heads": 4, "d_ff": 1024, "vocab_size": 8192, "seq_len": 128, "batch": 16}


# ---- machine -----------------------------------------------------------------------------------


def machine(runtime=None) -> str:
    """One line: CPU model, cores, the vector ISA torch dispatches to, threads, torch version, the
    GPUs, and (given one) the runtime the numbers ran under, with why: all from ``maskwise.runtime``,
    the one place that reads hardware flags."""
    from maskwise.runtime import machine_line

    return machine_line(runtime)


def device_runtime(device: str = "auto"):
    """The runtime ``maskwise`` picks on ``device`` with precision auto: its ``precision`` is "bf16"
    exactly where bf16 is fast there (a CPU with native bf16 whose probe finds bf16 matmuls faster
    than fp32; a CUDA GPU of compute capability 8.0 or newer)."""
    from maskwise.errors import UserError
    from maskwise.runtime import resolve

    try:
        return resolve(device, "auto")
    except UserError as error:  # e.g. --device cuda without a GPU: one line, not a traceback
        raise SystemExit(f"error: {error}") from None


def bf16_fast(runtime) -> bool:
    return runtime.precision == "bf16"


def skipped_line(what: str, runtime) -> str:
    """The one line a benchmark prints for what it left out, and why:
    "skipped maskwise-bf16 and the bf16 peak: device cpu, precision fp32: this CPU has no native bf16 (AVX2)"."""
    return f"skipped {what}: {runtime.describe()}"


def synchronize(device: str) -> None:
    """Wait for the device's queued work, so that a timer read afterwards counts it (CUDA runs
    asynchronously; the CPU needs nothing)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(call: Callable[[], object], repeats: int, warmup: int = 0) -> float:
    """Median wall seconds of ``repeats`` calls of ``call`` on the CPU, after ``warmup`` untimed ones."""
    return statistics.median(timed_calls(call, repeats, torch.device("cpu"), warm_up=warmup))


# ---- FLOP accounting -----------------------------------------------------------------------------


def train_flops(block_params: int, tokens: int, n_layers: int, context: int, width: int) -> float:
    """Training FLOPs of a stack's blocks: 6 per weight per token (forward 2, backward 4) plus the
    attention score and mixing matmuls, 12 x layers x context x width per token (the estimate of
    ``maskwise.train.budget``, applied to both sides alike)."""
    return tokens * (6.0 * block_params + 12.0 * n_layers * context * width)


def head_flops(d_model: int, vocab: int, positions: int, transform: bool, train: bool = True) -> float:
    """LM-head FLOPs at ``positions`` positions: what an implementation *executes*, so a dense head
    (HF) counts every position and maskwise's sparse head only the labelled ones."""
    per = 2.0 * d_model * vocab + (2.0 * d_model * d_model if transform else 0.0)
    return (3.0 if train else 1.0) * per * positions


def block_params(modules) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


# ---- memory -----------------------------------------------------------------------------------


def rss_mb() -> float:
    """Current resident set size (MiB), from /proc (no psutil needed)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident set size (MiB): ``ru_maxrss`` is in KiB on Linux."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- the worker side ------------------------------------------------------------------------------


class Side:
    """One thing to time, built inside its worker process.

    ``step()`` does one unit of work (a training step, a generate call, a batch of embeddings) and
    returns how many tokens (or lines) it processed; ``flops(n)`` the FLOPs it executed for ``n``
    such units counted by ``step``; ``info`` (optional, a dict) is free-form and reported once.
    Extra requests (``{"cmd": "call", "name": ...}``) call a method of the same name with keyword
    arguments.
    ``device`` is where the side computes: on a GPU the timers are read only after
    ``torch.cuda.synchronize()``, and the peak GPU memory is reported with the RSS.
    """

    device: str = "cpu"

    def step(self) -> int:
        raise NotImplementedError

    def flops(self, units: int) -> float:
        return 0.0


def serve(build: Callable[[str, argparse.Namespace], Side], side: str, args: argparse.Namespace) -> None:
    """The worker loop: build ``side``, then answer requests until "quit" or end of input."""
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints must not corrupt the protocol
    if args.threads:
        torch.set_num_threads(args.threads)
    baseline = rss_mb()
    obj = build(side, args)
    out.write(json.dumps({"ready": True, "info": getattr(obj, "info", {}), "bare_rss_mb": baseline}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        cmd = request["cmd"]
        if cmd == "quit":
            break
        if cmd == "time":
            units = 0
            synchronize(obj.device)
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(request["n"]):
                units += obj.step()
            synchronize(obj.device)
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
            reply: dict[str, Any] = {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "units": units,
                "flops": obj.flops(units),
            }
        elif cmd == "call":
            reply = {"result": getattr(obj, request["name"])(**request.get("kwargs", {}))}
        else:
            reply = {"error": f"unknown request {cmd!r}"}
        reply["peak_rss_mb"] = peak_rss_mb()
        reply["bare_rss_mb"] = baseline
        if torch.device(obj.device).type == "cuda":
            reply["device_peak_mb"] = torch.cuda.max_memory_allocated(obj.device) / 2**20
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ---- the parent side --------------------------------------------------------------------------------


class Worker:
    """A running worker process for one side; ``ask`` sends one request and waits for the reply."""

    def __init__(self, script: str, side: str, extra: list[str], wait: bool = True):
        self.side = side
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the worker's stderr for its whole life)
        env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--worker", side, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        self.ready = self._read() if wait else {}

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"worker {self.side} died:\n{self.log.read()[-4000:]}")
        return json.loads(line)

    def ask(self, **request) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"worker {self.side}: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=60)


@dataclass
class SideResult:
    side: str
    rates: list[float] = field(default_factory=list)  # units per second, one per round
    cpu_rates: list[float] = field(default_factory=list)  # units per CPU-second (all threads)
    flop_rates: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    bare_rss_mb: float = 0.0
    device_peak_mb: float | None = None  # torch.cuda.max_memory_allocated, on a GPU
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def flop_rate(self) -> float:
        return statistics.median(self.flop_rates)


@dataclass
class Comparison:
    """All sides of one benchmark after alternating rounds; ``peaks`` maps a dtype name to the
    matmul FLOP/s measured in each round."""

    name: str
    reference: str
    sides: dict[str, SideResult]
    peaks: dict[str, list[float]]
    unit: str = "tokens/s"

    def ratio(self, side: str, cpu: bool = False) -> tuple[float, float, float]:
        """(median, min, max) over rounds of side's rate / the reference's rate in the same round;
        ``cpu``: of rates per CPU-second, which a busy machine disturbs less than wall-clock rates."""
        attr = "cpu_rates" if cpu else "rates"
        pairs = [a / b for a, b in zip(getattr(self.sides[side], attr), getattr(self.sides[self.reference], attr))]
        return statistics.median(pairs), min(pairs), max(pairs)

    def peak(self, dtype: str) -> float:
        return statistics.median(self.peaks[dtype])


def start(script: str, sides: list[str], extra: list[str]) -> dict[str, Worker]:
    """One worker per side, each built and ready. They start together (each imports torch and
    builds its side at once) and nothing is timed until all are ready."""
    workers: dict[str, Worker] = {}
    try:
        for side in sides:
            workers[side] = Worker(script, side, extra, wait=False)
        for worker in workers.values():
            worker.ready = worker._read()
    except BaseException:
        kill_all(workers)
        raise
    return workers


def compare(
    workers: dict[str, Worker],
    name: str,
    reference: str,
    rounds: int,
    steps: int,
    warmup: int,
    peak_dtypes: tuple[str, ...] = ("float32",),
    unit: str = "tokens/s",
    device: str = "cpu",
) -> Comparison:
    """Warm every worker up, then ``rounds`` rounds of: every side times ``steps`` steps in turn (the
    order rotating each round, so no side always follows the same one), and the parent times the
    matmul peak on ``device`` at each of ``peak_dtypes`` (leave out a dtype the device runs slowly:
    an emulated bf16 peak on a CPU without native bf16 takes minutes and measures nothing useful)."""
    sides = list(workers)
    try:
        for side in sides:
            if warmup:
                workers[side].ask(cmd="time", n=warmup)
        results = {s: SideResult(s, info=workers[s].ready["info"]) for s in sides}
        peaks: dict[str, list[float]] = {d: [] for d in peak_dtypes}
        for r in range(rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for side in order:
                reply = workers[side].ask(cmd="time", n=steps)
                res = results[side]
                res.rates.append(reply["units"] / reply["seconds"])
                res.cpu_rates.append(reply["units"] / reply["cpu_seconds"])
                res.flop_rates.append(reply["flops"] / reply["seconds"])
                res.peak_rss_mb = reply["peak_rss_mb"]
                res.bare_rss_mb = reply["bare_rss_mb"]
                res.device_peak_mb = reply.get("device_peak_mb")
            for dtype in peak_dtypes:
                peaks[dtype].append(matmul_peak(getattr(torch, dtype), device, seconds=0.5))
            line = "  ".join(f"{s} {results[s].rates[-1]:,.1f}" for s in sides)
            print(f"  {name} round {r + 1}/{rounds}: {line} {unit}", file=sys.stderr, flush=True)
        return Comparison(name, reference, results, peaks, unit)
    except BaseException:
        kill_all(workers)
        raise


def kill_all(workers: dict[str, Worker]) -> None:
    for worker in workers.values():
        worker.proc.kill()


def close_all(workers: dict[str, Worker]) -> None:
    for worker in workers.values():
        worker.close()


# ---- reporting ---------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the results table."""

    bench: str
    side: str
    rate: float
    unit: str
    ratio: str = ""  # e.g. "1.62x (1.55-1.70)"; "" for the reference itself
    cpu_ratio: str = ""  # the same from rates per CPU-second
    target: str = ""
    gflops: float | None = None
    peak_pct: float | None = None
    peak_dtype: str = "float32"
    peak_rss_mb: float | None = None
    rss_over_bare_mb: float | None = None
    note: str = ""
    met: bool | None = None  # the median ratio against ``target``; None without a target
    profile: list[str] = field(default_factory=list)  # profile_step.py's arguments for this side's step


def target_ratio(target: str) -> float | None:
    """The ratio a target such as ">= 1.5x" or ">= 1.0x, identical vectors" asks for; None if it names none."""
    found = re.search(r">=\s*([0-9.]+)x", target)
    return float(found.group(1)) if found else None


def rows_of(
    comparison: Comparison,
    targets: dict[str, str] | None = None,
    dtypes: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
    profiles: dict[str, list[str]] | None = None,
) -> list[Row]:
    """Table rows for every side: rate, ratio to the reference, whether its target is met (by the
    median ratio), FLOP/s and % of the matmul peak at the side's dtype (``dtypes``: side ->
    "float32"/"bfloat16", default float32); ``profiles``: side -> the ``profile_step.py`` arguments
    that split its step, which ``run_all.py`` runs where the target is missed."""
    rows = []
    for side, res in comparison.sides.items():
        dtype = (dtypes or {}).get(side, "float32")
        ratio = cpu_ratio = ""
        target = (targets or {}).get(side, "")
        met = None
        if side != comparison.reference:
            median, low, high = comparison.ratio(side)
            met = median >= target_ratio(target) if target_ratio(target) else None
            ratio = f"{median:.2f}x ({low:.2f}-{high:.2f})"
            cpu_ratio = f"{comparison.ratio(side, cpu=True)[0]:.2f}x"
        gflops = res.flop_rate / 1e9 if res.flop_rates and res.flop_rate > 0 else None
        pct = 100.0 * res.flop_rate / comparison.peak(dtype) if gflops and dtype in comparison.peaks else None
        note = (notes or {}).get(side, "")
        if res.device_peak_mb is not None:
            note = "; ".join(filter(None, [note, f"GPU memory peak {res.device_peak_mb:,.0f} MiB"]))
        rows.append(
            Row(
                comparison.name,
                side,
                res.rate,
                comparison.unit,
                ratio,
                cpu_ratio,
                target,
                gflops,
                pct,
                dtype,
                res.peak_rss_mb,
                res.peak_rss_mb - res.bare_rss_mb,
                note,
                met,
                (profiles or {}).get(side, []),
            )
        )
    return rows


COLUMNS = (
    "benchmark",
    "side",
    "throughput (median)",
    "vs reference (median, range over rounds)",
    "vs reference per CPU-second",
    "target",
    "GFLOP/s",
    "% of matmul peak",
    "peak RSS MiB (over bare torch process)",
    "note",
)


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        cells = [
            r.bench,
            r.side,
            f"{r.rate:,.1f} {r.unit}" if r.rate < 100 else f"{r.rate:,.0f} {r.unit}",
            r.ratio or "reference",
            r.cpu_ratio,
            r.target if r.met is None else f"{r.target}: {'met' if r.met else '**not met**'}",
            f"{r.gflops:.1f}" if r.gflops is not None else "",
            f"{r.peak_pct:.0f}% ({'bf16' if r.peak_dtype == 'bfloat16' else 'fp32'})" if r.peak_pct is not None else "",
            f"{r.peak_rss_mb:,.0f} ({r.rss_over_bare_mb:+,.0f})" if r.peak_rss_mb is not None else "",
            r.note,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def peaks_line(comparison: Comparison) -> str:
    return ", ".join(
        f"{d} matmul peak {comparison.peak(d) / 1e9:.0f} GFLOP/s (median of {len(v)})"
        for d, v in comparison.peaks.items()
    )


def emit(
    rows: list[Row], header: list[str], json_out: str | None, extra: list[str] = (), skipped: list[str] = ()
) -> None:
    """Print the header lines, the lines of what was skipped and why, the table and any extra
    Markdown sections, and, for ``run_all.py``, write them as JSON."""
    for line in [*header, *skipped]:
        print(line)
    if rows:
        print(markdown(rows))
    for section in extra:
        print()
        print(section)
    if json_out:
        Path(json_out).write_text(
            json.dumps(
                {"header": header, "rows": [r.__dict__ for r in rows], "extra": list(extra), "skipped": list(skipped)}
            )
        )


def base_parser(description: str, rounds: int, steps: int, warmup: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=rounds, help="alternating rounds (median over them)")
    parser.add_argument("--steps", type=int, default=steps, help="timed steps per side per round")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed steps per side first")
    parser.add_argument("--json", help="also write the rows as JSON to this file (run_all.py)")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads on every side (0 = torch's default, one per core). On a machine "
        "that other jobs keep busy, 1 avoids waiting at every kernel for a descheduled "
        "second thread, which can slow 2 threads below 1",
    )
    return parser


def worker_args(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The command-line options a worker needs, rebuilt from the parent's parsed ``args``; the
    parent adopts ``--threads`` too, for its matmul-peak measurements."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return flags(args, ("threads", *names))


def flags(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """``args``' values of ``names`` as command-line options again (``--name value``; a true bool: ``--name``)."""
    extra = []
    for name in names:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                extra.append(flag)
        elif value is not None:
            extra += [flag, str(value)]
    return extra


# ---- data ------------------------------------------------------------------------------------------


def shakespeare(vocab_size: int = SHAPES["vocab_size"]):
    """(tokenizer, train TokenStream, val TokenStream) of the embedded plays with the WordPiece
    tokenizer maskwise trains (cached across runs); the token ids are cached in the temp folder too,
    since every worker needs them and tokenising the plays takes seconds."""
    from maskwise.data.corpus import load_corpus
    from maskwise.data.stream import TokenStream
    from maskwise.data.tokenizers import build_tokenizer

    corpus = load_corpus("shakespeare")
    tokenizer = build_tokenizer("wordpiece", corpus, vocab_size)
    cache = Path(tempfile.gettempdir()) / f"maskwise-bench-ids-{vocab_size}-{corpus.fingerprint[:16]}.pt"
    if cache.is_file():
        ids = torch.load(cache)
    else:
        ids = {
            "train": TokenStream.from_texts(corpus.train, tokenizer).ids,
            "val": TokenStream.from_texts(corpus.val, tokenizer).ids,
        }
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        torch.save(ids, tmp)
        os.replace(tmp, cache)
    return tokenizer, TokenStream(ids["train"], "train"), TokenStream(ids["val"], "val")
