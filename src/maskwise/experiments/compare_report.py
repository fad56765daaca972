"""``compare``'s measurements -> its report: cells with 95% intervals, the verdicts of the rule of thumb
(``claims``), a summary that names a "best" only where the intervals separate it, and a warning when a
pretraining run got too few steps to be evidence. A column beyond the three families (the hybrid) gets
every row its model can do, with intervals; the rules and the "best" column read the three families
only, and the summary says where that column separates from them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from maskwise.experiments.arms import WALL, Arm, matmul_peak_shares, run_name
from maskwise.experiments.claims import (
    RULES,
    Classic,
    CompareRow,
    Evidence,
    gather,
    gather_classic,
    judge_claim,
    ttft_milliseconds,
)
from maskwise.experiments.framework import Measured, Measures
from maskwise.experiments.intervals import (
    AT_CHANCE,
    WITHIN_NOISE,
    PerSeed,
    beats,
    best_of,
    interval,
    score,
    separation,
)
from maskwise.experiments.ladder import Along
from maskwise.experiments.verdict import (
    mean_and_spread,
)
from maskwise.families import FAMILIES, Family
from maskwise.tasks.registry import CLAIMS, TASKS

WRITES_NO_ANSWER = "cannot: writes no answer"
CONDITIONAL_ONLY = (
    "conditional only: its decoder models targets given a source, not the text itself (its own objective's loss in "
    "the curves)"
)


def cannot(kind: Family, what: str) -> str | None:
    """Why a model of ``kind`` cannot take measure or row ``what``, or None where it can: a task asks its kind
    (``Task.cannot``); of the measures beside the tasks, a model that writes nothing has no first token to time, and an
    encoder-decoder's decoder models targets given a source, not held-out text. Every skipped measure and every report
    cell reads it."""
    if what in TASKS:
        return TASKS[what].cannot(kind)
    if what == "ttft" and not kind.writes:
        return WRITES_NO_ANSWER
    if what == "next_token" and kind.two_stacks:
        return CONDITIONAL_ONLY
    return None


# ---- cells, the best column, warnings ---------------------------------------------------------------


def _baseline_text(baseline: PerSeed | float) -> str:
    if isinstance(baseline, (int, float)):
        return f"{baseline:.3f}"
    return interval(baseline).text()


def _baseline_mean(baseline: PerSeed | float) -> float:
    """A baseline as one number for a plot's line: a constant, or the score of its per-item values."""
    if isinstance(baseline, (int, float)):
        return float(baseline)
    return score(baseline)


def best_family(
    scores: Mapping[str, PerSeed],
    baselines: Mapping[str, PerSeed | float],
    higher: bool,
    contenders: Sequence[str] = FAMILIES,
) -> str:
    """``best_of`` the ``contenders`` (the three families: a column beside them, the hybrid, is not in the
    running; ``compare --model``: every model)."""
    return best_of({f: scores[f] for f in contenders if f in scores}, baselines, higher)


def best_cell(
    scores: Mapping[str, PerSeed],
    baselines: Mapping[str, PerSeed | float],
    higher: bool,
    contenders: Sequence[str] = FAMILIES,
    classic: Classic | None = None,
) -> str:
    """The row's best column, or the classic method where it beats every contender on their own test items (and so
    their winner too)."""
    columns = [c for c in contenders if c in scores]
    if (
        classic is not None
        and columns
        and all(c in classic.same and beats(classic.same[c], scores[c], higher) for c in columns)
    ):
        return f"**{classic.name}** (classic method)"
    winner = best_family(scores, baselines, higher, contenders)
    return winner if winner in (AT_CHANCE, WITHIN_NOISE) else f"**{winner}**"


CLASSIC_COLUMN = "classic method (same characters; whole texts)"


def classic_cell(e: Evidence, row: CompareRow) -> str:
    """The classic method's interval on the characters the families read and on whole texts (the first contender's
    test items), or which trivial baseline it is."""
    c = e.classic.get(row.key)
    if c is None:
        return ""
    first = c.reference(e.contenders)
    if first is None:
        return f"{c.name} (= its trivial baseline)"
    cell = f"{c.name}: {interval(c.same[first]).text()}"
    return cell + (f"; {interval(c.whole[first]).text()}" if first in c.whole else "; nothing cut")


def standing(e: Evidence, column: str) -> list[str]:
    """Where ``column`` (one beside the families) separates from the column judged for a family
    (``Evidence.judged``), by the rules' own test: a paired interval of the difference that excludes 0, with the
    side ahead clearing its trivial baseline."""
    rows = {
        **{row.key: (row.label, row.higher, *e.gathered[row.key]) for row in e.rows},
        **{
            f"ttft {name}": (f"time to first token (ms), {name}", False, times, {}) for name, times in e.ttft_ms.items()
        },
    }
    said = []
    for label, higher, scores, baselines in rows.values():
        for family, judged in e.judged.items():
            if column not in scores or judged not in scores or judged == column:
                continue
            order, gap = separation(scores[column], scores[judged], higher)
            ahead = column if order > 0 else judged
            if order == 0 or (ahead in baselines and not beats(scores[ahead], baselines[ahead], higher)):
                continue
            difference = (
                f"paired difference {gap.text()}"
                if gap is not None
                else f"{interval(scores[column]).text()} vs {interval(scores[judged]).text()}"
            )
            who = family if judged == family else f"{family} ({judged})"
            said.append(f"{'ahead of' if order > 0 else 'behind'} the {who} at {label}, {difference}")
    return said


def too_few_steps(pre: Mapping[str, dict], min_steps: int) -> list[str]:
    """The runs whose final step is below ``min_steps``, as "name: N steps"."""
    short = []
    for name, run in pre.items():
        steps = run["curve"][-1]["step"] if run["curve"] else 0
        if steps < min_steps:
            short.append(f"{name}: {steps} steps")
    return short


def warning_text(short: Sequence[str], min_steps: int, runtime, load_at_start: float | None, cores: int | None) -> str:
    causes = []
    if runtime is not None and runtime.warning:
        causes.append(f"the precision: {runtime.warning}")
    if load_at_start is not None and cores and load_at_start > 0.5 * cores:
        causes.append(f"a busy machine: load average {load_at_start:.1f} on {cores} cores when the run started")
    causes.append("or a slower machine than the recipe was sized on (README, the main job)")
    return (
        f"**Warning: too few pretraining steps to draw conclusions.** This recipe needs at least {min_steps} "
        f"optimizer steps per family in its budget; {', '.join(short)}. Likely cause: {'; '.join(causes)}. "
        "The numbers below are measured, but the verdicts are not evidence about the families."
    )


# ---- what both compare studies read and report (``compare_study.CompareStudy``) ---------------------


def by_seed(m: Measured) -> dict[int, dict[str, dict]]:
    """seed -> family -> that run's measures."""
    return {seed: {arm.key: m.measured[WALL][arm.key][i] for arm in m.arms} for i, seed in enumerate(m.setup.seeds)}


@dataclass(frozen=True)
class CompareMeasures(Measures):
    """A compare's measures: every row's per-item scores and baselines, which the claims pair over test items, and
    each row's per-seed means by column, which the results keep as its metrics."""

    evidence: Evidence
    means: dict[str, dict[str, list[float]]]  # row label -> column -> per seed
    along: Along | None = None  # the rows along compute (compare's ladder); None: measured at one point

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return self.means


def evidence(m: Measured) -> Evidence:
    """Every row's per-item scores and baselines per column, the first-token times and the columns judged."""
    measured = by_seed(m)
    rows = m.setup.plan.rows
    return Evidence(
        rows,
        {row.key: gather(measured, row) for row in rows},
        ttft_milliseconds(m.per_seed),
        m.setup.plan.judged,
        m.setup.plan.contenders,
        {row.key: gather_classic(measured, row) for row in rows},
    )


def peak_share_row(m: Measured) -> list[str]:
    """The pretraining runs' share of the machine's matmul peak (``arms.matmul_peak_shares``), as a table
    row; empty where a run has none."""
    shares = matmul_peak_shares(m.runs[WALL], m.arms)
    if shares is None:
        return []
    return [
        "pretraining % of the matmul peak",
        *[f"{100 * statistics.fmean(shares[a.key]):.0f}%" for a in m.arms],
        "",
        "",
    ]


def kinds(m: Measured) -> dict[str, Family]:
    """Each column's family as its model reads (``ModelConfig.kind``: the hybrid, a decoder read both ways)."""
    return {arm.key: m.setup.exp.kind(run_name(m.runs[WALL][arm.key][0])) for arm in m.arms}


def objective_of(m: Measured, arm: Arm) -> str:
    """How ``arm``'s model was pretrained (a model given: how its pretraining asked for a blank)."""
    return m.runs[WALL][arm.key][0]["settings"]["objective"]


def result_rows(
    m: Measured, e: Evidence, why_not: Callable[[str, str], str | None]
) -> tuple[dict[str, dict[str, list[float]]], list[list[str]]]:
    """(per-seed means of every row, by column; a table row per measured row and per timed source-length
    bucket): each cell its interval and baseline, or why its column cannot (``why_not(column, row kind)``)."""
    seeds, measured, kind_of, arms = m.setup.seeds, by_seed(m), kinds(m), m.arms
    rows: list[list[str]] = []
    metrics: dict[str, dict[str, list[float]]] = {}
    for row in e.rows:
        label, higher, baseline_name = row.label, row.higher, row.baseline_name
        scores, baselines = e.gathered[row.key]
        cells = []
        for arm in arms:
            column, kind = arm.key, kind_of[arm.key]
            if column not in scores:
                cells.append(why_not(column, row.kind) or "n/a")
                continue
            cell = f"{interval(scores[column]).text()} ({baseline_name} {_baseline_text(baselines[column])})"
            if len(seeds) > 1:
                _, spread = mean_and_spread([score([v]) for v in scores[column]])
                cell += f" (sd over seeds {spread:.3f})"
            if row.kind == "next_token" and kind.encoder_only:
                both = interval([measured[seed][column]["lm"]["both_sides_blocks"] for seed in measured])
                cell += f"; left context only, through [MASK] ({both.text()} with both sides)"
            elif row.kind == "next_token" and kind.reads_bidirectionally:
                cell += "; read causally"
            elif row.kind == "fill" and kind.reads_bidirectionally:
                cell += "; both sides, its [MASK] answered from the position before it"
            elif row.kind == "fill" and kind.causal:
                cell += "; left side only"
            elif row.kind == "fill" and kind.two_stacks:
                cell += (
                    "; rewriting the source up to the blank"
                    if objective_of(m, arm) == "denoise"
                    else "; via sentinel span"
                )
            elif "pooling" in measured[seeds[0]][column].get(row.key, {}):  # where a text is read: [CLS], last, mean
                cell += f"; {measured[seeds[0]][column][row.key]['pooling']} pooling"
            cells.append(cell)
        rows.append(
            [
                label + " [95% interval]",
                *cells,
                classic_cell(e, row),
                best_cell(scores, baselines, higher, e.contenders, e.classic.get(row.key)),
            ]
        )
        metrics[label] = {f: [score([v]) for v in scores[f]] for f in scores}
    # Per source-length bucket (none without a seq2seq task, so no source to time): the longest is judged.
    for timed in m.per_seed[seeds[0]].get("buckets", []):
        times = e.ttft_ms[timed["name"]]
        rows.append(
            [
                (
                    f"time to first token, {timed['name']}: {timed['source_tokens']}-token sources, batch "
                    f"{timed['batch']} (ms, mean [95% interval])"
                ),
                *[interval(times[a.key]).text(2) if a.key in times else why_not(a.key, "ttft") or "n/a" for a in arms],
                "",
                best_cell(times, {}, False, e.contenders),
            ]
        )
    return metrics, rows


def meta(e: Evidence) -> dict:
    """Each row's direction, per-family baseline and 95% intervals, for its plot."""
    out = {}
    for row in e.rows:
        label, higher, baseline_name = row.label, row.higher, row.baseline_name
        scores, baselines = e.gathered[row.key]
        out[label] = {
            "higher": higher,
            "baseline_name": baseline_name,
            "baseline": {f: _baseline_mean(baselines[f]) for f in scores},
            "intervals": {f: [iv.mean, iv.low, iv.high] for f, iv in ((f, interval(scores[f])) for f in scores)},
            # for the figure at a glance: the family the row's claim predicts, and the one that won
            "predicted": e.judged.get(CLAIMS[row.claim][0]) if row.claim else None,
            "winner": best_family(scores, baselines, higher, e.contenders),
            **({"classic": classic_means(c, e.contenders)} if (c := e.classic.get(row.key)) else {}),
        }
    return out


def classic_means(c: Classic, contenders: Sequence[str]) -> dict:
    """The classic method's name and scores (on the first contender's test items) for the figure: on the same
    characters and on whole texts, None where not measured (its trivial baseline is the classic method)."""
    first = c.reference(contenders)
    return {
        "name": c.name,
        "same": score(c.same[first]) if first else None,
        "whole": score(c.whole[first]) if first in c.whole else None,
    }


def verdicts_said(m: Measured, e: Evidence, others: str = "the other families") -> str:
    """The summary after its opening: the seeds, each claim's verdict, each row's best, and where a column beside
    the judged ones separates from them."""
    seeds = m.setup.seeds
    verdicts = [(rule.claim, judge_claim(rule.claim, e)[0]) for rule in RULES]
    scope = (
        f"{len(seeds)} seeds (intervals over seeds and test items)"
        if len(seeds) > 1
        else "a single seed (intervals over test items only; `--seeds 3` adds the spread between seeds)"
    )
    best = {row.label: best_family(*e.gathered[row.key], row.higher, e.contenders) for row in e.rows}
    beside = [
        f" The {arm.label}, beside the judged columns: {'; '.join(said)}."
        for arm in m.arms
        if arm.key not in e.judged.values() and (said := standing(e, arm.key))
    ]
    return (
        f"{scope}: "
        + "; ".join(f"{claim} {verdict}" for claim, verdict in verdicts)
        + ". "
        + f"Best (95% intervals separate it from {others} and from the trivial baseline): "
        + "; ".join(f"{label}: {winner}" for label, winner in best.items())
        + "."
        + "".join(beside)
    )


def data_notes(described: dict) -> list[str]:
    """The report's lines on its data: the corpus, then each task's files, rows, labels and how it is read."""
    lines = [
        f"Data: pretraining on {described['corpus']}; the held-out text rows read its validation part.",
        *([described["scope"][0].upper() + described["scope"][1:] + "."] if "scope" in described else []),
        *([described["narrowed"]] if "narrowed" in described else []),
    ]
    for t in described["tasks"]:
        files = ", ".join(f"`{path}` (sha256 {digest})" for path, digest in t["files"].items())
        extra = "".join(
            f"; {key.replace('_', ' ')}: {t[key]}"
            for key in ("labels", "why_metric", "read_out", "first_stage", "collection", "window", "drawn")
            if key in t
        )
        lines.append(
            f"Task {t['name']} ({t['kind']}, `--task {t['flag']}`): {files}; {t['train_rows']:,} training "
            f"and {t['test_rows']:,} test rows ({t['split']}){extra}."
        )
    return lines
