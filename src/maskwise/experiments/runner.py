"""What every experiment shares: a folder of cached steps, so an interrupted run continues.

Each named step (a pretraining run, an evaluation) writes its JSON result atomically to
``steps/<name>.json`` when it finishes; running the experiment again skips finished steps and
resumes an interrupted pretraining run from its newest checkpoint. Nothing is recomputed that was
already measured, and nothing measured is ever overwritten by a partial result.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import torch

from maskwise import runs
from maskwise.config import ModelConfig
from maskwise.experiments.eta import Ledger
from maskwise.families import Family
from maskwise.runtime import Runtime, detect_hardware, resolve
from maskwise.train.points import branch
from maskwise.train.pretrain import PretrainConfig, pretrain


def machine_info(runtime: Runtime) -> dict[str, Any]:
    """The machine and runtime an experiment's numbers come from (its report's machine line)."""
    hw = detect_hardware()
    return {
        "cpu": hw.cpu_name,
        "cpu_capability": hw.cpu_kind,
        "cores": os.cpu_count(),
        "gpus": list(hw.cuda_names),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "runtime": runtime.to_dict(),
    }


def step_file(out: Path, name: str) -> Path:
    """Where experiment folder ``out`` keeps step ``name``: a file name, and one per step name."""
    return out / "steps" / (quote(name, safe="-_.=%") + ".json")


class Experiment:
    """An experiment folder; its pretraining runs and the models it loads use one ``runtime``."""

    def __init__(self, out: str | Path, overwrite: bool = False, runtime: Runtime | None = None):
        self.out = Path(out)
        self.runtime = runtime or resolve()
        marker = self.out / "experiment.json"
        runs.prepare_folder(
            self.out, overwrite, resume=not overwrite, marker=marker.name, kind="maskwise experiment folder"
        )
        (self.out / "steps").mkdir(exist_ok=True)
        if not marker.is_file():
            runs.write_json(marker, {"created": time.time()})
        self.started = time.perf_counter()
        # A busy machine when the experiment started explains a slow one (the report's warning).
        self.load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.reused_s = 0.0  # what the steps this invocation found finished had taken
        self.ledger: Ledger | None = None  # the whole command's progress, told of every step that finishes
        self._timed: set[str] = set()  # steps whose seconds elapsed() already holds (read twice, counted once)

    def _step_path(self, name: str) -> Path:
        return step_file(self.out, name)

    def step(self, name: str, compute: Callable[[], dict]) -> dict:
        """``compute()`` once; its result (with ``step_s``, its seconds) is cached under ``name``
        for later runs."""
        path = self._step_path(name)
        if path.is_file():
            result = runs.read_json(path)
            if name not in self._timed:
                self.reused_s += result.get("step_s", 0.0)
                self._timed.add(name)
                if self.ledger is not None:
                    self.ledger.finished(name, 0.0, reused=True)
            return result
        started = time.perf_counter()
        result = compute()
        result["step_s"] = time.perf_counter() - started
        runs.write_json(path, result)
        self._timed.add(name)  # this invocation's clock holds it
        if self.ledger is not None:
            self.ledger.finished(name, result["step_s"])
        return result

    def cached(self, name: str) -> dict | None:
        """Step ``name``'s result where an earlier invocation finished it, else None."""
        path = self._step_path(name)
        return runs.read_json(path) if path.is_file() else None

    def keep_recipe(self, name: str, recipe: dict) -> tuple[dict | None, bool]:
        """Store ``recipe`` as step ``name`` when the folder is new. Returns the recipe the folder was
        made with when it is another (None when it is this one) and whether the folder is new:
        cached steps are only valid for the recipe that made them, so a caller refuses to continue
        under another."""
        new = not self._step_path(name).is_file()
        kept = json.loads(json.dumps(recipe))  # as the folder keeps it (tuples as lists)
        stored = {k: v for k, v in self.step(name, lambda: dict(kept)).items() if k != "step_s"}
        return (None if stored == kept else stored), new

    def run_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def pretrain(self, name: str, progress: bool = False, **settings: Any) -> dict:
        """A cached pretraining run: returns its curve and run folder (the model stays on disk)."""

        def run() -> dict:
            values = {"progress": progress, **settings, "out": str(self.run_dir(name)), "resume": True}
            pretrain(PretrainConfig.from_flat(values), runtime=self.runtime)
            return self._trained(name)

        return self.step(f"pretrain-{name}", run)

    def branch(self, name: str, source: str, fraction: float, progress: bool = False) -> dict:
        """A cached shorter run: pretraining run ``source``'s point ``fraction`` cooled down as a run of that fraction
        of its budget (``train.points``), returned as ``pretrain`` returns a run."""

        def run() -> dict:
            folder = self.run_dir(name)
            if (folder / runs.CONFIG_FILE).is_file():  # branched already: an interrupted cooldown resumes
                settings = runs.read_json(folder / runs.CONFIG_FILE)["settings"]
            else:
                settings = branch(self.run_dir(source), fraction, folder)
            pretrain(PretrainConfig.from_flat({**settings, "progress": progress, "resume": True}), runtime=self.runtime)
            return self._trained(name)

        return self.step(f"cooldown-{name}", run)

    def _trained(self, name: str) -> dict:
        """A finished pretraining run as a study reads it: its curve (across resumes), parameters and settings."""
        config = runs.read_json(self.run_dir(name) / runs.CONFIG_FILE)
        return {
            "name": name,
            "run_dir": str(self.run_dir(name)),
            "curve": runs.read_metrics(self.run_dir(name)),
            "parameters": config["parameters"],
            "settings": config["settings"],
        }

    def load(self, name: str) -> runs.Run:
        """A finished run, its model on this experiment's device."""
        run = runs.load_run(self.run_dir(name))
        run.model.to(self.runtime.torch_device)
        return run

    def kind(self, name: str) -> Family:
        """A finished run's family as its model reads (``ModelConfig.kind``), from its config alone."""
        return ModelConfig.from_dict(runs.read_run_config(self.run_dir(name))["model"]).kind

    def elapsed(self) -> float:
        """This invocation's seconds plus those of the finished steps it reused: the experiment's
        time as if it had run once without interruption (less what an interrupted step had done)."""
        return time.perf_counter() - self.started + self.reused_s
