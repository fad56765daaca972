"""compare's fine-tune-and-evaluate phase on the plays, timed at a base commit and at the working tree, side by side.

    python benchmarks/bench_finetune_phase.py [--base COMMIT] [--new COMMIT] [--points 3]
                                              [--families encoder,decoder,encoder-decoder] [--tokens 200000]
    python benchmarks/bench_finetune_phase.py --profile FILE [--family encoder]   # one family, this tree, cProfile

Why: compare is to fine-tune and evaluate every task at three points of pretraining compute, not one, within its
15 minutes on 2 cores; the extra points are paid for by speed, never by changing the fine-tuning rule. This times
exactly what compare runs for one column at one point (``compare_study.fine_tune``): each plays task the family can
take (``claims.plays_fine_tunes``, ``Task.cannot``), its config for the seed (``CompareSettings.task``) under the one
rule over its training rows (``ComparePlan.for_model``: ``FINE_TUNING.applied``), then ``run_task`` (fine-tune, then
evaluate under the runtime's inference mode). The bodies have ``recipes.DEFAULT``'s shape, pretrained here briefly
(point p of ``--points`` reads p/points of ``--tokens``; the timing does not depend on what they learned, but a
writer's answers' lengths do, so they are pretrained, not random), made once by the base side's library.

Side by side: the base commit's tree (and ``--new``'s, else the working tree's ``src``) is checked out into a ``git
worktree``; each side is one long-lived worker process (this script with ``--worker``, ``PYTHONPATH`` on its ``src``)
that runs every (family, point) it is asked in one process, as compare does, so that what a process reuses across
families and points counts. The parent asks the two in turns, (family, point) by (family, point), so that the load
of a shared machine falls on both. Each worker runs at one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``). It prints per task the seconds of each side (summed over points), old/new, and
whether the two records' JSON, less their clocks, is identical at every point (the scores for a seed must not move).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("encoder", "decoder", "encoder-decoder")
BASE = "0f2fcebae74a73b2b7876fe6a1a7958186f83c01"  # HEAD when this benchmark was written, before its speed-ups


# ---- a worker: one side ----------------------------------------------------------------------------------------


def body_folder(cache: Path, family: str, tokens: int) -> Path:
    return cache / f"{family}-{tokens}"


def pretrain_body(cache: Path, family: str, tokens: int) -> None:
    """The family's body at ``recipes.DEFAULT``'s shape, pretrained for ``tokens`` on the plays (seed 0), kept in
    ``cache`` so that both sides fine-tune the same weights."""
    from maskwise.data.corpus import SHAKESPEARE
    from maskwise.recipes import DEFAULT, pretrain_settings
    from maskwise.train.pretrain import PretrainConfig, pretrain

    folder = body_folder(cache, family, tokens)
    if not (folder / "model.safetensors").is_file():
        values = pretrain_settings(DEFAULT, DEFAULT.family_arm(family, SHAKESPEARE), 0, budget=f"tokens={tokens}")
        pretrain(PretrainConfig.from_flat({**values, "out": str(folder), "progress": False, "overwrite": True}))


def plays_fine_tunes(family: str) -> dict[str, str]:
    """compare's plays fine-tunes that ``family`` takes, measure key -> task kind: each plays row of the kinds compare
    reads when it is given no task (``claims.PLAYS_TASK_KINDS``), where the kind does not refuse the family
    (``Task.cannot``). Read from the registry, not from ``experiments``, whose in-flight edits must not stop a side."""
    from maskwise.families import family_of
    from maskwise.tasks.registry import TASKS

    kinds = ("tag", "classify", "embed", "seq2seq")
    return {p.key: k for k in kinds for p in TASKS[k].plays_rows if TASKS[k].cannot(family_of(family)) is None}


def untimed(value: Any) -> Any:
    """A record's JSON less its clocks (``finetune_s``, a retrieval's ``embed_s``, ``search_s``): what must not move."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not k.endswith("_s")}
    return [untimed(v) for v in value] if isinstance(value, list) else value


def phase(cache: Path, family: str, tokens: int, seed: int) -> dict[str, dict]:
    """Every plays fine-tune ``family`` takes on its body of ``tokens``, as compare runs it: key -> seconds, record."""
    import torch

    from maskwise.recipes import DEFAULT
    from maskwise.runs import load_run
    from maskwise.runtime import resolve
    from maskwise.tasks.finetune import FINE_TUNING
    from maskwise.tasks.registry import TASKS
    from maskwise.tasks.run import run_task

    runtime = resolve("cpu", "auto")
    out = {}
    for key, kind in plays_fine_tunes(family).items():
        run = load_run(body_folder(cache, family, tokens))  # fresh weights for every task, as compare loads the run
        cfg = DEFAULT.task(key, seed, progress=False)  # the plan's rows count (``ComparePlan.training``), then the rule
        cfg = FINE_TUNING.applied(cfg, TASKS[kind].training_rows(cfg, None), pretrained=False)
        torch.manual_seed(0)
        started = time.perf_counter()
        result = run_task(cfg, run.model, run.tokenizer, runtime, label=family)
        out[key] = {"seconds": time.perf_counter() - started, "record": untimed(result.record.to_json())}
    return out


def worker(cache: Path) -> None:
    """Answer one request per stdin line: {"pretrain": bool, "family", "tokens", "seed"} -> one RESULT line."""
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        ask = json.loads(line)
        if ask["pretrain"]:
            pretrain_body(cache, ask["family"], ask["tokens"])
            result: dict = {}
        else:
            result = phase(cache, ask["family"], ask["tokens"], ask["seed"])
        print("RESULT " + json.dumps(result), flush=True)


# ---- the parent: both sides, in turns ---------------------------------------------------------------------------


class Side:
    """A worker process on the library at ``src``."""

    def __init__(self, src: Path, cache: Path):
        env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        command = [sys.executable, __file__, "--worker", "--cache", str(cache)]
        self.src = src
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, family: str, tokens: int, seed: int, pretrain: bool = False) -> dict[str, dict]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps({"pretrain": pretrain, "family": family, "tokens": tokens, "seed": seed}) + "\n")
        stdin.flush()
        return self._answer(stdout)

    def _answer(self, stdout: IO[str]) -> dict[str, dict]:
        for line in stdout:
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT ") :])
        raise SystemExit(f"the worker on {self.src} stopped (its stderr above)")

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def tree(commit: str, cache: Path) -> Path:
    """``commit``'s ``src``, checked out (detached) into a ``git worktree`` under ``cache`` once."""
    where = cache / f"tree-{commit[:12]}"
    if not where.exists():
        add = ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), commit]
        subprocess.run(add, check=True, capture_output=True)
    return where / "src"


def resolved(commit: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def profile(args: argparse.Namespace) -> None:
    """One family's phase at the whole budget in this process (this tree's library), under cProfile."""
    import torch

    torch.set_num_threads(1)
    cache = Path(args.cache)
    pretrain_body(cache, args.family, args.tokens)
    profiler = cProfile.Profile()
    result = profiler.runcall(phase, cache, args.family, args.tokens, args.seed)
    profiler.dump_stats(args.profile)
    pstats.Stats(args.profile).sort_stats("cumulative").print_stats(60)
    print({key: round(value["seconds"], 1) for key, value in result.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help="be one side (the parent starts these)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--points", type=int, default=3, help="points of pretraining compute, as compare's ladder")
    parser.add_argument("--base", default=BASE, help="the commit before the speed-ups")
    parser.add_argument("--new", default="", help="a commit to time instead of the working tree")
    parser.add_argument("--tokens", type=int, default=200_000, help="the last point's pretraining tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "maskwise-bench-phase"))
    parser.add_argument("--profile", default="", help="profile --family's phase into this file instead")
    parser.add_argument("--family", default="encoder", help="with --profile: the family")
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.worker:
        return worker(cache)
    if args.profile:
        return profile(args)
    base, new_commit = resolved(args.base), resolved(args.new) if args.new else ""
    sides = {
        "old": Side(tree(base, cache), cache),
        "new": Side(tree(new_commit, cache) if new_commit else ROOT / "src", cache),
    }
    families = args.families.split(",")
    budgets = [args.tokens * (p + 1) // args.points for p in range(args.points)]
    for family in families:  # by the base's library, so that the bodies are the same whatever the new side changed
        for tokens in budgets:
            sides["old"].ask(family, tokens, args.seed, pretrain=True)
    seconds: dict[tuple[str, str, str], float] = {}
    same: dict[tuple[str, str], bool] = {}
    turn = 0
    for family in families:
        for tokens in budgets:  # compare's order: a column's points, then the next column
            order = ("old", "new") if turn % 2 == 0 else ("new", "old")
            turn += 1
            measured = {name: sides[name].ask(family, tokens, args.seed) for name in order}
            for key, old in measured["old"].items():
                new = measured["new"][key]
                for name, value in (("old", old), ("new", new)):
                    seconds[family, key, name] = seconds.get((family, key, name), 0.0) + value["seconds"]
                same[family, key] = same.get((family, key), True) and old["record"] == new["record"]
    for side in sides.values():
        side.close()
    new_name = new_commit[:10] or "the working tree"
    print(f"compare's fine-tune-and-evaluate phase on the plays, seed {args.seed}, points of {budgets} tokens")
    print(f"old: {base[:10]}, new: {new_name}; 1 thread a side, in turns; seconds summed over the points")
    print(f"{'family':<16} {'task':<9} {'old s':>7} {'new s':>7} {'old/new':>8}  records at every point")
    total = {"old": 0.0, "new": 0.0}
    for family, key in same:
        old_s, new_s = seconds[family, key, "old"], seconds[family, key, "new"]
        total["old"], total["new"] = total["old"] + old_s, total["new"] + new_s
        verdict = "identical" if same[family, key] else "DIFFER"
        print(f"{family:<16} {key:<9} {old_s:7.1f} {new_s:7.1f} {old_s / new_s:8.2f}  {verdict}")
    print(f"{'all':<26} {total['old']:7.1f} {total['new']:7.1f} {total['old'] / total['new']:8.2f}")


if __name__ == "__main__":
    main()
