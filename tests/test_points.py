"""The compute ladder's points: the WSD schedule, its kept checkpoints, and a branch that equals a shorter run."""

import pytest

from maskwise.errors import UserError
from maskwise.runs import CHECKPOINTS, newest_intact, point_root, read_json, read_metrics
from maskwise.train.optim import wsd_factor
from maskwise.train.points import branch, shorter_budget
from maskwise.train.pretrain import PretrainConfig, pretrain
from maskwise.train.settings import TrainConfig


@pytest.mark.unit
def test_wsd_warms_up_holds_the_peak_then_decays_to_zero():
    assert wsd_factor(0, 0.0, 10, 0.2) == pytest.approx(0.1)
    assert wsd_factor(10, 0.3, 10, 0.2) == 1.0
    assert wsd_factor(50, 0.8, 10, 0.2) == 1.0
    assert wsd_factor(60, 0.9, 10, 0.2) == pytest.approx(0.5)
    assert wsd_factor(70, 1.0, 10, 0.2) == 0.0


@pytest.mark.unit
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"points": "0.5", "schedule": "cosine"}, "need --schedule wsd"),
        ({"points": "0.5,1.5", "schedule": "wsd"}, "distinct fractions in (0, 1)"),
        ({"points": "0.5,0.5", "schedule": "wsd"}, "distinct fractions"),
        ({"points": "half", "schedule": "wsd"}, "separated by commas"),
        ({"schedule": "linear"}, "schedule must be one of cosine, wsd"),
        ({"cooldown": 0.0, "schedule": "wsd"}, "cooldown must be in (0, 1]"),
    ],
)
def test_bad_ladder_settings_are_one_line(fields, error):
    with pytest.raises(UserError, match=error.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(**fields).validate()


@pytest.mark.unit
def test_a_shorter_budget_keeps_its_kind_and_drops_the_points():
    assert shorter_budget({"budget": "seconds=120", "steps": 9, "points": "0.5"}, 0.25)["budget"] == "seconds=30"
    assert shorter_budget({"budget": "tokens=1000", "steps": 9, "points": ""}, 0.3)["budget"] == "tokens=300"
    no_budget = shorter_budget({"budget": "", "steps": 40, "points": "0.5"}, 0.5)
    assert (no_budget["steps"], no_budget["points"]) == (20, "")


def _settings(data, out, **train):
    return {
        "family": "decoder",
        "data": str(data),
        "d_model": 32,
        "layers": 1,
        "heads": 2,
        "out": str(out),
        "batch_size": 4,
        "block_size": 32,
        "eval_every": 5,
        "eval_batches": 2,
        "progress": False,
        "precision": "fp32",
        "schedule": "wsd",
        "cooldown": 0.25,
        "warmup": 4,
        **train,
    }


@pytest.mark.integration
def test_a_branch_from_a_point_is_the_shorter_run_exactly(small_text, tmp_path):
    """A 40-step run keeps its point 0.5 at step 15 (0.75 x 20); resumed as a 20-step run it cools down from there,
    step for step the run trained for 20 steps alone: same weights, same losses, same counters."""
    pretrain(PretrainConfig.from_flat(_settings(small_text, tmp_path / "long", steps=40, points="0.5,0.25")))
    point = newest_intact(point_root(tmp_path / "long", 0.5))
    assert point is not None and point.name == "step-00000015"
    assert read_json(point / "state.json")["point"] == 0.5
    assert len(list((tmp_path / "long" / CHECKPOINTS).glob("step-*"))) == 3  # keep_last prunes these alone
    assert newest_intact(point_root(tmp_path / "long", 0.25)) is not None

    settings = branch(tmp_path / "long", 0.5, tmp_path / "branch")
    pretrain(PretrainConfig.from_flat({**settings, "resume": True}))
    pretrain(PretrainConfig.from_flat(_settings(small_text, tmp_path / "alone", steps=20)))

    branched, alone = read_metrics(tmp_path / "branch"), read_metrics(tmp_path / "alone")
    assert [r["step"] for r in branched] == [5, 10, 15, 20]
    for key in ("val_loss", "lr", "tokens_seen", "flops"):
        assert branched[-1][key] == alone[-1][key], key
    assert branched[-1]["lr"] < branched[-2]["lr"]  # cooled down, where the long run held the peak
    assert (tmp_path / "branch" / "model.safetensors").read_bytes() == (
        tmp_path / "alone" / "model.safetensors"
    ).read_bytes()
    assert read_json(tmp_path / "branch" / "config.json")["branched_from"]["point"] == 0.5


@pytest.mark.integration
def test_a_branch_needs_its_point(small_text, tmp_path):
    pretrain(PretrainConfig.from_flat(_settings(small_text, tmp_path / "run", steps=8)))
    with pytest.raises(UserError, match="no intact checkpoint at point 0.5"):
        branch(tmp_path / "run", 0.5, tmp_path / "branch")
