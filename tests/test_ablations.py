"""Ablations: every coded rule on synthetic numbers (held / falsified / inconclusive), the pretraining
arms on both axes (the tolerance, a costlier arm, a two-phase arm's budget and totals), and the ablations
end to end through the CLI at the smoke scale (report structure, resuming from cached steps, bad
inputs). The smoke scale trains a few steps: it checks the plumbing, not the science."""

import contextlib
import dataclasses
import io
import json
import math
import time

import pytest

from maskwise.cli import main
from maskwise.errors import UserError
from maskwise.experiments.ablations import (
    clm_then_mlm,
    cross_objective,
    electra,
    embedder,
    hybrid,
    jobs,
    mask_ratio,
    pooling,
    registry,
    reranker,
    seq2seq,
    shift_bug,
)
from maskwise.experiments.ablations.jobs import JobScores
from maskwise.experiments.arms import (
    AXES,
    TOKENS,
    WALL,
    Arm,
    Phase,
    Setup,
    StudyOptions,
    matmul_peak_share,
    pretrain_arms,
    tokens_per_second,
    tokens_seen,
    train_seconds,
)
from maskwise.experiments.framework import (
    RECALL,
    SHARED,
    TAG_F1,
    Measured,
    curve_entries,
    key,
    metric_meta,
    throughput_rows,
)
from maskwise.experiments.verdict import FALSIFIED, HELD, INCONCLUSIVE
from maskwise.recipes import SCALES
from maskwise.train.pretrain import PretrainConfig
from tests.report_checks import check_report_html
from tests.test_compare_user_tasks import write_task_files
from tests.weights import state_dicts_equal


def smoke_run(name: str, out, *flags: str) -> dict:
    """``maskwise ablate NAME`` at the smoke scale over two seeds into ``out``: its results.json."""
    assert main(["ablate", name, "--scale", "smoke", "--seeds", "2", "--out", str(out), "--no-progress", *flags]) == 0
    return json.loads((out / "results.json").read_text())


def seeds(mean: float, sd: float = 0.005) -> list[float]:
    """Three per-seed values with this mean and sample standard deviation."""
    return [mean - sd, mean, mean + sd]


# ---- the rules ------------------------------------------------------------------------------------


def measured(arms=()) -> Measured:
    """What a study's ``judge`` reads beside its measures: the arms (no runs)."""
    return Measured(None, tuple(arms), {}, {}, {})


def judged(study, measures, arms=(), rule=None) -> tuple[str, str]:
    """``study``'s one rule (or ``rule``) judged on hand-made ``measures``."""
    return study.judge(rule or study.rules[0], measures, measured(arms))


def scores(arms: dict[str, list[float]], baseline: list[float], control: list[float] | None, higher=True) -> JobScores:
    return JobScores(arms, baseline, control, higher)


def from_metric(groups: dict[str, list[float]], higher: bool) -> JobScores:
    """A job's metric in results.json (``JobScores.to_json``) read back: the columns, the baseline, the control."""
    arms = {label: values for label, values in groups.items() if label not in (jobs.BASELINE, jobs.UNTRAINED)}
    return JobScores(arms, groups[jobs.BASELINE], groups.get(jobs.UNTRAINED), higher)


ENC, DEC = embedder.ENCODER.label, embedder.DECODER.label
BUCKETS = ("0-199", "200-399", "400-799")


def embedder_measures(enc: tuple, dec: tuple, axes=AXES, untrained: float = 0.05) -> embedder.EmbedderMeasures:
    def at() -> embedder.EmbedderAxis:
        recall = scores({ENC: seeds(sum(enc) / 3), DEC: seeds(sum(dec) / 3)}, seeds(0.02, 0.0), seeds(untrained))
        buckets = [embedder.Bucket(b, {ENC: seeds(e), DEC: seeds(d)}) for b, e, d in zip(BUCKETS, enc, dec)]
        return embedder.EmbedderAxis(recall, buckets)

    return embedder.EmbedderMeasures({axis: at() for axis in axes})


@pytest.mark.unit
def test_embedder_rule():
    study = embedder.ABLATION
    narrowing = embedder_measures((0.30, 0.40, 0.50), (0.28, 0.30, 0.32))
    assert judged(study, narrowing)[0] == HELD
    verdict, detail = judged(study, embedder_measures((0.30, 0.40, 0.50), (0.28, 0.30, 0.32), untrained=0.40))
    assert verdict == INCONCLUSIVE and "no pretraining to compare" in detail  # the encoder at its control
    matching = embedder_measures((0.30, 0.30, 0.30), (0.30, 0.30, 0.30))
    assert judged(study, matching)[0] == FALSIFIED
    widening = embedder_measures((0.50, 0.40, 0.30), (0.30, 0.30, 0.28))  # encoder ahead, gap grows for short
    verdict, detail = judged(study, widening)
    assert verdict == INCONCLUSIVE and "does not narrow" in detail
    pooled = embedder_measures((0.32, 0.32, 0.32), (0.30, 0.30, 0.30))  # no bucket separates
    overall = scores({ENC: seeds(0.32, 0.001), DEC: seeds(0.30, 0.001)}, seeds(0.02, 0.0), seeds(0.05))
    ahead_only_pooled = embedder.EmbedderMeasures(
        {axis: dataclasses.replace(at, recall=overall) for axis, at in pooled.at.items()}
    )
    assert judged(study, ahead_only_pooled)[0] == INCONCLUSIVE
    noisy = embedder_measures((0.30, 0.40, 0.50), (0.28, 0.30, 0.32))  # narrows on average, not every seed
    for at in noisy.at.values():
        at.buckets[-1].arms[ENC] = [0.40, 0.33, 0.30]
    verdict, detail = judged(study, noisy)
    assert verdict == INCONCLUSIVE and "inconclusive at 3 seeds" in detail and "would need about" in detail
    disagree = embedder.EmbedderMeasures(
        {
            **embedder_measures((0.30, 0.40, 0.50), (0.28, 0.30, 0.32), (TOKENS,)).at,
            **embedder_measures((0.30, 0.30, 0.30), (0.30, 0.30, 0.30), (WALL,)).at,
        }
    )
    verdict, detail = judged(study, disagree)
    assert verdict == INCONCLUSIVE and detail.startswith("The axes disagree")
    assert list(narrowing.to_json()) == [
        key(name, axis) for axis in AXES for name in ("recall@10", *(f"{embedder.BUCKET}{b} chars" for b in BUCKETS))
    ]


@pytest.mark.unit
def test_mask_ratio_rule():
    arms = mask_ratio.ABLATION.arms(StudyOptions(ratios=(0.3, 0.15)))  # sorted: the lowest ratio first
    low, high = arms[0].label, arms[-1].label

    def measures(loss_low, loss_high, acc_low, acc_high, untrained=0.2):
        tagging = scores({low: seeds(acc_low), high: seeds(acc_high)}, seeds(0.18), seeds(untrained))
        at = mask_ratio.RatioAxis({low: seeds(loss_low), high: seeds(loss_high)}, tagging)
        return mask_ratio.MaskRatioMeasures(dict.fromkeys(AXES, at))

    study = mask_ratio.ABLATION
    assert judged(study, measures(5.0, 4.5, 0.50, 0.40), arms)[0] == HELD
    assert judged(study, measures(5.0, 4.5, 0.40, 0.60), arms)[0] == FALSIFIED
    assert judged(study, measures(4.5, 5.0, 0.60, 0.40), arms)[0] == INCONCLUSIVE  # loss half fails
    assert judged(study, measures(5.0, 4.5, 0.50, 0.50), arms)[0] == INCONCLUSIVE
    verdict, detail = judged(study, measures(5.0, 4.5, 0.40, 0.60, untrained=0.45), arms)  # one at the control
    assert verdict == INCONCLUSIVE and f"{low} not ahead of the tagging baselines, so no evidence" in detail
    tagging = measures(5.0, 4.5, 0.5, 0.4).to_json()[key(TAG_F1, TOKENS)]
    assert list(tagging) == [low, high, jobs.BASELINE, jobs.UNTRAINED]


def shift_measures(metrics: dict) -> shift_bug.ShiftMeasures:
    """Shift-bug's metrics (results.json's, or hand-made in the same keys) as the measures its rule reads."""
    return shift_bug.ShiftMeasures(
        {
            axis: shift_bug.ShiftAxis(metrics[key(shift_bug.REPORTED, axis)], metrics[key(shift_bug.COPY_RATE, axis)])
            for axis in AXES
        }
    )


@pytest.mark.unit
def test_shift_bug_rule():
    bug, ok = shift_bug.SHIFT_BUG.label, shift_bug.SHIFT_OK.label

    def measures(reported_bug, reported_ok, copies_bug, copies_ok):
        at = shift_bug.ShiftAxis(
            {bug: seeds(reported_bug), ok: seeds(reported_ok)}, {bug: seeds(copies_bug), ok: seeds(copies_ok)}
        )
        return shift_bug.ShiftMeasures(dict.fromkeys(AXES, at))

    study = shift_bug.ABLATION
    assert judged(study, measures(0.1, 5.0, 0.9, 0.05))[0] == HELD
    assert judged(study, measures(4.0, 5.0, 0.9, 0.05))[0] == FALSIFIED  # lower, but not by half
    assert judged(study, measures(0.1, 5.0, 0.02, 0.05))[0] == FALSIFIED  # fewer copies
    assert judged(study, measures(0.1, 5.0, 0.05, 0.05))[0] == INCONCLUSIVE


@pytest.mark.unit
def test_seq2seq_rule():
    ed, do = seq2seq.ENCODER_DECODER.label, seq2seq.DECODER.label

    def measures(short, long, ttft):
        longest = seq2seq.Bucket("450-599", {ed: seeds(long[0]), do: seeds(long[1])})
        at = seq2seq.StructureAxis(
            {ed: seeds(0.5), do: seeds(0.5)},
            seq2seq.Bucket("0-149", {ed: seeds(short[0]), do: seeds(short[1])}),
            longest,
            seq2seq.Bucket("450-599", {ed: seeds(ttft[0], 0.5), do: seeds(ttft[1], 0.5)}),
        )
        return seq2seq.StructureMeasures(dict.fromkeys(AXES, at))

    study = seq2seq.ABLATION
    assert judged(study, measures((0.5, 0.5), (0.6, 0.4), (10.0, 20.0)))[0] == HELD
    assert judged(study, measures((0.5, 0.5), (0.4, 0.6), (10.0, 20.0)))[0] == FALSIFIED  # decoder writes better
    assert judged(study, measures((0.5, 0.5), (0.6, 0.4), (20.0, 10.0)))[0] == FALSIFIED  # decoder answers sooner
    assert judged(study, measures((0.0, 0.0), (0.0, 0.0), (10.0, 20.0)))[0] == INCONCLUSIVE  # nobody writes
    assert judged(study, measures((0.6, 0.4), (0.6, 0.4), (10.0, 20.0)))[0] == INCONCLUSIVE  # short not tied
    no_bucket = seq2seq.StructureMeasures(dict.fromkeys(AXES, seq2seq.StructureAxis({}, None, None, None)))
    assert judged(study, no_bucket)[0] == INCONCLUSIVE  # no bucket had enough passages
    assert list(measures((0.5, 0.5), (0.6, 0.4), (10.0, 20.0)).to_json())[:3] == [
        key(seq2seq.F1, TOKENS),
        key(f"{seq2seq.F1_BUCKET}0-149 chars", TOKENS),
        key(f"{seq2seq.F1_BUCKET}450-599 chars", TOKENS),
    ]


@pytest.mark.unit
def test_electra_detection_gain_is_zero_at_the_base_rate():
    def run(share, loss):
        return {"curve": [{"step": 1}, {"val_replaced_fraction": share, "val_discriminator_loss": loss}]}

    assert electra.detection_gain(run(0.5, math.log(2))) == pytest.approx(0.0)
    base = -(0.12 * math.log(0.12) + 0.88 * math.log(0.88))  # always 12% "replaced": 0.367 nats
    assert electra.detection_gain(run(0.12, base)) == pytest.approx(0.0)
    assert electra.detection_gain(run(0.12, 0.30)) == pytest.approx(base - 0.30)
    assert electra.detection_gain(run(0.0, 0.01)) == pytest.approx(-0.01)  # nothing replaced: any loss is a loss


def test_electra_rule():
    def measures(electra_acc, mlm_acc, rule=0.18):
        tagging = scores(
            {electra.ELECTRA.label: seeds(electra_acc), electra.MLM_ARM.label: seeds(mlm_acc)}, seeds(rule), seeds(0.2)
        )
        return electra.ElectraMeasures(dict.fromkeys(AXES, tagging))

    study = electra.ABLATION
    assert judged(study, measures(0.5, 0.4))[0] == HELD
    assert judged(study, measures(0.4, 0.5))[0] == FALSIFIED
    assert judged(study, measures(0.45, 0.45))[0] == INCONCLUSIVE
    verdict, detail = judged(study, measures(0.4, 0.5, rule=0.45))  # ELECTRA below the verse rule: no evidence
    assert verdict == INCONCLUSIVE and "ELECTRA not ahead of the tagging baselines" in detail


@pytest.mark.unit
@pytest.mark.parametrize("scale", SCALES)
def test_a_study_sets_what_it_fine_tunes_on_and_its_batch_the_scale_how_long(scale):
    recipe = SCALES[scale].recipe
    _, pooled, _ = registry.checked("pooling", scale, 2)
    classify = pooled.recipe.tasks["classify"]
    assert (classify.plays_task, classify.steps) == ("word-order", recipe.tasks["classify"].steps)
    assert pooled.recipe.tasks["tag"] == recipe.tasks["tag"] and pooled.recipe.batch_size == recipe.batch_size
    _, electra_scale, _ = registry.checked("electra", scale, 2, StudyOptions())  # no task of its own, half the batch
    assert electra_scale.recipe.tasks == recipe.tasks
    assert electra_scale.recipe.batch_size == recipe.batch_size // electra.ABLATION.steps_factor


@pytest.mark.unit
def test_an_ablation_refuses_the_options_it_does_not_read_in_one_line():
    with pytest.raises(UserError, match=r"^ablation pooling does not take ratios, share \(its options: none\)$"):
        registry.checked("pooling", "smoke", 2, StudyOptions(share=0.5, ratios=(0.1, 0.2)))
    with pytest.raises(UserError, match=r"^ablation mask-ratio does not take models \(its options: ratios\)$"):
        registry.checked("mask-ratio", "smoke", 2, StudyOptions(models="cross=x"))
    study, _, _ = registry.checked("clm-then-mlm", "smoke", 2, StudyOptions(share=0.25))
    assert study.arms(StudyOptions(share=0.25))[1].before.share == 0.25


def pooling_measures(
    acc_mean, acc_cls, recall_mean, recall_cls, majority=0.2, untrained=0.05, order_control=0.2
) -> pooling.PoolingMeasures:
    return pooling.PoolingMeasures(
        word_order=scores({"mean": seeds(acc_mean), "cls": seeds(acc_cls)}, seeds(majority, 0.0), seeds(order_control)),
        retrieval=scores({"mean": seeds(recall_mean), "cls": seeds(recall_cls)}, seeds(0.02, 0.0), seeds(untrained)),
    )


@pytest.mark.unit
def test_pooling_rule():
    study = pooling.ABLATION
    assert judged(study, pooling_measures(0.50, 0.50, 0.40, 0.20))[0] == HELD
    assert judged(study, pooling_measures(0.50, 0.515, 0.40, 0.20))[0] == HELD  # separated but within CLOSE
    assert judged(study, pooling_measures(0.50, 0.50, 0.20, 0.40))[0] == FALSIFIED
    assert judged(study, pooling_measures(0.60, 0.40, 0.40, 0.20))[0] == FALSIFIED  # not close on classification
    assert judged(study, pooling_measures(0.50, 0.50, 0.30, 0.30))[0] == INCONCLUSIVE
    verdict, detail = judged(study, pooling_measures(0.20, 0.20, 0.40, 0.20, majority=0.25))  # both at chance
    assert verdict == INCONCLUSIVE and "the pooling ahead, does not clear the baselines" in detail
    verdict, detail = judged(study, pooling_measures(0.50, 0.60, 0.40, 0.20, order_control=0.65))  # below control
    assert verdict == INCONCLUSIVE and "cls, the pooling ahead, does not clear the baselines" in detail
    verdict, detail = judged(study, pooling_measures(0.50, 0.50, 0.40, 0.20, untrained=0.45))  # fine-tuning got there
    assert verdict == INCONCLUSIVE and "mean does not clear the baselines" in detail
    verdict, detail = judged(study, pooling_measures(0.50, 0.50, 0.20, 0.40, untrained=0.45))  # [CLS] ahead, at control
    assert verdict == INCONCLUSIVE and "cls does not clear the baselines" in detail


@pytest.mark.unit
def test_pooling_judge_reads_the_typed_measures_and_writes_the_old_metrics():
    """The judge reads the fields (word order's and retrieval's columns and bars); the JSON is results.json's."""
    held = pooling_measures(0.50, 0.50, 0.40, 0.20)
    verdict, detail = judged(pooling.ABLATION, held)
    assert verdict == HELD and detail.startswith("close on classification (") and "mean ahead on retrieval" in detail
    # the same numbers with retrieval's columns swapped: [CLS] ahead there contradicts the second claim
    swapped = dataclasses.replace(
        held, retrieval=dataclasses.replace(held.retrieval, arms={"mean": seeds(0.20), "cls": seeds(0.40)})
    )
    assert judged(pooling.ABLATION, swapped)[0] == FALSIFIED
    assert held.word_order.clears("mean") and not held.word_order.short_of(("mean", "cls"))
    assert held.to_json() == {
        key(pooling.ORDER_ACC, SHARED): {
            "mean": seeds(0.50),
            "cls": seeds(0.50),
            jobs.BASELINE: seeds(0.2, 0.0),
            jobs.UNTRAINED: seeds(0.2),
        },
        key(RECALL, SHARED): {
            "mean": seeds(0.40),
            "cls": seeds(0.20),
            jobs.BASELINE: seeds(0.02, 0.0),
            jobs.UNTRAINED: seeds(0.05),
        },
    }
    assert from_metric(held.to_json()[key(RECALL, SHARED)], True) == held.retrieval  # the JSON reads back
    with pytest.raises(ValueError, match="no untrained control"):
        dataclasses.replace(held.retrieval, control=None).untrained()


@pytest.mark.unit
def test_copy_rate_counts_tokens_equal_to_the_one_before():
    assert shift_bug.copy_rate([5, 7], [7, 7, 2, 2]) == (3, 4)  # the first compares with the prompt's last
    assert shift_bug.copy_rate([5], []) == (0, 0)


def job_measures(values: dict) -> jobs.JobMeasures:
    """Measures shaped as ``JobsStudy.tabulate``'s from {job: {group: mean}} (``jobs.BASELINE`` and, where given,
    ``jobs.UNTRAINED`` among the groups), three seeds around each mean, on both axes."""

    def job_scores(job, groups: dict[str, float]) -> JobScores:
        bars = (jobs.BASELINE, jobs.UNTRAINED)
        return scores(
            {group: seeds(mean) for group, mean in groups.items() if group not in bars},
            seeds(groups[jobs.BASELINE]),
            seeds(groups[jobs.UNTRAINED]) if jobs.UNTRAINED in groups else None,
            job.higher,
        )

    return jobs.JobMeasures({(axis, job): job_scores(job, groups) for axis in AXES for job, groups in values.items()})


@pytest.mark.unit
def test_hybrid_rule():
    enc, dec, hyb, base = hybrid.MLM_ENCODER.label, hybrid.CLM_DECODER.label, hybrid.HYBRID.label, jobs.BASELINE
    study, arms = hybrid.ABLATION, hybrid.ARMS

    def measures(tag, loss, loss_baseline=3.0, untrained=None):
        control = {} if untrained is None else {jobs.UNTRAINED: untrained}
        return job_measures(
            {
                jobs.TAGGING: {enc: tag[0], hyb: tag[1], base: 0.18, **control},
                jobs.NEXT_TOKEN_LOSS: {dec: loss[0], hyb: loss[1], base: loss_baseline},
            }
        )

    assert judged(study, measures((0.30, 0.32), (2.2, 2.2)), arms)[0] == HELD  # within noise or ahead
    verdict, detail = judged(study, measures((0.30, 0.25), (2.2, 2.2)), arms)
    assert verdict == FALSIFIED and "the hybrid is behind the encoder (MLM) on tagging F1" in detail
    assert judged(study, measures((0.30, 0.30), (2.2, 2.4)), arms)[0] == FALSIFIED  # a higher loss is behind
    verdict, detail = judged(study, measures((0.30, 0.30), (2.2, 2.2), loss_baseline=2.0), arms)
    assert verdict == INCONCLUSIVE and "not cleared by decoder (CLM) on held-out next-token loss" in detail
    # behind a specialist that does not clear its own baseline: nothing learned to be behind
    verdict, detail = judged(study, measures((0.15, 0.10), (2.2, 2.2)), arms)
    assert verdict == INCONCLUSIVE and "not cleared by encoder (MLM) on tagging F1" in detail
    # above the verse rule but not above the untrained body fine-tuned the same way: pretraining added nothing seen
    verdict, detail = judged(study, measures((0.30, 0.30), (2.2, 2.2), untrained=0.30), arms)
    assert verdict == INCONCLUSIVE and "not cleared by encoder (MLM) on tagging F1" in detail


@pytest.mark.unit
def test_cross_objective_rules():
    arms = cross_objective.ABLATION.arms(StudyOptions())
    assert [arm.key for arm in arms] == ["mlm", "clm0.75-mlm", "clm", "mlm0.75-clm"]
    assert arms[1].settings == cross_objective.MLM_ARM.settings
    assert arms[1].before == Phase(cross_objective.CLM_ARM.settings, 0.75)
    assert cross_objective.ABLATION.clock_groups(arms) == (arms[:2], arms[2:])  # each pair on its own clock
    mlm, from_clm, clm, from_mlm = (arm.label for arm in arms)
    base = jobs.BASELINE
    study, encoders, decoders = cross_objective.ABLATION, cross_objective.ENCODERS, cross_objective.DECODERS
    assert study.rules == (encoders, decoders)

    def measures(tag, loss):
        return job_measures(
            {
                jobs.TAGGING: {mlm: tag[0], from_clm: tag[1], base: 0.18},
                jobs.NEXT_TOKEN_LOSS: {clm: loss[0], from_mlm: loss[1], base: 3.0},
            }
        )

    native_ahead = measures((0.30, 0.25), (2.2, 2.4))
    assert judged(study, native_ahead, arms, encoders)[0] == HELD
    assert judged(study, native_ahead, arms, decoders)[0] == HELD
    continued_ahead = measures((0.25, 0.30), (2.4, 2.2))  # a higher F1, a lower loss
    assert judged(study, continued_ahead, arms, encoders)[0] == FALSIFIED
    assert judged(study, continued_ahead, arms, decoders)[0] == FALSIFIED
    only_encoders_ahead = measures((0.30, 0.25), (2.4, 2.2))  # each rule reads its own pair
    assert judged(study, only_encoders_ahead, arms, encoders)[0] == HELD
    assert judged(study, only_encoders_ahead, arms, decoders)[0] == FALSIFIED
    tied = measures((0.30, 0.30), (2.2, 2.2))
    for rule in (encoders, decoders):
        verdict, detail = judged(study, tied, arms, rule)
        assert verdict == INCONCLUSIVE and "a tie is not shown to be a match" in detail
    assert cross_objective.ABLATION.arms(StudyOptions(share=0.5))[1].key == "clm0.5-mlm"


@pytest.mark.unit
def test_clm_then_mlm_rule():
    arms = clm_then_mlm.ABLATION.arms(StudyOptions())
    assert arms[1].key == "clm0.5-mlm" and arms[1].before.share == 0.5
    mlm, first_clm = (arm.label for arm in arms)
    study = clm_then_mlm.ABLATION

    def measures(tag, untrained=None):
        control = {} if untrained is None else {jobs.UNTRAINED: untrained}
        return job_measures({jobs.TAGGING: {mlm: tag[0], first_clm: tag[1], jobs.BASELINE: 0.18, **control}})

    assert judged(study, measures((0.25, 0.30)), arms)[0] == HELD
    assert judged(study, measures((0.30, 0.25)), arms)[0] == FALSIFIED
    assert judged(study, measures((0.30, 0.30)), arms)[0] == INCONCLUSIVE
    # MLM alone ahead, but the continued arm is not above the untrained body on tagging: that claim is no evidence
    verdict, detail = judged(study, measures((0.30, 0.25), untrained=0.26), arms)
    assert verdict == INCONCLUSIVE and f"not evidence as {first_clm} does not clear the baselines" in detail
    assert "contradicted" not in detail


# ---- end to end, at the smoke scale ---------------------------------------------------------------


@pytest.fixture(scope="module")
def shift_bug_run(tmp_path_factory):
    """``maskwise ablate shift-bug --scale smoke``, two seeds: (folder, exit code, stdout)."""
    out = tmp_path_factory.mktemp("ablate") / "shift-bug"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["ablate", "shift-bug", "--scale", "smoke", "--seeds", "2", "--out", str(out), "--no-progress"])
    return out, code, stdout.getvalue()


@pytest.mark.e2e
def test_shift_bug_report_structure(shift_bug_run):
    out, code, stdout = shift_bug_run
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    for field in (
        "title",
        "kind",
        "machine",
        "settings",
        "wall_s",
        "runs",
        "metrics",
        "table",
        "parameters",
        "verdicts",
        "summary",
        "samples",
        "notes",
    ):
        assert field in results, field
    assert results["kind"] == "ablation"
    # The verdict is the coded rule's on the recorded metrics, and on hand-made numbers in the same
    # keys (the pipeline's own labels and axes) that rule must answer held, then falsified.
    [verdict] = results["verdicts"]
    measures = shift_measures(results["metrics"])
    assert measures.to_json() == results["metrics"]  # the typed measures are what results.json holds
    rule_verdict, why = judged(shift_bug.ABLATION, measures)
    assert (verdict["verdict"], verdict["details"]) == (rule_verdict, [why])
    assert (verdict["prediction"], verdict["rule"]) == (shift_bug.ABLATION.rules[0].prediction, shift_bug.RULE)
    bug, ok = shift_bug.SHIFT_BUG.label, shift_bug.SHIFT_OK.label
    made = {
        name: {
            bug: seeds(0.9 if shift_bug.COPY_RATE in name else 0.1),
            ok: seeds(0.05 if shift_bug.COPY_RATE in name else 5.0),
        }
        for name in results["metrics"]
    }
    assert judged(shift_bug.ABLATION, shift_measures(made))[0] == HELD
    made = {name: {bug: groups[ok], ok: groups[bug]} for name, groups in made.items()}
    assert judged(shift_bug.ABLATION, shift_measures(made))[0] == FALSIFIED
    assert "[smoke scale]" in results["title"] and results["settings"]["scale"]["name"] == "smoke"
    assert f"verdict: {verdict['verdict']}" in stdout and str(out / "report.md") in stdout
    assert {row[1] for row in results["table"]["rows"]} == set(AXES)  # both axes, always
    for groups in results["metrics"].values():
        assert set(groups) == {shift_bug.SHIFT_OK.label, bug} and all(len(v) == 2 for v in groups.values())
    assert {run["seed"] for run in results["runs"]} == {0, 1} and len(results["runs"]) >= 4
    assert results["summary"].startswith("We replaced")
    assert {name: meta["higher"] for name, meta in results["metric_meta"].items()} == {
        key(shift_bug.REPORTED, axis): False for axis in AXES
    } | {key(shift_bug.COPY_RATE, axis): None for axis in AXES}
    report = (out / "report.md").read_text()
    for section in (
        "## Predictions, rules, verdicts (over 2 seeds)",
        "## Summary",
        "## Results",
        "## Where the parameters go",
        "## Plots",
        "## Settings",
    ):
        assert section in report, section
    for png in ("loss_vs_tokens_seen.png", "loss_vs_wall_s.png"):
        assert (out / png).stat().st_size > 0
    assert len(list(out.glob("metric_*.png"))) == len(results["metrics"])
    assert len(check_report_html(out).images) == 2 + len(results["metrics"])


@pytest.mark.e2e
def test_second_call_reuses_every_finished_step(shift_bug_run, monkeypatch, capsys):
    out, _, _ = shift_bug_run
    first = json.loads((out / "results.json").read_text())
    (out / "steps" / "shift-shift-seed1.json").unlink()  # as if interrupted before this measurement

    def no_training(*args, **kwargs):
        raise AssertionError("a finished pretraining run was trained again")

    monkeypatch.setattr("maskwise.experiments.runner.pretrain", no_training)
    assert main(["ablate", "shift-bug", "--scale", "smoke", "--seeds", "2", "--out", str(out), "--no-progress"]) == 0
    second = json.loads((out / "results.json").read_text())
    assert second["metrics"] == first["metrics"]  # the one re-measured step gives the same numbers
    assert (out / "steps" / "shift-shift-seed1.json").is_file()
    assert "continued an earlier one" in second["notes"][-1]
    assert not any("continued an earlier one" in note for note in first["notes"])


@pytest.mark.e2e
def test_report_over_several_ablations_prints_one_table(shift_bug_run, tmp_path, capsys):
    out, _, _ = shift_bug_run
    results = json.loads((out / "results.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    made_up = [{**results["verdicts"][0], "verdict": FALSIFIED}]
    (other / "results.json").write_text(
        json.dumps(
            {
                **results,
                "verdicts": made_up,
                "wall_s": 125.5,
                "settings": {**results["settings"], "ablation": "made-up"},
            }
        )
    )
    capsys.readouterr()
    assert main(["report", str(out), str(other)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| ablation | verdict |") and len(lines) == 6 and lines[4] == ""
    [verdict] = results["verdicts"]
    assert lines[2].startswith(f"| shift-bug | {verdict['verdict']} | {verdict['details'][0]} |")
    assert lines[2].endswith("| `maskwise ablate shift-bug --scale smoke --seeds 2` |")
    assert lines[3].startswith("| made-up | falsified |") and "| 2 min 5 s |" in lines[3]
    assert lines[5].startswith("Machine: ") and ";" not in lines[5]  # one machine, named once
    assert (other / "report.md").is_file()
    compare_like = tmp_path / "compare"
    compare_like.mkdir()
    (compare_like / "results.json").write_text(json.dumps({"title": "x", "kind": "compare"}))
    assert main(["report", str(out), str(compare_like)]) == 2
    assert "not an ablation's results (kind 'compare')" in capsys.readouterr().err
    for field, value in [("table", "x"), ("runs", "x")]:  # a TypeError and an AttributeError before
        (other / "results.json").write_text(json.dumps({**results, field: value}))
        assert main(["report", str(other)]) == 2
        assert f"not a maskwise results file ({field} of another type)" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_folder_keeps_its_ablation_and_scale(shift_bug_run, capsys):
    out, _, _ = shift_bug_run
    assert main(["ablate", "shift-bug", "--scale", "quick", "--out", str(out)]) == 2  # quick, not smoke
    assert "holds ablation shift-bug at scale smoke with other settings" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ablate", "no-such-thing"], "unknown ablation 'no-such-thing'; known: embedder, mask-ratio, shift-bug"),
        (["ablate", "pooling", "--ratios", "0.2,0.4"], "does not take ratios"),
        (["ablate", "mask-ratio", "--ratios", "0.2,x"], "--ratios must be comma-separated numbers"),
        (["ablate", "mask-ratio", "--ratios", "0.2"], "at least two distinct mask ratios"),
        (
            ["ablate", "cross-objective", "--share", "1.5"],
            "share: the first phase's share of the budget must be in (0, 1)",
        ),
        (["ablate", "clm-then-mlm", "--share", "half"], "--share must be a number, got 'half'"),
        (["ablate", "hybrid", "--share", "0.5"], "ablation hybrid does not take share"),
        (["ablate", "pooling", "--model", "cross=all-MiniLM-L6-v2"], "ablation pooling does not take models"),
        (["ablate", "shift-bug", "--seeds", "1"], "seeds must be at least 2"),
        (["ablate", "shift-bug", "--scale", "huge"], "unknown scale 'huge'; known: default, quick, smoke"),
        (["ablate", "shift-bug", "--quick", "--scale", "gpu"], "--quick is --scale quick"),  # compare's vocabulary
    ],
)
@pytest.mark.e2e
def test_bad_inputs_exit_2_with_one_line(argv, message, tmp_path, capsys):
    scale = [] if "--scale" in argv else ["--scale", "smoke"]
    assert main([*argv, *scale, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.e2e
@pytest.mark.slow
def test_reranker_ablation_end_to_end_at_smoke_scale(tmp_path, capsys):
    out = tmp_path / "reranker"
    results = smoke_run("reranker", out)
    assert [v["verdict"] in (HELD, FALSIFIED, INCONCLUSIVE) for v in results["verdicts"]] == [True]
    assert results["summary"].startswith(
        "We replaced a generative reranker with a cross-encoder over the same top-100 candidates: nDCG@10 went from"
    )
    assert results["table"]["columns"][2:-1] == list(reranker.SYSTEMS)
    rows = {row[0]: row for row in results["table"]["rows"]}
    assert set(rows) == {reranker.NDCG, "MRR", reranker.P50, reranker.P99}
    latency = results["metrics"][key(reranker.P99, TOKENS)]
    assert all(len(latency[s]) == 2 and min(latency[s]) > 0 for s in (reranker.CROSS, reranker.SCORES, reranker.WRITES))


@pytest.mark.e2e
@pytest.mark.slow
def test_seq2seq_ablation_end_to_end_at_smoke_scale(tmp_path):
    """Both structures pretrain by denoising on three times the scale's tokens; quality by the recipe's buckets."""
    out = tmp_path / "seq2seq"
    results = smoke_run("seq2seq", out)
    rows = {(row[0], row[1]): row for row in results["table"]["rows"]}
    seen = rows[("pretraining tokens seen (thousands)", TOKENS)]
    assert all(float(cell.split()[0]) >= 3 * SCALES["smoke"].tokens / 1000 for cell in seen[2:4])
    for arm in (seq2seq.DECODER, seq2seq.ENCODER_DECODER):
        config = json.loads((out / "runs" / f"{arm.key}-seed0" / "config.json").read_text())
        assert config["objective"] == "denoise"
    measured = json.loads((out / "steps" / "seq2seq-decoder-seed0.json").read_text())
    assert list(measured["by_source_chars"]) == ["0-59"]  # the recipe's buckets; smoke passages are under 40 chars
    assert [v["verdict"] for v in results["verdicts"]] == [INCONCLUSIVE]  # no bucket holds 10 passages in every run


@pytest.mark.e2e
@pytest.mark.slow
def test_pooling_ablation_end_to_end_at_smoke_scale(tmp_path):
    """Both poolings on each seed's encoder, each task's control under the pooling it was fine-tuned with."""
    out = tmp_path / "pooling"
    results = smoke_run("pooling", out)
    measures = pooling.PoolingMeasures(
        from_metric(results["metrics"][key(pooling.ORDER_ACC, SHARED)], True),
        from_metric(results["metrics"][key(RECALL, SHARED)], True),
    )
    assert measures.to_json() == results["metrics"]
    assert [(v["verdict"], v["details"]) for v in results["verdicts"]] == [
        (verdict, [detail]) for verdict, detail in [judged(pooling.ABLATION, measures)]
    ]
    for measure in (pooling.ORDER_ACC, RECALL):
        groups = results["metrics"][key(measure, SHARED)]
        assert set(groups) == {*pooling.POOLINGS, jobs.BASELINE, jobs.UNTRAINED} and all(
            len(scores) == 2 for scores in groups.values()
        )
    assert results["metrics"][key(pooling.ORDER_ACC, SHARED)][jobs.BASELINE] == [0.5, 0.5]  # half of each order
    assert sorted(p.name for p in (out / "steps").glob("*untrained*")) == [
        f"{task}-untrained-seed{seed}.json" for task in ("classify", "embed") for seed in (0, 1)
    ]
    rows = {row[0]: row[2:4] for row in results["table"]["rows"]}
    assert rows[f"{pooling.ORDER_ACC}, {jobs.UNTRAINED} (control)"][1] == "—"  # fine-tuned with [CLS]
    assert rows[f"{RECALL}, {jobs.UNTRAINED} (control)"][0] == "—"  # fine-tuned with mean pooling
    assert pooling.ORDER_ACC in results["summary"] and "never pretrained" in results["summary"]
    for seed in (0, 1):  # the study's own task, at the scale's steps, for both poolings and the control
        classify = json.loads((out / "steps" / f"pool-mlm-seed{seed}.json").read_text())["classify"]
        assert {
            (r["settings"]["plays_task"], r["settings"]["steps"])
            for r in (classify["cls"], classify["mean"], classify["cls"][jobs.UNTRAINED])
        } == {("word-order", SCALES["smoke"].recipe.tasks["classify"].steps)}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("name, module", [("mask-ratio", mask_ratio), ("electra", electra)])
def test_encoder_pretraining_ablations_judge_on_tagging(name, module, tmp_path):
    out = tmp_path / name
    results = smoke_run(name, out)
    metrics, arms = results["metrics"], module.ABLATION.arms(StudyOptions())
    tagging = {axis: from_metric(metrics[key(TAG_F1, axis)], True) for axis in AXES}
    if module is mask_ratio:
        at = {axis: mask_ratio.RatioAxis(metrics[key(mask_ratio.MASK_LOSS, axis)], tagging[axis]) for axis in AXES}
        measures = mask_ratio.MaskRatioMeasures(at)
    else:
        measures = electra.ElectraMeasures(tagging)
    assert measures.to_json() == metrics
    verdict, detail = judged(module.ABLATION, measures, arms)
    assert [(v["verdict"], v["details"]) for v in results["verdicts"]] == [(verdict, [detail])]
    assert {key(TAG_F1, axis) for axis in AXES} <= set(results["metrics"])
    assert not any(RECALL in metric or pooling.ORDER_ACC in metric for metric in results["metrics"])
    assert "tagging F1" in results["summary"] and "before every line break" in results["summary"]
    tagging = results["metric_meta"][key(TAG_F1, AXES[0])]  # its plot draws the verse rule
    assert tagging["higher"] is True and tagging["baseline_name"].endswith("before every line break")
    assert set(results["metrics"][key(TAG_F1, AXES[0])]) == {arm.label for arm in arms} | {
        jobs.BASELINE,
        jobs.UNTRAINED,
    }
    width = len(results["table"]["columns"])
    assert all(len(row) == width for row in results["table"]["rows"])  # the bars are metric groups, not columns
    batch = SCALES["smoke"].recipe.batch_size // module.ABLATION.steps_factor
    for arm in arms:  # the study's steps per token reach every arm's pretraining
        config = json.loads((out / "runs" / f"{arm.key}-seed0{'-wall' * arm.costlier}" / "config.json").read_text())
        assert config["settings"]["batch_size"] == batch
        # ELECTRA's own rate (Large's 25%), else pretraining's default
        assert config["settings"]["mask_ratio"] == arm.settings.get("mask_ratio", PretrainConfig.mask_ratio)
    if module is electra:  # whether its discriminator learned anything, beside what it was fine-tuned to
        [gain] = [row for row in results["table"]["rows"] if row[0] == electra.DETECTION_GAIN]
        assert -1.0 < float(gain[2].split()[0]) < math.log(2)  # below a coin's entropy, whatever it learned


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize(
    "name, module, options",
    [("hybrid", hybrid, {}), ("cross-objective", cross_objective, {}), ("clm-then-mlm", clm_then_mlm, {"share": 0.25})],
)
def test_ablations_on_their_arms_jobs_end_to_end_at_smoke_scale(name, module, options, tmp_path):
    out = tmp_path / name
    flags = [f"--{option}={value}" for option, value in options.items()]
    results = smoke_run(name, out, *flags)
    arms = module.ABLATION.arms(StudyOptions(**options))
    measures = jobs.JobMeasures(
        {
            (axis, job): from_metric(results["metrics"][key(job.name, axis)], job.higher)
            for axis in AXES
            for job in jobs.taken(arms)
        }
    )
    assert measures.to_json() == results["metrics"]
    verdicts = [judged(module.ABLATION, measures, arms, rule) for rule in module.ABLATION.rules]
    assert [(v["verdict"], v["details"]) for v in results["verdicts"]] == [(v, [why]) for v, why in verdicts]
    assert set(results["metrics"]) == {key(job.name, axis) for axis in AXES for job in jobs.taken(arms)}
    for job in jobs.taken(arms):
        groups = results["metrics"][key(job.name, TOKENS)]
        controls = {jobs.UNTRAINED} if job.fine_tunes else set()
        assert set(groups) == {arm.label for arm in arms if job in jobs.jobs_of(arm)} | {jobs.BASELINE} | controls
        assert all(len(values) == 2 for values in groups.values())
    assert results["table"]["columns"] == module.ABLATION.header([arm.label for arm in arms])
    rows = {(row[0], row[1]): row for row in results["table"]["rows"]}
    seen = rows[("pretraining tokens seen (thousands)", TOKENS)][2:-1]
    assert len(set(seen)) == 1  # a continued arm's two phases together read what a native arm reads
    assert any(", phase 1" in run["label"] for run in results["runs"]) == any(arm.before for arm in arms)
    assert results["summary"].startswith("We replaced") and "trivial baselines: " in results["summary"]
    assert all(results["settings"][option] == value for option, value in options.items())
    assert "## Predictions, rules, verdicts (over 2 seeds)" in (out / "report.md").read_text()


@pytest.mark.unit
def test_metric_meta_takes_each_key_from_its_longest_declared_measure():
    metrics = {
        "speakers F1 at equal tokens": {"a": [0.1], "b": [0.2]},
        "speakers F1, sources of 0-99 chars at equal tokens": {"a": [0.1], "b": [0.2]},
        "latency at equal tokens": {"a": [1.0]},
        "unplotted at equal tokens": {"a": [1.0]},
    }
    meta = metric_meta(
        metrics,
        {
            "speakers F1": (True, ("copy the first line", 0.6)),
            "speakers F1, sources of ": (True, None),
            "latency": (False, None),
        },
    )
    assert meta == {
        "speakers F1 at equal tokens": {
            "higher": True,
            "baseline_name": "copy the first line",
            "baseline": {"a": 0.6, "b": 0.6},
        },
        "speakers F1, sources of 0-99 chars at equal tokens": {"higher": True},
        "latency at equal tokens": {"higher": False},
    }


@pytest.mark.unit
def test_a_step_read_twice_counts_its_time_once(tmp_path):
    from maskwise.experiments.runner import Experiment

    def slow() -> dict:
        time.sleep(0.3)
        return {}

    first = Experiment(tmp_path / "exp")
    first.step("slow", slow)
    first.step("slow", dict)  # a run serving both axes is measured once, read twice
    assert first.elapsed() < 0.55
    again = Experiment(tmp_path / "exp")  # a later call reuses it: its recorded time, once
    for _ in range(3):
        again.step("slow", dict)
    assert 0.3 <= again.elapsed() < 0.55


class TimedRuns:
    """An ``Experiment`` stand-in whose pretraining runs take the seconds given per run name and
    read the tokens their budget names (or those given, for a run on a seconds budget); a run
    continued from another (``init_from``) also reports the totals of both, as pretraining does."""

    def __init__(self, seconds: dict[str, float], tokens: dict[str, int] | None = None):
        self.seconds, self.tokens, self.started, self.done = seconds, tokens or {}, [], {}

    def pretrain(self, name: str, progress: bool, **settings) -> dict:
        self.started.append(name)
        kind, amount = settings["budget"].split("=")
        read = self.tokens.get(name, int(amount) if kind == "tokens" else 0)
        last = {"wall_s": self.seconds.get(name, 1.0), "tokens_seen": read}
        if "init_from" in settings:
            source = self.done[settings["init_from"]]["curve"][-1]
            last.update(
                wall_s_total=last["wall_s"] + source["wall_s"],
                tokens_seen_total=last["tokens_seen"] + source["tokens_seen"],
            )
        run = {"name": name, "run_dir": f"runs/{name}", "settings": settings, "curve": [last]}
        self.done[run["run_dir"]] = run
        return run


@pytest.mark.unit
def test_equal_wall_clock_reruns_only_arms_slower_than_the_tolerance():
    from maskwise.recipes import SCALES

    arms = (
        Arm("a", "A", {"family": "decoder"}),
        Arm("b", "B", {"family": "decoder"}),
        Arm("c", "C", {"family": "decoder"}),
    )
    exp = TimedRuns({"a-seed0": 100.0, "b-seed0": 104.0, "c-seed0": 120.0})
    runs = pretrain_arms(Setup(exp, SCALES["smoke"], (0,), False), arms)
    assert exp.started == ["a-seed0", "b-seed0", "c-seed0", "c-seed0-wall"]  # b is within 5% of a: kept
    assert [r["run_dir"] for r in (runs[WALL]["a"][0], runs[WALL]["b"][0], runs[WALL]["c"][0])] == [
        "runs/a-seed0",
        "runs/b-seed0",
        "runs/c-seed0-wall",
    ]
    assert runs[WALL]["c"][0]["settings"]["budget"] == "seconds=100.0"


@pytest.mark.unit
def test_each_clock_group_reruns_at_its_own_fastest_arms_seconds():
    from maskwise.recipes import SCALES

    a, b, c, d = (Arm(name, name.upper(), {"family": "decoder"}) for name in "abcd")
    exp = TimedRuns({"a-seed0": 100.0, "b-seed0": 104.0, "c-seed0": 80.0, "d-seed0": 90.0})
    runs = pretrain_arms(Setup(exp, SCALES["smoke"], (0,), False), (a, b, c, d), AXES, ((a, b), (c, d)))
    # c's 80 s are not a and b's clock: they are compared with each other only, and within 5% of each other
    assert exp.started == ["a-seed0", "b-seed0", "c-seed0", "d-seed0", "d-seed0-wall"]
    assert runs[WALL]["d"][0]["settings"]["budget"] == "seconds=80.0"
    assert [runs[WALL][k][0]["run_dir"] for k in "abc"] == ["runs/a-seed0", "runs/b-seed0", "runs/c-seed0"]
    together = TimedRuns(dict(exp.seconds))  # one group: the fastest arm's clock is everyone's
    pretrain_arms(Setup(together, SCALES["smoke"], (0,), False), (a, b, c, d))
    assert together.started[4:] == ["a-seed0-wall", "b-seed0-wall", "d-seed0-wall"]


@pytest.mark.unit
def test_a_costlier_arm_runs_on_the_cheap_arms_clock_and_sets_the_equal_tokens_count():
    from maskwise.recipes import SCALES

    cheap, costly = Arm("cheap", "cheap", {"family": "encoder"}), Arm("dear", "dear", {"family": "encoder"}, True)
    exp = TimedRuns({"cheap-seed0": 100.0, "dear-seed0-wall": 100.0}, {"dear-seed0-wall": 3000})
    runs = pretrain_arms(Setup(exp, SCALES["smoke"], (0,), False), (costly, cheap))
    # never the costly arm at the scale's tokens: the cheap arm first, the costly one on its clock,
    # then the cheap arm again to what the costly one read
    assert exp.started == ["cheap-seed0", "dear-seed0-wall", "cheap-seed0-tokens3000"]
    assert runs[WALL]["dear"][0]["settings"]["budget"] == "seconds=100.0"
    assert [runs[WALL][k][0]["run_dir"] for k in ("cheap", "dear")] == ["runs/cheap-seed0", "runs/dear-seed0-wall"]
    assert [runs[TOKENS][k][0]["run_dir"] for k in ("cheap", "dear")] == [
        "runs/cheap-seed0-tokens3000",
        "runs/dear-seed0-wall",
    ]
    assert runs[TOKENS]["cheap"][0]["settings"]["budget"] == "tokens=3000"
    shared = TimedRuns({})  # one model per seed: nothing runs on a clock
    assert set(pretrain_arms(Setup(shared, SCALES["smoke"], (0,), False), (costly, cheap), (TOKENS,))) == {TOKENS}
    assert shared.started == ["dear-seed0", "cheap-seed0"]
    wrong = TimedRuns({"cheap-seed0": 100.0}, {"dear-seed0-wall": 5000})  # declared costlier, read more
    pretrain_arms(Setup(wrong, SCALES["smoke"], (0,), False), (costly, cheap))
    assert wrong.started == ["cheap-seed0", "dear-seed0-wall", "dear-seed0-tokens4096"]  # a rerun, never a gap


@pytest.mark.unit
def test_a_two_phase_arm_splits_its_budget_and_both_axes_read_its_totals():
    from maskwise.recipes import SCALES

    single = Arm("a", "A", {"family": "encoder", "objective": "mlm"})
    first = {"family": "decoder", "objective": "clm"}
    continued = Arm("b", "B", {"family": "encoder", "objective": "mlm"}, before=Phase(first, 0.75))
    exp = TimedRuns({"a-seed0": 100.0, "b-seed0-phase1": 80.0, "b-seed0": 40.0})
    runs = pretrain_arms(Setup(exp, SCALES["smoke"], (0,), False), (single, continued))
    # its second phase alone (40 s) is faster than A, both together (120 s) are not: B reruns both on A's clock
    assert exp.started == ["a-seed0", "b-seed0-phase1", "b-seed0", "b-seed0-wall-phase1", "b-seed0-wall"]
    settings = {run["run_dir"]: run["settings"] for run in exp.done.values()}
    assert [settings[f"runs/{name}"]["budget"] for name in exp.started[1:]] == [
        "tokens=3072",
        "tokens=1024",
        "seconds=75.0",
        "seconds=25.0",
    ]  # the smoke scale's 4096 tokens, 75% first
    assert {k: settings["runs/b-seed0-phase1"][k] for k in first} == first
    assert (settings["runs/b-seed0"]["init_from"], settings["runs/b-seed0"]["family"]) == (
        "runs/b-seed0-phase1",
        "encoder",
    )
    assert settings["runs/b-seed0-wall"]["init_from"] == "runs/b-seed0-wall-phase1"
    by_tokens, on_clock = runs[TOKENS]["b"][0], runs[WALL]["b"][0]
    assert (by_tokens["run_dir"], by_tokens["before"]["run_dir"]) == ("runs/b-seed0", "runs/b-seed0-phase1")
    assert (tokens_seen(by_tokens), train_seconds(by_tokens)) == (4096, 120.0)
    assert (on_clock["run_dir"], on_clock["budget"]) == ("runs/b-seed0-wall", "seconds=100.0")
    assert tokens_per_second(by_tokens) == pytest.approx(4096 / 120.0)
    labels = [entry["label"] for entry in curve_entries(runs, (single, continued))]
    assert labels == [
        "A, seed 0",
        "B, seed 0, phase 1",
        "B, seed 0, phase 2",
        "B, seed 0, 100 s budget, phase 1",
        "B, seed 0, 100 s budget, phase 2",
    ]


@pytest.mark.unit
def test_the_arms_share_of_the_matmul_peak_is_a_row_where_every_run_has_one():
    def run(share):
        last = {"tokens_seen": 4096, "wall_s": 40.0, **({"share_of_matmul_peak": share} if share else {})}
        return {"run_dir": "runs/x", "curve": [last]}

    arms = (Arm("a", "A", {}), Arm("b", "B", {}))
    rows = throughput_rows({TOKENS: {"a": [run(0.5), run(0.25)], "b": [run(0.75), run(0.75)]}}, arms)
    assert rows[-1][:2] == ["pretraining % of the matmul peak", TOKENS]
    assert rows[-1][2].startswith("38") and rows[-1][3].startswith("75")  # the seeds' mean, in percent
    rows = throughput_rows({TOKENS: {"a": [run(0.5), run(None)], "b": [run(0.75), run(0.75)]}}, arms)
    assert "pretraining % of the matmul peak" not in [row[0] for row in rows]  # a run without one: no row
    assert matmul_peak_share({**run(0.5), "before": {"run_dir": "runs/x-phase1"}}) is None  # one phase's alone


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.precision("fp32")
def test_a_two_phase_arm_continues_from_its_first_phase_and_counts_both(tmp_path, monkeypatch):
    from maskwise import runs as run_files
    from maskwise.experiments.runner import Experiment
    from maskwise.recipes import SCALES
    from maskwise.train.loop import Trainer

    starts = []  # the weights each training run starts from, before its first step
    fit = Trainer.fit

    def recording_fit(self, on_eval=None):
        starts.append({k: v.detach().clone() for k, v in self.model.state_dict().items()})
        return fit(self, on_eval)

    monkeypatch.setattr(Trainer, "fit", recording_fit)
    arm = cross_objective.continued(cross_objective.MLM_ARM, cross_objective.CLM_ARM, 0.75)
    [run] = pretrain_arms(Setup(Experiment(tmp_path / "exp"), SCALES["smoke"], (0,), False), (arm,), (TOKENS,))[TOKENS][
        arm.key
    ]
    first = tmp_path / "exp" / "runs" / "clm0.75-mlm-seed0-phase1"
    assert (
        run["before"]["run_dir"] == str(first)
        and run_files.read_json(first / run_files.CONFIG_FILE)["family"] == "decoder"
    )
    assert run_files.read_json(tmp_path / "exp" / "runs" / "clm0.75-mlm-seed0" / run_files.CONFIG_FILE)["init_from"][
        "path"
    ] == str(first)
    assert len(starts) == 2 and state_dicts_equal(starts[1], run_files.read_safetensors(first / run_files.MODEL_FILE))
    assert (run["before"]["settings"]["budget"], run["settings"]["budget"]) == ("tokens=3072", "tokens=1024")
    one, two = run_files.read_metrics(first)[-1], run["curve"][-1]
    assert tokens_seen(run) == two["tokens_seen_total"] == one["tokens_seen"] + two["tokens_seen"]
    assert train_seconds(run) == two["wall_s_total"] == pytest.approx(one["wall_s"] + two["wall_s"], abs=1e-3)


@pytest.mark.e2e
@pytest.mark.slow
def test_an_ablation_pretrains_on_the_users_corpus_and_reads_the_users_task(tmp_path):
    """mask-ratio's tagging job on a user's CoNLL file, every arm pretrained on the user's corpus."""
    files = write_task_files(tmp_path / "data")
    out = tmp_path / "mask-ratio"
    results = smoke_run("mask-ratio", out, "--data", str(files["corpus"]), "--task", f"pos=tag:{files['tag']}")
    [data] = [note for note in results["notes"] if note.startswith("Data: ")]
    assert (
        data.startswith(f"Data: pretraining on {files['corpus']}") and "the tag job reads the user's task pos" in data
    )
    tag = json.loads((out / "steps" / "mask-ratio0.15-seed0.json").read_text())
    assert tag["baseline"]["name"] == "most frequent tag" and tag["n_test"] < 40  # the file's held-out rows
    assert set(tag["tags"]) == {"DET", "W"}
    settings = json.loads((out / "runs" / "ratio0.15-seed0" / "config.json").read_text())["settings"]
    assert settings["data"] == str(files["corpus"])
    assert results["settings"]["task_flags"] == [f"pos=tag:{files['tag']}"]


@pytest.mark.e2e
@pytest.mark.slow
def test_the_seq2seq_ablation_reads_the_users_seq2seq_task_by_token_f1(tmp_path):
    """Both structures fine-tune on the user's source/target rows, scored by token F1 beside the lead baseline."""
    files = write_task_files(tmp_path / "data")
    rows = [json.loads(line) for line in files["seq2seq"].read_text().splitlines()]
    short = tmp_path / "data" / "first-word.jsonl"  # targets the smoke scale's halved context holds
    short.write_text("\n".join(json.dumps({"source": r["source"], "target": r["source"].split()[0]}) for r in rows))
    out = tmp_path / "seq2seq"
    results = smoke_run("seq2seq", out, "--data", str(files["corpus"]), "--task", f"heads=seq2seq:{short}")
    [data] = [note for note in results["notes"] if note.startswith("Data: ")]
    assert "the seq2seq job reads the user's task heads" in data
    stored = json.loads(next((out / "steps").glob("seq2seq-encdec*-seed0.json")).read_text())
    assert stored["baseline"]["name"].startswith("the source's first") and "speaker" not in json.dumps(
        stored["baseline"]
    )
    [f1] = [m for key_, m in results["metrics"].items() if key_.startswith("target F1 at equal tokens")]
    assert f1["encoder-decoder"][0] == stored["token_f1"]  # the user's rows are read by token F1
    assert "token F1" in " ".join(results["notes"])


@pytest.mark.parametrize(
    "name, task, message",
    [
        ("shift-bug", "h=seq2seq:{seq2seq}", "ablation shift-bug reads no task; --task h=seq2seq:"),
        ("embedder", "p=tag:{tag}", "ablation embedder reads a task of kind embed; --task p=tag:"),
        (
            "mask-ratio",
            "p=tag:{tag}",
            "ablation mask-ratio reads one task of each kind; --task gives tag more than once",
        ),
    ],
)
@pytest.mark.e2e
def test_an_ablation_refuses_a_task_it_does_not_read_in_one_line(name, task, message, tmp_path, capsys):
    files = write_task_files(tmp_path / "data")
    tasks = ["--task", task.format(**files)] * (2 if "more than once" in message else 1)
    assert main(["ablate", name, "--scale", "smoke", "--out", str(tmp_path / "out"), *tasks]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "out").exists()
