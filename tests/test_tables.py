"""Classification from GLUE-style TSV and CSV files with named columns: reading them, ``finetune
classify`` then ``evaluate --task classify`` on them, and bad tables (exit 2, one line)."""

import json

import pytest
from tiny_run import assert_one_line_exit_2, encoder_run, run_cli

from maskwise.data.task_files import labelled_texts_from_file

TRAIN = [
    ("a gripping, funny film", "1"),
    ("dull and far too long", "0"),
    ('the "twist" works', "1"),
    ("nothing happens", "0"),
    ("a joy", "1"),
    ("tedious", "0"),
    ("warm and sharp", "1"),
    ("flat", "0"),
]
TEST = [("funny and warm", "1"), ('a "comedy" without jokes', "0"), ("sharp", "1")]


def write_tsv(path, rows, header=("sentence", "label")):
    path.write_text("\t".join(header) + "\n" + "".join(f"{text}\t{label}\n" for text, label in rows))
    return path


@pytest.mark.unit
def test_tsv_cells_are_literal_and_csv_is_read_by_extension(tmp_path):
    tsv = write_tsv(tmp_path / "train.tsv", [('"unpaired quote', "pos"), ("plain, with comma", "neg")])
    rows = labelled_texts_from_file(tsv, ("sentence", "label"))
    assert [(r.text, r.label) for r in rows] == [('"unpaired quote', "pos"), ("plain, with comma", "neg")]
    assert rows[1].origin == "train.tsv:3"
    csv = tmp_path / "train.csv"
    csv.write_text('id,review,stars\n1,"good, really",5\n2,bad,1\n')
    rows = labelled_texts_from_file(csv, ("review", "stars"))
    assert [(r.text, r.label) for r in rows] == [("good, really", "5"), ("bad", "1")]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return encoder_run(tmp_path_factory.mktemp("tables") / "run")


@pytest.mark.e2e
def test_finetune_then_evaluate_classify_on_tsv_columns(encoder, tmp_path, capsys):
    train, test = write_tsv(tmp_path / "train.tsv", TRAIN), write_tsv(tmp_path / "dev.tsv", TEST)
    columns = ["--text-column", "sentence", "--label-column", "label"]
    out = tmp_path / "cls"
    code, stdout, err = run_cli(
        capsys,
        "finetune",
        "classify",
        encoder,
        "--out",
        out,
        "--data",
        train,
        "--val-data",
        test,
        *columns,
        "--steps",
        2,
        "--batch-size",
        4,
        "--no-progress",
    )
    assert code == 0, err
    assert "accuracy" in stdout and "macro-F1" in stdout
    results = json.loads((out / "results.json").read_text())
    assert results["n_test"] == len(TEST) and len(results["correct"]) == len(TEST)
    assert json.loads((out / "config.json").read_text())["task"]["labels"] == ["0", "1"]  # sorted label text
    code, _, err = run_cli(
        capsys,
        "evaluate",
        out,
        "--task",
        "classify",
        "--data",
        test,
        *columns,
        "--results",
        tmp_path / "again.json",
        "--no-progress",
    )
    assert code == 0, err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["correct"] == results["correct"] and again["macro_f1"] == results["macro_f1"]


@pytest.mark.e2e
def test_bad_tables_exit_2_with_one_line(encoder, tmp_path, capsys):
    train = write_tsv(tmp_path / "train.tsv", TRAIN)
    one_class = write_tsv(tmp_path / "one.tsv", [(text, "1") for text, _ in TRAIN])
    finetune = ["finetune", "classify", encoder, "--steps", 1, "--no-progress", "--data"]
    cases = [
        ([*finetune, train, "--out", tmp_path / "o1"], "lacks column(s) text (columns: sentence, label)"),
        ([*finetune, train, "--out", tmp_path / "o2", "--text-column", "sentence", "--label-column", "gold"], "gold"),
        ([*finetune, one_class, "--out", tmp_path / "o3", "--text-column", "sentence"], "holds one label"),
        (
            ["evaluate", encoder, "--task", "classify", "--data", tmp_path / "dev.parquet"],
            "must be .jsonl, .csv or .tsv",
        ),
    ]
    (tmp_path / "dev.parquet").write_text("not a table")
    for args, needle in cases:
        assert_one_line_exit_2(capsys, args, needle)
