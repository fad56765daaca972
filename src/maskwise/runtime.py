"""Where and how a model runs: the device and the precision, decided once, with the reason.

Every command and the library's training loops take a ``Runtime`` from ``resolve(device,
precision)``; nothing else in maskwise reads hardware flags. ``auto`` means the best the hardware
runs fast, as nanoGPT's ``device``/``dtype`` settings hand-pick it:

- device: CUDA if present (``cuda:LOCAL_RANK`` under torchrun), else MPS, else the CPU;
- precision on CUDA: bf16 where the GPU has native bf16 (compute capability 8.0 and newer), else
  fp16 autocast with a gradient scaler;
- precision on a CPU: bf16 only where the CPU has native bf16 instructions (avx512_bf16, AMX, or
  Arm's bf16) *and* a short probe finds a bf16 matmul faster than an fp32 one; else fp32 (without
  native support a bf16 matmul is emulated and can be ~90x slower than fp32);
- precision on MPS: fp32 (nothing here has measured Apple GPUs).

An explicit precision the hardware runs slowly still runs, with a one-line warning; a device that
is not present is bad input (``UserError``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from maskwise.errors import UserError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (AVX-512 BF16, AMX) and Arm (FEAT_BF16)
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


def _cpu_facts() -> tuple[frozenset[str], str]:
    """The CPU's feature flags and model name from /proc/cpuinfo (empty where there is none)."""
    flags: set[str] = set()
    name = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset(), name
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "model name" and value.strip():
            name = value.strip()
    return frozenset(flags), name


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


@functools.cache
def cpu_bf16_speedup(size: int = 256, repeats: int = 5) -> float:
    """fp32 time / bf16 time of one ``size``-square matmul on this CPU (best of ``repeats``).

    Only asked where the CPU has native bf16, so the probe never runs the emulated (slow) path."""
    a32, b32 = torch.randn(size, size), torch.randn(size, size)
    a16, b16 = a32.bfloat16(), b32.bfloat16()

    def best(a, b) -> float:
        a @ b  # warm-up: the first call pays for kernel selection
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times)

    return best(a32, b32) / max(best(a16, b16), 1e-9)


@dataclass(frozen=True)
class Runtime:
    """A device and a precision, with why they were chosen (and a warning if the choice is slow)."""

    device: str  # "cpu", "cuda:0", "mps"
    precision: str  # "fp32", "bf16" or "fp16"
    reason: str
    warning: str = ""

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

    def autocast(self):
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
        return {key: (value.pin_memory() if pin else value).to(self.torch_device, non_blocking=pin)
                if isinstance(value, torch.Tensor) else value for key, value in batch.items()}

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
            raise UserError(f"--device {requested}: CUDA is not available here "
                            f"(torch {torch.__version__}, no CUDA GPU visible)")
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


def _cpu_precision(requested: str, hw: Hardware, probe: Callable[[], float]) -> tuple[str, str, str]:
    isa = hw.cpu_capability
    if requested == "auto":
        if not hw.cpu_bf16_native:
            return "fp32", f"this CPU has no native bf16 ({isa})", ""
        speedup = probe()
        if speedup > 1.0:
            return "bf16", f"this CPU has native bf16 ({isa}) and a bf16 matmul ran {speedup:.1f}x faster than fp32", ""
        return "fp32", f"this CPU has native bf16 ({isa}) but a bf16 matmul ran at {speedup:.2f}x of fp32", ""
    native = {"bf16": hw.cpu_bf16_native, "fp16": any(f in hw.cpu_flags for f in CPU_FP16_FLAGS)}
    if requested in native and not native[requested]:
        return requested, "asked for", (f"precision {requested} on a CPU without native {requested} ({isa}): "
                                        "its matmuls are emulated and may be far slower than fp32")
    return requested, "asked for", ""


def resolve(device: str = "auto", precision: str = "auto", hardware: Hardware | None = None,
            bf16_probe: Callable[[], float] = cpu_bf16_speedup) -> Runtime:
    """The device and precision to run on, from the user's settings and the hardware present."""
    precision = precision.strip().lower()
    if precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    hw = hardware if hardware is not None else detect_hardware()
    chosen = _device(device, hw)
    kind = torch.device(chosen).type
    if kind == "cuda":
        index = torch.device(chosen).index or 0
        name = hw.cuda_names[index] if index < len(hw.cuda_names) else ""
        dtype, reason, warning = _cuda_precision(precision, hw.cuda_capabilities[index], name)
    elif kind == "mps":
        dtype, reason, warning = ("fp32", "MPS: fp32 (bf16/fp16 not measured there)", "") \
            if precision == "auto" else (precision, "asked for", "")
    else:
        dtype, reason, warning = _cpu_precision(precision, hw, bf16_probe)
    return Runtime(chosen, dtype, reason, warning)


def precision_setting(precision: str, bf16: bool) -> str:
    """``--bf16`` is an alias of ``--precision bf16``; the two may not disagree."""
    if not bf16:
        return precision
    if precision not in ("auto", "bf16"):
        raise UserError(f"--bf16 means --precision bf16, which contradicts --precision {precision}")
    return "bf16"


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
    parts = [f"{hw.cpu_name}, {os.cpu_count()} cores, {hw.cpu_capability}",
             f"{torch.get_num_threads()} threads", f"torch {torch.__version__}"]
    if hw.cuda_names:
        parts.append(", ".join(hw.cuda_names))
    if runtime is not None:
        parts.append(runtime.describe())
    return "; ".join(parts)
