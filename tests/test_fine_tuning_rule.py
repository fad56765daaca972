"""The one fine-tuning rule (``finetune.FINE_TUNING``): every body sees each training row as often, only the batch and
the rates follow its origin, and a budget draws fewer rows rather than fewer epochs."""

import math

import pytest

from maskwise.config import preset
from maskwise.data.corpus import load_corpus
from maskwise.data.tagging import TaggedText
from maskwise.data.tokenizers import build_tokenizer
from maskwise.data.user_tasks import TaskSpec
from maskwise.experiments.claims import plays_fine_tunes
from maskwise.experiments.compare_plan import plan_of
from maskwise.experiments.compare_report import data_notes
from maskwise.model.transformer import build_model
from maskwise.recipes import COMPARE_SCALES, QUICK
from maskwise.runtime import resolve
from maskwise.tasks.classify import ClassifyConfig
from maskwise.tasks.finetune import FINE_TUNING
from maskwise.tasks.registry import TASKS
from maskwise.tasks.tag import TagConfig
from maskwise.tasks.unit import DrawnRows, every_row


@pytest.mark.unit
@pytest.mark.parametrize("config", [ClassifyConfig(batch_size=32), TagConfig(batch_size=16)])
@pytest.mark.parametrize("rows", [7, 100, 1001])
def test_both_origins_see_each_row_equally_often_and_differ_only_by_the_stated_rates(config, rows):
    pretrained = FINE_TUNING.applied(config, rows, pretrained=True)
    scratch = FINE_TUNING.applied(config, rows, pretrained=False)
    for cfg in (pretrained, scratch):  # epochs over the rows, each pass's last batch kept
        assert cfg.steps == math.ceil(FINE_TUNING.epochs * math.ceil(rows / cfg.batch_size))
        assert (cfg.warmup, cfg.weight_decay) == (FINE_TUNING.warmup, FINE_TUNING.weight_decay)
    assert (pretrained.batch_size, pretrained.lr, pretrained.head_lr) == (8, 5e-5, 5e-5)
    assert (scratch.batch_size, scratch.lr, scratch.head_lr) == (config.batch_size, 1e-3, 3e-3)
    assert scratch.lr == 20 * pretrained.lr  # the stated rule: 20x the rate for a body pretrained for minutes
    unchanged = {"seed", "precision", "data_seed", "test_seed", "max_train_rows", "plays_task", "window_chars"}
    for name in unchanged & set(vars(config)):
        assert getattr(pretrained, name) == getattr(scratch, name) == getattr(config, name)


@pytest.mark.unit
def test_a_budget_of_steps_affords_the_rows_its_epochs_fit():
    assert FINE_TUNING.rows_within(300, 16) == 1600
    assert FINE_TUNING.steps(FINE_TUNING.rows_within(300, 16), 16) == 300
    assert FINE_TUNING.steps(FINE_TUNING.rows_within(189, 32), 32) <= 189


@pytest.mark.integration
@pytest.mark.parametrize("scale", sorted(COMPARE_SCALES))
def test_every_scale_draws_no_more_plays_rows_than_its_budget_affords(scale):
    """A scale's fine-tune ``steps`` is its budget: the plays' rows are as many as the rule's epochs fit in it, so that
    the rule's steps never pass it (and a user's task is drawn down to the same count)."""
    s = COMPARE_SCALES[scale]
    for key, kind in plays_fine_tunes().items():
        cfg = s.config_of(key)
        rows = TASKS[kind].training_rows(cfg, None)
        assert rows <= FINE_TUNING.rows_within(cfg.steps, cfg.batch_size), (scale, key, rows)
        assert FINE_TUNING.applied(cfg, rows, pretrained=False).steps <= cfg.steps


@pytest.mark.unit
def test_a_users_rows_past_the_budget_are_drawn_down_and_the_report_says_so(tmp_path, small_text):
    data = tmp_path / "rows.csv"
    data.write_text("text,label\n" + "".join(f"text number {i},{'ab'[i % 2]}\n" for i in range(1000)))
    spec = TaskSpec("t", "classify", str(data))
    own = plan_of(str(small_text), [spec], QUICK)  # compare's own bodies: budgeted
    cfg = own.configs["t"]
    budget = FINE_TUNING.rows_within(QUICK.config_of("classify").steps, cfg.batch_size)
    assert cfg.max_train_rows == budget < own.tasks[0].train_rows
    assert own.training["t"] == budget
    tuned = own.for_model("encoder", "t", cfg)
    assert tuned.steps == FINE_TUNING.steps(budget, cfg.batch_size) <= QUICK.config_of("classify").steps
    train, _ = TASKS["classify"].user_data(own.tasks[0], cfg)
    again, _ = TASKS["classify"].user_data(own.tasks[0], cfg)
    assert len(train) == budget and train == again  # drawn by the seed, the same draw for every family
    assert train != own.tasks[0].train[:budget]  # drawn, not the first rows
    assert own.described["tasks"][0]["drawn"].startswith(f"{budget:,} of its {own.tasks[0].train_rows:,} training")
    assert train.whole == own.tasks[0].train and every_row(train) == own.tasks[0].train  # the classic fits them all
    assert "drawn:" in " ".join(data_notes(own.described))  # the report says so


@pytest.mark.integration
def test_the_classic_method_fits_every_row_where_the_families_fit_the_drawn_ones(small_text):
    """A tag task drawn down to 4 of its sentences: the tagger trains on those, the word-lookup fits all of them."""
    rows = [TaggedText((f"w{i}", "x"), ("A" if i < 4 else "B", "O"), (" ", "")) for i in range(8)]
    task = TASKS["tag"]
    drawn = DrawnRows(rows[:4], rows)
    cfg = TagConfig(steps=1, batch_size=2, progress=False, precision="fp32", window_chars=40)
    tokenizer = build_tokenizer("char", load_corpus(str(small_text)))
    model = build_model(
        preset("bert", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2, max_seq_len=32)
    )
    test = [TaggedText(("w6", "x"), ("B", "O"), (" ", ""))]
    _, evaluate, _ = task.run(model, tokenizer, cfg, resolve("cpu", "fp32"), (drawn, test), "m")
    record = evaluate()
    assert record.classic is not None and record.classic.micro.f1 == 1.0  # "w6" -> B, learned from an undrawn row
