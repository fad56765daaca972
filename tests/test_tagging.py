"""Token classification: the plays' punctuation task, user files, the word -> token alignment, the
scores against hand-computed values, and one tiny run per family through the library."""

import json
import random
from types import SimpleNamespace

import pytest
import torch

from maskwise.data.corpus import load_corpus
from maskwise.data.tagging import (
    OUTSIDE,
    TaggedText,
    punctuated_words,
    punctuation_examples,
    rejoined,
    tagged_from_file,
    windows_of,
)
from maskwise.data.tokenizers import build_tokenizer
from maskwise.data.user_tasks import TaskSpec
from maskwise.errors import UserError
from maskwise.tasks.metrics import tag_scores
from maskwise.tasks.registry import TASKS, read_tasks
from maskwise.tasks.tag import (
    TagConfig,
    TokenTagger,
    evaluate_tagger,
    predict_tags,
    tag_counts,
    tagging_results,
    train_tagger,
    word_positions,
)
from tests.test_tasks_library import tiny


@pytest.fixture(scope="module")
def tokenizer(small_text):
    return build_tokenizer("char", load_corpus(str(small_text)))


@pytest.mark.unit
def test_each_word_is_tagged_with_the_mark_that_followed_it():
    words, tags, separators = punctuated_words("Good morrow, Benedick.\nHow now?! -- what's this; a.b. sir,-- 'end.'")
    assert words == ["Good", "morrow", "Benedick", "How", "now", "--", "what's", "this", "a.b", "sir--", "'end'"]
    assert tags == ["O", ",", ".", "O", "?", "O", "O", ";", ".", ",", "."]  # the first of several; quotes stay
    assert separators[2] == "\n" and set(separators) - {"\n"} == {" "}


@pytest.mark.unit
def test_play_windows_are_whole_words_split_by_play_and_many():
    test = punctuation_examples("test", max_chars=120)
    train_sources = {e.source.split(":")[0] for e in punctuation_examples("train", max_chars=120, limit=200)}
    assert len(test) >= 1000 and not train_sources & {e.source.split(":")[0] for e in test}
    assert all(len(e.text) <= 120 or len(e.words) == 1 for e in test)
    words = [w for e in test for w in e.words]  # the marks are the answers: none left but inside fused words
    assert sum(any(c in w for c in ",.;:!?") for w in words) < len(words) / 1000
    assert {t for e in test for t in e.tags} == {OUTSIDE, ",", ".", ";", ":", "!", "?"}
    assert punctuation_examples("test", 120, limit=50, seed=1) == punctuation_examples("test", 120, limit=50, seed=1)


@pytest.mark.unit
def test_a_word_is_read_at_its_last_token_after_the_frame(tokenizer):
    example = TaggedText(("To", "be", "or"), ("O", ",", "O"), (" ", " ", " "))
    assert example.text == "To be or" and example.word_ends() == [2, 5, 8]
    ids, where = word_positions(tokenizer, example, "decoder", 64)
    assert ids == tokenizer.encode("To be or") and where == [1, 4, 7]  # characters: one token each
    ids, where = word_positions(tokenizer, example, "encoder", 64)
    assert ids[0] == tokenizer.cls_id and where == [2, 5, 8]  # [CLS] shifts every position by one
    _, where = word_positions(tokenizer, example, "decoder", 6)
    assert where == [1, 4, -1]  # the cut leaves the last word unread
    _, where = word_positions(tokenizer, example, "decoder", 64, read_out="first")
    assert where == [0, 3, 6]  # each word's first character: "T", "b", "o"
    _, where = word_positions(tokenizer, example, "encoder", 64, read_out="first")
    assert where == [1, 4, 7]


@pytest.mark.unit
def test_a_saved_taggers_read_out_is_kept_and_checked(tokenizer):
    body = tiny("encoder", tokenizer)
    head = TokenTagger(body, ["O", ","]).head.state_dict()
    assert TokenTagger.from_fine_tune(body, {"tags": ["O", ","]}, head, "old").read_out == "last"  # before it was kept
    assert TokenTagger.from_fine_tune(body, {"tags": ["O", ","], "read_out": "first"}, head, "f").read_out == "first"
    with pytest.raises(UserError, match="reads words at 'middle'"):
        TokenTagger.from_fine_tune(body, {"tags": ["O", ","], "read_out": "middle"}, head, "damaged")
    with pytest.raises(UserError, match="read_out must be one of last, first"):
        TagConfig(read_out="middle").validate()


@pytest.mark.unit
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_a_tagger_reads_the_words_positions_alone_as_it_reads_every_one(tokenizer, family, monkeypatch):
    from maskwise.model import heads

    tagger = TokenTagger(tiny(family, tokenizer), ["O", ",", "."]).eval()
    examples = punctuation_examples("test", max_chars=60, limit=6)
    widths = []
    stack = tagger.body.stack
    stack.blocks[-1].ffn.register_forward_hook(lambda m, inputs, out: widths.append(inputs[0].shape[1]))
    ids = torch.randint(5, tokenizer.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    labels = torch.full(ids.shape, -100)
    labels[0, [3, 9]], labels[1, [4]] = torch.tensor([1, 2]), 0
    with torch.no_grad():
        some = (tagger.labelled_logits(ids, mask, labels), predict_tags(tagger, tokenizer, examples))
        monkeypatch.setattr(heads, "READ_LABELLED_SHARE", 0.0)  # every position read
        every = (tagger.labelled_logits(ids, mask, labels), predict_tags(tagger, tokenizer, examples))
    assert widths[0] == 2 and widths[1] < widths[3]  # the words' positions alone, then every one
    torch.testing.assert_close(some[0][0], every[0][0], rtol=1e-5, atol=1e-5)
    assert torch.equal(some[0][1], every[0][1]) and some[0][1].tolist() == [1, 2, 0]
    assert some[1] == every[1]


@pytest.mark.unit
def test_tag_scores_match_hand_counts():
    gold = [",", ",", "O", ".", "O", "O"]
    predicted = [",", ".", ".", ".", "O", ","]
    scores = tag_scores(predicted, gold, OUTSIDE)
    # ",": 1 right of 2 predicted, 2 gold; ".": 1 right of 3 predicted, 1 gold; micro 2 right of 5 predicted, 3 gold
    assert scores["per_tag"][","] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert scores["per_tag"]["."]["f1"] == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert scores["micro"]["f1"] == pytest.approx(2 * 0.4 * (2 / 3) / (0.4 + 2 / 3))
    assert scores["macro_f1"] == pytest.approx((0.5 + 0.5) / 2)
    assert scores["detection"]["precision"] == pytest.approx(3 / 5) and scores["detection"]["recall"] == 1.0


@pytest.mark.unit
def test_user_files_in_conll_and_jsonl(tmp_path):
    conll = tmp_path / "ner.conll"
    conll.write_text("-DOCSTART- O\n\nJohn B-PER\nlives O\nin O\nParis B-LOC\n\nHi O\n", encoding="utf-8")
    rows = tagged_from_file(conll)
    assert [r.words for r in rows] == [("John", "lives", "in", "Paris"), ("Hi",)]
    assert rows[0].tags == ("B-PER", "O", "O", "B-LOC") and rows[0].source == "ner.conll:3"
    jsonl = tmp_path / "ner.jsonl"
    jsonl.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O", "X"]}) + "\n\n", encoding="utf-8")
    assert tagged_from_file(jsonl)[0].tags == ("O", "X")


@pytest.mark.unit
@pytest.mark.parametrize(
    "name, text, message",
    [
        ("bad.conll", "John B-PER\nlonely\n", "line 2 has one column"),
        ("bad.jsonl", '{"tokens": ["a"], "tags": ["O", "O"]}\n', "line 1 has 1 tokens but 2 tags"),
        ("bad.jsonl", '{"tokens": ["a b"], "tags": ["O"]}\n', "line 1 needs 'tokens' and 'tags'"),
        ("bad.jsonl", "{not json\n", "line 1 is not valid JSON"),
        pytest.param(
            "deep.jsonl", "[" * 100_000 + "\n", "line 1 is not valid JSON", id="nested-past-the-recursion-limit"
        ),
        ("list.jsonl", '["a", "O"]\n', "line 1 is not a JSON object \\(need 'tokens' and 'tags'\\)"),
        ("empty.conll", "\n\n", "has no sentences"),
    ],
)
def test_bad_tagging_files_are_one_line_errors(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        tagged_from_file(path)


def _conll(path, sentences: list[tuple[str, str]]) -> None:
    """Write (words, tags) sentences as CoNLL lines, a blank line between sentences."""
    lines = ("\n".join(f"{w}\t{t}" for w, t in zip(words.split(), tags.split())) for words, tags in sentences)
    path.write_text("\n\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.unit
def test_a_bilou_file_is_scored_by_bilou_rules_decided_when_it_is_read(tmp_path):
    path = tmp_path / "bilou.conll"
    _conll(path, [("Ann Lee met Bob Ray", "B-PER L-PER O B-PER L-PER"), ("Ann came", "U-PER O")] * 200)
    [task] = read_tasks([TaskSpec("t", "tag", str(path))])
    assert task.details["scheme"] == "BILOU" and "strict" in task.details["why_metric"]
    [row] = TASKS["tag"].user_rows(task, TASKS["tag"].config())
    assert row.label.startswith("t: entity F1 pooled over the test set (BILOU, seqeval strict)")
    # the record's counts by the same rules: two names where two are (CoNLL's rules, knowing no L, found one)
    test = task.test
    record = tagging_results([list(e.tags) for e in test], test, tag_counts(task.train), "encoder", ["O"])
    assert record.per_example.entities == [[2, 2, 2] if len(e.words) == 5 else [1, 1, 1] for e in test]
    assert record.entity == {"precision": 1.0, "recall": 1.0, "f1": 1.0}


@pytest.mark.e2e
def test_a_tag_file_whose_span_scheme_cannot_be_checked_is_refused_in_one_line(small_text, tmp_path, capsys):
    from tests.tiny_run import assert_one_line_exit_2

    mixed = tmp_path / "mixed.conll"
    _conll(mixed, [("Ann Lee met Bob", "B-PER E-PER O U-PER")] * 20)  # IOBES's E- beside BILOU's U-
    command = ["compare", "--data", small_text, "--out", tmp_path / "cmp", "--task", f"t=tag:{mixed}"]
    assert_one_line_exit_2(capsys, command, "task t: tags B-PER, E-PER, U-PER fit no one span scheme")
    assert not (tmp_path / "cmp").exists()


@pytest.mark.integration
@pytest.mark.precision("fp32")
@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder-decoder"])
def test_tag_end_to_end(tokenizer, family):
    train = punctuation_examples("train", 60, limit=16)
    test = punctuation_examples("test", 60, limit=6)
    tagger = train_tagger(tiny(family, tokenizer), tokenizer, train, TagConfig(steps=2, batch_size=4, progress=False))
    assert tagger.tags[0] == OUTSIDE and len(tagger.tags) >= 2
    ids = torch.tensor([tokenizer.encode("To be or not")])
    assert tagger(ids, torch.ones_like(ids)).shape == (1, ids.shape[1], len(tagger.tags))
    predicted, truncated = predict_tags(tagger, tokenizer, test)
    assert [len(p) for p in predicted] == [len(e.words) for e in test] and truncated == 0
    result = evaluate_tagger(tagger, tokenizer, test, tag_counts(train))
    flat = [t for row in predicted for t in row]
    assert result.n_words == len(flat) and result.family == family
    assert result.micro.to_json() == tag_scores(flat, [t for e in test for t in e.tags], OUTSIDE)["micro"]
    assert result.baseline.tag == OUTSIDE and result.baseline.detection.f1 == 0.0
    assert type(result).from_json(result.to_json()) == result  # its JSON reads back as the same record


# ---- through the CLI --------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.precision("fp32")
def test_finetune_tag_on_a_users_file_and_evaluate_the_saved_tagger(tmp_path, capsys):
    from tests.tiny_run import assert_one_line_exit_2, encoder_run, run_cli

    run = encoder_run(tmp_path / "enc")
    sentences = ["John B-PER\nlives O\nin O\nParis B-LOC", "Mary B-PER\nsaw O\nRome B-LOC", "it O\nrains O"] * 4
    data = tmp_path / "ner.conll"
    data.write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    code, out, err = run_cli(
        capsys,
        "finetune",
        "tag",
        run,
        "--out",
        tmp_path / "tagger",
        "--data",
        data,
        "--steps",
        2,
        "--batch-size",
        4,
        "--read-out",
        "first",
        "--no-progress",
    )
    assert code == 0, err
    assert out.startswith("tag (encoder) ") and " words of 1 texts" in out  # a random 10% of 12 sentences: one
    assert json.loads((tmp_path / "tagger" / "config.json").read_text())["task"]["read_out"] == "first"  # kept
    tuned = json.loads((tmp_path / "tagger" / "results.json").read_text())
    assert (tmp_path / "tagger" / "head.safetensors").is_file() and tuned["tags"][0] == OUTSIDE
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "tagger", "--data", data, "--no-progress")
    assert code == 0, err
    again = json.loads(next((tmp_path / "tagger").glob("results-tag-*.json")).read_text())
    assert again["n_words"] == (4 + 3 + 2) * 4  # every sentence of the file, read with the saved head
    code, _, err = run_cli(capsys, "evaluate", run, "--task", "tag", "--no-progress")
    assert code == 2 and "no tagging head" in err and err.count("\n") == 1
    other = tmp_path / "bilou.conll"  # the training tags' IOB beside its U-: no one scheme scores both
    other.write_text("Ann U-PER\nsmiled O\n", encoding="utf-8")
    args = ["evaluate", tmp_path / "tagger", "--data", other, "--no-progress"]
    assert_one_line_exit_2(capsys, args, "U-PER fit no one span scheme")


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.precision("fp32")
def test_finetune_tag_on_the_plays_reproduces_under_evaluate(tmp_path, capsys):
    from tests.tiny_run import encoder_run, run_cli

    run = encoder_run(tmp_path / "enc")
    code, _, err = run_cli(
        capsys,
        "finetune",
        "tag",
        run,
        "--out",
        tmp_path / "tagger",
        "--steps",
        2,
        "--batch-size",
        4,
        "--train-windows",
        20,
        "--eval-windows",
        30,
        "--no-progress",
    )
    assert code == 0, err
    tuned = json.loads((tmp_path / "tagger" / "results.json").read_text())
    code, _, err = run_cli(capsys, "evaluate", tmp_path / "tagger", "--eval-windows", 30, "--no-progress")
    assert code == 0, err
    again = json.loads((tmp_path / "tagger" / "results-tag-test.json").read_text())
    assert again["n_test"] == tuned["n_test"] == 30 and again["micro"] == tuned["micro"]
    assert again["line_break_rule"] == tuned["line_break_rule"]  # the baselines from the saved training counts


def _long_sentence_file(path, sentences: int = 40, words: int = 30, seed: int = 0) -> None:
    """A CoNLL file of long sentences (30 words: several windows each) with entities everywhere, in two documents."""
    rng = random.Random(seed)
    lines = []
    for s in range(sentences):
        if s % 20 == 0:
            lines += ["-DOCSTART- O", ""]
        tags, i = [], 0
        while i < words:
            if rng.random() < 0.3:
                span = rng.randint(1, 3)
                kind = rng.choice(("PER", "LOC"))
                tags += [f"B-{kind}"] + [f"I-{kind}"] * (span - 1)
                i += span
            else:
                tags.append("O")
                i += 1
        lines += [f"w{rng.randrange(50)} {tag}" for tag in tags[:words]] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.unit
def test_docstart_lines_mark_documents_and_windows_keep_them(tmp_path):
    path = tmp_path / "long.conll"
    _long_sentence_file(path)
    sentences = tagged_from_file(path)
    assert len(sentences) == 40 and {s.document for s in sentences} == {"long.conll:1", f"long.conll:{1 + 2 + 20 * 31}"}
    windows = windows_of(sentences, 40)
    assert len(windows) > 2 * len(sentences) and {w.document for w in windows} == {s.document for s in sentences}
    assert rejoined(sentences, [list(w.tags) for w in windows]) == [list(s.tags) for s in sentences]


@pytest.mark.unit
def test_long_sentences_read_in_windows_score_exactly_seqeval_on_the_sentences(tmp_path, monkeypatch):
    from seqeval.metrics import f1_score

    from maskwise.tasks import tag as tag_module

    path = tmp_path / "long.conll"
    _long_sentence_file(path)
    sentences = tagged_from_file(path)
    rng = random.Random(1)
    alphabet = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
    made: list[list[str]] = []  # per window read, its predicted tags

    def predicted_in_windows(model, tokenizer, windows, batch_size=64, max_len=None):
        made.extend([t if rng.random() < 0.7 else rng.choice(alphabet) for t in w.tags] for w in windows)
        return made[-len(windows) :], 0

    monkeypatch.setattr(tag_module, "predict_tags", predicted_in_windows)
    tagger = SimpleNamespace(body=SimpleNamespace(cfg=SimpleNamespace(family="encoder")), tags=list(alphabet))
    record = evaluate_tagger(tagger, None, sentences, tag_counts(sentences), window_chars=40)
    assert len(made) > 2 * len(sentences) and record.n_test == len(sentences) == len(record.per_example.f1)
    # The same predictions joined back to their sentences and scored by seqeval: an entity a window edge cut is one.
    gold = [list(s.tags) for s in sentences]
    assert record.entity is not None
    assert record.entity["f1"] == pytest.approx(f1_score(gold, rejoined(sentences, made)))
    # Redrawn by document: two groups of 20 sentences, the floor counting the 40.
    task = SimpleNamespace(spec=TaskSpec("n", "tag", str(path)), details={"scheme": "IOB"})
    (row,) = TASKS["tag"].user_rows(task, TagConfig())
    items = row.scored(record.to_json()).scores
    assert items is not None and len(items) == 2 and items.size == 40
