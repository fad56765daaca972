"""The task commands end to end on tiny run folders (seconds), and bad inputs: exit 2, one line."""

import json
import shutil

import pytest
import torch
from tiny_run import files_in

from maskwise.cli import main
from maskwise.config import preset
from maskwise.data.corpus import load_corpus
from maskwise.data.tokenizers import build_tokenizer
from maskwise.model.transformer import build_model
from maskwise.runs import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    save_weights,
    write_json,
)

pytestmark = pytest.mark.e2e

PRESETS = {"encoder": "bert", "decoder": "gpt2", "encoder-decoder": "t5"}


@pytest.fixture(scope="module")
def runs(small_text, tmp_path_factory):
    """A run folder per family, laid out as runs.load_run expects."""
    tokenizer = build_tokenizer("char", load_corpus(str(small_text)))
    root = tmp_path_factory.mktemp("runs")
    folders = {}
    for family, name in PRESETS.items():
        torch.manual_seed(0)
        cfg = preset(name, vocab_size=tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2, max_seq_len=96)
        folder = root / family
        folder.mkdir()
        save_weights(build_model(cfg), folder / MODEL_FILE)
        tokenizer.save(folder / TOKENIZER_FILE)
        write_json(folder / CONFIG_FILE, {"model": cfg.to_dict()})
        folders[family] = folder
    return folders


def cli(capsys, *args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_generate(runs, capsys):
    code, out, err = cli(
        capsys,
        "generate",
        runs["decoder"],
        "--prompt",
        "ROMEO",
        "--prompt",
        "To be",
        "--max-new-tokens",
        5,
        "--temperature",
        0.8,
        "--top-k",
        10,
        "--seed",
        1,
    )
    assert code == 0, err
    assert out.startswith("ROMEO") and "\nTo be" in out
    code, out, err = cli(
        capsys, "generate", runs["encoder-decoder"], "--prompt", "ROMEO\nHi.", "--num-beams", 2, "--max-new-tokens", 4
    )
    assert code == 0, err


def test_fill_mask(runs, capsys):
    code, out, err = cli(capsys, "fill-mask", runs["encoder"], "To be or [MASK]ot", "--top-k", 2)
    assert code == 0, err
    assert out.startswith("[MASK] 1:") and out.count("\n") == 1


def test_finetune_then_evaluate_and_search(runs, tmp_path, capsys):
    out = tmp_path / "cls"
    code, stdout, err = cli(
        capsys,
        "finetune",
        "classify",
        runs["encoder"],
        "--out",
        out,
        "--steps",
        2,
        "--batch-size",
        4,
        "--plays-task",
        "line-order",
        "--per-label",
        3,
        "--eval-per-label",
        5,
        "--no-progress",
    )
    assert code == 0, err
    assert "accuracy" in stdout and "majority class" in stdout
    results = json.loads((out / "results.json").read_text())
    assert results["pooling"] == "cls" and results["mode"] == "finetune" and "baseline" in results
    assert results["settings"]["plays_task"] == "line-order" and results["n_test"] == 10
    assert (out / "head.safetensors").is_file() and (out / "summary.txt").is_file()
    before = files_in(out)
    unlabelled = tmp_path / "unlabelled.jsonl"
    unlabelled.write_text('{"text": "a line"}\n')
    code, _, err = cli(
        capsys,
        "finetune",
        "classify",
        runs["encoder"],
        "--out",
        out,
        "--overwrite",
        "--data",
        unlabelled,
        "--steps",
        2,
        "--no-progress",
    )
    assert code == 2 and "label" in err
    assert files_in(out) == before  # refused: nothing replaced
    code, stdout, err = cli(capsys, "evaluate", out, "--eval-per-label", 5, "--no-progress")  # the task it was tuned on
    assert code == 0, err
    again = json.loads((out / "results-classify-test.json").read_text())
    assert again["accuracy"] == results["accuracy"]  # the saved head reproduces the fine-tune's score
    code, _, err = cli(capsys, "evaluate", out, "--plays-task", "genre", "--eval-per-label", 2, "--no-progress")
    assert code == 2 and "none of the classifier's (in order, swapped)" in err and err.count("\n") == 1
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    config = json.loads((damaged / "config.json").read_text())
    for field, value in [("labels", None), ("train_labels", 5)]:  # a KeyError and a TypeError before
        task = (
            {**config["task"], field: value}
            if value is not None
            else {k: v for k, v in config["task"].items() if k != field}
        )
        (damaged / "config.json").write_text(json.dumps({**config, "task": task}))
        code, _, err = cli(capsys, "evaluate", damaged, "--eval-per-label", 2, "--no-progress")
        assert code == 2 and f"without its {field}" in err and "Traceback" not in err, err

    collection = tmp_path / "docs.txt"
    collection.write_text("To be or not to be\nGood morrow, cousin\nO Romeo, Romeo\n")
    code, stdout, err = cli(capsys, "search", out, "--query", "Romeo", "--collection", collection, "--k", 2)
    assert code == 0, err
    assert stdout.count(". ") >= 2 and "3 passages" in stdout


def test_finetune_on_own_data(runs, tmp_path, capsys):
    data = tmp_path / "own.jsonl"
    data.write_text("".join(json.dumps({"source": f"A{i}\nline", "target": f"A{i}"}) + "\n" for i in range(10)))
    code, _, err = cli(
        capsys,
        "finetune",
        "seq2seq",
        runs["encoder-decoder"],
        "--out",
        tmp_path / "s2s",
        "--data",
        data,
        "--steps",
        2,
        "--batch-size",
        2,
        "--no-progress",
    )
    assert code == 0, err
    results = json.loads((tmp_path / "s2s" / "results.json").read_text())
    assert results["n_test"] == 1
    # the user's rows are not the plays: no speakers in the metric names or the baseline's
    assert "speaker" not in json.dumps({k: v for k, v in results.items() if k != "examples"}).lower()
    assert results["baseline"]["name"].startswith("the source's first") and "items_f1" in results  # the lead


def test_finetune_applies_the_fine_tuning_rule_unless_a_flag_sets_it(runs, tmp_path, capsys):
    """``maskwise finetune`` trains as compare does: 3 epochs of the training rows, the batch and rates by the
    body's origin (a run folder: scratch, unless --body says pretrained); --steps and --lr still win."""
    data = tmp_path / "rows.csv"
    data.write_text("text,label\n" + "".join(f"line {i} of the play,{'ab'[i % 2]}\n" for i in range(40)))
    common = ["--data", data, "--no-progress", "--plays-task", "genre"]
    code, _, err = cli(capsys, "finetune", "classify", runs["encoder"], "--out", tmp_path / "a", *common)
    assert code == 0, err
    tuning = json.loads((tmp_path / "a" / "results.json").read_text())["fine_tuning"]
    rows = tuning["rows"]  # 36: 10% of the 40 held out for evaluation
    assert tuning == {
        "rows": rows,
        "epochs": tuning["steps"] * 16 / rows,
        "steps": 3 * -(-rows // 16),
        "batch_size": 16,
        "lr": 1e-3,
        "head_lr": 3e-3,
        "body": "scratch",
    }
    assert f"fine-tuned: {tuning['steps']} steps at batch 16 over {rows} training rows" in err
    pretrained = ["--body", "pretrained", "--lr", "1e-4"]
    code, _, err = cli(capsys, "finetune", "classify", runs["encoder"], "--out", tmp_path / "b", *pretrained, *common)
    assert code == 0, err
    tuning = json.loads((tmp_path / "b" / "results.json").read_text())["fine_tuning"]
    expected = (3 * -(-rows // 8), 8, 1e-4, 5e-5)  # HF Trainer's batch and head rate, the body's rate as given
    assert (tuning["steps"], tuning["batch_size"], tuning["lr"], tuning["head_lr"]) == expected
    code, _, err = cli(capsys, "finetune", "classify", runs["encoder"], "--out", tmp_path / "c", "--steps", 2, *common)
    assert code == 0 and json.loads((tmp_path / "c" / "results.json").read_text())["fine_tuning"]["steps"] == 2


def test_finetune_rerank_reports_gains_with_intervals(runs, tmp_path, capsys):
    out = tmp_path / "rerank"
    code, stdout, err = cli(
        capsys,
        "finetune",
        "rerank",
        runs["encoder"],
        "--out",
        out,
        "--steps",
        1,
        "--batch-size",
        2,
        "--negatives",
        "random",
        "--train-queries",
        8,
        "--candidates",
        5,
        "--rerank-queries",
        6,
        "--no-progress",
    )
    assert code == 0, err
    assert "over random order (95% CI" in stdout and "over first stage (95% CI" in stdout
    results = json.loads((out / "results.json").read_text())
    assert results["n_queries"] == 6 and results["candidates_per_query"] == 5
    assert set(results["ndcg@10_gain"]) == {"over_random_order", "over_first_stage"}


def test_a_segment_readout_cross_encoder_is_kept_and_read_back_by_evaluate(runs, tmp_path, capsys):
    out = tmp_path / "rerank"
    flags = ["--candidates", 5, "--rerank-queries", 6, "--no-progress"]
    code, _, err = cli(
        capsys,
        "finetune",
        "rerank",
        runs["encoder"],
        "--out",
        out,
        "--steps",
        2,
        "--batch-size",
        2,
        "--negatives",
        "random",
        "--train-queries",
        8,
        "--readout",
        "segments",
        *flags,
    )
    assert code == 0, err
    trained = json.loads((out / "results.json").read_text())
    assert trained["readout"] == "segments"
    code, _, err = cli(capsys, "evaluate", out, "--results", tmp_path / "again.json", *flags)
    assert code == 0, err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["ndcg@10"] == trained["ndcg@10"]  # the same scores: the saved scale read into the same readout


def _bad(runs, tmp_path):
    bad_rows = tmp_path / "bad.csv"
    bad_rows.write_text("text,label\nfine,a\n,b\n")
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("precious")
    common = ["--steps", "1", "--no-progress"]
    return [
        (["generate", runs["encoder"], "--prompt", "x"], "break"),
        (["generate", runs["decoder"], "--prompt", "x", "--top-k", "3"], "temperature"),
        (["generate", runs["decoder"], "--prompt", "x", "--max-new-tokens", "0"], "max-new-tokens"),
        (["generate", runs["decoder"], "--prompt", ""], "empty"),
        (["generate", tmp_path / "nowhere", "--prompt", "x"], "nowhere"),
        (["fill-mask", runs["encoder"], "no mask here"], "[MASK]"),
        (["fill-mask", runs["decoder"], "a [MASK]"], "encoder"),
        (["finetune", "classify", runs["encoder"], "--out", tmp_path / "o1", "--data", bad_rows, *common], "line 3"),
        (["finetune", "seq2seq", runs["encoder"], "--out", tmp_path / "o2", *common], "encoder"),
        (
            [
                "finetune",
                "seq2seq",
                runs["encoder-decoder"],
                "--out",
                tmp_path / "o7",
                "--data",
                bad_rows,
                "--rename-speakers",
                "0.5",
                *common,
            ],
            "embedded passages",
        ),
        (
            [
                "finetune",
                "seq2seq",
                runs["encoder-decoder"],
                "--out",
                tmp_path / "o8",
                "--rename-speakers",
                "2",
                *common,
            ],
            "[0, 1]",
        ),
        (["finetune", "classify", runs["encoder"], "--out", existing, *common], "already exists"),
        (["finetune", "classify", runs["encoder"], "--out", tmp_path / "o3", "--steps", "0"], "steps"),
        (["finetune", "embed", runs["encoder"], "--out", tmp_path / "o4", "--lr", "-1", *common], "lr"),
        (["finetune", "classify", runs["decoder"], "--out", tmp_path / "o5", "--pooling", "cls", *common], "cls"),
        (["finetune", "rerank", runs["encoder"], "--out", tmp_path / "o6", "--eval-data", bad_rows, *common], "--data"),
        (["evaluate", runs["encoder"]], "--task"),
        (["evaluate", runs["encoder"], "--task", "classify"], "finetune classify"),
        (["break", runs["decoder"], runs["decoder"]], "not an encoder"),
        (["search", runs["encoder"], "--query", "x", "--k", "0"], "--k"),
    ]


def test_bad_inputs_exit_2_with_one_line(runs, tmp_path, capsys):
    for args, needle in _bad(runs, tmp_path):
        code, _, err = cli(capsys, *args)
        assert code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1, (args, err)
        assert "Traceback" not in err and needle.lower() in err.lower(), (args, err)
    assert (tmp_path / "existing" / "keep.txt").read_text() == "precious"


def test_mid_speech_seq2seq_is_kept_by_evaluate(runs, tmp_path, capsys):
    out = tmp_path / "mid"
    code, _, err = cli(
        capsys,
        "finetune",
        "seq2seq",
        runs["encoder-decoder"],
        "--out",
        out,
        "--mid-speech",
        "--steps",
        2,
        "--batch-size",
        2,
        "--eval-limit",
        6,
        "--max-chars",
        100,
        "--no-progress",
    )
    assert code == 0, err
    tuned = json.loads((out / "results.json").read_text())
    assert tuned["mid_speech"] is True and tuned["n_test"] == 6
    assert tuned["baseline"]["items_f1"] == 0.0  # the first line is verse: never one of the speakers
    code, _, err = cli(capsys, "evaluate", out, "--eval-limit", 6, "--max-chars", 100, "--no-progress")
    assert code == 0, err
    again = json.loads((out / "results-seq2seq-test.json").read_text())
    assert again["mid_speech"] is True and again["per_example"] == tuned["per_example"]


@pytest.mark.slow
def test_verse_seq2seq_is_kept_by_evaluate_with_its_rules(runs, tmp_path, capsys):
    out = tmp_path / "verse"
    common = ("--eval-limit", 6, "--max-chars", 60, "--no-progress")
    code, printed, err = cli(
        capsys, "finetune", "seq2seq", runs["encoder-decoder"], "--out", out, "--plays-task", "verse", "--steps", 2,
        "--batch-size", 2, "--max-target-len", 64, *common
    )  # fmt: skip
    assert code == 0, err
    assert "verse from prose (encoder-decoder, greedy) on 6 sources: line breaks F1 model" in printed
    tuned = json.loads((out / "results.json").read_text())
    assert tuned["plays_task"] == "verse" and len(tuned["per_example"]["break_f1"]) == 6
    assert sorted(rule["name"] for rule in tuned["rules"]) == sorted(tuned["rules_on_training"])  # both, scored
    assert tuned["classic"]["name"] == max(tuned["rules_on_training"], key=tuned["rules_on_training"].get)
    code, _, err = cli(capsys, "evaluate", out, *common)
    assert code == 0, err
    again = json.loads((out / "results-seq2seq-test.json").read_text())
    assert again["plays_task"] == "verse" and again["per_example"] == tuned["per_example"]
    code, _, err = cli(capsys, "finetune", "seq2seq", runs["decoder"], "--out", tmp_path / "no", "--plays-task",
                       "verse", "--rename-speakers", 0.5, *common)  # fmt: skip
    assert code == 2 and "verse has none" in err
