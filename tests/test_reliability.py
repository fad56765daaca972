"""Checkpoint safety: a full disk keeps the previous checkpoint, mismatches are named, nothing unpickles."""

import errno
import json
import os

import pytest
import torch

from maskwise import runs
from maskwise.cli import main
from maskwise.config import preset
from maskwise.errors import UserError
from maskwise.model.transformer import build_model

TINY = ["--d-model", "32", "--layers", "1", "--heads", "2", "--batch-size", "4", "--block-size", "32",
        "--eval-batches", "2", "--no-progress"]


@pytest.mark.e2e
def test_disk_full_while_saving_keeps_previous_checkpoint(small_text, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(small_text), "--steps", "2", "--eval-every", "2",
                 "--out", str(out), *TINY]) == 0
    good = sorted((out / "checkpoints").glob("step-*"))
    assert [p.name for p in good] == ["step-00000002"]
    capsys.readouterr()  # the first run's output (the runtime line, said once per process)
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    code = main(["pretrain", "--data", str(small_text), "--steps", "4", "--eval-every", "2",
                 "--out", str(out), "--resume", *TINY])
    monkeypatch.setattr(os, "fsync", real_fsync)
    err = capsys.readouterr().err
    assert code == 2 and "No space left" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in sorted((out / "checkpoints").glob("step-*"))] == ["step-00000002"]
    assert runs.verify_checkpoint(good[0]) is None
    assert not list((out / "checkpoints").glob(".tmp-*"))  # no half-written folder left behind


@pytest.mark.e2e
def test_vocabulary_checkpoint_mismatch_is_named(small_text, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(small_text), "--steps", "2", "--eval-every", "2",
                 "--out", str(out), *TINY]) == 0
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
