"""Fuzzing the user-facing parsers: whatever comes in, the only exception is a one-line UserError."""

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maskwise.cli import build_parser
from maskwise.errors import UserError
from maskwise.train.pretrain import PretrainConfig, read_toml

KEYS = sorted(PretrainConfig().flat()) + ["stepz", "model", "lr_", ""]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
)


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6))
def test_config_parsing_only_raises_user_error(values):
    try:
        PretrainConfig.from_flat(values).resolved()
    except UserError as error:
        assert "\n" not in str(error)


FLAGS = [
    "--steps",
    "--lr",
    "--family",
    "--objective",
    "--mask-ratio",
    "--budget",
    "--block-size",
    "--bf16",
    "--no-progress",
    "--d-model",
    "--config",
    "--preset",
    "-x",
    "--",
]


@pytest.mark.unit
@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FLAGS), st.text(max_size=8)), max_size=6))
def test_cli_argument_parsing_only_raises_user_error(argv):
    parser = build_parser()
    try:
        args = parser.parse_args(["pretrain", *argv])
        values = {k: v for k, v in vars(args).items() if k not in ("config", "handler", "command")}
        PretrainConfig.from_flat(values).resolved()
    except UserError as error:
        assert "\n" not in str(error)


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_toml_reader_only_raises_user_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("toml") / "c.toml"
    path.write_bytes(data)
    try:
        values = read_toml(str(path))
        PretrainConfig.from_flat(values)
    except UserError as error:
        assert "\n" not in str(error)
    except tomllib.TOMLDecodeError as error:  # pragma: no cover - read_toml must convert these
        raise AssertionError("TOMLDecodeError escaped") from error
