"""run_all's verdict on each speed target (met by the median ratio or not), and the step profile it runs
for a missed one: what the report's "met" and "why not" rest on."""

import argparse

import pytest

from tests.benchmark_modules import load

common, run_all = load("common", "run_all")


def _comparison(ratios: list[float]):
    """A benchmark whose side "fast" ran each round at ``ratio`` times the reference's rate."""
    reference = common.SideResult("hf", rates=[100.0] * len(ratios), cpu_rates=[50.0] * len(ratios))
    fast = common.SideResult("maskwise", rates=[100.0 * r for r in ratios], cpu_rates=[50.0 * r for r in ratios])
    return common.Comparison("span train", "hf", {"hf": reference, "maskwise": fast}, {})


@pytest.mark.unit
def test_target_ratio_reads_the_ratio_a_target_names():
    assert common.target_ratio(">= 1.5x") == 1.5
    assert common.target_ratio(">= 1.0x, identical vectors") == 1.0
    assert common.target_ratio("") is None


@pytest.mark.unit
@pytest.mark.parametrize(("target", "met"), [(">= 1.2x", True), (">= 1.5x", False), ("", None)])
def test_a_target_is_met_by_the_median_ratio(target, met):
    rows = common.rows_of(
        _comparison([1.1, 1.3, 1.4]),
        targets={"maskwise": target},
        profiles={"maskwise": ["train", "--objective", "span"]},
    )
    reference, side = rows
    assert reference.met is None and side.met is met
    assert side.profile == ["train", "--objective", "span"]
    table = common.markdown(rows)
    assert {True: ">= 1.2x: met", False: ">= 1.5x: **not met**", None: "| 1.30x |"}[met] in table


@pytest.mark.unit
def test_only_missed_targets_are_explained():
    rows = common.rows_of(_comparison([2.0]), targets={"maskwise": ">= 1.5x"})
    args = argparse.Namespace(quick=True, threads=0)
    assert run_all.why_missed(rows, args, failed := []) == [] and failed == []
    rows = common.rows_of(_comparison([1.0]), targets={"maskwise": ">= 1.5x"})
    missed = "span train, maskwise: >= 1.5x not met; its benchmark has no step profile"
    assert run_all.why_missed(rows, args, failed) == [missed]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_missed_target_gets_the_split_of_its_step():
    rows = common.rows_of(
        _comparison([1.0]),
        targets={"maskwise": ">= 1.5x"},
        profiles={"maskwise": ["finetune", "--task", "tag", "--sides", "hf", "maskwise"]},
    )
    failed = []
    (why,) = run_all.why_missed(rows, argparse.Namespace(quick=True, threads=1), failed)
    assert failed == []
    assert why.startswith("span train, maskwise, >= 1.5x not met (`python benchmarks/profile_step.py finetune")
    assert "torch's products and attention" in why
    assert "target >= 1.5x hf (" in why and "ms a step: " in why
