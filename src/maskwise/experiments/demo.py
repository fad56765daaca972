"""``maskwise demo``: the smallest look at the seed's claim, in about four minutes on 2 CPU cores.

A decoder (CLM) and an encoder (MLM) train for the same wall-clock on the plays, each on ``compare``'s
default recipe (its block, size and objective for the family), so the demo shows the models the main job
measures; then the decoder writes a continuation and the encoder fills a blank, and both loss curves are
drawn. ``maskwise compare`` is the full, measured version of this.
"""

from __future__ import annotations

from pathlib import Path

from maskwise.experiments.report import pyplot
from maskwise.recipes import DEFAULT, pretrain_settings
from maskwise.runs import prepare_folder, write_json
from maskwise.runtime import Runtime, resolve
from maskwise.tasks.fill_mask import fill_mask
from maskwise.tasks.generate import GenerationConfig, generate_text
from maskwise.tasks.reading import seeded_generator
from maskwise.train.pretrain import PretrainConfig, pretrain

PROMPT = "ROMEO\n"
MARKER = "demo.json"  # what makes a folder one a demo wrote, and may replace
BLANK = "To be, or not to be: that is the q[MASK]estion"


def run_demo(
    out: str | Path = "runs/demo", seconds: float = 120.0, progress: bool = True, runtime: Runtime | None = None
) -> dict:

    # Each demo replaces the last one, and only a folder a demo wrote: `--out runs` must not wipe runs/encoder.
    out = prepare_folder(Path(out), overwrite=True, marker=MARKER, kind=f"folder maskwise demo wrote (no {MARKER})")
    write_json(out / MARKER, {"seconds": seconds})
    runtime = runtime or resolve()
    runs = {}
    for family in ("decoder", "encoder"):
        recipe = pretrain_settings(DEFAULT, {"family": family}, seed=0, budget=f"seconds={seconds}")
        settings = PretrainConfig.from_flat(
            {**recipe, "progress": progress, "out": str(out / family), "overwrite": True}
        )
        runs[family] = pretrain(settings, runtime=runtime)
    decoder, encoder = runs["decoder"], runs["encoder"]
    sample = generate_text(
        decoder["model"].eval(),
        decoder["tokenizer"],
        [PROMPT],
        GenerationConfig(max_new_tokens=240, temperature=0.8, top_k=40),
        seeded_generator(decoder["model"], 0),
    )[0]
    filled = fill_mask(encoder["model"].eval(), encoder["tokenizer"], BLANK, top_k=5)[0]
    plot = _plot({f: r["records"] for f, r in runs.items()}, out / "loss.png")
    return {
        "sample": PROMPT + sample,
        "fill_mask": filled,
        "plot": plot,
        "final": {f: r["records"][-1] for f, r in runs.items()},
    }


def _plot(curves: dict[str, list[dict]], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    labels = {
        "decoder": "decoder, CLM (loss on every next token)",
        "encoder": "encoder, MLM (loss on 15% masked tokens)",
    }
    for family, records in curves.items():
        ax.plot([r["wall_s"] for r in records], [r["val_loss"] for r in records], marker=".", label=labels[family])
    ax.set_xlabel("training wall-clock (s)")
    ax.set_ylabel("validation loss (nats per loss position)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
