"""Keep freed memory in the process while training on a CPU.

Why: a training step allocates the same activation and gradient buffers every step, many of them
megabytes (an FFN activation of batch 16 x 128 x 1024 is 8 MiB in fp32). glibc's malloc gives such
blocks back to the kernel when they are freed (large ones are mmapped; the heap top is trimmed past
a small threshold), so the next step page-faults the same memory in again, zero-filled: a
measurable part of a small model's step (docs/results.md, Performance). PyTorch's CPU allocator has no cache
of its own, and Intel's PyTorch launcher swaps in jemalloc/tcmalloc for the
same reason; the glibc knobs get the same effect without another library.

The cost: memory freed during training stays mapped (up to ``TRIM_THRESHOLD`` at the heap top), so
resident memory stays at its high-water mark instead of shrinking between steps.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt parameters (malloc.h) and the values set.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks below this come from the heap, where freed ones are reused. 32 MiB is glibc's largest
# accepted value (HEAP_MAX_SIZE / 2 on 64-bit); its own adaptive threshold stops there too.
MMAP_THRESHOLD = 32 * 2**20
# Free memory at the heap top kept before trimming (glibc's default is 128 KiB once the mmap
# threshold is fixed, which would return every freed activation to the kernel).
TRIM_THRESHOLD = 2**30

_applied: bool | None = None


def retain_freed_memory(device_type: str = "cpu") -> bool:
    """Set glibc's mmap and trim thresholds for this process when training on ``device_type``
    "cpu" (once; later calls return the first answer). True when set; False for other devices
    (their memory is not glibc's) and where the C library is not glibc (macOS, musl), which is left
    as it is."""
    global _applied
    if device_type != "cpu":
        return False
    if _applied is None:
        _applied = False
        if sys.platform.startswith("linux"):
            try:
                mallopt = ctypes.CDLL("libc.so.6").mallopt
            except (OSError, AttributeError):
                return _applied
            mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
            _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            )
    return _applied
