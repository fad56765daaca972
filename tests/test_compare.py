"""`maskwise compare` end to end on tiny settings: the report's structure, resumability, the hybrid column."""

import json
import re
import string

import pytest
import torch

from maskwise.cli import main
from maskwise.config import preset
from maskwise.data.corpus import SHAKESPEARE, make_corpus
from maskwise.data.tokenizers import build_tokenizer
from maskwise.experiments.arms import WALL, Arm, StudyOptions
from maskwise.experiments.claims import Evidence, rows_of
from maskwise.experiments.compare import COMPARE, FAMILIES, columns_of
from maskwise.experiments.compare_plan import ComparePlan, Reader, measure_steps, plan_of
from maskwise.experiments.compare_report import CLASSIC_COLUMN, best_cell, peak_share_row, standing
from maskwise.experiments.compare_study import ttft_buckets
from maskwise.experiments.held_out import blank_filling
from maskwise.families import family_of
from maskwise.model.transformer import build_model
from maskwise.recipes import COMPARE_SCALES, DEFAULT
from maskwise.tasks.registry import READ_THEN_WRITE
from maskwise.tasks.unit import Speeds
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
ttft_batch = 3
held_out_chars = 160
fill_positions = 12

[tasks.tag]
steps = 3
train_windows = 12
test_windows = 6
window_chars = 80

[tasks.classify]
steps = 3
train_per_label = 8
test_per_label = 6

[tasks.embed]
steps = 3
train_pairs = 40
test_queries = 20

[tasks.seq2seq]
steps = 3
train_passages = 24
test_passages = 8
max_target_len = 24

[tasks.verse]
steps = 3
train_passages = 24
test_passages = 8
max_chars = 60
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
        "embed, score or classify => encoder",
        "generate => decoder",
        "read-then-write => encoder-decoder",
    ]
    assert all(
        v["verdict"] in ("held", "falsified", "mixed", "inconclusive", "too few test items") and v["details"]
        for v in results["verdicts"]
    )  # a tiny config tests a few items: too few for some verdicts
    assert results["warning"].startswith("**Warning: too few pretraining steps")  # min_steps above what 3 s allows
    assert all(r["curve"] and "tokens_seen" in r["curve"][0] and "wall_s" in r["curve"][0] for r in results["runs"])
    params = [results["parameters"][f]["total"] for f in FAMILIES]
    assert max(params) / min(params) < 1.10  # equal size within 10%
    assert results["table"]["columns"] == [
        "task",
        *FAMILIES,
        CLASSIC_COLUMN,
        "best",
        "trend along compute (per doubling)",
    ]
    rows = {row[0]: row[1:] for row in results["table"]["rows"]}
    assert rows["passage -> speakers F1 [95% interval]"][0].startswith("cannot")
    assert rows["verse line breaks F1 [95% interval]"][0].startswith("cannot")  # the encoder writes no lines
    exports = rows["exports to (`maskwise export RUN --to hf OUT`)"]  # what each family's run leaves maskwise as
    assert exports[:2] == ["`ModernBertForMaskedLM`", "`ModernBertDecoderForCausalLM`"]
    assert exports[2].startswith("no HF class: ") and "cross-attention" in exports[2]
    assert all(
        "a mark before every line break" in cell
        for cell in rows["punctuation restoration F1 per text (tagging) [95% interval]"][:3]
    )  # every family tags, beside the rule
    order = rows["line order accuracy (classification) [95% interval]"][:3]
    assert all("majority class" in cell for cell in order)  # every family classifies, beside the majority class
    assert [cell.rsplit("; ", 1)[1] for cell in order] == ["cls pooling", "last pooling", "mean pooling"]
    assert "genre" not in json.dumps(results["table"])  # six test plays decide nothing: not a row here
    assert rows["held-out next-token loss (nats/char) [95% interval]"][2].startswith("conditional only")
    assert "through [MASK]" in rows["held-out next-token loss (nats/char) [95% interval]"][0]
    ttft = json.loads((out / "steps" / "ttft-seed0.json").read_text())["buckets"]  # the plays': one bucket
    assert len(ttft) == 1 and ttft[0]["batch"] == 3  # both writers, timed on 3 sources at once
    assert [len(ttft[0]["seconds"][f]) for f in ("decoder", "encoder-decoder")] == [2, 2]
    assert (
        f"time to first token, the longest test verse: {ttft[0]['source_tokens']}-token sources, batch 3 "
        "(ms, mean [95% interval])"
    ) in rows
    report = (out / "report.md").read_text()
    assert report.split("\n")[2].startswith("**Warning")
    for section in (
        "## Results",
        "## Where the parameters go",
        "## Plots",
        "## Summary",
        "## Predictions, rules, verdicts (one seed)",
    ):
        assert section in report
    assert (out / "loss_vs_tokens_seen.png").is_file() and (out / "loss_vs_wall_s.png").is_file()
    html = (out / "report.html").read_text()
    assert "<table>" in html
    # quick's ladder, 0.5 and 1 of the clock: each run's point branched off, cooled down and measured like the last
    ladder = results["ladder"]
    assert [p["fraction"] for p in ladder["compute"]] == [0.5, 1.0]
    for family in FAMILIES:
        branch = json.loads((out / "runs" / f"{family}-seed0-at0.5" / "config.json").read_text())
        assert branch["branched_from"]["point"] == 0.5 and branch["settings"]["budget"] == "seconds=1.5"
        assert (out / "runs" / f"{family}-seed0" / "points" / "0.5").is_dir()  # kept, never pruned
        assert (
            ladder["compute"][0]["families"][family]["tokens_seen"]
            < ladder["compute"][1]["families"][family]["tokens_seen"]
        )
    assert (out / "steps" / "cooldown-encoder-seed0-at0.5.json").is_file()
    assert set(ladder["claims"]) == {v["claim"] for v in results["verdicts"]}
    assert all(t["reading"] in ("grows", "shrinks", "flat", "undetermined") for t in ladder["trends"].values())
    assert all(any(d.startswith("Along compute (2 points") for d in v["details"]) for v in results["verdicts"])
    trend_cells = {row[0]: row[-1] for row in results["table"]["rows"]}
    assert trend_cells["punctuation restoration F1 per text (tagging) [95% interval]"].split(":")[0] in (
        "grows",
        "shrinks",
        "flat",
        "undetermined",
    )
    assert any(
        cell.startswith("final point only") for label, cell in trend_cells.items() if label.startswith("time to")
    )
    assert "## Along compute" in report
    page = check_report_html(out)  # every plot decodes, Markdown rendered
    # at a glance, the two loss curves, one per metric, one curve along compute per metric
    assert len(page.images) == 3 + 2 * len(results["metrics"])
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


@pytest.mark.parametrize(
    "text, needle",
    [
        ("secondz = 3\n", "secondz"),
        ("[tasks.tag]\nstepz = 3\n", "tasks.tag: unknown key(s) stepz"),
        ("[tasks.tag]\nsteps = 'many'\n", "steps must be int"),
        ("[tasks.genre]\nsteps = 3\n", "tasks must be a table of"),
        ("ladder = [0.5, 0.25, 1.0]\n", "ladder must be ascending fractions in (0, 1] ending at 1"),
        ("cooldown = 0.0\n", "cooldown must be in (0, 1]"),
    ],
)
def test_compare_rejects_unknown_setting(tmp_path, capsys, text, needle):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    assert main(["compare", "--config", str(config), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not (tmp_path / "x").exists()


def test_the_plays_go_along_the_ladder_and_a_users_data_only_with_trend():
    from maskwise.cli.experiments import laddered

    assert laddered(DEFAULT, users=False, trend=False).ladder == (0.25, 0.5, 1.0)
    assert laddered(DEFAULT, users=True, trend=False).ladder == (1.0,)
    assert laddered(DEFAULT, users=True, trend=True).ladder == (0.25, 0.5, 1.0)
    assert laddered(DEFAULT, users=True, trend=False).schedule("")["points"] == ""


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--scale", "huge"], "unknown scale"),
        (["--quick", "--scale", "gpu"], "--quick"),
        (["--seeds", "0"], "--seeds"),
        (["--seconds", "-1"], "--seconds"),
        (["--families", "encoder,decoder,encoder-decoder,gpt"], "unknown 'gpt'"),
        (["--families", "encoder,decoder,encoder-decoder,hybrid,hybrid"], "hybrid more than once"),
        (["--families", "encoder,decoder,hybrid"], "must include encoder, decoder, encoder-decoder"),
        (["--model", "m=missing-folder", "--trend"], "--trend sets what is pretrained"),
    ],
)
def test_compare_bad_options_exit_2_with_one_line(tmp_path, capsys, args, needle):
    assert main(["compare", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not (tmp_path / "x").exists()


def test_a_compare_whose_data_does_not_open_is_refused_before_overwrite_replaces_the_folder(tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "experiment.json").write_text("{}")
    (out / "report.md").write_text("an earlier compare")
    assert main(["compare", "--overwrite", "--data", str(tmp_path / "missing.txt"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()  # after the runtime's line, if this process has not printed it yet
    assert "Traceback" not in err and "no such file or folder" in err.splitlines()[-1]
    assert (out / "report.md").read_text() == "an earlier compare"


@pytest.mark.slow
def test_compare_with_the_hybrid_column(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text("ladder = [1.0]\n" + TINY)  # one point: the ladder's plumbing is the test above's
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--quick",
                "--config",
                str(config),
                "--out",
                str(out),
                "--no-progress",
                "--families",
                "hybrid,encoder,decoder,encoder-decoder",
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    trend = "trend along compute (per doubling)"
    assert results["table"]["columns"] == ["task", *FAMILIES, "hybrid", CLASSIC_COLUMN, "best", trend]
    assert "ladder" not in results and not list((out / "runs").glob("*-at*"))
    assert {row[-1] for row in results["table"]["rows"] if row[0].startswith("line order")} == {"one point"}
    assert [r["group"] for r in results["runs"]] == [*FAMILIES, "hybrid"]
    assert [v["claim"] for v in results["verdicts"]] == [
        "embed, score or classify => encoder",
        "generate => decoder",
        "read-then-write => encoder-decoder",
    ]
    hybrid = {row[0]: row[4] for row in results["table"]["rows"]}
    assert hybrid["pretraining objective"] == "hybrid"
    assert hybrid["exports to (`maskwise export RUN --to hf OUT`)"] == "`ModernBertDecoderForCausalLM`"
    measured = [row.label for row in rows_of(())]
    timed = next(label for label in hybrid if label.startswith("time to first token"))
    for label in [f"{label} [95% interval]" for label in measured] + [timed]:
        assert re.match(r"\d+\.\d+ \[\d+\.\d+, \d+\.\d+\]", hybrid[label]), (label, hybrid[label])
    assert hybrid["fill a blank (token accuracy) [95% interval]"].endswith(
        "; both sides, its [MASK] answered from the position before it"
    )
    assert hybrid["held-out next-token loss (nats/char) [95% interval]"].endswith("; read causally")
    assert all("hybrid" in groups for groups in results["metrics"].values())
    assert results["settings"]["families"] == [*FAMILIES, "hybrid"]
    assert "hybrid sample (seed 0)" in results["samples"]
    assert any(
        note.startswith("The hybrid column (hybrid pretraining on the decoder family)") for note in results["notes"]
    )
    assert (
        f"| task | encoder | decoder | encoder-decoder | hybrid | {CLASSIC_COLUMN} | best |"
        in (out / "report.md").read_text()
    )
    page = check_report_html(out)
    assert len(page.images) == 3 + len(results["metrics"])
    for meta in results["metric_meta"].values():  # the hybrid's dot and interval on every plot it has a row in
        assert "hybrid" in meta["intervals"] and set(meta["baseline"]) == set(meta["intervals"])
    # Another set of columns in the same folder would read cached steps made for these: refused.
    assert main(["compare", "--quick", "--config", str(config), "--out", str(out), "--no-progress"]) == 2


@pytest.mark.unit
def test_the_plays_judge_verse_under_read_then_write_and_report_the_speakers_beside_it():
    rows = {row.key: row for row in rows_of(())}
    assert list(rows) == ["next_token", "fill", "tag", "classify", "embed", "verse", "seq2seq"]
    verse, speakers = rows["verse"], rows["seq2seq"]
    assert (verse.claim, verse.kind, verse.label) == (READ_THEN_WRITE, "seq2seq", "verse line breaks F1")
    assert (speakers.claim, speakers.kind, speakers.label) == (None, "seq2seq", "passage -> speakers F1")  # reported
    plan = ComparePlan(SHAKESPEARE)
    assert "verse from prose" in plan.scope and "passage -> speakers reported beside them" in plan.scope
    for scale in COMPARE_SCALES.values():  # each its own fine-tune at every scale
        tunes = plan.fine_tunes(scale)
        assert {key: kind for key, (kind, _, _) in tunes.items()} == {
            "tag": "tag",
            "classify": "classify",
            "embed": "embed",
            "verse": "seq2seq",
            "seq2seq": "seq2seq",
        }
        assert (tunes["verse"][1].plays_task, tunes["seq2seq"][1].plays_task) == ("verse", "speakers")
    speeds = Speeds(1e-5, 1e-5, 1e-4, 128, 64)
    readers = {f: Reader(f, family_of(f), speeds, 1.0) for f in FAMILIES}
    steps = {e.prefix: e for e in measure_steps(plan_of(SHAKESPEARE, [], DEFAULT), DEFAULT, 2, readers)}
    assert steps["verse"].count == steps["seq2seq"].count == 4  # the two writers, two seeds: the plan counts it
    assert 0.5 < steps["verse"].seconds / steps["seq2seq"].seconds < 2.5  # steps and rows like the speakers'
    assert steps["ttft"].count == 2


@pytest.mark.unit
def test_the_first_token_is_timed_on_the_longest_test_verse_read_whole():
    (name, sources), *others = ttft_buckets(ComparePlan(SHAKESPEARE), DEFAULT)[0]
    assert not others and name == "the longest test verse"
    longest = sorted(map(len, sources), reverse=True)[: DEFAULT.ttft_batch]
    assert DEFAULT.block_size >= min(longest) > DEFAULT.block_size - 20  # twice the encoder-decoder's half block
    assert ttft_buckets(ComparePlan(SHAKESPEARE), DEFAULT)[1] == DEFAULT.tasks["verse"].max_target_len


@pytest.mark.unit
def test_families_are_the_default_columns_and_hybrid_an_extra_one():
    assert COMPARE.arms(StudyOptions()) == tuple(Arm(f, f, {"family": f, "data": "shakespeare"}) for f in FAMILIES)
    assert columns_of(["hybrid", "encoder-decoder", "decoder", "encoder"]) == (*FAMILIES, "hybrid")
    assert COMPARE.arms(StudyOptions(families=columns_of([*FAMILIES, "hybrid"])))[-1] == Arm(
        "hybrid", "hybrid", {"family": "decoder", "objective": "hybrid", "data": "shakespeare"}
    )


@pytest.mark.unit
def test_a_hybrid_fills_a_blank_reading_both_sides_from_the_position_before_it(monkeypatch):
    tok = build_tokenizer("char", make_corpus("printable", [string.printable], [string.printable]))
    torch.manual_seed(0)
    model = build_model(
        preset(
            "gpt2",
            vocab_size=tok.vocab_size,
            d_model=32,
            n_layers=1,
            n_heads=2,
            max_seq_len=64,
            reads_bidirectionally=True,
        )
    )
    with torch.no_grad():  # nothing is added to the residual stream: each position's logits favour its own token
        for name, weight in model.named_parameters():
            if name.startswith("stack.positions") or ".attn.out." in name or ".ffn.down." in name:
                weight.zero_()
    read, rows = model.read, []

    def spy(ids, mask):
        rows.extend(row[keep].tolist() for row, keep in zip(ids, mask.bool()))
        return read(ids, mask)

    monkeypatch.setattr(model, "read", spy)
    a = tok.encode("a")[0]
    repeated = blank_filling(model, tok, "a" * 30, 10, 0, a, "hybrid")
    assert repeated["n"] == 10 and repeated["accuracy"] == 1.0  # answered from p - 1, which holds the same "a"
    # every blank read with the whole text around it (30 tokens: one window), [MASK] in its place, no [CLS]
    assert len(rows) == 10 and all(row.count(tok.mask_id) == 1 and len(row) == 30 for row in rows)
    assert blank_filling(model, tok, "ab" * 15, 10, 0, a, "hybrid")["accuracy"] == 0.0  # p - 1 holds the other


@pytest.mark.unit
def test_the_hybrid_is_placed_only_where_its_intervals_separate_it_and_never_named_best():
    def same(value, n=40):
        return [[value] * n]

    gathered = {
        "next_token": (
            {"encoder": same(3.0), "decoder": same(1.5), "hybrid": same(2.0)},
            {"encoder": same(3.5), "decoder": same(3.5), "hybrid": same(3.5)},
        ),
        "fill": (
            {"encoder": same(0.6), "decoder": same(0.3), "encoder-decoder": same(0.3), "hybrid": same(0.9)},
            dict.fromkeys(["encoder", "decoder", "encoder-decoder", "hybrid"], same(0.0)),
        ),
        "tag": (
            {"encoder": same(0.8), "decoder": same(0.2), "encoder-decoder": same(0.8), "hybrid": same(0.8)},
            dict.fromkeys(["encoder", "decoder", "encoder-decoder", "hybrid"], same(0.1)),
        ),
        "classify": (
            {f: same(0.6) for f in ("encoder", "decoder", "encoder-decoder", "hybrid")},  # level: not said
            dict.fromkeys(["encoder", "decoder", "encoder-decoder", "hybrid"], same(0.5)),
        ),
        # ahead of the decoder, but not clear of random ranking: not said
        "embed": (
            {"encoder": same(0.05), "decoder": same(0.0), "encoder-decoder": same(0.05), "hybrid": same(0.05)},
            dict.fromkeys(["encoder", "decoder", "encoder-decoder", "hybrid"], 0.1),
        ),
        "verse": (
            {"decoder": same(0.5), "encoder-decoder": same(0.5), "hybrid": same(0.5)},
            dict.fromkeys(["decoder", "encoder-decoder", "hybrid"], same(0.1)),
        ),
        "seq2seq": (
            {"decoder": same(0.5), "encoder-decoder": same(0.5), "hybrid": same(0.5)},
            dict.fromkeys(["decoder", "encoder-decoder", "hybrid"], same(0.1)),
        ),
    }
    e = Evidence(
        rows_of(()),
        gathered,
        {
            "the longest test verse": {
                "decoder": same(5.0, 10),
                "encoder-decoder": same(5.0, 10),
                "hybrid": same(5.0, 10),
            }
        },
    )
    assert [said.split(" (")[0] for said in standing(e, "hybrid")] == [
        "ahead of the encoder at held-out next-token loss",
        "behind the decoder at held-out next-token loss",
        "ahead of the encoder at fill a blank",
        "ahead of the decoder at fill a blank",
        "ahead of the encoder-decoder at fill a blank",
        "ahead of the decoder at punctuation restoration F1 per text",
    ]
    assert best_cell(*gathered["fill"], higher=True) == "**encoder**"  # the hybrid, far ahead, is not in the running


@pytest.mark.slow
def test_demo_trains_the_models_compare_measures(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--seconds", "1", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "the encoder fills a blank" in printed and "the decoder continues a prompt" in printed
    for family, objective in (("encoder", "mlm"), ("decoder", "clm")):
        settings = json.loads((out / family / "config.json").read_text())["settings"]
        assert settings["objective"] == objective
        assert (settings["preset"], settings["d_model"], settings["block_size"]) == (
            DEFAULT.preset,
            DEFAULT.d_model,
            DEFAULT.block_size,
        )
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_replaces_only_a_folder_a_demo_wrote(tmp_path, capsys):
    """`maskwise demo --out runs` would have replaced the user's runs/encoder and runs/decoder without asking."""
    users = tmp_path / "runs"
    (users / "encoder").mkdir(parents=True)
    (users / "encoder" / "config.json").write_text("{}")  # a run folder of the user's
    assert main(["demo", "--seconds", "1", "--out", str(users), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a folder maskwise demo wrote (no demo.json)" in err.splitlines()[-1] and "Traceback" not in err
    assert (users / "encoder" / "config.json").read_text() == "{}"


@pytest.mark.unit
def test_the_pretraining_share_of_the_matmul_peak_is_a_row_where_every_run_has_one():
    from types import SimpleNamespace

    def measured(*shares):
        runs = [{"curve": [{"wall_s": 40.0, **({"share_of_matmul_peak": s} if s is not None else {})}]} for s in shares]
        return SimpleNamespace(
            arms=[Arm("enc", "encoder", {}), Arm("dec", "decoder", {})], runs={WALL: {"enc": runs[:2], "dec": runs[2:]}}
        )

    assert peak_share_row(measured(0.5, 0.3, 0.6, 0.6)) == ["pretraining % of the matmul peak", "40%", "60%", "", ""]
    assert peak_share_row(measured(0.5, None, 0.6, 0.6)) == []  # a run under UTILIZATION_MIN_SECONDS: no row
