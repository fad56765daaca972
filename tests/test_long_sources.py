"""Read-then-write on a user's sources longer than the pretrained context: compare's window holds them whole up to
``Seq2SeqConfig.source_cap``, a body with rotary positions reads past its pretrained context to hold them, a body
with a learned position table reads their start and says so, and longer sources are reported apart, never judged."""

import json
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from maskwise.config import preset
from maskwise.data.corpus import load_corpus
from maskwise.data.tokenizers import build_tokenizer
from maskwise.data.user_tasks import TaskSpec
from maskwise.experiments import compare_study
from maskwise.experiments.compare import COMPARE
from maskwise.experiments.compare_plan import plan_of
from maskwise.experiments.compare_study import fitted, time_plan
from maskwise.model.positions import extend_context
from maskwise.model.transformer import build_model
from maskwise.recipes import SMOKE
from maskwise.runtime import resolve
from maskwise.tasks.reading import config_of
from maskwise.tasks.registry import TASKS
from maskwise.tasks.run import run_task
from maskwise.tasks.seq2seq import Seq2SeqConfig
from maskwise.tasks.unit import Speeds

WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "from", "home", "and", "birds", "sang"]


@pytest.fixture(scope="module")
def tokenizer(small_text):
    return build_tokenizer("char", load_corpus(str(small_text)))


def tiny(family: str, tokenizer, name: str = "modernbert", context: int = 32):
    torch.manual_seed(0)
    return build_model(
        preset(
            name, vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=2, max_seq_len=context, family=family
        )
    )


@pytest.fixture
def long_task(tmp_path):
    """Sources of 40 to 120 characters, each target the source's first two words; 32 of them held out."""
    rng = random.Random(0)
    rows = []
    for i in range(320):
        source = " ".join(rng.choice(WORDS) for _ in range(40))[: 40 + (i % 9) * 10].strip()
        rows.append({"source": source, "target": " ".join(source.split()[:2])})
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return TASKS["seq2seq"].read(TaskSpec("long", "seq2seq", str(path)))


@pytest.mark.unit
def test_rotary_positions_extend_and_a_learned_table_does_not(tokenizer):
    rotary, learned = tiny("decoder", tokenizer), tiny("decoder", tokenizer, "gpt2")
    assert extend_context(rotary, 100) == 68 and all(
        m.cfg.max_seq_len == 100 for m in rotary.modules() if hasattr(m, "cfg")
    )
    rotary(torch.randint(10, 40, (1, 100)))  # reads 100 positions now
    assert extend_context(learned, 100) == 0 and learned.cfg.max_seq_len == 32
    assert extend_context(rotary, 50) == 0  # already holds it


@pytest.mark.unit
def test_the_window_holds_the_longest_source_up_to_the_cap(long_task):
    seq2seq = TASKS["seq2seq"]
    whole = seq2seq.configure(Seq2SeqConfig(), long_task, context=32)
    longest = max(len(e.source) for e in [*long_task.train, *long_task.test])
    assert whole.max_chars == longest > 32  # not the smallest context's 30 characters
    labels = [row.label for row in seq2seq.user_rows(long_task, whole)]
    assert labels[0].startswith("long: ROUGE-L, sources of ") and labels[0].endswith("+ characters (seq2seq)")
    assert [label.split(",")[0] for label in labels[1:4]] == ["long: token F1", "long: ROUGE-1", "long: ROUGE-2"]
    assert not any("read to their first" in label for label in labels)
    capped = seq2seq.configure(Seq2SeqConfig(source_cap=80), long_task, context=32)
    assert capped.max_chars == 80 and max(capped.source_edges) <= 80
    labels = [row.label for row in seq2seq.user_rows(long_task, capped)]
    assert "long: ROUGE-L, sources over 80 characters, read to their first 80 (seq2seq)" in labels
    assert labels[0].endswith("-80 characters (seq2seq)")  # judged: the longest sources read whole


@pytest.mark.integration
@pytest.mark.parametrize("family", ["decoder", "encoder-decoder"])
def test_a_rotary_body_reads_every_source_whole_past_its_pretrained_context(tokenizer, long_task, family):
    seq2seq = TASKS["seq2seq"]
    cfg = seq2seq.configure(Seq2SeqConfig(steps=2, batch_size=4, progress=False), long_task, context=32)
    record = run_task(
        cfg, tiny(family, tokenizer), tokenizer, resolve("cpu", "fp32"), seq2seq.run_data(long_task, cfg)
    ).record
    assert record.chars_read == record.source_chars  # every character of every source
    target_room = 0 if family == "encoder-decoder" else cfg.max_target_len + 2
    assert (
        record.positions_past_pretrained
        == max(map(len, tokenizer.encode_batch([e.source for e in [*long_task.train, *long_task.test]])))
        + target_room
        - 32
    )


@pytest.mark.integration
def test_a_learned_position_table_reads_the_start_and_says_so(tokenizer, long_task):
    seq2seq = TASKS["seq2seq"]
    cfg = seq2seq.configure(Seq2SeqConfig(steps=2, batch_size=4, progress=False), long_task, context=32)
    record = run_task(
        cfg,
        tiny("encoder-decoder", tokenizer, "t5", context=32),
        tokenizer,
        resolve("cpu", "fp32"),
        seq2seq.run_data(long_task, cfg),
    ).record
    assert record.positions_past_pretrained > 0  # T5's relative buckets hold any length
    gpt2 = run_task(
        cfg,
        tiny("decoder", tokenizer, "gpt2", context=48),
        tokenizer,
        resolve("cpu", "fp32"),
        seq2seq.run_data(long_task, cfg),
    ).record
    assert gpt2.positions_past_pretrained == 0
    room = 48 - cfg.max_target_len - 2  # what its table holds beside the target
    assert max(gpt2.chars_read) == room < max(gpt2.source_chars)


@pytest.mark.unit
def test_no_source_read_whole_is_judged_on_all_of_them_cut_and_says_the_trend_was_not_measured(long_task):
    seq2seq = TASKS["seq2seq"]
    cfg = seq2seq.configure(Seq2SeqConfig(source_cap=30), long_task, context=32)
    labels = [row.label for row in seq2seq.user_rows(long_task, cfg)]
    cut = "all sources, cut at 30 characters (the trend by source length not measured) (seq2seq)"
    assert labels == [f"long: {metric}, {cut}" for metric in ("ROUGE-L", "token F1", "ROUGE-1", "ROUGE-2")]
    assert "the trend by source length is not measured" in seq2seq.reading(cfg, long_task, 32)


@pytest.mark.integration
@pytest.mark.parametrize("minutes", [1e-4, 1e6])
def test_compare_narrows_a_window_its_budget_cannot_afford_and_says_why(tmp_path, long_task, monkeypatch, minutes):
    monkeypatch.setattr(compare_study, "probe", lambda *args, **kwargs: Speeds(1e-5, 1e-5, 1e-4, 128, 64))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS) for _ in range(200)))
    s = SMOKE.retuned("smoke", minutes=minutes)
    plan = plan_of(str(corpus), [long_task.spec], s)  # smoke: block 64, the encoder-decoder's half 32
    window = plan.configs["long"].max_chars
    narrowed, timing = fitted(COMPARE, plan, s, 1, resolve("cpu", "fp32"))
    if minutes > 1:  # affordable: read as configured
        assert narrowed.configs["long"].max_chars == window > 30 and not narrowed.narrowed
        return
    assert narrowed.configs["long"].max_chars == 30  # down to the smallest pretrained context, and no further
    assert narrowed.narrowed.startswith("Read less to fit the 0.0001-minute budget: the time plan estimated about")
    described = narrowed.described["tasks"][0]["window"]
    assert "is longer than the 30 read" in described or "read whole up to 30 characters" in described
    assert timing.total < time_plan(COMPARE, plan, s, 1, resolve("cpu", "fp32")).total


@pytest.mark.integration
def test_the_first_token_is_timed_on_sources_read_as_far_as_the_fine_tunes_read_them(tmp_path, tokenizer, long_task):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS) for _ in range(200)))
    plan = plan_of(str(corpus), [long_task.spec], SMOKE)
    models = {f: tiny(f, tokenizer) for f in ("decoder", "encoder-decoder")}  # 32 positions pretrained, rotary

    class Runs:  # the two things of an experiment the timing reads
        def load(self, run):
            return SimpleNamespace(model=models[run], tokenizer=tokenizer)

        def kind(self, run):
            return config_of(models[run]).kind

    timed = compare_study.time_to_first_token(Runs(), {f: f for f in models}, replace(SMOKE, ttft_repeats=1), plan)
    longest = timed["buckets"][-1]
    assert longest["source_tokens"] > 32 and set(longest["seconds"]) == set(models)  # past the pretrained context
