"""A tiny untrained encoder run folder (character tokenizer, one 32-wide layer): the cheapest model
the task commands open, for end-to-end runs on benchmark fixtures."""

import string
from pathlib import Path

import torch

from maskwise.config import preset
from maskwise.data.corpus import make_corpus
from maskwise.data.tokenizers import build_tokenizer
from maskwise.model.transformer import build_model
from maskwise.runs import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    save_weights,
    write_json,
)


def encoder_run(folder: Path) -> Path:
    """Write the run into ``folder`` (created) and return it."""
    tokenizer = build_tokenizer("char", make_corpus("printable", [string.printable], [string.printable]))
    torch.manual_seed(0)
    cfg = preset("bert", vocab_size=tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2, max_seq_len=64)
    folder.mkdir(parents=True)
    save_weights(build_model(cfg), folder / MODEL_FILE)
    tokenizer.save(folder / TOKENIZER_FILE)
    write_json(folder / CONFIG_FILE, {"model": cfg.to_dict()})
    return folder


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """``maskwise ARGS`` in-process: (exit code, stdout, stderr)."""
    from maskwise.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_exit_2(capsys, args, needle: str) -> None:
    """Bad input: exit 2, one line on stderr naming the problem, no traceback."""
    code, _, err = run_cli(capsys, *args)
    assert code == 2, (args, err)
    assert len(err.strip().splitlines()) == 1, (args, err)
    assert "Traceback" not in err and needle.lower() in err.lower(), (args, err)


def files_in(folder: Path) -> dict[Path, bytes]:
    """Every file under ``folder`` (relative path -> bytes): compared before and after a refused command."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
