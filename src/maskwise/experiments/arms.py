"""Arms and the two axes they pretrain on: equal tokens seen, and equal wall-clock (the seconds of each
compared group's fastest arm). ``pretrain_arms`` runs every arm of a study for every seed on both, with
the tolerance that spares a rerun, an arm that is costlier per token by design, and an arm that starts
in another objective (``Phase``); a run's totals (tokens, seconds) count every phase it continued."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from maskwise.data.corpus import SHAKESPEARE
from maskwise.experiments.checkpoints import Candidate
from maskwise.experiments.runner import Experiment
from maskwise.families import FAMILIES
from maskwise.recipes import CompareSettings, Scale, pretrain_settings

TOKENS, WALL = "equal tokens", "equal wall-clock"
AXES = (TOKENS, WALL)
# Equal wall-clock: an arm whose equal-tokens run took at most this much longer than its seed's
# fastest keeps that run on both axes. Arms of equal cost per token differ by the machine's
# run-to-run noise (5-10% on 2 shared cores), and rerunning them would measure that noise twice.
WALL_TOLERANCE = 0.05


@dataclass(frozen=True)
class Phase:
    """Pretraining an arm does first, on ``share`` of its budget, so that it continues from those weights."""

    settings: dict  # pretraining settings of this phase, as an arm's (family, objective)
    share: float  # of the arm's budget, in (0, 1); the arm's own settings get the rest


@dataclass(frozen=True)
class Arm:
    key: str  # names its runs and cached steps
    label: str  # names it in tables, plots and metrics
    settings: dict  # pretraining settings beyond the scale's block (family, and what the arm changes)
    # Spends more per token than the other arms by design (ELECTRA's generator): it pretrains only on
    # their clock, and the equal-tokens axis is at the tokens it read there (``pretrain_arms``).
    costlier: bool = False
    # Another pretraining first (Ettin's cross-objective training, CLM then MLM): the arm's own settings
    # continue from its weights (``init_from``), and both axes count the two phases together.
    before: Phase | None = None


@dataclass(frozen=True)
class StudyOptions:
    """A study's own settings from its command line, one typed object for every study: each study reads the fields
    it names in ``Study.options``, and a field another study reads is refused before anything runs."""

    data: str = SHAKESPEARE  # compare: the corpus every family pretrains on
    families: tuple[str, ...] = FAMILIES  # compare: its columns
    candidates: tuple[Candidate, ...] = ()  # compare --model: the models given, opened and checked
    ratios: tuple[float, ...] | None = None  # mask-ratio: the ratios its arms pretrain at
    share: float | None = None  # cross-objective, clm-then-mlm: the first objective's share of the budget
    models: str | None = None  # reranker: ROLE=FOLDER,... that start a reranker from a folder

    def given(self) -> tuple[str, ...]:
        """The fields set away from their defaults, in declaration order: what a study must accept."""
        default = StudyOptions()
        return tuple(f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name))

    def recorded(self) -> dict[str, Any]:
        """The given fields as the results' settings record them."""
        return {name: getattr(self, name) for name in self.given()}


NO_OPTIONS = StudyOptions()  # every field at its default: each study's own defaults


@dataclass(frozen=True)
class Setup:
    """What every measurement receives: the experiment folder, the scale, the seeds."""

    exp: Experiment
    scale: Scale | CompareSettings
    seeds: tuple[int, ...]
    progress: bool
    plan: Any = None  # what a study reads beyond its scale (compare: its data, tasks and rows)
    options: StudyOptions = NO_OPTIONS  # the study's own, as given

    @property
    def corpus(self) -> dict:
        """The pretraining corpus every arm reads: the plan's (``--data``), else each arm's own setting."""
        return {"data": self.plan.data} if self.plan is not None else {}

    @property
    def recipe(self) -> CompareSettings:
        """The block and the fine-tunes: an ablation scale's recipe, or compare's scale itself."""
        return self.scale.recipe if isinstance(self.scale, Scale) else self.scale


Runs = dict[str, dict[str, list[dict]]]  # {axis: {arm key: [one entry per seed]}}


def _total(run: dict, name: str) -> float:
    """The run's last ``name`` over every phase it continued (``init_from``): its own where it had none."""
    last = run["curve"][-1]
    return last.get(f"{name}_total", last[name])


def train_seconds(run: dict) -> float:
    return _total(run, "wall_s")


def tokens_seen(run: dict) -> float:
    return _total(run, "tokens_seen")


def tokens_per_second(run: dict) -> float:
    return tokens_seen(run) / max(train_seconds(run), 1e-9)


def matmul_peak_share(run: dict) -> float | None:
    """The share of the machine's matmul peak the run trained at (``Trainer``'s last record, on a CPU run of
    ``UTILIZATION_MIN_SECONDS`` or more); None without one, or for a run continued from another phase, whose
    record covers its own phase alone."""
    return None if run.get("before") else run["curve"][-1].get("share_of_matmul_peak")


def matmul_peak_shares(runs: dict[str, list[dict]], arms: Sequence[Arm]) -> dict[str, list[float]] | None:
    """Each arm's runs' ``matmul_peak_share``, by arm key (``runs``: one axis's runs by arm key); None if any
    run has none, so that a report shows the row for every arm or for none."""
    shares: dict[str, list[float]] = {}
    for arm in arms:
        found = [share for run in runs[arm.key] if (share := matmul_peak_share(run)) is not None]
        if len(found) < len(runs[arm.key]):
            return None
        shares[arm.key] = found
    return shares


def run_name(run: dict) -> str:
    """The name a run's steps are cached under (``<arm>-seed<N>``...): its pretraining's, or a given model's."""
    return run["name"]


def split_budget(budget: str, share: float) -> tuple[str, str]:
    """(``share`` of ``budget``, the rest): "tokens=4096", 0.75 -> ("tokens=3072", "tokens=1024"); tokens whole."""
    kind, amount = budget.split("=")
    total = float(amount)
    first = round(share * total) if kind == "tokens" else share * total
    rest = round(total) - first if kind == "tokens" else total - first
    return f"{kind}={first}", f"{kind}={rest}"


def pretrain_arms(
    setup: Setup, arms: Sequence[Arm], axes: Sequence[str] = AXES, clock_groups: Sequence[Sequence[Arm]] | None = None
) -> Runs:
    """``{axis: {arm key: [pretraining run per seed]}}`` (the module docstring says what the axes are);
    ``axes`` without the wall-clock one skips its extra runs (an ablation that reads one model per seed),
    without the equal-tokens one runs every arm once on the scale's own clock (compare). ``clock_groups``
    (all the arms together by default) partition ``arms``: each group's equal-wall-clock budget is its own.

    A costlier arm never pretrains at the scale's tokens: it runs on the other arms' clock, and the
    equal-tokens axis is at what it read there (the other arms run again to that count). Two arms
    still make three runs a seed, but the extra one is the cheap arm's shorter run rather than the
    costly arm's longer one. Seeds run one after another, all arms of a seed together, so the arms
    of one seed share the machine's conditions and an interrupted ablation keeps whole seeds.

    An arm with a phase ``before`` spends its budget in two runs: ``<arm>-seed<N>-phase1`` on the phase's
    share (tokens or seconds), then ``<arm>-seed<N>`` continuing from its weights on the rest; its run is
    the second, which counts both (``tokens_seen_total``, ``wall_s_total``), so both axes compare totals."""
    runs: Runs = {axis: {arm.key: [] for arm in arms} for axis in axes}

    def pretrain(arm: Arm, seed: int, suffix: str = "", budget: str = "") -> dict:
        """The arm's run on ``budget`` (the scale's when empty), which it keeps as ``budget`` (both phases')."""
        name = f"{arm.key}-seed{seed}{suffix}"
        settings = pretrain_settings(setup.scale, {**setup.corpus, **arm.settings}, seed, budget)
        if arm.before is None:
            return {**setup.exp.pretrain(name, progress=setup.progress, **settings), "budget": settings["budget"]}
        first, rest = split_budget(settings["budget"], arm.before.share)
        before = setup.exp.pretrain(
            f"{name}-phase1",
            progress=setup.progress,
            **pretrain_settings(setup.scale, {**setup.corpus, **arm.before.settings}, seed, first),
        )
        run = setup.exp.pretrain(
            name,
            progress=setup.progress,
            init_from=before["run_dir"],
            **pretrain_settings(setup.scale, {**setup.corpus, **arm.settings}, seed, rest),
        )
        return {**run, "budget": settings["budget"], "before": before}

    def pretrain_group(group: Sequence[Arm], seed: int) -> None:
        """One seed of ``group``'s arms on both axes, the wall-clock one at the group's own clock."""
        by_key = {arm.key: arm for arm in group}
        costlier = [arm for arm in group if arm.costlier] if WALL in axes and not all(a.costlier for a in group) else []
        by_tokens = {arm.key: pretrain(arm, seed) for arm in group if arm not in costlier}
        seconds = min(train_seconds(run) for run in by_tokens.values())
        if WALL in axes:
            on_clock = {arm.key: pretrain(arm, seed, "-wall", f"seconds={seconds}") for arm in costlier}
            for arm in group:
                run = on_clock.get(arm.key) or by_tokens[arm.key]
                if arm not in costlier and train_seconds(run) > seconds * (1 + WALL_TOLERANCE):
                    run = pretrain(arm, seed, "-wall", f"seconds={seconds}")
                runs[WALL][arm.key].append(run)
            if costlier:
                first = {**by_tokens, **on_clock}  # every arm's run before the equal-tokens reruns
                tokens = min(tokens_seen(run) for run in first.values())
                by_tokens = {
                    key: run
                    if tokens_seen(run) == tokens
                    else pretrain(by_key[key], seed, f"-tokens{tokens}", f"tokens={tokens}")
                    for key, run in first.items()
                }
        for arm in group:
            runs[TOKENS][arm.key].append(by_tokens[arm.key])

    for seed in setup.seeds:
        if TOKENS not in axes:  # every arm once, on the scale's own clock
            for arm in arms:
                runs[WALL][arm.key].append(pretrain(arm, seed))
            continue
        for group in clock_groups or (arms,):
            pretrain_group(group, seed)
    return runs
