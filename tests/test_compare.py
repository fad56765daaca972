"""`maskwise compare` end to end on tiny settings: the report's structure, resumability."""

import json

import pytest

from maskwise.cli import main
from maskwise.experiments.compare import FAMILIES
from tests.report_checks import check_report_html

pytestmark = pytest.mark.e2e  # the CLI; only the whole compare run is slow

TINY = """
seconds = 3.0
d_model = 32
block_size = 128
batch_size = 8
held_out_blocks = 4
min_steps = 100000
ttft_repeats = 2
held_out_chars = 160
fill_positions = 12

[tasks.tag]
steps = 3
train_windows = 12
test_windows = 6
window_chars = 80

[tasks.embed]
steps = 3
train_pairs = 40
test_queries = 20

[tasks.seq2seq]
steps = 3
train_passages = 24
test_passages = 8
max_target_len = 24
"""


@pytest.mark.slow
def test_compare_quick_report_structure(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "cmp"
    assert main(["compare", "--quick", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["kind"] == "compare"
    assert [r["group"] for r in results["runs"]] == list(FAMILIES)
    assert [v["claim"] for v in results["verdicts"]] == [
        "embed, score or classify => encoder", "generate => decoder", "read-then-write => encoder-decoder"]
    assert all(v["verdict"] in ("held", "falsified", "inconclusive") and v["details"] for v in results["verdicts"])
    assert results["warning"].startswith("**Warning: too few pretraining steps")  # min_steps above what 3 s allows
    assert all(r["curve"] and "tokens_seen" in r["curve"][0] and "wall_s" in r["curve"][0] for r in results["runs"])
    params = [results["parameters"][f]["total"] for f in FAMILIES]
    assert max(params) / min(params) < 1.10  # equal size within 10%
    assert results["table"]["columns"] == ["task", *FAMILIES, "best"]
    rows = {row[0]: row[1:] for row in results["table"]["rows"]}
    assert rows["passage -> speakers F1 [95% interval]"][0].startswith("cannot")
    exports = rows["exports to (`maskwise export RUN --to hf OUT`)"]  # what each family's run leaves maskwise as
    assert exports[:2] == ["`ModernBertForMaskedLM`", "`ModernBertDecoderForCausalLM`"]
    assert exports[2].startswith("no HF class: ") and "cross-attention" in exports[2]
    assert all("a mark before every line break" in cell for cell in rows[
        "punctuation restoration F1 per text (tagging) [95% interval]"][:3])  # every family tags, beside the rule
    assert "genre" not in json.dumps(results["table"])  # six test plays decide nothing: not a row here
    assert rows["held-out next-token loss (nats/char) [95% interval]"][2].startswith("conditional only")
    assert "through [MASK]" in rows["held-out next-token loss (nats/char) [95% interval]"][0]
    report = (out / "report.md").read_text()
    assert report.split("\n")[2].startswith("**Warning")
    for section in ("## Results", "## Where the parameters go", "## Plots", "## Summary",
                    "## Predictions, rules, verdicts (one seed)"):
        assert section in report
    assert (out / "loss_vs_tokens_seen.png").is_file() and (out / "loss_vs_wall_s.png").is_file()
    html = (out / "report.html").read_text()
    assert "<table>" in html
    page = check_report_html(out)  # every plot decodes, Markdown rendered
    assert len(page.images) == 2 + len(results["metrics"])  # the two loss curves and one per metric
    assert max(page.list_depths) == 2  # the verdicts' paired comparisons nest under their verdict
    for meta in results["metric_meta"].values():  # each metric plot has its baseline and intervals
        assert set(meta["baseline"]) == set(meta["intervals"]) and meta["higher"] in (True, False)

    # Re-running continues from the cached steps: nothing is retrained.
    before = {p.name: p.stat().st_mtime for p in (out / "steps").iterdir()}
    assert main(["compare", "--quick", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    assert {p.name: p.stat().st_mtime for p in (out / "steps").iterdir()} == before
    # and `maskwise report` re-renders from results.json alone
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0 and (out / "report.md").is_file()


@pytest.mark.parametrize("text, needle", [
    ("secondz = 3\n", "secondz"),
    ("[tasks.tag]\nstepz = 3\n", "tasks.tag: unknown key(s) stepz"),
    ("[tasks.tag]\nsteps = 'many'\n", "steps must be int"),
    ("[tasks.genre]\nsteps = 3\n", "tasks must be a table of"),
])
def test_compare_rejects_unknown_setting(tmp_path, capsys, text, needle):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    assert main(["compare", "--config", str(config), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, needle", [
    (["--scale", "huge"], "unknown scale"),
    (["--quick", "--scale", "gpu"], "--quick"),
    (["--seeds", "0"], "--seeds"),
    (["--seconds", "-1"], "--seconds"),
])
def test_compare_bad_options_exit_2_with_one_line(tmp_path, capsys, args, needle):
    assert main(["compare", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not (tmp_path / "x").exists()
