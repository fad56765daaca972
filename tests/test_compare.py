"""`maskwise compare` end to end on tiny settings: the report's structure, resumability."""

import json

import pytest

from maskwise.cli import main
from maskwise.experiments.compare import FAMILIES

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY = """
seconds = 3.0
d_model = 32
block_size = 128
extraction_target = 24
batch_size = 8
finetune_steps = 3
genre_per_class = 12
retrieval_pairs = 40
retrieval_queries = 20
extraction_train = 24
extraction_test = 8
held_out_chars = 160
fill_positions = 12
"""


def test_compare_quick_report_structure(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "cmp"
    assert main(["compare", "--quick", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["kind"] == "compare"
    assert [r["group"] for r in results["runs"]] == list(FAMILIES)
    assert all(r["curve"] and "tokens_seen" in r["curve"][0] and "wall_s" in r["curve"][0] for r in results["runs"])
    params = [results["parameters"][f]["total"] for f in FAMILIES]
    assert max(params) / min(params) < 1.10  # equal size within 10%
    rows = {row[0]: row[1:] for row in results["table"]["rows"]}
    assert rows["passage -> speakers: exact match / speakers F1"][0].startswith("cannot")
    assert rows["held-out next-token loss (nats/char)"][2].startswith("conditional only")
    assert "poorly" in rows["held-out next-token loss (nats/char)"][0]
    report = (out / "report.md").read_text()
    for section in ("## Results", "## Where the parameters go", "## Plots", "## Summary"):
        assert section in report
    assert (out / "loss_vs_tokens_seen.png").is_file() and (out / "loss_vs_wall_s.png").is_file()
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<table>" in html

    # Re-running continues from the cached steps: nothing is retrained.
    before = {p.name: p.stat().st_mtime for p in (out / "steps").iterdir()}
    assert main(["compare", "--quick", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    assert {p.name: p.stat().st_mtime for p in (out / "steps").iterdir()} == before
    # and `maskwise report` re-renders from results.json alone
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0 and (out / "report.md").is_file()


def test_compare_rejects_unknown_setting(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text("secondz = 3\n")
    assert main(["compare", "--config", str(config), "--out", str(tmp_path / "x")]) == 2
    assert "secondz" in capsys.readouterr().err
