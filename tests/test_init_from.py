"""--init-from: one run's final weights start another with another family and objective, the phases'
tokens and seconds add up, the refusals are one line, and a continued run resumes exactly."""

import json
import shutil

import pytest
from tiny_run import assert_one_line_exit_2, files_in, run_cli
from weights import state_dicts_equal

from maskwise import runs
from maskwise.train.loop import Trainer
from maskwise.train.pretrain import PretrainConfig, pretrain, untrained

# modernbert: the layout Ettin's encoders and decoders share, so either family's weights fit the other
TINY = {
    "preset": "modernbert",
    "d_model": 32,
    "layers": 1,
    "heads": 2,
    "batch_size": 4,
    "block_size": 32,
    "warmup": 2,
    "eval_every": 2,
    "eval_batches": 2,
    "progress": False,
}


def _run(small_text, out, family, objective, steps=4, on_eval=None, **extra):
    settings = PretrainConfig.from_flat(
        {
            "family": family,
            "objective": objective,
            "data": str(small_text),
            "out": str(out),
            "steps": steps,
            **TINY,
            **extra,
        }
    )
    return pretrain(settings, on_eval=on_eval)


def _weights(run):
    return runs.read_safetensors(run / runs.MODEL_FILE)


@pytest.fixture
def start_weights(monkeypatch):
    """The weights each Trainer.fit starts from, before its first optimizer step."""
    seen = []
    fit = Trainer.fit

    def recording_fit(self, on_eval=None):
        seen.append({k: v.detach().clone() for k, v in self.model.state_dict().items()})
        return fit(self, on_eval)

    monkeypatch.setattr(Trainer, "fit", recording_fit)
    return seen


@pytest.mark.integration
@pytest.mark.parametrize("family, objective", [("encoder", "mlm"), ("decoder", "hybrid")])
def test_untrained_is_the_model_a_run_starts_from(family, objective, small_text, tmp_path, start_weights):
    """The ablations' control: the weights pretraining would start from, as its folder would load them."""
    run = _run(small_text, tmp_path / "run", family, objective, steps=1)
    settings = PretrainConfig.from_flat(
        {"family": family, "objective": objective, "data": str(small_text), **TINY, "steps": 1}
    )
    model, tokenizer = untrained(settings)
    assert state_dicts_equal(model.state_dict(), start_weights[-1])
    assert type(model) is type(run["model"]) and tokenizer.vocab_size == run["tokenizer"].vocab_size
    other, _ = untrained(PretrainConfig.from_flat({**settings.flat(), "seed": 1}))
    assert not state_dicts_equal(other.state_dict(), start_weights[-1])  # seeded like the run


@pytest.mark.integration
@pytest.mark.precision("fp32")
@pytest.mark.parametrize(
    "first, then", [(("decoder", "clm"), ("encoder", "mlm")), (("encoder", "mlm"), ("decoder", "clm"))]
)
def test_continued_run_starts_from_the_source_weights_and_adds_up(first, then, small_text, tmp_path, start_weights):
    source, continued = tmp_path / "source", tmp_path / "continued"
    _run(small_text, source, *first)
    _run(small_text, continued, *then, init_from=str(source))
    assert state_dicts_equal(start_weights[-1], _weights(source))  # loaded, not freshly initialised
    assert not state_dicts_equal(_weights(continued), _weights(source))  # and then trained
    config = runs.read_json(continued / runs.CONFIG_FILE)
    end = runs.read_metrics(source)[-1]
    assert config["model"]["family"] == then[0] and config["settings"]["init_from"] == str(source)
    assert config["init_from"] == {
        "path": str(source),
        "family": first[0],
        "objective": first[1],
        "tokens_seen": end["tokens_seen"],
        "wall_s": end["wall_s"],
        "tokens_seen_total": end["tokens_seen"],
        "wall_s_total": end["wall_s"],
    }
    for record in runs.read_metrics(continued):
        assert record["tokens_seen_total"] == end["tokens_seen"] + record["tokens_seen"]
        assert record["wall_s_total"] == pytest.approx(end["wall_s"] + record["wall_s"], abs=1e-3)


@pytest.mark.integration
@pytest.mark.precision("fp32")
def test_a_chain_of_phases_is_recorded_and_its_totals_add_up(small_text, tmp_path):
    phases = [("decoder", "clm"), ("encoder", "mlm"), ("decoder", "clm")]
    folders = [tmp_path / f"phase{i}" for i in range(len(phases))]
    for i, (folder, (family, objective)) in enumerate(zip(folders, phases)):
        _run(small_text, folder, family, objective, steps=2, **({"init_from": str(folders[i - 1])} if i else {}))
    ends = [runs.read_metrics(folder)[-1] for folder in folders]
    assert ends[-1]["tokens_seen_total"] == sum(end["tokens_seen"] for end in ends)
    assert ends[-1]["wall_s_total"] == pytest.approx(sum(end["wall_s"] for end in ends), abs=1e-3)
    record = runs.read_json(folders[-1] / runs.CONFIG_FILE)["init_from"]
    assert (record["path"], record["init_from"]["path"]) == (str(folders[1]), str(folders[0]))
    assert "init_from" not in record["init_from"]


@pytest.mark.integration
@pytest.mark.precision("fp32")
def test_an_interrupted_continued_run_resumes_exactly_without_its_source(small_text, tmp_path):
    source = tmp_path / "source"
    _run(small_text, source, "decoder", "clm")
    continued = {"init_from": str(source), "steps": 6}
    _run(small_text, tmp_path / "full", "encoder", "mlm", **continued)

    def crash_after_step_4(record):
        if record["step"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(small_text, tmp_path / "cut", "encoder", "mlm", on_eval=crash_after_step_4, **continued)
    source.rename(tmp_path / "moved")  # resume reads the checkpoint: the source is neither needed nor applied
    _run(small_text, tmp_path / "cut", "encoder", "mlm", resume=True, **continued)

    def curve(run):
        return [(r["step"], r["train_loss"], r["val_loss"], r["tokens_seen_total"]) for r in runs.read_metrics(run)]

    assert curve(tmp_path / "cut") == curve(tmp_path / "full")
    assert state_dicts_equal(_weights(tmp_path / "cut"), _weights(tmp_path / "full"))


CLI_TINY = [
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--batch-size",
    "4",
    "--block-size",
    "32",
    "--eval-batches",
    "2",
    "--no-progress",
    "--steps",
    "2",
    "--eval-every",
    "2",
]


@pytest.mark.e2e
def test_refusals_are_one_line_and_write_nothing(small_text, tmp_path, capsys):
    source = tmp_path / "source"
    common = ["pretrain", "--data", small_text, *CLI_TINY]
    assert run_cli(capsys, *common, "--family", "decoder", "--preset", "gpt2", "--out", source)[0] == 0
    unfinished = tmp_path / "unfinished"
    shutil.copytree(source, unfinished)
    (unfinished / runs.MODEL_FILE).unlink()
    cut_short = tmp_path / "cut-short"  # a metrics line a crash cut in half, a finished run otherwise
    shutil.copytree(source, cut_short)
    with open(cut_short / runs.METRICS_FILE, "a") as handle:
        handle.write('{"step": 9, "val_lo')
    no_objective, text_counts = tmp_path / "no-objective", tmp_path / "text-counts"
    for damaged in (no_objective, text_counts):
        shutil.copytree(source, damaged)
    config = json.loads((source / runs.CONFIG_FILE).read_text())
    (no_objective / runs.CONFIG_FILE).write_text(json.dumps({k: v for k, v in config.items() if k != "objective"}))
    with open(text_counts / runs.METRICS_FILE, "a") as handle:  # well-formed JSON, the counts not numbers
        handle.write('{"step": "x", "tokens_seen": "y", "wall_s": null}\n')
    new = tmp_path / "new"
    into_encoder = [*common, "--family", "encoder", "--out", new, "--init-from"]
    for args, needle in [
        ([source, "--preset", "bert"], "does not match the model"),  # BERT's layout from GPT-2's: keys differ
        ([source, "--preset", "gpt2", "--d-model", "64"], "shape mismatch for"),
        ([tmp_path / "nowhere", "--preset", "gpt2"], "not a maskwise run folder"),
        ([unfinished, "--preset", "gpt2"], "has not finished"),
        ([cut_short, "--preset", "gpt2"], "metrics.jsonl line 3 is not valid JSON"),
        ([no_objective, "--preset", "gpt2"], "lacks what a pretraining run's holds"),
        ([text_counts, "--preset", "gpt2"], "does not give tokens_seen and wall_s as numbers"),
        ([source, "--preset", "gpt2", "--tokenizer", "bpe"], "--tokenizer is 'char' there"),
    ]:
        assert_one_line_exit_2(capsys, [*into_encoder, *args], needle)
        assert not new.exists()
    code, _, err = run_cli(capsys, *into_encoder, source, "--preset", "bert")
    assert (
        code == 2 and "missing" in err and "(model (" in err and "preset gpt2" in err
    )  # names a key, its shape, the source's layout
    code, _, err = run_cli(capsys, *into_encoder, source, "--preset", "gpt2", "--d-model", "64")
    assert code == 2 and "checkpoint (" in err and "vs model (" in err  # both shapes

    assert run_cli(capsys, *into_encoder, source, "--preset", "gpt2")[0] == 0
    before = files_in(new)
    assert_one_line_exit_2(
        capsys, [*into_encoder, unfinished, "--preset", "gpt2", "--resume", "--steps", "4"], "cannot change --init-from"
    )
    assert files_in(new) == before
    assert (
        json.loads(
            run_cli(
                capsys, *common, "--family", "encoder", "--preset", "gpt2", "--out", new, "--resume", "--steps", "4"
            )[1].splitlines()[-1]
        )["tokens_seen_total"]
        > 0
    )
