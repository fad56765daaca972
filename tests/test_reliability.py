"""Checkpoint safety: a full disk keeps the previous checkpoint, mismatches are named, nothing unpickles."""

import errno
import json
import os

import pytest
import torch
from tiny_run import files_in

from maskwise import runs
from maskwise.cli import main
from maskwise.config import preset
from maskwise.errors import UserError
from maskwise.model.transformer import build_model

TINY = [
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
]


@pytest.mark.e2e
def test_disk_full_while_saving_keeps_previous_checkpoint(small_text, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert (
        main(["pretrain", "--data", str(small_text), "--steps", "2", "--eval-every", "2", "--out", str(out), *TINY])
        == 0
    )
    good = sorted((out / "checkpoints").glob("step-*"))
    assert [p.name for p in good] == ["step-00000002"]
    capsys.readouterr()  # the first run's output (the runtime line, said once per process)
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    code = main(
        [
            "pretrain",
            "--data",
            str(small_text),
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--out",
            str(out),
            "--resume",
            *TINY,
        ]
    )
    monkeypatch.setattr(os, "fsync", real_fsync)
    err = capsys.readouterr().err
    assert code == 2 and "No space left" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in sorted((out / "checkpoints").glob("step-*"))] == ["step-00000002"]
    assert runs.verify_checkpoint(good[0]) is None
    assert not list((out / "checkpoints").glob(".tmp-*"))  # no half-written folder left behind


@pytest.mark.e2e
def test_a_refused_overwrite_or_resume_leaves_the_run_as_it_was(small_text, tmp_path, capsys):
    """--overwrite replaces a run only after everything the new run reads has been checked, and --resume
    without an intact checkpoint refuses rather than start again over a finished model."""
    out = tmp_path / "run"
    assert (
        main(["pretrain", "--data", str(small_text), "--steps", "2", "--eval-every", "2", "--out", str(out), *TINY])
        == 0
    )
    capsys.readouterr()
    before = files_in(out)
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("To be.")
    overwrite = ["pretrain", "--data", str(small_text), "--steps", "2", "--out", str(out), "--overwrite", *TINY]
    for extra, needle in [
        (["--block-size", "100000"], "fewer than one block"),  # found by the token stream
        (["--val-data", str(tiny)], "validation data"),
    ]:
        code = main([*overwrite, *extra])
        err = capsys.readouterr().err
        assert code == 2 and needle in err and "Traceback" not in err, err
        assert files_in(out) == before

    damaged = tmp_path / "damaged"  # a finished run whose checkpoints are gone
    damaged.mkdir()
    for name, data in before.items():
        if name.parts[0] != "checkpoints":
            (damaged / name).parent.mkdir(parents=True, exist_ok=True)
            (damaged / name).write_bytes(data)
    resume = ["pretrain", "--data", str(small_text), "--steps", "4", "--resume", *TINY]
    code = main([*resume, "--out", str(damaged)])
    err = capsys.readouterr().err
    assert code == 2 and "no intact checkpoint" in err and "model.safetensors" in err, err
    (damaged / "checkpoints").write_text("not a folder")
    kept = files_in(damaged)
    code = main([*resume, "--out", str(damaged)])
    err = capsys.readouterr().err
    assert code == 2 and "is not a folder" in err, err
    assert files_in(damaged) == kept

    no_settings = tmp_path / "no-settings"
    no_settings.mkdir()
    (no_settings / "config.json").write_text('{"family": "encoder"}')
    code = main([*resume, "--out", str(no_settings)])
    err = capsys.readouterr().err
    assert code == 2 and "holds no run settings" in err and "Traceback" not in err, err


@pytest.mark.e2e
def test_resume_reads_past_garbage_in_metrics_and_an_unreadable_manifest(small_text, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["pretrain", "--data", str(small_text), "--eval-every", "2", "--out", str(out), *TINY]
    assert main([*args, "--steps", "2"]) == 0
    assert main([*args, "--steps", "4", "--resume"]) == 0  # two checkpoints: step 2 and step 4
    (out / "metrics.jsonl").write_bytes(os.urandom(64) + b"\n" + (out / "metrics.jsonl").read_bytes())
    (out / "checkpoints" / "step-00000004" / runs.MANIFEST_FILE).write_text("[]")  # valid JSON, not a manifest
    capsys.readouterr()
    with pytest.warns(UserWarning, match="unreadable manifest"):
        assert main([*args, "--steps", "6", "--resume"]) == 0  # from step 2; the garbage line dropped
    assert [r["step"] for r in runs.read_metrics(out)] == [2, 4, 6]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "tamper, needle",
    [
        ("optimizer of another model", "has shape"),  # AdamW's fused step corrupted memory on it (abort, exit 134)
        ("counters not numbers", "loop counters"),
        ("state not an object", "loop state"),
    ],
)
def test_a_checkpoint_that_verifies_but_does_not_fit_is_a_user_error(small_text, tmp_path, capsys, tamper, needle):
    """Checksums catch damage, not a checkpoint whose manifest was rewritten to match: what it holds is
    checked before it is loaded."""

    def pretrain(out, *args):
        assert (
            main(
                [
                    "pretrain",
                    "--data",
                    str(small_text),
                    "--steps",
                    "2",
                    "--eval-every",
                    "2",
                    "--out",
                    str(out),
                    *TINY,
                    *args,
                ]
            )
            == 0
        )

    out = tmp_path / "run"
    pretrain(out)
    step = out / "checkpoints" / "step-00000002"
    if tamper == "optimizer of another model":
        pretrain(tmp_path / "wider", "--d-model", "64")
        (step / "optimizer.safetensors").write_bytes(
            (tmp_path / "wider" / "checkpoints" / "step-00000002" / "optimizer.safetensors").read_bytes()
        )
    else:
        state = json.loads((step / "state.json").read_text())
        if tamper == "counters not numbers":
            state["counters"]["step"] = "x"
        else:
            state = []
        (step / "state.json").write_text(json.dumps(state))
    runs.write_json(
        step / runs.MANIFEST_FILE,
        {p.name: runs.sha256_of(p) for p in sorted(step.iterdir()) if p.name != runs.MANIFEST_FILE},
    )
    capsys.readouterr()
    code = main(["pretrain", "--data", str(small_text), "--steps", "4", "--out", str(out), "--resume", *TINY])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.e2e
def test_vocabulary_checkpoint_mismatch_is_named(small_text, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(["pretrain", "--data", str(small_text), "--steps", "2", "--eval-every", "2", "--out", str(out), *TINY])
        == 0
    )
    config = json.loads((out / "config.json").read_text())
    config["model"]["vocab_size"] += 64
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="shape mismatch for embed.weight"):
        runs.load_run(out)


@pytest.mark.unit
def test_missing_and_unexpected_keys_are_named(tmp_path):
    model = build_model(preset("gpt2", vocab_size=64, d_model=32, n_heads=2, n_layers=1, max_seq_len=16))
    tensors = {k: v.clone() for k, v in model.state_dict().items()}
    tensors.pop("embed.weight")
    tensors["surprise"] = torch.zeros(1)
    with pytest.raises(UserError, match="missing 1 key.*embed.weight.*unexpected 1 key.*surprise"):
        runs.load_weights_into(model, tensors, "test.safetensors")


@pytest.mark.unit
def test_truncated_safetensors_is_a_user_error(tmp_path):
    model = build_model(preset("gpt2", vocab_size=64, d_model=32, n_heads=2, n_layers=1, max_seq_len=16))
    path = tmp_path / "model.safetensors"
    runs.save_weights(model, path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(UserError, match="not a readable safetensors file"):
        runs.read_safetensors(path)


@pytest.mark.unit
def test_no_pickle_on_load_paths():
    """Every torch.load in the package passes weights_only=True; nothing calls pickle's loaders."""
    from pathlib import Path

    import maskwise

    root = Path(maskwise.__file__).parent
    for source in root.rglob("*.py"):
        text = source.read_text()
        assert "pickle.load" not in text and "Unpickler(" not in text, source
        for line in text.splitlines():
            if "torch.load(" in line:
                assert "weights_only=True" in line, (source, line)
