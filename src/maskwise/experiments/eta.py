"""The whole command's progress: one bar over every step an experiment will take, and the time left, estimated
before anything runs from a measured probe of this machine and re-estimated from each step's measured seconds.

Pretraining runs on a clock, so its minutes are known; a fine-tune's are not. Before the first one runs they are
estimated from the work it will do (tokens trained, tokens read to evaluate, small forward calls such as a decoding
step) at the speeds a few seconds' probe measures on this machine; once a kind of step has run, its own measured
seconds replace the estimate, and the others are scaled by how far the estimates of those that ran were off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import quote

import torch
from tqdm import tqdm

from maskwise.model.transformer import build_model
from maskwise.runtime import Runtime
from maskwise.tasks.reading import body_of
from maskwise.tasks.unit import Speeds
from maskwise.train.pretrain import PretrainConfig, model_config

# Joins what a step measures to the run it measures; quoted out of both parts, so no two pairs share a name.
STEP_SEPARATOR = "="


def step_name(what: str, run: str) -> str:
    """The step (and fine-tune folder) name of measuring ``what`` on run ``run``: one-to-one with the pair, whatever
    characters either holds (``what`` "x" on run "encoder-decoder-seed0" and "x-encoder" on "decoder-seed0" differ)."""
    return f"{quote(what, safe='-_.')}{STEP_SEPARATOR}{quote(run, safe='-_.')}"


def probe(settings: dict, runtime: Runtime, rows: int = 16, length: int = 128) -> Speeds:
    """``probe_model`` on the scale's fresh body (``settings``: flat pretraining settings), a second or two in all on
    2 cores at the default scale."""
    return probe_model(
        build_model(model_config(PretrainConfig.from_flat(settings), 256)).to(runtime.torch_device),
        runtime,
        rows,
        length,
    )


def probe_model(model: torch.nn.Module, runtime: Runtime, rows: int = 16, length: int = 128) -> Speeds:
    """A few steps of ``model`` (on the runtime's device): training (forward, backward, AdamW) and reading ``rows`` x
    ``length`` tokens (fewer where its context is shorter), and a one-token call; each after a warm-up turn. Its
    weights change (the training turns): a copy or a model about to be thrown away."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    body = body_of(model)
    length = min(length, body.cfg.max_seq_len)
    high = min(256, body.cfg.vocab_size)  # ordinary ids of any vocabulary (a character one has under 256)
    ids = torch.randint(5, high, (rows, length), generator=generator).to(runtime.torch_device)  # (rows, length)
    mask = torch.ones_like(ids)

    def timed(fn, turns: int = 3) -> float:
        fn()  # warm-up, not kept
        started = time.perf_counter()
        for _ in range(turns):
            fn()
        return (time.perf_counter() - started) / turns

    def train() -> None:
        with runtime.autocast():
            loss = body.read(ids, mask).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    one = ids[:, :1]  # (rows, 1): a decoding step's input
    model.eval()
    with torch.no_grad(), runtime.inference().autocast():
        reading = timed(lambda: body.read(ids, mask))
        call = timed(lambda: body.read(one, mask[:, :1]), turns=5)
    model.train()
    training = timed(train)
    return Speeds(training / ids.numel(), reading / ids.numel(), call, length, body.cfg.d_model)


@dataclass
class Expected:
    """A kind of step the command takes: its step names' prefix, how many, and the seconds of each as estimated."""

    prefix: str
    count: int
    seconds: float


class Ledger:
    """Every step of the command as it finishes, and the time left (``remaining``) on one progress bar."""

    def __init__(self, expected: list[Expected], progress: bool, what: str):
        self.expected = {e.prefix: e for e in expected}
        self.measured: dict[str, list[float]] = {e.prefix: [] for e in expected}
        self.reused: dict[str, int] = {e.prefix: 0 for e in expected}
        self.started = time.perf_counter()
        self.bar = tqdm(
            total=sum(e.count for e in expected),
            desc=what,
            unit="step",
            dynamic_ncols=True,
            disable=not progress,
            postfix=[""],
            bar_format="{desc}: {n}/{total} steps |{bar}| {postfix[0]}",
        )
        self._show()

    def kind_of(self, name: str) -> str | None:
        """The expected kind a step name belongs to (the longest prefix it starts with), or None."""
        what, separator, _ = name.partition(STEP_SEPARATOR)  # a measure's step (``step_name``)
        if separator:
            return what if what in self.expected else None
        kinds = [p for p in self.expected if name == p or name.startswith(p + "-")]
        return max(kinds, key=len, default=None)

    def finished(self, name: str, seconds: float, reused: bool = False) -> None:
        """Step ``name`` done: its ``seconds`` measured, or found finished by an earlier invocation (``reused``)."""
        kind = self.kind_of(name)
        if kind is None:
            return
        if reused:
            self.reused[kind] += 1
        else:
            self.measured[kind].append(seconds)
        self.bar.update(1)
        self._show()

    def remaining(self) -> float:
        """Seconds left: each kind's mean measured seconds where it has run, else its estimate scaled by how far
        the estimates of the kinds that ran were off (the clock-bound pretraining aside, whose seconds are set)."""
        ran = [k for k, seconds in self.measured.items() if seconds and k != "pretrain"]
        scale = (
            (
                sum(sum(self.measured[k]) / len(self.measured[k]) for k in ran)
                / max(sum(self.expected[k].seconds for k in ran), 1e-9)
            )
            if ran
            else 1.0
        )
        left = 0.0
        for kind, e in self.expected.items():
            count = e.count - len(self.measured[kind]) - self.reused[kind]
            if count <= 0:
                continue
            done = self.measured[kind]
            each = sum(done) / len(done) if done else e.seconds * (1.0 if kind == "pretrain" else scale)
            left += count * each
        return left

    def _show(self) -> None:
        if self.bar.disable:
            return
        elapsed = time.perf_counter() - self.started
        self.bar.postfix[0] = f"{_clock(elapsed)} elapsed, about {_clock(self.remaining())} left"
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"
