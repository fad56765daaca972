"""Shared fixtures: a private tokenizer cache, a small plain-text corpus for fast runs, the
devices to run on (``device``: the CPU, and CUDA where a GPU is present; CUDA cases carry the
``gpu`` marker and are skipped elsewhere), and the precision ``auto`` means on a CPU: the
machine's own answer, ``--auto-precision fp32|bf16`` for the whole run (the other CPU kind's
answer, on any machine), or a test's ``@pytest.mark.precision("fp32")``, which pins it for that
test whatever the machine or the option (library calls and the CLI subprocesses it starts).

A test that compares numbers carries the precision it compares under; tolerances fit it."""

import os

import pytest
import torch

# Tests use tiny tensors: one thread avoids worker threads spinning against each other on 2 cores.
torch.set_num_threads(1)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# after the thread count and HF_HUB_OFFLINE are set: importing maskwise must already see them
from maskwise.runtime import AUTO_PRECISION_ENV, detect_hardware  # noqa: E402

HAS_CUDA = bool(detect_hardware().cuda_capabilities)
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU")])]


def pytest_addoption(parser):
    parser.addoption(
        "--auto-precision",
        choices=("fp32", "bf16"),
        default=None,
        help="make a CPU's precision auto answer this, as the other machine kind would "
        "(bf16 on an AVX2 machine runs emulated, slowly)",
    )


def pytest_configure(config):
    forced = config.getoption("--auto-precision")
    if forced:
        os.environ[AUTO_PRECISION_ENV] = forced  # inherited by the CLI subprocesses tests start


@pytest.fixture(autouse=True)
def _pinned_precision(request, monkeypatch):
    marker = request.node.get_closest_marker("precision")
    if marker is not None:
        monkeypatch.setenv(AUTO_PRECISION_ENV, marker.args[0])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    os.environ["MASKWISE_CACHE"] = str(tmp_path_factory.mktemp("maskwise-cache"))


@pytest.fixture(scope="session")
def small_text(tmp_path_factory):
    """About 60 kB of real play text (first speeches of several plays), as one plain-text file."""
    from maskwise.data.plays import load_plays, render_speech

    lines = []
    for play in load_plays()[:6]:
        lines.extend(render_speech(s) for s in play.speeches[:150])
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    return path
