"""Reports for ``compare`` and ``ablate``: results.json -> report.md + report.html + PNG plots.

Everything is rendered from ``results.json`` alone, so ``maskwise report RUN_DIR`` can re-render a
finished (or interrupted) experiment without retraining. The HTML embeds its images as base64 so it
is one self-contained file.

The results layout (all keys optional except ``title``)::

    title, kind ("compare" | "ablation"), warning (opens the report), machine, settings, wall_s
    runs:    [{label, group, seed, curve: [metrics.jsonl records]}]   -> loss vs tokens / wall-clock
    metrics: {metric: {group: [value per seed]}}                       -> one dot-and-interval plot each
    metric_meta: {metric: {higher: bool, baseline: {group: value}, baseline_name: str,
                  intervals: {group: [mean, low, high]}}}                 -> its direction, baseline, intervals
    table:   {"columns": [...], "rows": [[cell, ...], ...]}            -> the main table
    parameters: {group: {category: count}}                             -> where the parameters go
    verdicts: [{claim, prediction, rule, verdict, details: [text]}]   -> each coded rule, judged
    costs:   {"columns": [...], "rows": [[cell, ...], ...]}            -> what each model costs to serve
    quality_cost: {task: {higher, latency, points: {model: [quality, p99 ms]}}} -> quality against p99 latency
    ladder:  {compute, trends, claims, crossings, curves}              -> compare along compute (``ladder_report``)
    summary, warning, samples: {name: text}, notes: [text]
"""

from __future__ import annotations

import base64
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from maskwise.errors import UserError
from maskwise.experiments.drawing import COLOURS, markdown_table, ordered, pyplot, slug
from maskwise.experiments.ladder_report import ALONG_PREFIX, along_lines, plot_along
from maskwise.experiments.verdict import mean_and_spread, t975
from maskwise.runs import atomic_write, read_json, write_json

RESULTS, REPORT_MD, REPORT_HTML = "results.json", "report.md", "report.html"


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def fmt_stat(values: list[float], digits: int = 3) -> str:
    mean, spread = mean_and_spread(values)
    return f"{mean:.{digits}f} ± {spread:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def _plot_overview(results: dict, out: Path) -> list[Path]:
    """The figure at a glance: rows by families, each cell the mean and 95% interval, the family the row's
    claim predicts framed, the one whose intervals separate it from the others and the baseline filled."""
    rows = {metric: meta for metric, meta in results.get("metric_meta", {}).items() if "winner" in meta}
    if not rows:
        return []
    table = [str(row[0]) for row in results.get("table", {}).get("rows", [])]
    rows = dict(
        sorted(
            rows.items(),
            key=lambda item: next(
                (
                    i
                    for i, label in enumerate(table)  # the table's order
                    if label.startswith(item[0])
                ),
                len(table),
            ),
        )
    )
    plt = pyplot()
    families = ordered({f for meta in rows.values() for f in meta["intervals"]})
    labels = [
        textwrap.fill(m + (" (lower is better)" if not meta["higher"] else ""), 44)  # whole, wrapped
        for m, meta in rows.items()
    ]
    height = [max(1.0, 0.42 * label.count("\n") + 0.6) for label in labels]  # a row grows with its label's lines
    top = [sum(height[:i]) for i in range(len(height))]
    columns = [*families, "trivial baseline", "classic method"]
    fig, ax = plt.subplots(figsize=(2.1 * len(columns) + 3.6, 0.62 * sum(height) + 1.5))
    for y, h, meta in zip(top, height, rows.values()):
        for x, family in enumerate(families):
            won = meta["winner"] == family
            ax.add_patch(
                plt.Rectangle(
                    (x, y),
                    1,
                    h,
                    facecolor=COLOURS.get(family, "#999999") if won else "white",
                    alpha=0.35 if won else 1.0,
                    edgecolor="#dddddd",
                )
            )
            if family == meta.get("predicted"):
                ax.add_patch(
                    plt.Rectangle(
                        (x + 0.03, y + 0.06),
                        0.94,
                        h - 0.12,
                        fill=False,
                        linewidth=2,
                        edgecolor=COLOURS.get(family, "black"),
                    )
                )
            cell = meta["intervals"].get(family)
            text = f"{cell[0]:.3f}\n[{cell[1]:.3f}, {cell[2]:.3f}]" if cell else "cannot"
            below = (
                cell
                and family in meta["baseline"]
                and (family == meta.get("predicted") or won)
                and (cell[0] < meta["baseline"][family] if meta["higher"] else cell[0] > meta["baseline"][family])
            )
            if below:  # a framed or filled cell under its own trivial baseline: not progress, whatever its frame says
                text += "\nbelow its baseline"
            ax.text(
                x + 0.5, y + h / 2, text, ha="center", va="center", fontsize=8, color="#c0392b" if below else "black"
            )
        baseline = next(iter(meta["baseline"].values()), None)
        classic = meta.get("classic")
        cells = [
            f"{baseline:.3f}\n{textwrap.fill(meta['baseline_name'], 22)}" if baseline is not None else "",
            ""
            if classic is None
            else textwrap.fill(classic["name"], 22)
            + (
                "\n(its trivial baseline)"
                if classic["same"] is None
                else f"\n{classic['same']:.3f} same characters"
                + (f"\n{classic['whole']:.3f} whole texts" if classic["whole"] is not None else "")
            ),
        ]
        for x, text in enumerate(cells, start=len(families)):
            ax.add_patch(plt.Rectangle((x, y), 1, h, facecolor="#f4f4f4", edgecolor="#dddddd"))
            ax.text(x + 0.5, y + h / 2, text, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(columns))
    ax.set_ylim(sum(height), 0)
    ax.set_xticks([x + 0.5 for x in range(len(columns))], columns, fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([y + h / 2 for y, h in zip(top, height)], labels, fontsize=8)
    ax.tick_params(length=0)
    ax.set_title(
        "framed: the family the claim predicts; filled: the winner (intervals separate it from the other "
        "families and the trivial baseline); red: below its own trivial baseline",
        fontsize=8,
        pad=22,
    )
    fig.tight_layout()
    path = out / "overview.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _plot_curves(results: dict, out: Path) -> list[Path]:
    plt = pyplot()
    runs = [r for r in results.get("runs", []) if r.get("curve")]
    if not runs:
        return []
    paths = []
    for axis, label in (("tokens_seen", "tokens seen"), ("wall_s", "training wall-clock (s)")):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for run in runs:  # a continued run (init_from) at its totals, so that it follows its first phase
            points = [
                (r.get(f"{axis}_total", r[axis]), r["val_loss"]) for r in run["curve"] if r.get("val_loss") is not None
            ]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker=".", label=run["label"], color=COLOURS.get(run.get("group")))
        ax.set_xlabel(label)
        ax.set_ylabel("validation loss (per loss-carrying position)")
        ax.set_title(f"validation loss vs {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"loss_vs_{axis}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def metric_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t-interval of per-seed values (a point for one seed)."""

    mean, spread = mean_and_spread(values)
    finite = [v for v in values if v is not None]
    half = t975(len(finite) - 1) * spread / len(finite) ** 0.5 if len(finite) > 1 else 0.0
    return mean, mean - half, mean + half


def _plot_metrics(results: dict, out: Path) -> list[Path]:
    """One dot-and-interval plot per metric: each group's mean and 95% interval (the experiment's own
    where it gave them, else a t-interval over seeds), its trivial baseline as a dashed line, the
    axis from 0 (every metric here is a rate, a loss or a time), and which direction is better."""
    plt = pyplot()
    paths = []
    for metric, groups in results.get("metrics", {}).items():
        names = ordered(g for g, values in groups.items() if values)
        if not names:
            continue
        meta = results.get("metric_meta", {}).get(metric, {})
        given = meta.get("intervals", {})
        stats = [tuple(given[g]) if g in given else metric_interval(groups[g]) for g in names]
        fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(names) + 4.0), 3.6))  # room for the legend beside
        xs = range(len(names))
        for x, name, (mean, low, high) in zip(xs, names, stats):
            colour = COLOURS.get(name, "#4c72b0")
            ax.errorbar(
                [x],
                [mean],
                yerr=[[mean - low], [high - mean]],
                fmt="o",
                color=colour,
                ecolor=colour,
                elinewidth=2,
                capsize=0,
                markersize=7,
                label="mean [95% interval]" if x == 0 else None,
            )
        baselines = meta.get("baseline", {})
        drawn = False
        for x, name in zip(xs, names):
            if baselines.get(name) is not None:
                ax.hlines(
                    baselines[name],
                    x - 0.4,
                    x + 0.4,
                    colors="#c44e52",
                    linestyles="--",
                    label=f"trivial baseline ({meta.get('baseline_name', 'baseline')})" if not drawn else None,
                )
                drawn = True
        top = max([hi for _, _, hi in stats] + [b for b in baselines.values() if b is not None])
        ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
        direction = {True: " (higher is better)", False: " (lower is better)"}.get(meta.get("higher"), "")
        ax.set_title("\n".join(textwrap.wrap(metric + direction, 60)), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot: never over a point
        fig.tight_layout()
        path = out / f"metric_{slug(metric)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _plot_quality_cost(results: dict, out: Path) -> list[Path]:
    """One panel per task: each model's quality (its mean over test items) against its p99 latency per item at
    batch 1 (reading, or the first token of an answer for a writing task), the latency axis logarithmic, since
    checkpoints differ in cost by orders of magnitude."""
    tasks = {task: meta for task, meta in results.get("quality_cost", {}).items() if meta.get("points")}
    if not tasks:
        return []
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter  # deferred: as pyplot

    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
    for ax, (task, meta) in zip(axes[0], tasks.items()):
        for i, (model, (quality, p99)) in enumerate(meta["points"].items()):
            ax.scatter([p99], [quality], color=COLOURS.get(model, f"C{i}"), s=40, zorder=3)
            ax.annotate(model, (p99, quality), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # 10, not 10^1
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))  # minor ticks unlabelled: they overlap
        ax.set_xlabel(f"p99 latency, batch 1, {meta['latency']} (ms)", fontsize=8)
        ax.set_ylabel(f"mean over test items ({'higher' if meta['higher'] else 'lower'} is better)", fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(task, 40)), fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "quality_vs_p99_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _markdown(results: dict, images: list[Path]) -> str:
    lines = [f"# {results['title']}", ""]
    if results.get("warning"):
        lines += [results["warning"], ""]
    if results.get("machine"):
        m = results["machine"]
        gpus = f", {', '.join(m['gpus'])}" if m.get("gpus") else ""
        runtime = m.get("runtime")
        ran = f" Ran on device {runtime['device']} in {runtime['precision']} ({runtime['reason']})." if runtime else ""
        lines.append(
            f"Machine: {m.get('cpu', '?')}{gpus}, {m.get('threads', '?')} threads, torch {m.get('torch', '?')}."
            f"{ran} Total time: {fmt(results.get('wall_s', float('nan')), 1)} s."
        )
        lines.append("")
    if results.get("summary"):
        lines += ["## Summary", "", results["summary"], ""]
    glance = [p for p in images if p.name == "overview.png"]
    lines += [f"![{p.stem}]({p.name})\n" for p in glance]
    images = [p for p in images if p not in glance]
    if results.get("verdicts"):
        seeds = len(results.get("settings", {}).get("seeds", [])) or 1
        scope = "one seed" if seeds == 1 else f"over {seeds} seeds"
        lines += [f"## Predictions, rules, verdicts ({scope})", ""]
        for v in results["verdicts"]:
            claim = f"**{v['claim']}** — " if v.get("claim") else ""
            lines.append(f"- {claim}`{v['verdict']}`. Prediction: {v['prediction']}")
            # four spaces: a nested list in every renderer
            lines += [f"    - Falsification rule (coded): {v['rule']}", *[f"    - {d}" for d in v["details"]]]
        lines.append("")
    for key, heading in (("table", "Results"), ("costs", "What each costs to serve")):
        table = results.get(key)
        if table:
            lines += [f"## {heading}", "", *markdown_table(table["columns"], table["rows"]), ""]
    if results.get("costs"):
        lines += [f"![{p.stem}]({p.name})\n" for p in images if p.name == "quality_vs_p99_latency.png"]
    lines += along_lines(results, images)
    images = [p for p in images if p.name != "quality_vs_p99_latency.png" and not p.name.startswith(ALONG_PREFIX)]
    if results.get("parameters"):
        categories = sorted({c for counts in results["parameters"].values() for c in counts})
        rows = [
            [group, *(f"{counts.get(c, 0):,}" for c in categories)] for group, counts in results["parameters"].items()
        ]
        lines += ["## Where the parameters go", "", *markdown_table(["model", *categories], rows), ""]
    for name, text in results.get("samples", {}).items():
        lines += [f"### {name}", "", "```", text.strip(), "```", ""]
    for note in results.get("notes", []):
        lines.append(f"- {note}")
    if results.get("notes"):
        lines.append("")
    if images:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})\n" for p in images]
    if results.get("settings"):
        lines += ["## Settings", "", "```json", json.dumps(results["settings"], indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def _html(markdown_text: str, images: list[Path]) -> str:
    """report.md as one self-contained page: Python-Markdown renders it (tables, code, nested lists),
    and each image is inlined as base64 in place of its file name."""
    import markdown  # deferred: only the HTML report renders Markdown

    embedded = {p.name: base64.b64encode(p.read_bytes()).decode() for p in images}

    def inline(match: re.Match) -> str:
        name = match.group(1)
        return f'src="data:image/png;base64,{embedded[name]}"' if name in embedded else match.group(0)

    body = markdown.markdown(markdown_text, extensions=["tables", "fenced_code"], output_format="html")
    body = re.sub(r'src="([^"]+)"', inline, body)
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em}"
        "pre{background:#f5f5f5;padding:.6em;white-space:pre-wrap}img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>\n"
        + body
        + "\n</body></html>\n"
    )


# The types of the fields a results file holds (each may be absent): what the renderer reads them as.
RESULT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "title": str,
    "kind": str,
    "summary": str,
    "warning": str,
    "wall_s": (int, float),
    "machine": dict,
    "metric_meta": dict,
    "metrics": dict,
    "parameters": dict,
    "settings": dict,
    "table": dict,
    "notes": list,
    "runs": list,
    "verdicts": list,
    "costs": dict,
    "quality_cost": dict,
}


def write_results(out: str | Path, results: dict) -> None:
    write_json(Path(out) / RESULTS, results)


def read_results(out: str | Path) -> dict:
    """``out``'s results.json, checked to be a maskwise one."""
    out = Path(out)
    if not (out / RESULTS).is_file():
        raise UserError(f"{out}: no {RESULTS} to render a report from")
    results = read_json(out / RESULTS)
    if not isinstance(results, dict) or "title" not in results:
        raise UserError(f"{out / RESULTS}: not a maskwise results file")
    wrong = [key for key, kind in RESULT_FIELDS.items() if key in results and not isinstance(results[key], kind)]
    table = results.get("table", {})
    wrong += [
        f"table.{key}"
        for key in ("columns", "rows")
        if isinstance(table, dict) and key in table and not isinstance(table[key], list)
    ]
    wrong += [
        f"{key} items"
        for key in ("runs", "verdicts")
        if isinstance(results.get(key), list) and not all(isinstance(item, dict) for item in results[key])
    ]
    if wrong:
        raise UserError(f"{out / RESULTS}: not a maskwise results file ({', '.join(wrong)} of another type)")
    return results


def _minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def ablation_table(folders: list[str | Path]) -> str:
    """One Markdown table over finished ablation folders (verdict, its coded detail, time, the
    command that reproduces it) and the machines they ran on: what a paper's table is made from."""
    rows, machines = [], []
    for folder in folders:
        results = read_results(folder)
        if results.get("kind") != "ablation":
            raise UserError(f"{folder}: not an ablation's results (kind {results.get('kind')!r})")
        settings = results["settings"]
        name, scale = settings["ablation"], settings["scale"]["name"]
        command = f"`maskwise ablate {name} --scale {scale} --seeds {len(settings['seeds'])}`"
        verdicts = results["verdicts"]
        rows.append(
            f"| {name} | {'; '.join(v['verdict'] for v in verdicts)} | "
            f"{' '.join(d for v in verdicts for d in v['details'])} | {_minutes(results.get('wall_s'))} | "
            f"{command} |"
        )
        m = results.get("machine", {})
        runtime = m.get("runtime", {})
        machine = (
            f"{m.get('cpu', '?')} ({m.get('cpu_capability', '?')}), threads {m.get('threads', '?')}, "
            f"torch {m.get('torch', '?')}, {runtime.get('device', '?')} {runtime.get('precision', '?')}"
        )
        if machine not in machines:
            machines.append(machine)
    lines = [
        "| ablation | verdict | by its coded rule | time | reproduce |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Machine: " + "; ".join(machines) + ".",
    ]
    return "\n".join(lines)


def render(out: str | Path) -> Path:
    """(Re-)render report.md, report.html and the PNGs of ``out`` from its results.json."""
    out = Path(out)
    results = read_results(out)
    images = (
        _plot_overview(results, out)
        + _plot_quality_cost(results, out)
        + _plot_curves(results, out)
        + _plot_metrics(results, out)
        + plot_along(results, out)
    )
    markdown_text = _markdown(results, images)
    atomic_write(out / REPORT_MD, markdown_text.encode())
    atomic_write(out / REPORT_HTML, _html(markdown_text, images).encode())
    return out / REPORT_MD
