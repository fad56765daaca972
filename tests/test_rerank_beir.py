"""A rerank task read from a BEIR folder: BM25's near misses for training, graded nDCG@10 over BM25's candidates
per query, the random order's exact expectation under graded judgements, and a bad qrels line refused."""

import itertools

import pytest

from maskwise.data.user_tasks import parse_task
from maskwise.errors import UserError
from maskwise.interop.folders import load
from maskwise.runtime import resolve
from maskwise.tasks.metrics import mrr, ndcg_at_k, recall_at_k
from maskwise.tasks.registry import TASKS
from maskwise.tasks.rerank import RerankConfig
from maskwise.tasks.rerank_eval import random_order_per_query
from maskwise.tasks.retrieve import bm25_ranking
from maskwise.tasks.run import run_task
from tests.test_beir import TEST_QRELS, TRAIN_QRELS, write_beir
from tests.tiny_run import encoder_run


def read(folder):
    return TASKS["rerank"].read(parse_task(f"t=rerank:{folder}", tuple(TASKS)))


@pytest.mark.unit
def test_training_rows_are_each_judged_pair_with_bm25_misses_that_are_none_of_its_querys(tmp_path):
    task = read(write_beir(tmp_path / "beir", {"train": TRAIN_QRELS, "test": TEST_QRELS}))
    assert task.details["metric"] == "nDCG@10"
    assert task.details["first_stage"] == (  # the analysis the test documents pick, named in the report
        "BM25 (Lucene variant, k1 1.2, b 0.75; English analysis: lower-case, Lucene's 33 English stop words, Porter "
        "stems)"
    )
    assert task.test.query_ids == ("q1", "q2", "q3")  # q4's only judgement is 0: nothing to find
    train, negatives, test, candidates = TASKS["rerank"].run_data(task, RerankConfig(n_negatives=2, candidates=4))
    doc = {d: i for i, d in enumerate(task.train.doc_ids)}
    assert list(zip(train.queries, train.relevant)) == [  # q3 is judged relevant to two documents: two rows
        ("Where is Rome?", doc["d3"]),
        ("Which city did Romeo flee to?", doc["d5"]),
        ("Rivers of France", doc["d4"]),
        ("Rivers of France", doc["d2"]),
    ]
    assert all(len(n) == 2 for n in negatives)
    assert not {doc["d4"], doc["d2"]} & {*negatives[2], *negatives[3]}  # neither of q3's relevant documents
    assert test is task.test and candidates == bm25_ranking(task.test, 4)


@pytest.mark.integration
def test_a_reranker_fine_tunes_on_a_beir_folder_and_is_scored_by_graded_ndcg_per_query(tmp_path):
    task = read(write_beir(tmp_path / "beir", {"train": TRAIN_QRELS, "test": TEST_QRELS}))
    model, tokenizer = load(encoder_run(tmp_path / "encoder"))
    cfg = RerankConfig(steps=1, batch_size=2, n_negatives=2, candidates=4, max_len=64, progress=False)
    data = TASKS["rerank"].run_data(task, cfg)
    record = run_task(cfg, model, tokenizer, resolve("cpu"), data=data, label="cross").record
    candidates, qrels = data[3], task.test.qrels
    first_stage = [ndcg_at_k([c], [grades]) for c, grades in zip(candidates, qrels)]
    assert record.per_query.first_stage_ndcg_at_10 == pytest.approx(first_stage)
    assert len(record.per_query.ndcg_at_10) == len(record.per_query.seconds) == 3  # paired per query
    assert record.baseline.ndcg_at_10 == pytest.approx(ndcg_at_k(candidates, qrels))  # grades are the gains
    (row,) = TASKS["rerank"].user_rows(task, cfg)
    scored = row.scored(record.to_json())
    assert scored.scores.values == record.per_query.ndcg_at_10 and scored.baseline.values == first_stage


@pytest.mark.unit
def test_random_order_under_graded_judgements_is_the_mean_over_every_order():
    candidates = [3, 1, 4, 0, 2]  # documents 0 (grade 2) and 4 (grade 1) among five; 9 judged but not a candidate
    grades = {0: 2, 4: 1, 9: 1}
    orders = [list(p) for p in itertools.permutations(candidates)]
    expected = random_order_per_query([candidates], [grades], (1, 10))
    assert expected["mrr"][0] == pytest.approx(mrr(orders, [grades] * len(orders)))
    assert expected["ndcg@10"][0] == pytest.approx(ndcg_at_k(orders, [grades] * len(orders)))
    for k in (1, 10):
        assert expected[f"recall@{k}"][0] == pytest.approx(recall_at_k(orders, [grades] * len(orders), k))


@pytest.mark.unit
def test_a_qrels_line_naming_a_missing_document_is_one_line_with_file_and_line(tmp_path):
    folder = write_beir(tmp_path / "beir", {"train": TRAIN_QRELS, "test": [*TEST_QRELS, ("q1", "d9", 1)]})
    with pytest.raises(UserError, match=r"qrels/test.tsv line 10 names document 'd9', not in corpus.jsonl") as error:
        read(folder)
    assert "\n" not in str(error.value)
