"""Ablation reranker: a cross-encoder vs a generative reranker over the same BM25 top candidates.

The design notes' reporting template (section 7): "We replaced a generative reranker with a
cross-encoder over the same top-100 candidates: nDCG@10 went from A to B while p99 latency fell from
C to D". Three rerankers read the same candidates of the same queries: a cross-encoder (an MLM
encoder, one parallel pass per candidate), and one fine-tuned decoder read two ways: scoring one
relevance token (one pass, like the cross-encoder but causal) and writing its judgement (a few
greedy tokens per candidate, as LLM rerankers that answer in words do), so that what generation
costs shows up apart from what a decoder costs.

Its ``models`` option starts a reranker from a folder instead of a body pretrained here ("cross=FOLDER,
generative=FOLDER", either alone): the template is about pretrained models, and a d-64 character encoder
pretrained for minutes never ranked above BM25's own order. An HF folder (all-MiniLM-L6-v2, say) is fine-tuned
as a pretrained body (``finetune.FINE_TUNING``: 3 epochs at HF Trainer's batch and rate), a maskwise run at the
scale's own; a role without a folder is the arm pretrained here, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean as mean

from torch import nn

from maskwise.errors import UserError
from maskwise.experiments.ablations.jobs import CLM_DECODER, MLM_ENCODER
from maskwise.experiments.arms import TOKENS, Arm, Setup, StudyOptions
from maskwise.experiments.framework import (
    Measured,
    Measures,
    Rule,
    Study,
    Table,
    claims_verdict,
    key,
    table_row,
    task_setting,
)
from maskwise.experiments.verdict import INCONCLUSIVE, compare
from maskwise.interop.folders import load, model_folder
from maskwise.model.accounting import parameter_breakdown
from maskwise.recipes import CompareSettings
from maskwise.runs import CONFIG_FILE, read_json
from maskwise.tasks.finetune import FINE_TUNING
from maskwise.tasks.reading import config_of
from maskwise.tasks.registry import TASKS
from maskwise.tasks.rerank import (
    Rerank,
    RerankConfig,
    RerankRecord,
    evaluate_reranker,
    judging_scorer,
)
from maskwise.tasks.run import run_task

CROSS, SCORES, WRITES = "cross-encoder", "generative, scores ' yes'", "generative, writes its judgement"
FIRST, RANDOM = "BM25 order", "random order"
SYSTEMS = (CROSS, FIRST, RANDOM, SCORES, WRITES)  # the table's columns: the last column compares the first and last
CANDIDATES = 100  # per query, from the first stage
NDCG, P50, P99 = "nDCG@10", "latency p50 (ms/query)", "latency p99 (ms/query)"
SIZE_RATIO = 4  # bodies further apart in parameters than this: the report says its verdict compares checkpoints

RULE = (
    "On the same queries and candidates, paired by seed. First, the cross-encoder must clear the random "
    "order of the candidates on nDCG@10 (otherwise nothing was learned to compare) and the first stage's own "
    "order (a reranker that does not improve on its first stage is not one); if it does not, the verdict is "
    "inconclusive. Then two claims: (1) the generative reranker that writes its judgement is not ahead of "
    "the cross-encoder on nDCG@10 (contradicted if it is); (2) the cross-encoder's p99 latency per query "
    "is lower (contradicted if higher). Falsified if a claim is contradicted, held if both are supported, "
    "inconclusive otherwise."
)


@dataclass(frozen=True)
class RerankerMeasures(Measures):
    """What the rule reads, each by system (the table's columns: the rerankers and the two baseline orders), per
    seed; a baseline order has no latency (an empty list)."""

    ndcg: dict[str, list[float]]
    p99: dict[str, list[float]]

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {key(NDCG, TOKENS): self.ndcg, key(P99, TOKENS): self.p99}


# ---- the rerankers' bodies: pretrained here (the arms), or folders given (``models``) -------------------------

ROLES = {"cross": MLM_ENCODER, "generative": CLM_DECODER}  # each role's arm, pretrained here when no folder is given
MODELS_USAGE = "cross=FOLDER,generative=FOLDER (either alone; a folder or all-MiniLM-L6-v2)"
# A body pretrained elsewhere (an HF folder) is fine-tuned as in compare --model (``finetune.FINE_TUNING`` for a
# pretrained body, the segments readout), reading at most this many word pieces a pair (the plays' ICT passages: 53 at
# the median, 143 at the 90th percentile; 192 cost MiniLM four times 128's).
PRETRAINED_MAX_LEN = 128


def checkpoints(models: str | None) -> dict[str, Path]:
    """``models`` (``MODELS_USAGE``) as role -> folder, or one line naming what is wrong; {} when None: both arms are
    pretrained here. ``arms`` checks that each folder opens as its role reads."""
    if models is None:
        return {}
    found: dict[str, Path] = {}
    for role, folder in ((r.strip(), f.strip()) for r, _, f in (part.partition("=") for part in models.split(","))):
        if role not in ROLES or not folder or role in found:
            raise UserError(f"models {models!r}: expected {MODELS_USAGE}")
        found[role] = model_folder(folder).resolve()
    return found


def opened(role: str, folder: Path) -> tuple[nn.Module, object]:
    """The model and tokenizer of ``folder``, refused in one line where ``role`` cannot read it."""
    model, tokenizer = load(folder)
    if tokenizer is None:
        raise UserError(f"models: {role}={folder} has no tokenizer.json, so no text can be read")
    if config_of(model).kind.encoder_only != (role == "cross"):
        raise UserError(
            f"models: {role}={folder} holds a model of family {config_of(model).family} (the cross-encoder "
            "reads an encoder, the generative reranker a decoder or an encoder-decoder)"
        )
    return model, tokenizer


def pretrained_elsewhere(folder: Path) -> bool:
    """Whether ``folder`` is an HF folder (fine-tuned as a pretrained body), not a maskwise run (the scale's recipe)."""
    return "model_type" in read_json(folder / CONFIG_FILE)


def rerankers(setup: Setup, seed: int, model: nn.Module, tokenizer, role: str, pretrained: bool) -> dict:
    """``{system: evaluate_reranker record as JSON}`` of ``model`` fine-tuned as ``role`` on the seed's queries (the
    user's rerank task, else the plays'), over the same top-``CANDIDATES``; a generative one is read both ways. A
    fine-tuned one's JSON holds its fine-tune's ``settings`` beside the record."""
    cfg, data = task_setting(setup, "rerank", seed)
    cfg = replace(cfg, candidates=CANDIDATES, reranker=role)
    if pretrained:
        rows = TASKS[Rerank.kind].training_rows(cfg, setup.plan.task_of("rerank") if setup.plan else None)
        cfg = replace(FINE_TUNING.applied(cfg, rows, pretrained=True), max_len=PRETRAINED_MAX_LEN)
    label = CROSS if role == "cross" else SCORES
    result = run_task(cfg, model, tokenizer, setup.exp.runtime, data=data, label=label)
    measured = {
        label: {
            **result.record.to_json(),
            "settings": {
                "lr": cfg.lr,
                "head_lr": cfg.head_lr,
                "steps": cfg.steps,
                "batch_size": cfg.batch_size,
                "max_len": cfg.max_len,
                "readout": cfg.readout,
            },
        }
    }
    if role == "generative":
        test, candidates = result.test
        assert isinstance(result.record, RerankRecord)  # a rerank config's task
        writes = judging_scorer(result.model, tokenizer, result.record.max_len)
        measured[WRITES] = evaluate_reranker(writes, test, candidates, WRITES, progress=False, seed=seed).to_json()
    return measured


def by_system(m: Measured) -> dict[str, list[dict]]:
    """Each reranker's records as stored (JSON), one a seed, from the arm pretrained here or the folder given."""
    measured = [records for arm in m.arms for records in m.measured[TOKENS][arm.key]]
    given = {role: str(folder) for role, folder in checkpoints(m.setup.options.models).items()} if m.per_seed else {}
    for seed, joint in sorted(m.per_seed.items()):
        if {role: body["folder"] for role, body in joint["bodies"].items()} != given:  # a folder's earlier steps
            raise UserError(
                f"{m.setup.exp.out} holds seed {seed}'s rerankers from other folders than models "
                f"{given or 'none'}; use --overwrite or another --out"
            )
        measured.append(joint["systems"])
    return {
        system: [records[system] for records in measured if system in records] for system in (CROSS, SCORES, WRITES)
    }


def _cost_row(name: str, groups: dict[str, list[float]]) -> list[str]:
    """A latency row: the rerankers' numbers, a dash for the baselines (nothing to time), and the
    cross-encoder against the writing reranker (lower is better)."""
    row = table_row(name, TOKENS, {CROSS: groups[CROSS], WRITES: groups[WRITES]}, False, 1)
    cells = {CROSS: row[2], WRITES: row[3], SCORES: table_row(name, TOKENS, {SCORES: groups[SCORES]}, None, 1)[2]}
    return [name, TOKENS, *[cells.get(system, "—") for system in SYSTEMS], row[-1]]


def plays_queries(recipe: CompareSettings) -> int:
    """The test queries a seed's reranking of the plays reads at ``recipe``."""
    cfg = recipe.config_of(Rerank.kind)
    assert isinstance(cfg, RerankConfig)
    return cfg.test_queries


def bodies(m: Measured, records: dict[str, list[dict]]) -> list[str]:
    """Where each reranker's body came from, its size and its fine-tuning recipe; the size ratio where they differ."""
    sizes, lines = {}, []
    for role, system, name in (("cross", CROSS, "cross-encoder"), ("generative", SCORES, "generative reranker")):
        joint = next(iter(m.per_seed.values()), {}).get("bodies", {}).get(role)
        arm = ROLES[role]
        sizes[role] = joint["parameters"] if joint else m.parameters[arm.label]["total"]
        origin = f"the folder {joint['folder']}" if joint else f"the {arm.label} pretrained here at this scale"
        recipe = records[system][0]["settings"]
        head = ""  # a decoder scores a token
        if role == "cross":
            head = (
                f" and its fresh [CLS] head at {recipe['head_lr']:g}"
                if recipe.get("readout", "cls") == "cls"
                else f", scoring by the cosine of the query's and the passage's mean states in the joint pass (its "
                f"scale at {recipe['head_lr']:g})"
            )
        lines.append(
            f"The {name}'s body: {origin}, {sizes[role] / 1e6:.2f} M parameters, fine-tuned "
            f"{recipe['steps']} steps of {recipe['batch_size']} queries at lr {recipe['lr']:g}{head}, reading "
            f"at most {recipe['max_len']} tokens a pair."
        )
    ratio = max(sizes.values()) / max(min(sizes.values()), 1)
    if ratio > SIZE_RATIO:
        lines.append(
            f"The two bodies differ in size by a factor of {ratio:.0f}: the verdict compares these "
            "checkpoints, not the families. No pretrained decoder ships on this machine, so without a "
            "generative folder the decoder is the one pretrained here."
        )
    return lines


class Reranker(Study[RerankerMeasures]):
    """A cross-encoder vs a generative reranker over the same first-stage candidates."""

    about = "cross-encoder vs generative reranker over the same top-100 (nDCG@10, p50/p99 latency)"
    title = "Ablation reranker: a cross-encoder vs a generative reranker over the same candidates"
    rules = (
        Rule(
            (
                "Over the same top-100 candidates, a cross-encoder reranks at least as well as a generative "
                "reranker that writes its judgement, at a much lower p99 latency."
            ),
            RULE,
        ),
    )
    step = "rerank"
    options = ("models",)
    reads = ("rerank",)
    axes = (TOKENS,)
    extra_rows = False
    per_seed_step = "rerank-folders"  # the rerankers started from the folders given (``models``)

    def columns(self, arms: Sequence[Arm]) -> list[str]:
        """Every reranker and both baseline orders, whichever arms were pretrained here."""
        return list(SYSTEMS)

    def arms(self, options: StudyOptions) -> tuple[Arm, ...]:
        """The arms still to pretrain here: each role's, unless ``options.models`` gives it a folder."""
        given = checkpoints(options.models)
        for role, folder in given.items():
            opened(role, folder)  # a folder that does not load, or a body its role cannot read: one line now
        return tuple(arm for role, arm in ROLES.items() if role not in given)

    def measure(self, setup: Setup, arm: Arm, name: str, seed: int) -> dict:
        """The arm's rerankers on the seed's queries: the encoder a cross-encoder, the decoder both generative ways."""
        run = setup.exp.load(name)
        role = next(role for role, of in ROLES.items() if of.key == arm.key)
        return rerankers(setup, seed, run.model, run.tokenizer, role, False)

    def measure_seed(self, setup: Setup, names: dict[str, str], seed: int) -> dict:
        """The rerankers started from the folders given (``models``) for ``seed``, and which folders those were."""
        given = checkpoints(setup.options.models)
        systems, bodies = {}, {}
        for role, folder in given.items():
            model, tokenizer = opened(role, folder)
            bodies[role] = {"folder": str(folder), "parameters": parameter_breakdown(model)["total"]}
            systems.update(rerankers(setup, seed, model, tokenizer, role, pretrained_elsewhere(folder)))
        return {"bodies": bodies, "systems": systems}

    def tabulate(self, m: Measured) -> Table[RerankerMeasures]:
        records = {system: [RerankRecord.from_json(r) for r in stored] for system, stored in by_system(m).items()}
        first = records[CROSS]  # the baselines are the same candidates whoever reranks them

        def per_system(values: dict[str, list[float]]) -> dict[str, list[float]]:
            """Every column's values, in the columns' order; a column without any has an empty list."""
            return {system: values.get(system, []) for system in SYSTEMS}

        ndcg = per_system(
            {
                **{system: [r.ndcg_at_10 for r in rs] for system, rs in records.items()},
                FIRST: [mean(r.per_query.first_stage_ndcg_at_10) for r in first],
                RANDOM: [mean(r.per_query.random_order_ndcg_at_10) for r in first],
            }
        )
        mrr = per_system(
            {
                **{system: [r.mrr for r in rs] for system, rs in records.items()},
                FIRST: [r.baseline.mrr for r in first],
                RANDOM: [r.random_order.mrr for r in first],
            }
        )
        p50 = per_system({system: [r.latency.p50_ms for r in rs] for system, rs in records.items()})
        p99 = per_system({system: [r.latency.p99_ms for r in rs] for system, rs in records.items()})
        rows = [
            table_row(NDCG, TOKENS, ndcg, True),
            table_row("MRR", TOKENS, mrr, True),
            _cost_row(P50, p50),
            _cost_row(P99, p99),
        ]
        return Table(RerankerMeasures(ndcg, p99), rows)

    def judge(self, rule: Rule, measures: RerankerMeasures, m: Measured) -> tuple[str, str]:
        ndcg, p99 = measures.ndcg, measures.p99
        learned = compare(ndcg[CROSS], ndcg[RANDOM])
        improves = compare(ndcg[CROSS], ndcg[FIRST])
        quality = compare(ndcg[CROSS], ndcg[WRITES])
        latency = compare(p99[CROSS], p99[WRITES], higher_is_better=False)
        if learned.winner != "a":
            return INCONCLUSIVE, (
                f"the cross-encoder does not clear a random order of its candidates "
                f"({learned.describe('cross', 'random')}): nothing learned to compare"
            )
        if improves.winner != "a":
            return INCONCLUSIVE, (
                f"the cross-encoder does not improve on the first stage's own order "
                f"({improves.describe('cross', 'BM25')}): not yet a reranker to compare"
            )
        not_behind = {"a": True, "tie": True, "b": False}[quality.winner]
        return claims_verdict(
            [
                (f"not behind the writing reranker on nDCG@10 ({quality.describe('cross', 'writes')})", not_behind),
                (
                    f"lower p99 latency ({latency.describe('cross', 'writes', 1)})",
                    {"a": True, "tie": None, "b": False}[latency.winner],
                ),
            ]
        )

    def summary(self, m: Measured, measures: RerankerMeasures) -> str:
        ndcg, p99 = measures.ndcg, measures.p99
        gen_p99, cross_p99 = mean(p99[WRITES]), mean(p99[CROSS])
        return (
            f"We replaced a generative reranker with a cross-encoder over the same top-{CANDIDATES} candidates: "
            f"nDCG@10 went from {mean(ndcg[WRITES]):.3f} to {mean(ndcg[CROSS]):.3f} while p99 latency "
            f"{'fell' if cross_p99 < gen_p99 else 'rose'} from {gen_p99:.0f} ms to {cross_p99:.0f} ms per query "
            f"(BM25's own order: {mean(ndcg[FIRST]):.3f}; a random order of the candidates: "
            f"{mean(ndcg[RANDOM]):.3f}; the same decoder scoring one relevance token instead of writing: "
            f"{mean(ndcg[SCORES]):.3f} at p99 {mean(p99[SCORES]):.0f} ms)."
        )

    def notes(self, m: Measured) -> list[str]:
        user = m.setup.plan.task_of("rerank") if m.setup.plan is not None else None
        queries = (
            f"the {user.test_rows} test queries of the user's task {user.spec.name} ({user.spec.flag()})"
            if user
            else f"{plays_queries(m.setup.recipe)} ICT queries of the test plays per seed"
        )
        return [
            (
                f"First stage: BM25 (Lucene variant; lower-cased words, digits and letters of any script kept, and "
                f"where the collection is English Lucene's English stop words and Porter stems: "
                f"``tasks.retrieve.Bm25Analysis``), its top {CANDIDATES} for {queries}; the same candidates for every "
                "reranker. Training negatives: BM25's top wrong documents for the train queries."
            ),
            *bodies(m, by_system(m)),
            (
                "The writing reranker generates up to 4 tokens greedily after each candidate's prompt and counts 'yes' "
                "as relevant; ties keep BM25's order. Latency: wall-clock per query over all its candidates, batch 50, "
                "on this machine."
            ),
        ]

    def meaning(self, m: Measured) -> dict[str, tuple[bool | None, tuple[str, float] | None]]:
        """nDCG higher, latency lower; the baselines are columns (random order, first stage)."""
        return {NDCG: (True, None), P99: (False, None)}


ABLATION = Reranker()
