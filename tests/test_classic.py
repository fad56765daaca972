"""The classic methods beside every task, each task's field metric fixed when its files are read, and the pooled
scores' intervals: the evidence a user needs before acting on a report."""

import json
import random

import pytest

from maskwise.data.corpus import load_corpus
from maskwise.data.tagging import TaggedText
from maskwise.data.tokenizers import build_tokenizer
from maskwise.data.user_tasks import TaskSpec
from maskwise.experiments.claims import HELD_OUT_ROWS, Part, judge_part, share_read
from maskwise.experiments.compare_plan import plan_of
from maskwise.experiments.intervals import interval, paired_difference, score
from maskwise.recipes import SMOKE
from maskwise.tasks.classic import (
    chars_read,
    lines_after_blank,
    most_frequent_tags,
    tfidf_logistic_regression,
)
from maskwise.tasks.metrics import set_f1
from maskwise.tasks.registry import TASKS, read_tasks
from maskwise.tasks.tag import tagging_results

pytestmark = pytest.mark.unit


def tagged(pairs: str) -> TaggedText:
    words, tags = zip(*(p.split("/") for p in pairs.split()))
    return TaggedText(tuple(words), tuple(tags), (" ",) * len(words))


def test_tfidf_logistic_regression_learns_words_that_decide_the_label():
    rng = random.Random(0)
    filler = "the a of and to in is it".split()
    rows = [
        (f"{' '.join(rng.choices(filler, k=6))} {word}", label)
        for label, word in (("pets", "dog"), ("pets", "cat"), ("money", "bank"), ("money", "loan"))
        for _ in range(20)
    ]
    texts, labels = zip(*rows)
    assert tfidf_logistic_regression(texts, labels, ["of the dog", "a loan in it", "bank"]) == [
        "pets",
        "money",
        "money",
    ]


def test_the_word_tagger_takes_each_words_most_frequent_tag_else_the_most_frequent_overall():
    train = [tagged("the/DT run/NN ./."), tagged("we/PRP run/VB"), tagged("they/PRP run/VB")]
    # run: VB twice, NN once; zebra unseen: PRP and VB tie as the most frequent, the first in sorted order wins
    assert most_frequent_tags(train, [tagged("run/X the/X zebra/X")]) == [["VB", "DT", "PRP"]]


def test_the_speakers_rule_names_every_line_after_a_blank_line_once():
    source = "my lord, be gone\n\nBAPTISTA\nTalk not.\n\nGREMIO\nTake heed.\n\nBAPTISTA\nNo."
    assert lines_after_blank(source) == "BAPTISTA, GREMIO"
    assert set_f1(lines_after_blank(source), "BAPTISTA, GREMIO") == 1.0
    assert lines_after_blank("verse with no speaker\nat all") == ""


def test_chars_read_is_where_the_token_cut_falls(small_text):
    tokenizer = build_tokenizer("char", load_corpus(str(small_text)))
    texts = ["short", "x" * 300]
    assert chars_read(tokenizer, texts, 64, "encoder") == [5, 63]  # an encoder frames a text with [CLS]
    assert chars_read(tokenizer, texts, 64, "decoder") == [5, 64]
    assert share_read((chars_read(tokenizer, texts, 64, "encoder"), [5, 300])).startswith(
        "34 of 152 characters a text on average (22%)"
    )


def test_an_entity_f1_interval_redraws_texts_and_pools_again():
    # text 1: 1 right of 1 predicted and 1 gold; text 2: 0 right of 0 predicted and 9 gold (2 x tp, pred + gold)
    items = [[2, 2], [0, 9]]
    assert score([items]) == pytest.approx(2 / 11)  # pooled: not the mean of 1.0 and 0.0
    assert interval([items]).mean == pytest.approx(2 / 11)
    assert score([[0.5, 1.0]]) == 0.75  # plain numbers are still their mean
    same = paired_difference([items], [items])
    assert (same.low, same.high) == (0.0, 0.0)


def test_always_outside_scores_zero_entity_f1_when_most_texts_have_no_entity():
    test = [tagged("he/O saw/O Ann/B-NAME Lee/I-NAME"), *[tagged("no/O names/O here/O")] * 9]
    predicted = [["O"] * len(e.tags) for e in test]
    record = tagging_results(
        predicted,
        test,
        {"O": 50, "B-NAME": 5, "I-NAME": 3},
        "encoder",
        ["O", "B-NAME", "I-NAME"],
        classic=most_frequent_tags(test, test),
    )
    assert record.entity["f1"] == 0.0 and record.baseline.entity["f1"] == 0.0
    assert sum(record.per_example.f1) / len(test) == pytest.approx(0.9)  # the old per-text mean rewarded it
    assert record.classic.entity["f1"] == 1.0


def _write_conll(path, sentences):
    path.write_text("\n".join("".join(f"{w}\t{t}\n" for w, t in zip(s.split(), tags.split())) for s, tags in sentences))


@pytest.mark.parametrize("scheme", ["bio", "pos"])
def test_the_judged_metric_is_fixed_by_the_training_tags_before_any_number(tmp_path, scheme):
    rng = random.Random(1)
    rows = []
    for _ in range(400):
        name = rng.random() < 0.4
        words = "we met Ann Lee today" if name else "we met nobody today"
        if scheme == "bio":
            tags = "O O B-PER I-PER O" if name else "O O O O"
        else:
            tags = "PRP VBD NNP NNP NN" if name else "PRP VBD NN NN"
        rows.append((words, tags))
    path = tmp_path / "rows.conll"
    _write_conll(path, rows)
    [task] = read_tasks([TaskSpec("t", "tag", str(path))])
    [row] = TASKS["tag"].user_rows(task, TASKS["tag"].config())
    if scheme == "bio":
        assert row.label.startswith("t: entity F1 pooled over the test set (IOB, CoNLL)")
        assert "seqeval" in task.details["why_metric"]
    else:
        assert row.label.startswith("t: F1 per text") and "no span scheme" in task.details["why_metric"]


def test_compare_on_a_users_corpus_without_tasks_judges_its_held_out_text_only_and_says_so(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": f"document number {i} of a corpus"}) for i in range(50)))
    plan = plan_of(str(corpus), [], SMOKE)
    assert plan.rows == HELD_OUT_ROWS and not plan.plays_tasks
    assert "held-out text only" in plan.scope and "not measured" in plan.scope
    assert "held-out text only" in plan.described["scope"]
    plays = plan_of("shakespeare", [], SMOKE)
    assert len(plays.rows) > len(HELD_OUT_ROWS) and "plays' tasks" in plays.scope


def test_a_judged_part_that_separates_but_has_too_few_items_names_the_minimum():
    part = Part("t", [[1.0] * 10], [[0.0] * 10], True, None)
    assert judge_part(part)[0] == "too few test items"


def test_bm25_sits_beside_an_embedder_on_rows_and_on_graded_judgements():
    from maskwise.data.beir import GradedRetrievalSet
    from maskwise.data.tasks import RetrievalSet
    from maskwise.tasks.retrieve import evaluate_graded_retrieval, evaluate_retrieval, with_bm25

    # 12 documents, 8 of them near misses sharing "the", "sat" and "hill": MRR 1 on every query needs each right
    # document first, which neither index order (the last query's is document 11), the reverse (the first's is
    # document 0) nor a random order (1 time in 1,728) gives
    filler = tuple(f"the {w} sat on the hill by the river" for w in "owl hen fox ox ram elk ant bee".split())
    docs = ("the cat sat on the mat", "stocks fell sharply today", "a dog chased the cat", *filler, "rain over hills")
    queries = ("cat on a mat", "stock markets fell", "hills and rain")
    relevant = (0, 1, len(docs) - 1)

    def embedder(texts):  # no model: a constant vector, so every ranking is by index
        import torch

        return torch.ones(len(texts), 4)

    rows = RetrievalSet(queries, docs, relevant)
    record = with_bm25(evaluate_retrieval(embedder, rows), rows, [6] * len(docs))
    assert record.classic_whole.mrr == [1.0, 1.0, 1.0]  # each right document first
    assert record.chars_read == [6] * len(docs) and record.chars_given == [len(d) for d in docs]
    graded = GradedRetrievalSet(
        ("q1", "q2", "q3"),
        queries,
        tuple(f"d{i}" for i in range(len(docs))),
        docs,
        ({0: 2, 2: 1}, {1: 1}, {len(docs) - 1: 1}),
    )
    record = with_bm25(evaluate_graded_retrieval(embedder, graded), graded, [len(d) for d in docs])
    assert record.classic.ndcg_at_10 == record.classic_whole.ndcg_at_10
    assert record.classic.ndcg_at_10[1:] == [1.0, 1.0] and 0.9 < record.classic.ndcg_at_10[0] <= 1.0
