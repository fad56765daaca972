"""BEIR/MTEB retrieval folders: reading them, the benchmark's metrics against a hand computation and
against ranx, and ``evaluate --task retrieve`` / ``finetune embed`` on a folder, bad folders included."""

import json
import math
import random

import pytest
import torch
from tiny_run import assert_one_line_exit_2, encoder_run, run_cli

from maskwise.data.beir import GradedRetrievalSet, open_beir
from maskwise.tasks.metrics import mrr, ndcg_at_k, recall_at_k
from maskwise.tasks.retrieve import (
    RetrievalRecord,
    benchmark_metrics,
    evaluate_graded_retrieval,
)

DOCS = [  # _id, title, text
    ("d1", "Rome", "The eternal city on the Tiber."),
    ("d2", "", "Paris stands on the Seine."),
    ("d3", "Tiber", "A river through Rome."),
    ("d4", "Seine", "A river through Paris."),
    ("d5", "Verona", "Two lovers in fair Verona."),
    ("d6", "Mantua", "Exile in Mantua."),
]
QUERIES = [
    ("q1", "Where is Rome?"),
    ("q2", "Which city did Romeo flee to?"),
    ("q3", "Rivers of France"),
    ("q4", "unjudged relevance"),
    ("q5", "a query no qrels name"),
]
# Graded judgements; score 0 = judged not relevant. q4 has only a 0, so it has nothing to find.
TEST_QRELS = [
    ("q1", "d1", 2),
    ("q1", "d3", 1),
    ("q1", "d4", 0),
    ("q2", "d6", 2),
    ("q2", "d5", 1),
    ("q3", "d2", 1),
    ("q3", "d4", 1),
    ("q4", "d1", 0),
]
TRAIN_QRELS = [("q1", "d3", 1), ("q2", "d5", 1), ("q3", "d4", 2), ("q3", "d2", 1)]


def write_beir(folder, qrels=None, docs=DOCS, queries=QUERIES):
    """A BEIR folder: corpus.jsonl, queries.jsonl and one qrels/<split>.tsv per entry of ``qrels``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": title, "text": text}) + "\n" for i, title, text in docs)
    )
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries))
    for split, rows in (qrels if qrels is not None else {"test": TEST_QRELS}).items():
        (folder / "qrels").mkdir(exist_ok=True)
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows)
        )
    return folder


# ---- metrics against a hand computation -----------------------------------------------------------

D1, D2, D3, D4, D5, D6 = range(6)
HAND_QRELS = [{D1: 2, D3: 1, D4: 0}, {D6: 2, D5: 1}, {D2: 1, D4: 1}]
HAND_RANKING = [[D2, D1, D4, D3, D5, D6], [D6, D2, D5], [D1, D2, D3]]  # q3's top 3 miss D4


@pytest.mark.unit
def test_graded_metrics_match_a_hand_computation():
    # nDCG@10, linear gains: DCG = sum gain / log2(rank + 1); ideal = the judged gains sorted.
    # q1: D1 (gain 2) at rank 2, D3 (gain 1) at rank 4, D4 judged 0 counts nothing:
    #     DCG = 2 / log2(3) + 1 / log2(5) = 1.2618595 + 0.4306766 = 1.6925361
    #     ideal = 2 / log2(2) + 1 / log2(3) = 2 + 0.6309298 = 2.6309298 -> 0.6433224
    # q2: D6 (2) at rank 1, D5 (1) at rank 3: (2 + 1 / log2(4)) / 2.6309298 = 2.5 / 2.6309298 = 0.9502344
    # q3: D2 (1) at rank 2, D4 never retrieved: (1 / log2(3)) / (1 + 1 / log2(3)) = 0.6309298 / 1.6309298 = 0.3868528
    per_query = [0.6433224, 0.9502344, 0.3868528]
    for ranked, qrels, expected in zip(HAND_RANKING, HAND_QRELS, per_query):
        assert ndcg_at_k([ranked], [qrels], 10) == pytest.approx(expected, abs=1e-7)
    metrics = benchmark_metrics(HAND_RANKING, HAND_QRELS)
    assert metrics["ndcg@10"] == pytest.approx((0.6433224 + 0.9502344 + 0.3868528) / 3, abs=1e-7)  # 0.6601365
    # recall@100: q1 2 of 2, q2 2 of 2, q3 1 of 2 -> (1 + 1 + 0.5) / 3
    assert metrics["recall@100"] == pytest.approx(2.5 / 3)
    # MRR@10: first relevant at rank 2, 1, 2 -> (1/2 + 1 + 1/2) / 3
    assert metrics["mrr@10"] == pytest.approx(2 / 3)
    # Binary relevance would rank q1's D3 as high as D1: graded nDCG is not binary nDCG.
    assert ndcg_at_k([HAND_RANKING[0]], [{D1, D3}], 10) == pytest.approx(
        (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    )
    assert ndcg_at_k([HAND_RANKING[0]], [{D1, D3}], 10) != pytest.approx(per_query[0])


@pytest.mark.unit
def test_mrr_at_10_stops_at_rank_10_and_zero_grades_are_not_relevant():
    ranked = [list(range(100, 110)) + [7]]  # the one relevant document at rank 11
    assert mrr(ranked, [{7: 1}], k=10) == 0.0
    assert mrr(ranked, [{7: 1}]) == pytest.approx(1 / 11)
    assert recall_at_k([[3, 7]], [{3: 0, 7: 1, 9: 2}], 100) == 0.5  # 3 is judged 0: one of two found
    assert ndcg_at_k([[3]], [{3: 0, 9: 1}], 10) == 0.0


@pytest.mark.integration
@pytest.mark.slow
def test_ndcg_agrees_with_ranx_on_random_queries():
    """ranx (numba) as the independent implementation; nDCG only, as each metric costs a JIT compile."""
    from ranx import Qrels, Run, evaluate

    rng = random.Random(0)
    docs = [f"d{i}" for i in range(60)]
    qrels, run, ranked, graded = {}, {}, [], []
    for q in range(25):
        judged = rng.sample(range(60), rng.randint(1, 8))
        grades = {d: rng.randint(0, 3) for d in judged}
        grades[judged[0]] = rng.randint(1, 3)  # every query has something to find
        retrieved = rng.sample(range(60), 20)  # a 20-document run: relevant documents can be missed
        scores = {d: rng.random() for d in retrieved}
        qrels[f"q{q:02d}"] = {docs[d]: g for d, g in grades.items()}
        run[f"q{q:02d}"] = {docs[d]: s for d, s in scores.items()}
        ranked.append(sorted(retrieved, key=lambda d: -scores[d]))
        graded.append(grades)
    theirs = evaluate(Qrels(qrels), Run(run), "ndcg@10", return_mean=False)  # per query, by sorted id
    ours = [ndcg_at_k([r], [g], 10) for r, g in zip(ranked, graded)]
    assert ours == pytest.approx([float(x) for x in theirs], abs=1e-9)
    assert len({round(x, 6) for x in ours}) > 10  # a fixture of varied partial rankings, not one corner


# ---- reading a folder, evaluating on it -------------------------------------------------------------


@pytest.mark.unit
def test_a_folder_reads_as_beir_does(tmp_path):
    data = open_beir(write_beir(tmp_path / "set"), ("test",)).split("test")
    assert data.query_ids == ("q1", "q2", "q3")  # q4's only judgement is 0; q5 is in no qrels
    assert data.without_relevant == 1
    assert data.qrels == ({0: 2, 2: 1}, {5: 2, 4: 1}, {1: 1, 3: 1})
    assert data.docs[0] == "Rome The eternal city on the Tiber." and data.docs[1] == "Paris stands on the Seine."
    assert data.pairs()[:2] == [("Where is Rome?", data.docs[0]), ("Where is Rome?", data.docs[2])]
    assert open_beir(tmp_path / "set", ("test",)).split("test", max_queries=2).query_ids in (
        ("q1", "q2"),
        ("q1", "q3"),
        ("q2", "q3"),
    )


def lookup_embedder(vectors: dict[str, list[float]]):
    return lambda texts: torch.tensor([vectors[t] for t in texts], dtype=torch.float32)


@pytest.mark.integration
def test_evaluate_graded_retrieval_scores_a_known_ranking(tmp_path):
    data = open_beir(write_beir(tmp_path / "set"), ("test",)).split("test")
    # Queries are one-hot; document j's coordinate i is its score for query i, so the rankings are
    # q1: d2 d1 d4 d3 d5 d6, q2: d6 d2 d5 d1 d3 d4, q3: d1 d2 d3 d5 d6 d4.
    scores = [[5, 3, 6], [6, 5, 5], [3, 2, 4], [4, 1, 1], [2, 4, 3], [1, 6, 2]]
    vectors = {text: s for text, s in zip(data.docs, scores)}
    vectors.update({q: [float(i == j) for j in range(3)] for i, q in enumerate(data.queries)})
    results = evaluate_graded_retrieval(lookup_embedder(vectors), data, name="lookup")
    # q3 over the whole collection finds D4 at rank 6: (1/log2(3) + 1/log2(7)) / (1 + 1/log2(3))
    #   = (0.6309298 + 0.3562072) / 1.6309298 = 0.9871369 / 1.6309298 = 0.6052602
    assert results.per_query.ndcg_at_10 == pytest.approx([0.6433224, 0.9502344, 0.6052602], abs=1e-7)
    assert results.per_query.query_id == ["q1", "q2", "q3"]
    assert results.mrr_at_10 == pytest.approx(2 / 3) and results.recall_at_100 == 1.0
    assert results.n_queries == 3 and results.n_docs == 6 and results.queries_without_relevant == 1
    assert RetrievalRecord.from_json(results.to_json()) == results  # what a results.json holds reads back whole


@pytest.mark.unit
def test_ignore_identical_ids_drops_the_query_s_own_document():
    data = GradedRetrievalSet(
        query_ids=("d2",), queries=("q",), doc_ids=("d1", "d2"), docs=("one", "two"), qrels=({0: 1},)
    )
    embedder = lookup_embedder({"q": [1.0], "one": [0.5], "two": [0.9]})  # its own id first
    assert evaluate_graded_retrieval(embedder, data).mrr_at_10 == 0.5
    assert evaluate_graded_retrieval(embedder, data, ignore_identical_ids=True).mrr_at_10 == 1.0


# ---- the CLI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return encoder_run(tmp_path_factory.mktemp("beir") / "run")


@pytest.mark.e2e
def test_evaluate_retrieve_on_a_beir_folder(encoder, tmp_path, capsys):
    folder = write_beir(tmp_path / "set", {"test": TEST_QRELS, "train": TRAIN_QRELS})
    code, out, err = run_cli(
        capsys,
        "evaluate",
        encoder,
        "--task",
        "retrieve",
        "--data",
        folder,
        "--results",
        tmp_path / "zero-shot.json",
        "--no-progress",
    )
    assert code == 0, err
    assert "nDCG@10" in out and "MRR@10" in out and "recall@100" in out
    record = json.loads((tmp_path / "zero-shot.json").read_text())
    assert record["split"] == "test" and record["n_queries"] == 3 and record["n_docs"] == 6
    assert 0.0 <= record["ndcg@10"] <= 1.0 and record["recall@100"] == 1.0  # 6 documents: all retrieved
    assert record["per_query"]["query_id"] == ["q1", "q2", "q3"] and record["queries_without_relevant"] == 1


@pytest.mark.e2e
def test_finetune_embed_trains_on_train_qrels_and_scores_on_test(encoder, tmp_path, capsys):
    folder = write_beir(tmp_path / "set", {"test": TEST_QRELS, "train": TRAIN_QRELS})
    out_run = tmp_path / "bi"
    code, _, err = run_cli(
        capsys,
        "finetune",
        "embed",
        encoder,
        "--out",
        out_run,
        "--data",
        folder,
        "--steps",
        1,
        "--batch-size",
        2,
        "--no-progress",
    )
    assert code == 0, err
    tuned = json.loads((out_run / "results.json").read_text())
    assert tuned["train_pairs"] == 4 and tuned["split"] == "test" and tuned["n_queries"] == 3
    code, _, err = run_cli(capsys, "evaluate", out_run, "--data", folder, "--no-progress")
    assert code == 0, err
    again = json.loads((out_run / "results-retrieve-set-test.json").read_text())
    assert again["ndcg@10"] == pytest.approx(tuned["ndcg@10"])  # the saved bi-encoder reproduces its score


@pytest.mark.e2e
def test_bad_beir_folders_exit_2_with_one_line(encoder, tmp_path, capsys):
    good = write_beir(tmp_path / "good")
    no_qrels = write_beir(tmp_path / "no-qrels", qrels={})
    no_corpus = write_beir(tmp_path / "no-corpus")
    (no_corpus / "corpus.jsonl").unlink()
    no_queries = write_beir(tmp_path / "no-queries")
    (no_queries / "queries.jsonl").unlink()
    unknown_doc = write_beir(tmp_path / "unknown-doc", {"test": [*TEST_QRELS, ("q1", "d99", 1)]})
    bad_json = write_beir(tmp_path / "bad-json")
    (bad_json / "corpus.jsonl").write_text('{"_id": "d1", "text": "fine"}\n{"_id": "d2", "text": \n')
    repeated = write_beir(tmp_path / "repeated", docs=[*DOCS, DOCS[0]])
    evaluate = ["evaluate", encoder, "--task", "retrieve", "--no-progress", "--data"]
    cases = [
        ([*evaluate, no_qrels], "no qrels"),
        ([*evaluate, good, "--split", "dev"], "qrels/dev.tsv"),
        ([*evaluate, no_corpus], "corpus.jsonl"),
        ([*evaluate, no_queries], "queries.jsonl"),
        ([*evaluate, unknown_doc], "'d99'"),
        ([*evaluate, bad_json], "line 2"),
        ([*evaluate, repeated], "line 7 repeats _id 'd1'"),
        (["evaluate", encoder, "--task", "retrieve", "--ignore-identical-ids"], "BEIR folder"),
        (["evaluate", encoder, "--task", "retrieve", "--split", "dev"], "BEIR folder"),
        (["finetune", "embed", encoder, "--out", tmp_path / "o1", "--data", good, "--steps", 1], "qrels/train.tsv"),
        (["finetune", "rerank", encoder, "--out", tmp_path / "o2", "--data", good, "--steps", 1], "folder"),
    ]
    for args, needle in cases:
        assert_one_line_exit_2(capsys, args, needle)
