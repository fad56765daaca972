"""report.md -> report.html as a person opens it: every plot (names with parentheses and slashes
included), rendered Markdown, nested verdict details, dot-and-interval plots with baselines; and the
page in headless Chromium where it is installed."""

import shutil

import pytest

from maskwise.experiments.report import metric_interval, render, slug, write_results
from tests.report_checks import browser_errors, check_report_html

CURVE = [{"step": s, "tokens_seen": 100 * s, "wall_s": 0.5 * s, "val_loss": 3.0 - 0.1 * s} for s in (1, 2, 3)]


def made_results() -> dict:
    """A results.json of compare's shape with the row names that broke the old renderer."""
    return {
        "title": "made",
        "kind": "compare",
        "wall_s": 12.0,
        "machine": {
            "cpu": "test CPU",
            "threads": 2,
            "torch": "x",
            "runtime": {"device": "cpu", "precision": "fp32", "reason": "this CPU has no native bf16 (AVX2)"},
        },
        "runs": [{"label": f"{f} seed 0", "group": f, "seed": 0, "curve": CURVE} for f in ("encoder", "decoder")],
        "metrics": {
            "fill a blank (token accuracy)": {"encoder": [0.6], "decoder": [0.58]},
            "held-out next-token loss (nats/char)": {"decoder": [1.9, 2.0, 2.1]},
            "retrieval recall@10 (ICT)": {"encoder": [0.05], "decoder": [0.03]},
        },
        "metric_meta": {
            "fill a blank (token accuracy)": {
                "higher": True,
                "baseline_name": "most frequent token",
                "baseline": {"encoder": 0.2, "decoder": 0.2},
                "intervals": {"encoder": [0.6, 0.55, 0.65], "decoder": [0.58, 0.52, 0.63]},
            }
        },
        "verdicts": [
            {
                "claim": "generate => decoder",
                "verdict": "inconclusive",
                "prediction": "the decoder wins",
                "rule": "held if the decoder's interval lies below",
                "details": ["loss: decoder ahead by 0.1 [0.0, 0.2]", "TTFT: within noise"],
            }
        ],
        "table": {
            "columns": ["task", "encoder", "decoder", "best"],
            "rows": [
                [
                    "fill a blank (token accuracy) [95% interval]",
                    "0.600 [0.550, 0.650]",
                    "0.580 [0.520, 0.630]",
                    "**encoder**",
                ]
            ],
        },
        "samples": {"decoder sample": "To be, or <not> to be"},
        "summary": "A summary with `code` and **bold**.",
        "settings": {"seeds": [0]},
    }


@pytest.mark.unit
def test_slugs_are_file_name_safe():
    assert slug("fill a blank (token accuracy)") == "fill_a_blank_token_accuracy"
    assert slug("held-out next-token loss (nats/char)") == "held_out_next_token_loss_nats_char"
    assert slug("retrieval recall@10 (ICT)") == "retrieval_recall_10_ict"


@pytest.mark.unit
def test_metric_interval_is_a_t_interval_over_seeds_and_a_point_for_one():
    assert metric_interval([0.5]) == (0.5, 0.5, 0.5)
    mean, low, high = metric_interval([1.0, 2.0, 3.0])  # sd 1, t(2) = 4.303
    assert mean == 2.0 and low == pytest.approx(2.0 - 4.303 / 3**0.5) and high == pytest.approx(2.0 + 4.303 / 3**0.5)


@pytest.mark.integration
def test_every_plot_is_embedded_and_markdown_renders(tmp_path):
    write_results(tmp_path, made_results())
    render(tmp_path)
    page = check_report_html(tmp_path)
    assert len(page.images) == 5  # two curves and three metrics, the parenthesised names among them
    assert sorted(p.name for p in tmp_path.glob("metric_*.png")) == [
        "metric_fill_a_blank_token_accuracy.png",
        "metric_held_out_next_token_loss_nats_char.png",
        "metric_retrieval_recall_10_ict.png",
    ]
    assert max(page.list_depths) == 2  # the verdict's details nest under it
    html = (tmp_path / "report.html").read_text()
    assert "<strong>encoder</strong>" in html and "<code>code</code>" in html
    assert "&lt;not&gt;" in html  # a sample's text is escaped, not markup


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("chromium") or shutil.which("chromium-browser")),
    reason="no chromium (Debian: apt-get install chromium)",
)
def test_the_report_loads_in_a_browser_with_every_image_and_no_console_error(tmp_path):
    write_results(tmp_path, made_results())
    render(tmp_path)
    assert browser_errors(tmp_path / "report.html", tmp_path) == []
