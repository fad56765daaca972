"""compare's ladder in its report: a curve per row along pretraining compute (a line per family with its intervals, the
trivial baseline and the classic method as horizontal lines), each point's compute and validation loss, and each
claim's and row's trend and crossing as the results' ``ladder`` holds them (``experiments.ladder``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from maskwise.experiments.drawing import COLOURS, markdown_table, ordered, pyplot, slug

ALONG_PREFIX = "along_"  # the curves' file names: the report shows them under their own heading


def plot_along(results: dict, out: Path) -> list[Path]:
    """One figure per row: the metric against pretraining seconds on a log axis, each column's mean and 95% interval
    at every point, the trivial baseline (dashed) and the classic method on the same characters (solid) and on whole
    texts (dotted) at the final point."""
    curves = results.get("ladder", {}).get("curves", {})
    if not curves:
        return []
    plt = pyplot()
    paths = []
    for label, curve in curves.items():
        fig, ax = plt.subplots(figsize=(8.4, 4.2))  # room for the legend beside
        xs = curve["seconds"]
        for column in ordered(curve["columns"]):
            points = curve["columns"][column]
            means = [p[0] for p in points]
            errors = [[p[0] - p[1] for p in points], [p[2] - p[0] for p in points]]
            judged = column in curve.get("judged", [])
            ax.errorbar(
                xs,
                means,
                yerr=errors,
                marker="o",
                capsize=3,
                color=COLOURS.get(column),
                linewidth=2 if judged else 1,
                label=column + (" (judged)" if judged else ""),
            )
        baseline, classic = curve.get("baseline", {}), curve.get("classic")
        if baseline.get("value") is not None:
            ax.axhline(baseline["value"], color="#c44e52", linestyle="--", label=f"trivial: {baseline['name']}")
        if classic is not None:  # named in the title: a classic method's name is long
            ax.axhline(classic["same"], color="black", label="classic method, same characters")
            if classic.get("whole") is not None:
                ax.axhline(classic["whole"], color="black", linestyle=":", label="classic method, whole texts")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel("pretraining seconds per family (log scale)")
        direction = " (higher is better)" if curve["higher"] else " (lower is better)"
        title = label + direction + (f"; classic method: {classic['name']}" if classic is not None else "")
        ax.set_title("\n".join(textwrap.wrap(title, 72)), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = out / f"{ALONG_PREFIX}{slug(label)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def along_lines(results: dict, images: list[Path]) -> list[str]:
    """The report's "Along compute" section: how to read it, each point's compute, the claims' and rows' trends and
    crossings, and the curves."""
    ladder = results.get("ladder")
    if not ladder:
        return []
    compute = ladder["compute"]
    families = ordered(compute[0]["families"])
    rows = [
        [
            f"{point['seconds']:g} s ({point['fraction']:g} of the clock)",
            *[
                f"{f['wall_s']:.3g} s, {f['flops']:.3g} FLOPs, {f['tokens_seen']:,.0f} tokens; "
                f"val loss {f['val_loss']:.3f}"
                for f in (point["families"][family] for family in families)
            ],
        ]
        for point in compute
    ]
    trends = list(ladder["trends"].values())
    delta = trends[0]["delta"] if trends else None
    lines = [
        "## Along compute",
        "",
        "Every row measured at each point of pretraining compute: each family's run branched off its stable phase at "
        "that point and cooled down as a run of that length (warmup, stable, decay), then fine-tuned and scored "
        "exactly as at the final point. A trend is the predicted family's lead over its rival per doubling of compute, "
        "its 95% interval from one bootstrap that draws the seeds and test items once for every point: `grows` or "
        "`shrinks` where the interval excludes 0, "
        + (f"`flat` where it lies within ±{delta:g} per doubling, " if delta is not None else "")
        + "`undetermined` otherwise. The first-token time is read at the final point only.",
        "",
        *markdown_table(["point", *[f"{f}: trained, FLOPs, tokens; validation loss" for f in families]], rows),
        "",
    ]
    for claim, found in ladder["claims"].items():
        said = f": {found['said']}" if found["said"] else ""
        lines += [
            f"- **{claim}** along compute: `{found['reading']}`{said}",
            *[f"    - {t['text']}" for t in found["tasks"]],
        ]
    crossings = [
        f"{ladder['trends'][key]['task']}: {c['text']}" for key, found in ladder["crossings"].items() for c in found
    ]
    if crossings:
        lines += ["", "Against the classic method's line (on the characters the families read):", ""]
        lines += [f"- {text}" for text in crossings]
    lines.append("")
    lines += [f"![{p.stem}]({p.name})\n" for p in images if p.name.startswith(ALONG_PREFIX)]
    return lines
