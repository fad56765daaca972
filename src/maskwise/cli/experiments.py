"""``maskwise demo``, ``compare``, ``ablate`` and ``report``: the experiments that show why."""

from __future__ import annotations


def register(subparsers) -> None:
    demo = subparsers.add_parser("demo", help="train a small decoder and encoder and show what each can do")
    demo.add_argument("--seconds", type=float, default=120.0, help="training seconds per model (default 120)")
    demo.add_argument("--out", default="runs/demo")
    demo.add_argument("--no-progress", dest="progress", action="store_false")
    demo.set_defaults(handler=run_demo)

    report = subparsers.add_parser("report", help="re-render report.md/.html from an experiment's results.json")
    report.add_argument("run_dir")
    report.set_defaults(handler=run_report)


def run_demo(args) -> int:
    from maskwise.errors import UserError
    from maskwise.experiments.demo import BLANK, run_demo

    if not args.seconds > 0:
        raise UserError(f"--seconds must be positive, got {args.seconds}")
    result = run_demo(args.out, args.seconds, args.progress)
    for family, record in result["final"].items():
        extra = f", masked accuracy {record['val_masked_acc']:.3f}" if "val_masked_acc" in record else ""
        print(f"{family}: {record['step']} steps, {record['tokens_seen']:,} tokens in {record['wall_s']:.0f} s, "
              f"validation loss {record['val_loss']:.3f}{extra}")
    print("\n--- the decoder continues a prompt (temperature 0.8, top-k 40) ---")
    print(result["sample"])
    print(f"\n--- the encoder fills a blank: {BLANK} ---")
    print("  ".join(f"{token!r} {p:.2f}" for token, p in result["fill_mask"]))
    print(f"\nloss curves: {result['plot']}")
    return 0


def run_report(args) -> int:
    from maskwise.experiments.report import render

    print(render(args.run_dir))
    return 0
