"""Run every side-by-side benchmark and print one Markdown report: one table, then the decoding cost
curve and the bf16 quality check.

    python benchmarks/run_all.py [--quick] [--only train,decode,embed,bf16,finetune] [--out report.md] [--device auto]

Each benchmark runs as its own process, one after the other (two at once would time each other). Each
target is judged met or not by its median ratio; for each one missed, ``profile_step.py --floor`` then splits
that side's step against its reference, and the report says whether torch's matrix-product and attention
kernels alone already take more than the target allows (out of reach on this machine) or what else the time
is spent in.
``--quick`` uses fewer rounds and steps: for checking that everything runs, not for numbers. Exit
status 1 if a benchmark failed (its error is printed); targets missed are reported, not failures.
``--device`` goes to the training benchmarks (train, bf16); decoding and embedding run on the CPU.

bf16 runs only where the device runs it fast (``maskwise.runtime.resolve(device, "auto")`` picks
bf16 there): elsewhere the bf16 quality check is not started, the training benchmarks leave out
their bf16 sides and the bf16 peak, and the report lists what was skipped and why.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

HERE = Path(__file__).resolve().parent

# name -> (script arguments, quick arguments)
BENCHES = {
    "train": [
        (["bench_train.py", "--objective", "mlm"], ["--rounds", "2", "--steps", "1"]),
        (["bench_train.py", "--objective", "clm", "--compile", "--warmup", "2"], ["--rounds", "2", "--steps", "1"]),
        (["bench_train.py", "--objective", "span"], ["--rounds", "2", "--steps", "1"]),
        # GPT-2-small's width, where matrix products dominate a step: the share of the matmul peak it reaches
        (
            [
                "bench_train.py",
                "--objective",
                "clm",
                "--d-model",
                "768",
                "--heads",
                "12",
                "--d-ff",
                "3072",
                "--rounds",
                "3",
                "--steps",
                "2",
                "--warmup",
                "1",
            ],
            ["--rounds", "2", "--steps", "1"],
        ),
    ],
    "decode": [
        (
            ["bench_decode.py", "--curve", "16,32,64,128", "--curve-repeats", "1"],
            ["--rounds", "2", "--new-tokens", "32", "--curve", "16,32,64"],
        )
    ],
    "embed": [(["bench_embed.py", "--lines", "512"], ["--rounds", "2", "--lines", "256"])],
    "bf16": [(["bench_bf16.py"], ["--steps", "20", "--eval-batches", "4"])],
    "finetune": [(["bench_finetune.py", "--shape", "compare"], ["--quick"])],
}


def why_missed(rows: list[common.Row], args, failed: list[str]) -> list[str]:
    """For each target a row missed, ``profile_step.py --floor``'s split of that side's step against its
    reference: whether torch's kernels alone exceed what the target allows, or what else takes the time."""
    why = []
    for row in rows:
        if row.met is not False:
            continue
        if not row.profile:
            why.append(f"{row.bench}, {row.side}: {row.target} not met; its benchmark has no step profile")
            continue
        quick = ["--steps", "2", "--warmup", "1"] if args.quick else []
        threads = ["--threads", str(args.threads)] if args.threads else []
        command = [*row.profile, "--floor", "--target", row.target, *quick, *threads]
        print(f"running profile_step.py {' '.join(command)}", file=sys.stderr, flush=True)
        result = subprocess.run(
            [sys.executable, str(HERE / "profile_step.py"), *command], capture_output=True, text=True, check=False
        )
        if result.returncode:
            failed.append("profile_step.py")
            print(
                f"profile_step.py {' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}",
                file=sys.stderr,
            )
            continue
        split = result.stdout.splitlines()[1:]  # the first line names the machine, as the report's header does
        heading = (
            f"{row.bench}, {row.side}, {row.target} not met (`python benchmarks/profile_step.py {' '.join(command)}`):"
        )
        why.append("\n".join([heading, "```", *split, "```"]))
    return why


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(BENCHES))
    parser.add_argument("--out", help="also write the report to this file")
    parser.add_argument("--threads", type=int, default=0, help="passed to every benchmark but bf16 (see common.py)")
    parser.add_argument("--device", default="auto", help="for the training benchmarks (train, bf16): auto, cpu, cuda")
    args = parser.parse_args()
    runtime = common.device_runtime(args.device)
    rows, runs, sections, failed, skipped = [], [], [], [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="maskwise-bench-") as tmp:
        for name in args.only.split(","):
            if name == "bf16" and not common.bf16_fast(runtime):
                skipped.append(common.skipped_line("bench_bf16.py (the bf16 quality check)", runtime))
                print(skipped[-1], file=sys.stderr, flush=True)
                continue
            for i, (command, quick) in enumerate(BENCHES[name]):
                out = Path(tmp) / f"{name}-{i}.json"
                argv = [
                    sys.executable,
                    str(HERE / command[0]),
                    *command[1:],
                    *(quick if args.quick else []),
                    *(["--threads", str(args.threads)] if args.threads and name != "bf16" else []),
                    *(["--device", runtime.device] if name in ("train", "bf16") else []),
                    "--json",
                    str(out),
                ]
                print(f"running {' '.join(argv[1:-2])}", file=sys.stderr, flush=True)
                result = subprocess.run(argv, capture_output=True, text=True, check=False)  # failure: no JSON, below
                if not out.is_file():
                    failed.append(command[0])
                    print(
                        f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}",
                        file=sys.stderr,
                    )
                    continue
                report = json.loads(out.read_text())
                rows += [common.Row(**row) for row in report["rows"]]
                skipped += [f"{line} ({' '.join(command)})" for line in report.get("skipped", [])]
                runs.append("- " + "; ".join(line.removeprefix("command: ") for line in report["header"][1:]))
                sections += report["extra"]
    if why := why_missed(rows, args, failed):
        sections.insert(
            0, "\n\n".join(["Targets not met, and where the step's time goes (`profile_step.py --floor`):", *why])
        )
    lines = [
        f"machine: {common.machine(runtime)}",
        f"command: python benchmarks/run_all.py {' '.join(sys.argv[1:])}",
        f"total {time.perf_counter() - started:.0f} s",
        "",
        common.markdown(rows),
        "",
        *runs,
    ]
    if skipped:
        lines += ["", "Skipped:", *(f"- {line}" for line in skipped)]
    for section in sections:
        lines += ["", section]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
