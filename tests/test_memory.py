"""retain_freed_memory: freed training buffers stay in the process instead of going back to the kernel."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# A child process allocates 16 MiB with malloc, touches every page, frees it, and prints how much of
# it is still resident (MiB), with or without retain_freed_memory() first.
CHILD = """
import ctypes, os, sys
from maskwise.kernels.memory import retain_freed_memory
applied = retain_freed_memory() if sys.argv[1] == "retain" else None
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
page = os.sysconf("SC_PAGE_SIZE")
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20
before = resident()
block = libc.malloc(16 * 2**20)
ctypes.memset(block, 1, 16 * 2**20)
libc.free(block)
print(applied, round(resident() - before, 1))
"""


def _kept_after_free(mode: str) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True).stdout
    applied, kept = out.split()
    return applied, float(kept)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_blocks_stay_resident_only_with_retain_freed_memory():
    applied, kept = _kept_after_free("retain")
    assert applied == "True"
    assert kept >= 15  # the freed 16 MiB are still mapped, ready for the next step
    _, kept_by_default = _kept_after_free("default")
    assert kept_by_default < 2  # glibc's default: a 16 MiB block is mmapped and unmapped on free


@pytest.mark.unit
def test_retain_freed_memory_leaves_other_devices_alone():
    from maskwise.kernels.memory import retain_freed_memory

    for device_type in ("cuda", "mps"):
        assert retain_freed_memory(device_type) is False  # not glibc's memory: left alone
