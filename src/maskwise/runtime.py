"""Where and how a model runs: the device and the precision, decided once, with the reason.

Every command and the library's training loops take a ``Runtime`` from ``resolve(device,
precision)``; nothing else in maskwise reads hardware flags. ``auto`` means the best the hardware
runs fast, as nanoGPT's ``device``/``dtype`` settings hand-pick it:

- device: CUDA if present (``cuda:LOCAL_RANK`` under torchrun), else MPS, else the CPU;
- precision on CUDA: bf16 where the GPU has native bf16 (compute capability 8.0 and newer), else
  fp16 autocast with a gradient scaler;
- precision on a CPU: bf16 only where the CPU has native bf16 instructions (avx512_bf16, AMX, or
  Arm's bf16) *and* a short probe finds a transformer MLP's forward + backward faster under bf16
  autocast than in fp32; else fp32 (without native support bf16 is emulated and can be ~90x slower);
- precision on MPS: fp32 (nothing here has measured Apple GPUs).

``auto`` is the training precision. Inference (``Runtime.inference()``: evaluation, embedding,
generation) runs fp32 under ``auto``, as sentence-transformers and HF pipelines do, so that a
model's scores and vectors are the same on every machine kind and from every entry point; an
explicit precision applies to both.

``MASKWISE_AUTO_PRECISION=fp32|bf16`` makes a CPU's ``auto`` answer as the other machine kind
would (the test suite's ``--auto-precision``); it is read here and nowhere else.

An explicit precision the hardware runs slowly still runs, with a one-line warning; a device that
is not present is bad input (``UserError``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from maskwise.errors import UserError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# The CPU flags of native bf16 (x86: AMX, AVX-512 BF16; Arm: FEAT_BF16), each with its name, the fastest first.
CPU_BF16_ENGINES = (("amx_bf16", "AMX"), ("avx512_bf16", "avx512_bf16"), ("bf16", "Arm bf16"))
CPU_BF16_FLAGS = tuple(flag for flag, _ in CPU_BF16_ENGINES)
CPU_FP16_FLAGS = ("avx512_fp16", "amx_fp16", "fphp")


@dataclass(frozen=True)
class Hardware:
    """What the machine offers, as facts (tests build fakes of it)."""

    cuda_capabilities: tuple[tuple[int, int], ...] = ()  # one (major, minor) per visible GPU
    cuda_names: tuple[str, ...] = ()
    mps: bool = False
    cpu_capability: str = "DEFAULT"  # torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    cpu_name: str = ""

    @property
    def cpu_bf16_native(self) -> bool:
        return any(flag in self.cpu_flags for flag in CPU_BF16_FLAGS)

    @property
    def cpu_kind(self) -> str:
        """torch's kernel level with the CPU's bf16 hardware named ("AVX512 with AMX"), since AMX's
        bf16 matmul peak is ~7x fp32's where avx512_bf16's is ~2x, and torch calls both AVX512."""
        engine = next((name for flag, name in CPU_BF16_ENGINES if flag in self.cpu_flags), "")
        return f"{self.cpu_capability} with {engine}" if engine else self.cpu_capability


def _cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[frozenset[str], str]:
    """The CPU's feature flags and name from /proc/cpuinfo (empty where there is none). The name carries the
    x86 family and model: cloud machines report a bare "AMD EPYC", and two of them (the second of family 26, a
    Zen 5) measured bf16 matmul peaks 2x apart (docs/results.md, 2026-12-06 fifth session)."""
    facts: dict[str, str] = {}
    name = platform.processor() or platform.machine()
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset(), name
    for line in text.splitlines():
        key, _, value = line.partition(":")
        facts.setdefault(key.strip(), value.strip())
    flags = frozenset((facts.get("flags") or facts.get("Features") or "").split())
    name = facts.get("model name") or name
    if facts.get("cpu family") and facts.get("model"):
        name += f" (family {facts['cpu family']}, model {facts['model']})"
    return flags, name


@functools.cache
def detect_hardware() -> Hardware:
    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    flags, name = _cpu_facts()
    return Hardware(
        cuda_capabilities=tuple(torch.cuda.get_device_capability(i) for i in range(count)),
        cuda_names=tuple(torch.cuda.get_device_name(i) for i in range(count)),
        mps=bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_flags=flags,
        cpu_name=name,
    )


@dataclass(frozen=True)
class Bf16Probe:
    """What the CPU probe measured: one MLP forward + backward, median milliseconds per precision."""

    fp32_ms: float
    bf16_ms: float

    @property
    def speedup(self) -> float:
        return self.fp32_ms / max(self.bf16_ms, 1e-9)

    def describe(self) -> str:
        return (
            f"a d-{PROBE_WIDTH} MLP's forward + backward on {PROBE_ROWS} rows took {self.bf16_ms:.1f} ms in "
            f"bf16 vs {self.fp32_ms:.1f} ms in fp32 ({self.speedup:.1f}x)"
        )


PROBE_WIDTH, PROBE_ROWS, PROBE_REPEATS = 256, 1024, 5


@functools.cache
def cpu_bf16_probe() -> Bf16Probe:
    """Time the work training does (linear layers forward and backward, with autocast's casts), not
    one bare matmul, whose ratio moved from 1.7x to 10.4x between processes on one machine; the
    median of the repeats after a warm-up. Only asked where the CPU has native bf16, so it never
    runs the emulated (slow) path; it leaves torch's global random state as it found it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        width = PROBE_WIDTH
        mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
        x = torch.randn(PROBE_ROWS, width)

    def median_ms(dtype: torch.dtype | None) -> float:
        times = []
        for _ in range(PROBE_REPEATS + 1):  # the first call pays for kernel selection
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                y = mlp(x)
            y.float().square().mean().backward()
            times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times[1:])

    return Bf16Probe(fp32_ms=median_ms(None), bf16_ms=median_ms(torch.bfloat16))


@dataclass(frozen=True)
class Runtime:
    """A device and a precision, with why they were chosen (and a warning if the choice is slow)."""

    device: str  # "cpu", "cuda:0", "mps"
    precision: str  # "fp32", "bf16" or "fp16"
    reason: str
    warning: str = ""
    requested: str = "auto"  # the user's setting, so that inference can tell "auto" from an explicit choice
    measured: str = ""  # what a probe timed to decide (recorded with the run; not in describe(): it varies run to run)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def device_type(self) -> str:
        return self.torch_device.type

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return AUTOCAST_DTYPES[self.precision]

    @property
    def needs_scaler(self) -> bool:
        """fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range."""
        return self.precision == "fp16"

    def inference(self) -> Runtime:
        """The runtime evaluation, embedding and generation run under: fp32 where the precision was
        ``auto`` (the same scores and vectors on every machine kind), else this one."""
        if self.requested != "auto" or self.precision == "fp32":
            return self
        return Runtime(
            self.device,
            "fp32",
            f"inference under precision auto runs fp32 (training: {self.precision})",
            requested=self.requested,
            measured=self.measured,
        )

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """The autocast context of this precision (none for fp32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.autocast_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(self.device_type, enabled=self.needs_scaler)

    def move(self, batch: dict) -> dict:
        """A batch prepared on the CPU, on this device: pinned and copied without waiting on CUDA."""
        if self.device_type == "cpu":
            return batch
        pin = self.device_type == "cuda"
        return {
            key: (value.pin_memory() if pin else value).to(self.torch_device, non_blocking=pin)
            if isinstance(value, torch.Tensor)
            else value
            for key, value in batch.items()
        }

    def describe(self) -> str:
        """One line: "device cpu, precision fp32: this CPU has no native bf16 (AVX2)"."""
        return f"device {self.device}, precision {self.precision}: {self.reason}"

    def to_dict(self) -> dict:
        return asdict(self)


def local_rank() -> int | None:
    """This process's GPU index under torchrun (``LOCAL_RANK``), else None."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def _device(requested: str, hw: Hardware) -> str:
    requested = requested.strip().lower()
    n_gpus = len(hw.cuda_capabilities)
    if requested == "auto":
        if not n_gpus:
            return "mps" if hw.mps else "cpu"
        requested = "cuda"
    if requested == "cpu":
        return "cpu"
    if requested == "mps":
        if not hw.mps:
            raise UserError("--device mps: no Apple GPU (MPS) is available here")
        return "mps"
    if requested == "cuda" or requested.startswith("cuda:"):
        if not n_gpus:
            raise UserError(
                f"--device {requested}: CUDA is not available here (torch {torch.__version__}, no CUDA GPU visible)"
            )
        index = str(local_rank() or 0) if requested == "cuda" else requested.partition(":")[2]
        if not index.isdigit() or int(index) >= n_gpus:
            raise UserError(f"--device {requested}: this machine has {n_gpus} CUDA GPU(s) (cuda:0..cuda:{n_gpus - 1})")
        return f"cuda:{index}"
    raise UserError(f"--device must be auto, cpu, cuda, cuda:N or mps, got {requested!r}")


def _cuda_precision(requested: str, capability: tuple[int, int], name: str) -> tuple[str, str, str]:
    major, minor = capability
    native = major >= 8
    where = f"{name or 'this GPU'} (sm{major}{minor})"
    if requested == "auto":
        if native:
            return "bf16", f"{where} runs bf16 natively", ""
        return "fp16", f"{where} has no native bf16, so fp16 autocast with a gradient scaler", ""
    if requested == "bf16" and not native:
        return "bf16", f"asked for; {where} emulates bf16", f"precision bf16 on {where}: no native bf16, expect it slow"
    return requested, "asked for", ""


AUTO_PRECISION_ENV = "MASKWISE_AUTO_PRECISION"


def _forced_auto() -> str | None:
    """``MASKWISE_AUTO_PRECISION``: the CPU ``auto`` answer forced (fp32 or bf16), else None."""
    forced = os.environ.get(AUTO_PRECISION_ENV, "").strip().lower()
    if forced and forced not in ("fp32", "bf16"):
        raise UserError(f"{AUTO_PRECISION_ENV} must be fp32 or bf16, got {forced!r}")
    return forced or None


def _cpu_precision(requested: str, hw: Hardware, probe: Callable[[], Bf16Probe]) -> tuple[str, str, str, str]:
    """(precision, reason, warning, what the probe measured or "")."""
    isa = hw.cpu_kind
    if requested == "auto":
        forced = _forced_auto()
        if forced:
            slow = forced == "bf16" and not hw.cpu_bf16_native
            return (
                forced,
                f"{AUTO_PRECISION_ENV}={forced} ({isa})",
                (f"precision auto forced to bf16 on a CPU without native bf16 ({isa}): emulated, slow" if slow else ""),
                "",
            )
        if not hw.cpu_bf16_native:
            return "fp32", f"this CPU has no native bf16 ({isa})", "", ""
        measured = probe()
        if measured.speedup > 1.0:
            return (
                "bf16",
                f"this CPU has native bf16 ({isa}) and ran the probe's MLP faster in bf16",
                "",
                measured.describe(),
            )
        return (
            "fp32",
            f"this CPU has native bf16 ({isa}) but ran the probe's MLP slower in bf16",
            "",
            measured.describe(),
        )
    native = {"bf16": hw.cpu_bf16_native, "fp16": any(f in hw.cpu_flags for f in CPU_FP16_FLAGS)}
    if requested in native and not native[requested]:
        return (
            requested,
            "asked for",
            (
                f"precision {requested} on a CPU without native {requested} ({isa}): "
                "its matmuls are emulated and may be far slower than fp32"
            ),
            "",
        )
    return requested, "asked for", "", ""


def resolve(
    device: str = "auto",
    precision: str = "auto",
    hardware: Hardware | None = None,
    bf16_probe: Callable[[], Bf16Probe] = cpu_bf16_probe,
) -> Runtime:
    """The device and precision to run on, from the user's settings and the hardware present."""
    precision = precision.strip().lower()
    if precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    hw = hardware if hardware is not None else detect_hardware()
    chosen = _device(device, hw)
    kind, measured = torch.device(chosen).type, ""
    if kind == "cuda":
        index = torch.device(chosen).index or 0
        name = hw.cuda_names[index] if index < len(hw.cuda_names) else ""
        dtype, reason, warning = _cuda_precision(precision, hw.cuda_capabilities[index], name)
    elif kind == "mps":
        dtype, reason, warning = (
            ("fp32", "MPS: fp32 (bf16/fp16 not measured there)", "")
            if precision == "auto"
            else (precision, "asked for", "")
        )
    else:
        dtype, reason, warning, measured = _cpu_precision(precision, hw, bf16_probe)
    return Runtime(chosen, dtype, reason, warning, requested=precision, measured=measured)


def precision_setting(precision: str, bf16: bool | None) -> str:
    """``bf16`` is an alias: True means precision bf16, False means fp32, None (unset) leaves
    ``precision`` as it is; the two may not disagree."""
    if bf16 is None or precision == ("bf16" if bf16 else "fp32"):
        return precision
    if precision != "auto":
        alias = "--bf16 means --precision bf16" if bf16 else "bf16=False means precision fp32"
        raise UserError(f"{alias}, which contradicts --precision {precision}")
    return "bf16" if bf16 else "fp32"


_announced: set[tuple[str, str]] = set()


def announce(runtime: Runtime) -> None:
    """Print the choice (and any warning) to stderr, once per process and device + precision."""
    if (runtime.device, runtime.precision) in _announced:
        return
    _announced.add((runtime.device, runtime.precision))
    print(runtime.describe(), file=sys.stderr)
    if runtime.warning:
        print(f"warning: {runtime.warning}", file=sys.stderr)


def machine_line(runtime: Runtime | None = None) -> str:
    """The machine a report's numbers come from, with the runtime they ran under."""
    hw = detect_hardware()
    parts = [
        f"{hw.cpu_name}, {os.cpu_count()} cores, {hw.cpu_kind}",
        f"{torch.get_num_threads()} threads",
        f"torch {torch.__version__}",
    ]
    if hw.cuda_names:
        parts.append(", ".join(hw.cuda_names))
    if runtime is not None:
        parts.append(runtime.describe())
    return "; ".join(parts)


def matmul_peak(dtype: torch.dtype, device: str = "cpu", seconds: float = 1.0, n: int | None = None) -> float:
    """FLOP/s of a square (n x n) @ (n x n) product in a loop at ``dtype`` on ``device``: the most the
    matmul library delivers on this machine right now, the denominator of a share of the peak. bf16
    is timed as a plain bf16 product, which is what autocast runs. ``n`` defaults to 2048 on a CPU,
    8192 on a GPU."""
    on_cuda = torch.device(device).type == "cuda"
    n = n or (8192 if on_cuda else 2048)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b  # warm-up: first-call packing and thread start
    if on_cuda:
        torch.cuda.synchronize(device)
    count, start = 0, time.perf_counter()
    while True:
        a @ b
        count += 1
        if on_cuda:
            torch.cuda.synchronize(device)  # the product has only been queued until then
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and count >= 3:
            return 2.0 * n**3 * count / elapsed
