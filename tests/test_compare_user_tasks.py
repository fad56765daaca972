"""`maskwise compare` on a user's corpus and task files: every kind end to end, the per-task verdicts and
the claim rule on injected measurements, and every bad file refused in one line before anything is written."""

import json
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maskwise.data.user_tasks import RESERVED, TaskSpec, parse_task
from maskwise.errors import UserError
from maskwise.experiments import compare_study
from maskwise.experiments.arms import StudyOptions
from maskwise.experiments.claims import (
    Evidence,
    Part,
    claim_verdict,
    judge_claim,
    judge_part,
    rows_of,
)
from maskwise.experiments.compare import COMPARE
from maskwise.experiments.compare_plan import BRANCH_OVERHEAD_S, plan_of
from maskwise.experiments.compare_study import time_plan
from maskwise.experiments.eta import Expected, Ledger, step_name
from maskwise.experiments.runner import step_file
from maskwise.experiments.verdict import (
    FALSIFIED,
    HELD,
    INCONCLUSIVE,
    MIXED,
    NOT_MEASURED,
    TOO_FEW,
)
from maskwise.families import FAMILIES
from maskwise.recipes import SMOKE
from maskwise.runtime import resolve
from maskwise.tasks.registry import (
    ENCODER_JOBS,
    GENERATE,
    READ_THEN_WRITE,
    TASKS,
    read_tasks,
)
from maskwise.tasks.unit import Speeds
from tests.test_compare import TINY
from tests.tiny_run import assert_one_line_exit_2, files_in, run_cli

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "while",
    "dogs",
    "ran",
    "far",
    "from",
    "home",
    "and",
    "birds",
    "sang",
    "in",
    "tall",
    "trees",
    "near",
    "quiet",
    "rivers",
]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_task_files(folder):
    """A small file of every kind a --task reads, and a corpus: {kind: path}."""
    rng = random.Random(0)
    folder.mkdir(exist_ok=True)
    files = {
        kind: folder / name
        for kind, name in (
            ("corpus", "corpus.txt"),
            ("classify", "topics.csv"),
            ("tag", "pos.conll"),
            ("embed", "pairs.jsonl"),
            ("seq2seq", "heads.jsonl"),
        )
    }
    files["corpus"].write_text("\n".join(sentence(rng, 20) for _ in range(300)))
    rows = []
    for i in range(300):  # a held-out 10% of 30 items, the fewest a verdict reads
        label = ("calm", "busy")[i % 2]
        rows.append(f'"{sentence(rng, 6)} {"quiet" if label == "calm" else "dogs"}",{label}')
    files["classify"].write_text("text,label\n" + "\n".join(rows) + "\n")
    files["tag"].write_text(
        "\n\n".join(
            "\n".join(f"{w}\t{'DET' if w in ('the', 'a') else 'W'}" for w in sentence(rng, 6).split())
            for _ in range(300)
        )
        + "\n"
    )
    pairs = [sentence(rng, 10) for _ in range(300)]
    files["embed"].write_text("\n".join(json.dumps({"query": " ".join(p.split()[:3]), "positive": p}) for p in pairs))
    heads = [sentence(rng, 12) for _ in range(300)]
    files["seq2seq"].write_text("\n".join(json.dumps({"source": h, "target": " ".join(h.split()[:3])}) for h in heads))
    return files


@pytest.mark.e2e
@pytest.mark.slow
def test_compare_judges_a_task_of_every_kind_from_the_users_files(tmp_path, capsys):
    files = write_task_files(tmp_path / "data")
    config = tmp_path / "tiny.toml"  # the seq2seq task in the config file's form, the others as flags
    config.write_text(TINY + f'\n[[task]]\nname = "heads"\nkind = "seq2seq"\ndata = "{files["seq2seq"]}"\n')
    out = tmp_path / "cmp"
    code, _, err = run_cli(
        capsys,
        "compare",
        "--quick",
        "--config",
        config,
        "--out",
        out,
        "--no-progress",
        "--data",
        files["corpus"],
        "--task",
        f"topics=classify:{files['classify']}",
        "--task",
        f"pos=tag:{files['tag']}",
        "--task",
        f"find=embed:{files['embed']}",
        "--task",
        f"order=rerank:{files['embed']}",
    )
    assert code == 0, err
    assert "plan: 3 columns x 1 seed(s): pretraining 3 s each" in err and "pos.first ~" in err  # said first
    assert "min in all" in err  # the whole command's estimate, at this machine's probed speed
    results = json.loads((out / "results.json").read_text())
    rows = {row[0]: row[1:] for row in results["table"]["rows"]}
    for label in (
        "topics: accuracy (classify)",
        "pos: F1 per text, read at each word's last character (tag)",
        "pos: F1 per text, read at each word's first character (tag)",
        "find: recall@10 (embed, retrieval)",
        "order: nDCG@10 over BM25's top candidates (rerank)",
    ):
        assert f"{label} [95% interval]" in rows, label
    assert "punctuation restoration F1 per text (tagging) [95% interval]" not in rows  # the plays are not read
    heads = [label for label in rows if label.startswith("heads: ROUGE-L, ")]  # by source length, the longest first
    assert heads and heads[0].startswith("heads: ROUGE-L, sources of ") and rows[heads[0]][0].startswith("cannot")
    judged_sources = heads[0].split(", ", 1)[1]
    assert rows[f"heads: token F1, {judged_sources}"][0].startswith("cannot")  # beside ROUGE-L, on the same sources
    timed = [label for label in rows if label.startswith("time to first token, sources of ")]  # per bucket
    assert len(timed) == len(heads) - (len(heads) > 1) and rows[timed[0]][0].startswith("cannot")
    assert "the source's first 3 words" in json.dumps(
        json.loads((out / "steps" / "heads=decoder-seed0.json").read_text())["baseline"]
    )
    verdicts = {v["claim"]: v for v in results["verdicts"]}
    encoder = verdicts[ENCODER_JOBS]["details"]
    judged = [line for line in encoder[1:] if not line.startswith("against the classic method")]
    assert [line.split(":")[0] for line in judged] == ["topics", "pos", "find", "order"]  # none dropped
    beside = [line.split(": ", 1)[1] for line in encoder[1:] if line.startswith("against the classic method")]
    print("\n".join(beside))
    assert [line.split(":")[0] for line in beside] == ["topics", "pos", "find", "order"]  # each task beside it
    assert "TF-IDF word 1-2-grams + logistic regression" in beside[0] and "on whole texts" in beside[0]
    assert "characters a text on average" in beside[0] and "90th percentile" in beside[0]
    assert "each word's most frequent training tag" in beside[1] and "BM25" in beside[2]
    assert "is the classic method a practitioner would try first" in beside[3]  # BM25's order: said, not shown twice
    assert "pos.first" not in json.dumps(results["verdicts"])  # the read-out's other choice: reported, not judged
    tagger = json.loads((out / "fine-tuned" / "pos.first=decoder-seed0" / "config.json").read_text())["task"]
    assert tagger["read_out"] == "first"
    assert encoder[0].startswith(verdicts[ENCODER_JOBS]["verdict"] + ": ")
    assert "heads" in verdicts[READ_THEN_WRITE]["details"][1]
    assert results["settings"]["task_flags"][-1] == f"heads=seq2seq:{files['seq2seq']}"
    assert results["data"]["tasks"][0]["labels"].startswith(("busy", "calm"))
    data_notes = [n for n in results["notes"] if n.startswith(("Data:", "Task "))]
    assert len(data_notes) == 6 and str(files["corpus"]) in data_notes[0] and "sha256" in data_notes[1]
    prompt = results["samples"]["decoder sample (seed 0)"].split()[:4]  # the held-out text's, not Hamlet's
    assert "HAMLET" not in json.dumps(results["samples"]) and all(word in WORDS for word in prompt)
    # Every fine-tune is kept as a run folder: the encoder's classifier exports as its HF task class.
    record = json.loads((out / "steps" / "topics=encoder-seed0.json").read_text())
    assert record["folder"] == "fine-tuned/topics=encoder-seed0"
    code, _, err = run_cli(capsys, "export", out / record["folder"], "--to", "hf", tmp_path / "hf")
    assert code == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "ModernBertForSequenceClassification"
    ]
    assert (out / "fine-tuned" / "heads=encoder-decoder-seed0" / "model.safetensors").is_file()
    # The same folder with other tasks would read steps cached for these: refused, nothing changed.
    before = files_in(out)
    code, _, err = run_cli(
        capsys,
        "compare",
        "--quick",
        "--config",
        config,
        "--out",
        out,
        "--no-progress",
        "--data",
        files["corpus"],
        "--task",
        f"topics=classify:{files['classify']}",
    )
    assert code == 2 and "tasks" in err and files_in(out) == before


@pytest.mark.unit
def test_the_task_flag_reads_name_kind_path_and_options():
    kinds = tuple(TASKS)
    spec = parse_task("sst=classify:train.tsv,test=dev.tsv,text=sentence", kinds)
    assert spec == TaskSpec("sst", "classify", "train.tsv", "dev.tsv", "sentence")
    assert parse_task(spec.flag(), kinds) == spec
    for bad, needle in (
        ("classify:x.jsonl", "expected --task NAME=KIND:PATH"),
        ("a=sort:x.jsonl", "unknown task kind"),
        ("a=tag:x.conll,split=0.2", "not one of test=..."),
        ("a b=tag:x.conll", "letters, digits"),
        ("lm=tag:x.conll", "compare's own measures"),
    ):
        with pytest.raises(UserError, match=needle):
            parse_task(bad, kinds)


@pytest.mark.unit
@pytest.mark.parametrize(
    "outcomes, verdict, said",
    [
        ([("tag", HELD), ("retrieval", HELD)], HELD, "held on tag, retrieval"),
        ([("tag", HELD), ("line order", FALSIFIED)], MIXED, "held on tag; falsified on line order (the decoder ahead)"),
        ([("tag", FALSIFIED), ("line order", INCONCLUSIVE)], FALSIFIED, "falsified on tag"),
        ([("tag", HELD), ("line order", INCONCLUSIVE)], INCONCLUSIVE, "inconclusive on line order"),
        ([], NOT_MEASURED, "no task of this job was given"),
    ],
)
def test_a_claim_is_judged_from_every_one_of_its_tasks(outcomes, verdict, said):
    found, line = claim_verdict(outcomes, "decoder")
    assert found == verdict and said in line


@pytest.mark.unit
def test_injected_measurements_force_each_claims_verdict():
    """The three rules on made-up per-item scores: an undecided task is named, never counted as support."""

    def same(value, n=60):
        return [[value] * n]

    def noisy(mean, n=60):
        rng = random.Random(mean)
        return [[mean + rng.uniform(-0.5, 0.5) for _ in range(n)]]

    fams = ("encoder", "decoder", "encoder-decoder")
    gathered = {
        "next_token": ({"encoder": same(3.0), "decoder": same(1.5)}, dict.fromkeys(fams, same(3.5))),
        "fill": ({f: same(0.5) for f in fams}, dict.fromkeys(fams, same(0.1))),
        "tag": (
            {"encoder": same(0.8), "decoder": same(0.2), "encoder-decoder": same(0.5)},
            dict.fromkeys(fams, same(0.1)),
        ),
        "classify": (
            {"encoder": same(0.55), "decoder": same(0.7), "encoder-decoder": same(0.6)},
            dict.fromkeys(fams, same(0.5)),
        ),
        "embed": (
            {"encoder": noisy(0.3), "decoder": noisy(0.3), "encoder-decoder": noisy(0.3)},
            dict.fromkeys(fams, 0.1),
        ),
        "verse": ({"decoder": same(0.2), "encoder-decoder": same(0.6)}, dict.fromkeys(fams, same(0.1))),
        "seq2seq": ({"decoder": same(0.6), "encoder-decoder": same(0.2)}, dict.fromkeys(fams, same(0.1))),  # reported
    }
    fast = {
        "sources of 0-9 characters": {"decoder": same(9.0, 10), "encoder-decoder": same(9.0, 10)},
        "sources of 10+ characters": {"decoder": same(9.0, 10), "encoder-decoder": same(5.0, 10)},
    }
    e = Evidence(rows_of(()), gathered, fast)
    verdict, details = judge_claim(ENCODER_JOBS, e)
    assert verdict == MIXED and details[0].startswith("mixed: held on punctuation")
    assert "falsified on line order accuracy (classification) (the decoder ahead)" in details[0]
    assert "inconclusive on retrieval recall@10 (ICT)" in details[0]
    assert judge_claim(GENERATE, e)[0] == HELD
    assert judge_claim(READ_THEN_WRITE, e)[0] == HELD
    slow = Evidence(
        rows_of(()),
        gathered,
        {"sources of 10+ characters": {"decoder": same(5.0, 10), "encoder-decoder": same(9.0, 10)}},
    )
    verdict, details = judge_claim(READ_THEN_WRITE, slow)
    assert verdict == MIXED and "time to first token (ms), sources of 10+ characters" in details[0]  # the longest
    no_seq2seq = Evidence(tuple(r for r in rows_of(()) if r.kind != "seq2seq"), gathered, fast)
    assert judge_claim(READ_THEN_WRITE, no_seq2seq)[0] == NOT_MEASURED


def _bad_files(tmp_path):
    """(--task value, the words its one line must hold) for each edge case a user's files can hit."""
    files = write_task_files(tmp_path / "data")
    one_label = tmp_path / "one.jsonl"
    one_label.write_text("\n".join(json.dumps({"text": f"row {i}", "label": "a"}) for i in range(5)))
    unseen = tmp_path / "unseen.jsonl"
    unseen.write_text(json.dumps({"text": "x", "label": "never"}))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    long_target = tmp_path / "long.jsonl"
    long_target.write_text("\n".join(json.dumps({"source": "s", "target": "t" * (n * 400 + 1)}) for n in range(3)))
    columns = tmp_path / "columns.conll"
    columns.write_text("the DT B-NP\ncat NN\n")
    small = tmp_path / "small.csv"  # 40 rows: a held-out 10% of 4 items
    small.write_text("text,label\n" + "".join(f"row {i},{'ab'[i % 4 == 0]}\n" for i in range(40)))
    rare = tmp_path / "rare.csv"  # label b twice in 300 rows: the held-out draw has none
    rare.write_text("text,label\n" + "".join(f"row {i},{'b' if i in (0, 1) else 'a'}\n" for i in range(300)))
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\xe9,a\n".encode("latin-1"))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "a doc"}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a query"}) + "\n")
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td9\t1\n")
    return files, [
        (f"t=classify:{one_label}", "one label"),
        (f"t=classify:{files['classify']},test={unseen}", "'never' (1)"),
        (f"t=classify:{files['classify']},test={empty}", "has no rows"),
        (f"t=classify:{files['classify']},label=topic", "lacks column(s) topic"),
        (f"t=seq2seq:{files['seq2seq']},test={long_target}", "long.jsonl:3 has a target of 801 characters"),
        (f"t=classify:{small}", "leaves 4 test items, fewer than the 30 a verdict needs"),
        (f"t=classify:{rare}", "its test split holds one label ('a')"),
        (f"t=tag:{columns}", "line 2 has 2 columns, line 1 has 3"),
        (f"t=classify:{latin}", "not UTF-8"),
        (f"t=embed:{beir}", "names document 'd9'"),
        (f"t=rerank:{beir}", "names document 'd9'"),
        (f"t=tag:{tmp_path / 'missing.conll'}", "no such file"),
    ]


@pytest.mark.e2e
def test_a_bad_task_file_is_one_line_within_seconds_and_out_is_untouched(tmp_path, capsys):
    files, cases = _bad_files(tmp_path)
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "report.md").write_text("an earlier compare")
    for value, needle in cases:
        started = time.perf_counter()
        assert_one_line_exit_2(
            capsys, ["compare", "--overwrite", "--data", files["corpus"], "--out", out, "--task", value], needle
        )
        assert time.perf_counter() - started < 5
        assert files_in(out) == {out.relative_to(out) / "report.md": b"an earlier compare"}
    twice = f"a=tag:{files['tag']}"
    assert_one_line_exit_2(capsys, ["compare", "--out", out, "--task", twice, "--task", twice], "more than once")


@pytest.mark.unit
def test_imbalanced_labels_are_read_by_balanced_accuracy_chosen_from_the_test_split(tmp_path):
    rows = [{"text": f"t{i}", "label": "rare" if i % 5 == 0 else "common"} for i in range(500)]
    path = tmp_path / "imbalanced.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    [task] = read_tasks([TaskSpec("skew", "classify", str(path))])
    assert task.details["metric"] == "balanced accuracy" and "imbalanced" in task.details["why_metric"]
    [row] = TASKS["classify"].user_rows(task, None)
    # always answering the majority: accuracy 0.8, balanced accuracy 0.5 (its per-item mean)
    from maskwise.tasks.classify import classification_results

    record = classification_results(
        ["common"] * 10, ["rare", "rare", *["common"] * 8], ["common", "rare"], family="encoder", mode="finetune"
    )
    assert row.scored(record.to_json()).scores.score() == pytest.approx(0.5) and record.accuracy == 0.8
    # Fitted for that metric: the fine-tune's loss and the classic method weight the labels.
    assert TASKS["classify"].configure(SMOKE.config_of("classify"), task, 64).balanced


@pytest.mark.unit
def test_a_balanced_accuracy_interval_recomputes_per_label_recalls_and_stays_within_one():
    from maskwise.experiments.intervals import interval
    from maskwise.tasks.classify import ClassifyRow, classification_results

    # 95 common items (all right) and 5 rare ones (all right): every resample's balanced accuracy is exactly 1, where
    # weighting each item once by the whole test set's label shares let a resample with more rare items pass 1.
    gold = ["rare"] * 5 + ["common"] * 95
    record = classification_results(gold, gold, gold, family="encoder", mode="finetune")
    items = ClassifyRow("skew: balanced accuracy (classify)", True, balanced=True).scored(record.to_json()).scores
    assert items is not None and interval([items]).high == pytest.approx(1.0)
    old = interval([record.balanced_correct])
    assert old.high > 1.0  # what the report printed before: [0.861, 1.014] on a spam split


@pytest.mark.unit
def test_test_items_found_verbatim_in_the_pretraining_corpus_are_counted_in_one_warning(tmp_path):
    from maskwise.experiments.compare_plan import plan_of
    from maskwise.recipes import SMOKE

    leak = "a sentence from the corpus that the test split holds too"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(leak + "\n" + "\n".join(f"filler line number {i}" for i in range(200)))
    rows = [{"text": f"training row {i}", "label": "ab"[i % 2]} for i in range(18)]
    path, test = tmp_path / "rows.jsonl", tmp_path / "test.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    test.write_text("\n".join(json.dumps(r) for r in [{"text": leak, "label": "a"}, {"text": "short", "label": "b"}]))
    with pytest.warns(UserWarning, match=r"task t: 1 test item\(s\) occur verbatim"):
        plan_of(str(corpus), [TaskSpec("t", "classify", str(path), str(test))], SMOKE)


@pytest.mark.unit
def test_test_rows_that_a_training_row_holds_too_are_counted_in_one_warning(tmp_path):
    from maskwise.experiments.compare_plan import plan_of
    from maskwise.recipes import SMOKE

    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("\n".join(json.dumps({"text": f"row {i}", "label": "ab"[i % 2]}) for i in range(40)))
    test.write_text(
        "\n".join(
            json.dumps({"text": text, "label": "ab"[i % 2]})
            for i, text in enumerate(["row 3", " row 4 ", "new one", "new two"])
        )
    )
    with pytest.warns(UserWarning, match=r"task t: 2 of its 4 test items have the text of a training row"):
        plan_of("shakespeare", [TaskSpec("t", "classify", str(train), str(test))], SMOKE)


@pytest.mark.unit
def test_the_time_left_is_re_estimated_from_each_measured_step():
    ledger = Ledger(
        [Expected("pretrain", 3, 129.0), Expected("topics", 3, 10.0), Expected("heads", 2, 20.0)],
        progress=False,
        what="compare",
    )
    assert ledger.remaining() == 3 * 129 + 3 * 10 + 2 * 20
    ledger.finished("pretrain-encoder-seed0", 131.0)
    ledger.finished("pretrain-decoder-seed0", 0.0, reused=True)  # an earlier invocation's: done, not timed
    ledger.finished("measures-encoder-seed0", 99.0)  # not a kind of step the plan counts: ignored
    assert ledger.remaining() == 131 + 3 * 10 + 2 * 20
    ledger.finished("topics=encoder-seed0", 30.0)  # three times its estimate: heads, not yet run, scaled alike
    assert ledger.remaining() == pytest.approx(131 + 2 * 30 + 2 * 20 * 3)
    assert ledger.kind_of("heads=decoder-seed0") == "heads" and ledger.kind_of("headsx=decoder-seed0") is None


@pytest.mark.unit
def test_a_budget_the_users_tasks_would_overrun_shortens_pretraining_to_fit(tmp_path, monkeypatch):
    files = write_task_files(tmp_path / "data")
    s = replace(SMOKE, seconds=100.0, minutes=10.0)
    plan = plan_of(str(files["corpus"]), [parse_task(f"topics=classify:{files['classify']}", tuple(TASKS))], s)

    def timed(speeds: Speeds):
        monkeypatch.setattr(compare_study, "probe", lambda settings, runtime: speeds)
        timing = time_plan(COMPARE, plan, s, 1, resolve("cpu", "fp32"))
        assert timing.total == pytest.approx(sum(e.count * e.seconds for e in timing.expected))
        return timing

    unit = sum(e.count * e.seconds for e in timed(Speeds(1.0, 1.0, 1.0, 128, 64)).expected if e.prefix == "topics")
    cheap, dear = timed(Speeds(1e-9, 1e-9, 0.0, 128, 64)), timed(Speeds(*[350 / unit] * 3, 128, 64))
    assert (cheap.settings.seconds, cheap.fitted_from) == (100, None)  # fits: the scale's clock
    assert dear.fitted_from == 100 and 50 < dear.settings.seconds < 100  # shortened to fit
    assert dear.total <= 600 + 3 and "shortened from the scale's 100 s" in dear.text(FAMILIES, 1)
    assert "over the 10-minute budget" not in dear.text(FAMILIES, 1)
    dearest = timed(Speeds(1.0, 1.0, 1.0, 128, 64))
    assert dearest.settings.seconds == 50  # never below half the scale's clock, however dear the fine-tunes
    assert "over the 10-minute budget even with pretraining at its floor (50%" in dearest.text(FAMILIES, 1)
    unfitted = time_plan(
        COMPARE, plan, s, 1, resolve("cpu", "fp32"), fit=False, options=StudyOptions(families=FAMILIES)
    )
    assert unfitted.settings.seconds == 100  # --seconds given: the user's clock


@pytest.mark.unit
def test_the_ladder_adds_its_points_to_the_plan_and_never_shortens_the_clock_for_them(tmp_path, monkeypatch):
    files = write_task_files(tmp_path / "data")
    task = [parse_task(f"topics=classify:{files['classify']}", tuple(TASKS))]
    monkeypatch.setattr(compare_study, "probe", lambda settings, runtime: Speeds(1e-5, 1e-5, 0.0, 128, 64))

    def timed(ladder: tuple[float, ...]):
        s = replace(SMOKE, seconds=100.0, minutes=10.0, ladder=ladder)
        return time_plan(COMPARE, plan_of(str(files["corpus"]), task, s), s, 1, resolve("cpu", "fp32"))

    one, three = timed((1.0,)), timed((0.25, 0.5, 1.0))
    counts = {e.prefix: e.count for e in three.expected}
    assert {e.prefix: e.count for e in one.expected}["topics"] * 3 == counts["topics"]  # every point fine-tuned
    assert counts["cooldown"] == 2 * 3 and "cooldown" not in {e.prefix for e in one.expected}
    cooldown = next(e for e in three.expected if e.prefix == "cooldown")
    assert cooldown.seconds == pytest.approx(0.2 * (25 + 50) / 2 + BRANCH_OVERHEAD_S)  # a fifth of each point's clock
    assert three.settings.seconds == one.settings.seconds  # the ladder's cost is added, never fitted away
    assert three.total - three.ladder_s == pytest.approx(one.total)
    assert "measured at 3 points of that clock (25, 50, 100 s)" in three.text(FAMILIES, 1)
    with pytest.raises(UserError, match="ladder must be ascending fractions"):
        SMOKE.overridden({"ladder": [0.5, 0.25, 1.0]}, "compare config")
    with pytest.raises(UserError, match="ending at 1"):
        SMOKE.overridden({"ladder": [0.25, 0.5]}, "compare config")


NAME_CHARACTERS = "ab-_.=%ed0"  # the separator, the quoting's escape, '-' and '.' among them


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(NAME_CHARACTERS, min_size=1, max_size=8),
            st.text(NAME_CHARACTERS, min_size=1, max_size=8),
            st.integers(0, 12),
        ),
        min_size=2,
        max_size=6,
        unique=True,
    )
)
def test_step_and_folder_names_are_one_to_one_with_task_column_and_seed(triples):
    names = {step_name(task, f"{column}-seed{seed}") for task, column, seed in triples}
    assert len(names) == len(triples)
    paths = {step_file(Path("x"), name) for name in names}
    assert len(paths) == len(triples)


@pytest.mark.unit
def test_the_collision_of_the_issue_gets_two_names():
    assert step_name("x", "encoder-decoder-seed0") != step_name("x-encoder", "decoder-seed0")
    assert step_name("a-b", "c-seed0") != step_name("a", "b-c-seed0")


@pytest.mark.unit
@pytest.mark.parametrize("name", RESERVED)
def test_every_internal_step_name_is_refused_as_a_task_or_model_name(name):
    from maskwise.experiments.checkpoints import parse_model

    with pytest.raises(UserError, match="choose another"):
        parse_task(f"{name}=classify:rows.csv", tuple(TASKS))
    with pytest.raises(UserError, match="choose another"):
        parse_model(f"{name}=some/folder")


@pytest.mark.e2e
def test_overwrite_with_a_bad_corpus_leaves_the_earlier_compare_byte_for_byte(tmp_path, capsys):
    out = tmp_path / "OLD"
    (out / "steps").mkdir(parents=True)
    (out / "experiment.json").write_text('{"created": 1}')
    (out / "steps" / "compare.json").write_text('{"settings": {}}')
    (out / "report.md").write_text("an earlier compare")
    (out / "fine-tuned" / "t=encoder-seed0").mkdir(parents=True)
    (out / "fine-tuned" / "t=encoder-seed0" / "model.safetensors").write_bytes(b"\x00weights")
    before = files_in(out)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps({"text": f"document {i}"}) for i in range(3000)) + "\n{not json\n")
    started = time.perf_counter()
    assert_one_line_exit_2(capsys, ["compare", "--quick", "--data", bad, "--out", out, "--overwrite"], "3001")
    assert time.perf_counter() - started < 10
    assert files_in(out) == before


def _part(n: int, gap: float, noise: float = 0.0, seed: int = 0) -> Part:
    rng = random.Random(seed)
    base = [rng.random() for _ in range(n)]
    return Part("t", [[x + gap + rng.gauss(0, noise) for x in base]], [base], True, None)


@pytest.mark.unit
def test_a_task_with_too_few_test_items_is_never_held_or_falsified():
    outcome, line = judge_part(_part(29, 0.5))  # far apart, but 29 items
    assert outcome == TOO_FEW and "29 test items, fewer than the 30" in line
    assert judge_part(_part(30, 0.5))[0] == HELD
    assert judge_part(_part(29, -0.5))[0] == TOO_FEW
    one = Part("t", [[1.0]], [[0.0]], True, None)  # one right answer against one wrong one
    assert judge_part(one)[0] == TOO_FEW
    labelled = _part(300, 0.5)._replace(too_few="its test split holds one label ('a')")
    assert judge_part(labelled) == (TOO_FEW, judge_part(labelled)[1]) and "one label" in judge_part(labelled)[1]
    verdict, said = claim_verdict([("a", TOO_FEW), ("b", TOO_FEW)], "decoder")
    assert verdict == TOO_FEW
    assert claim_verdict([("a", HELD), ("b", TOO_FEW)], "decoder")[0] == INCONCLUSIVE  # held needs every task


@pytest.mark.unit
def test_an_undecided_task_says_how_many_test_items_its_difference_would_need():
    outcome, line = judge_part(_part(100, 0.02, noise=0.3))
    assert outcome == INCONCLUSIVE
    needed = int(line.split("would need about ")[1].split(" test items")[0].replace(",", ""))
    assert needed > 100 and "(has 100)" in line
    # at that many items, the same effect separates
    assert judge_part(_part(needed * 2, 0.02, noise=0.3, seed=1))[0] == HELD


@pytest.mark.unit
def test_the_classic_method_for_balanced_accuracy_weights_classes_and_chooses_c_by_cross_validation():
    from sklearn.metrics import balanced_accuracy_score

    from maskwise.tasks.classic import tfidf_logistic_regression

    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(300)]

    def text(rare: bool) -> str:  # a rare label marked by one word in 9 texts of 10, 1 in 50 of the common ones
        words = [rng.choice(vocab) for _ in range(12)]
        if rng.random() < (0.9 if rare else 0.02):
            words[rng.randrange(12)] = "prize"
        return " ".join(words)

    def rows(n: int) -> list[tuple[str, str]]:
        return [(text(rare), "spam" if rare else "ham") for rare in (rng.random() < 0.06 for _ in range(n))]

    train, test = rows(600), rows(600)
    gold = [label for _, label in test]

    def scored(balanced: bool) -> float:
        predicted = tfidf_logistic_regression(
            [t for t, _ in train], [y for _, y in train], [t for t, _ in test], balanced
        )
        return balanced_accuracy_score(gold, predicted)

    assert scored(False) == 0.5  # unweighted, every C answers the majority: what the report compared with before
    assert scored(True) > 0.8
