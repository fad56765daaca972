"""The reranker ablation's pieces: BM25 first stage, the writing scorer, the rule, the report rows."""

import pytest
import torch

from maskwise.data.tasks import RetrievalSet
from maskwise.experiments.ablations import reranker
from maskwise.experiments.arms import TOKENS, StudyOptions
from maskwise.experiments.framework import Measured, key
from maskwise.tasks.rerank_eval import (
    Latency,
    NdcgGains,
    OrderBaseline,
    PairedGain,
    QueryScores,
    RerankRecord,
)
from maskwise.tasks.retrieve import bm25_ranking

pytestmark = pytest.mark.unit


def test_bm25_puts_the_document_sharing_the_rare_words_first():
    docs = (
        "the king is dead and the queen weeps",
        "the fool sings of rain",
        "the the the the king",
        "a horse, a horse, my kingdom for a horse",
    )
    data = RetrievalSet(("my kingdom for a horse", "who sings of the rain", "the queen"), docs, (3, 1, 0))
    ranked = bm25_ranking(data, k=2)
    assert [r[0] for r in ranked] == [3, 1, 0]
    assert all(len(r) == 2 for r in ranked)


def record(ndcg: float, p50_ms: float, p99_ms: float) -> dict:
    """A reranker's record as the ablation stores it (JSON) over two queries: BM25's order at nDCG@10 0.11 (MRR
    0.10), a random order at 0.02."""
    recall, no_gain = {"recall@100": 1.0}, PairedGain(difference=0.0, ci95_low=0.0, ci95_high=0.0, p_not_better=1.0)
    return RerankRecord(
        recall=recall,
        mrr=ndcg,
        ndcg_at_10=ndcg,
        reranker="cross",
        n_queries=2,
        candidates_per_query=100,
        per_query=QueryScores(
            ndcg_at_10=[ndcg, ndcg],
            seconds=[p50_ms / 1000] * 2,
            first_stage_ndcg_at_10=[0.10, 0.12],
            random_order_ndcg_at_10=[0.02, 0.02],
        ),
        latency=Latency(p50_ms=p50_ms, p99_ms=p99_ms),
        baseline=OrderBaseline(recall=recall, mrr=0.10, ndcg_at_10=0.11, name="first-stage order"),
        random_order=OrderBaseline(recall=recall, mrr=0.02, ndcg_at_10=0.02, name="random order"),
        ndcg_at_10_gain=NdcgGains(over_random_order=no_gain, over_first_stage=no_gain),
    ).to_json()


def measured(cross: list[tuple], scores: list[tuple], writes: list[tuple]) -> Measured:
    enc = [{reranker.CROSS: record(*c)} for c in cross]
    dec = [{reranker.SCORES: record(*s), reranker.WRITES: record(*w)} for s, w in zip(scores, writes)]
    runs = {TOKENS: {reranker.MLM_ENCODER.key: enc, reranker.CLM_DECODER.key: dec}}
    return Measured(None, (reranker.MLM_ENCODER, reranker.CLM_DECODER), runs, runs, {})


def judge(m: Measured) -> tuple[str, str]:
    """The reranker's rule on ``m``'s records, tabulated as the ablation tabulates them."""
    [rule] = reranker.ABLATION.rules
    return reranker.ABLATION.judge(rule, reranker.ABLATION.tabulate(m).measures, m)


def test_rule_held_falsified_inconclusive_on_synthetic_seeds():
    fast_and_good = measured(
        [(0.30, 20, 40), (0.32, 21, 41), (0.31, 20, 42)],
        [(0.25, 25, 50)] * 3,
        [(0.26, 200, 400), (0.27, 210, 420), (0.29, 190, 380)],
    )
    rows = reranker.ABLATION.tabulate(fast_and_good).rows
    assert judge(fast_and_good)[0] == "held"
    assert [len(r) for r in rows] == [len(reranker.SYSTEMS) + 3] * len(rows)  # measure, axis, systems, verdict
    writer_better = measured(
        [(0.20, 20, 40), (0.21, 21, 41), (0.22, 20, 42)],
        [(0.25, 25, 50)] * 3,
        [(0.40, 200, 400), (0.41, 210, 420), (0.43, 190, 380)],
    )
    assert judge(writer_better)[0] == "falsified"
    unlearned = measured(
        [(0.021, 20, 40), (0.019, 21, 41), (0.020, 20, 42)],
        [(0.02, 25, 50)] * 3,
        [(0.02, 200, 400), (0.021, 210, 420), (0.019, 190, 380)],
    )
    verdict, detail = judge(unlearned)
    assert verdict == "inconclusive" and ("would need" in detail or "no gap" in detail)
    below_random = measured(
        [(0.004, 20, 40), (0.006, 21, 41), (0.005, 20, 42)],  # random order: 0.02
        [(0.02, 25, 50)] * 3,
        [(0.03, 200, 400), (0.031, 210, 420), (0.029, 190, 380)],
    )
    verdict, detail = judge(below_random)
    # a failed precondition falsifies nothing
    assert verdict == "inconclusive" and "nothing learned to compare" in detail
    behind_first_stage = measured(
        [(0.060, 20, 40), (0.070, 21, 41), (0.065, 20, 42)],  # BM25's order: 0.11
        [(0.02, 25, 50)] * 3,
        [(0.01, 200, 400), (0.011, 210, 420), (0.009, 190, 380)],
    )
    verdict, detail = judge(behind_first_stage)
    assert verdict == "inconclusive" and "does not improve on the first stage's own order" in detail


def test_summary_is_the_templates_sentence_with_the_measured_numbers():
    m = measured([(0.30, 20, 40)] * 2, [(0.25, 25, 50)] * 2, [(0.26, 200, 400)] * 2)
    measures = reranker.ABLATION.tabulate(m).measures
    text = reranker.ABLATION.summary(m, measures)
    assert text.startswith(
        "We replaced a generative reranker with a cross-encoder over the same top-100 candidates: "
        "nDCG@10 went from 0.260 to 0.300 while p99 latency fell from 400 ms to 40 ms"
    )
    assert measures.p99[reranker.FIRST] == []  # nothing to time for a baseline order
    assert measures.to_json()[key(reranker.P99, TOKENS)] is measures.p99


def test_judging_scorer_writes_and_counts_yes(small_text):
    from maskwise.config import preset
    from maskwise.data.corpus import load_corpus
    from maskwise.data.tokenizers import build_tokenizer
    from maskwise.model.transformer import build_model
    from maskwise.tasks.rerank import judging_scorer

    tokenizer = build_tokenizer("char", load_corpus(str(small_text)))
    torch.manual_seed(0)
    model = build_model(
        preset("gpt2", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2, max_seq_len=64)
    )
    scores = judging_scorer(model, tokenizer, max_len=64)("a line", ["one passage", "another"])
    assert scores.shape == (2,) and set(scores.tolist()) <= {0.0, 1.0}


@pytest.fixture
def bert_folder(tmp_path, small_text):
    """A random tiny HF ``BertModel`` folder (no MLM head, as all-MiniLM-L6-v2) with a character tokenizer.json."""
    import transformers

    from maskwise.data.corpus import load_corpus
    from maskwise.data.tokenizers import build_tokenizer

    tokenizer = build_tokenizer("char", load_corpus(str(small_text)))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=160,
    )
    transformers.BertModel(config).save_pretrained(tmp_path / "bert")
    tokenizer.save(tmp_path / "bert" / "tokenizer.json")
    return tmp_path / "bert"


@pytest.mark.integration
def test_segment_readout_scores_the_cosine_of_each_parts_mean_state_in_one_joint_pass():
    from maskwise.config import preset
    from maskwise.model.transformer import build_model
    from maskwise.tasks.cross_encoder import CrossEncoder

    torch.manual_seed(0)
    body = build_model(preset("bert", vocab_size=40, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=16))
    model = CrossEncoder(body, readout="segments").eval()
    ids = torch.tensor([[1, 5, 6, 2, 7, 8, 9, 2, 0], [1, 5, 6, 2, 7, 3, 9, 2, 0]])  # the passages differ in one token
    mask = torch.tensor([[1] * 8 + [0]] * 2)
    types = torch.tensor([[0] * 4 + [1] * 5] * 2)
    with torch.no_grad():
        h = body.hidden_states(ids, mask, types)  # (2, 9, 16)
        expected = 20 * torch.cosine_similarity(h[:, :4].mean(1), h[:, 4:8].mean(1), dim=-1)
        scores = model(ids, mask, types)
    assert torch.allclose(scores, expected, atol=1e-5)
    assert not torch.allclose(scores[0], scores[1])  # the query's states read the passage: one joint pass
    assert [name for name, _ in model.head.named_parameters()] == ["log_scale"]


def test_cls_readout_scores_the_cls_state_which_the_body_computes_alone():
    from maskwise.config import preset
    from maskwise.model.heads import pool
    from maskwise.model.transformer import build_model
    from maskwise.tasks.cross_encoder import CrossEncoder

    torch.manual_seed(0)
    body = build_model(preset("bert", vocab_size=40, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=16))
    model = CrossEncoder(body, readout="cls").eval()
    ids = torch.tensor([[1, 5, 6, 2, 7, 8, 9, 2, 0], [0, 1, 5, 2, 7, 3, 9, 2, 2]])
    mask = torch.tensor([[1] * 8 + [0], [0] + [1] * 8])  # right and left padding: [CLS] at 0 and at 1
    types = torch.tensor([[0] * 4 + [1] * 5, [0] * 4 + [1] * 5])
    with torch.no_grad():
        cls = pool(body.hidden_states(ids, mask, types), mask, "cls")  # (2, 16)
        expected = model.head.proj(cls).squeeze(-1)
        scores = model(ids, mask, types)
    assert torch.allclose(scores, expected, atol=1e-5)


def test_models_option_is_checked_in_one_line_before_anything_runs(bert_folder, tmp_path):
    from maskwise.errors import UserError
    from maskwise.experiments.ablations.registry import checked

    only_cross = StudyOptions(models=f"cross={bert_folder}")
    assert reranker.ABLATION.arms(only_cross) == (reranker.CLM_DECODER,)  # only the decoder is pretrained here
    assert reranker.checkpoints(f" cross = {bert_folder} ") == {"cross": bert_folder.resolve()}
    for models, needle in (
        (f"cross={tmp_path / 'nope'}", "no such folder"),
        ("judge=x", "expected cross=FOLDER"),
        (f"cross={bert_folder},cross={bert_folder}", "expected cross=FOLDER"),
        (f"generative={bert_folder}", "holds a model of family encoder"),
    ):
        with pytest.raises(UserError, match=needle) as error:
            checked("reranker", "smoke", 2, StudyOptions(models=models))
        assert "\n" not in str(error.value)


@pytest.mark.e2e
@pytest.mark.slow
def test_reranker_ablation_starts_its_cross_encoder_from_a_folder_on_a_beir_task(bert_folder, tmp_path):
    import json

    from maskwise.data.user_tasks import parse_task
    from maskwise.experiments.ablations.registry import run_ablation
    from maskwise.tasks.registry import TASKS
    from tests.test_beir import TEST_QRELS, TRAIN_QRELS, write_beir

    beir = write_beir(tmp_path / "beir", {"train": TRAIN_QRELS, "test": TEST_QRELS})
    out = run_ablation(
        "reranker",
        tmp_path / "out",
        "smoke",
        2,
        tasks=[parse_task(f"t=rerank:{beir}", tuple(TASKS))],
        options=StudyOptions(models=f"cross={bert_folder}"),
    )
    results = json.loads((out / "results.json").read_text())
    assert "the 3 test queries of the user's task t" in " ".join(results["notes"])
    assert set(results["parameters"]) == {reranker.CLM_DECODER.label}  # no encoder pretrained
    ndcg = results["metrics"][key(reranker.NDCG, TOKENS)]
    assert all(len(ndcg[system]) == 2 for system in reranker.SYSTEMS)
    folders = json.loads((out / "steps" / "rerank-folders-seed1.json").read_text())
    cross = folders["systems"][reranker.CROSS]
    assert folders["bodies"]["cross"]["folder"] == str(bert_folder.resolve())
    assert (cross["settings"]["lr"], cross["settings"]["head_lr"], cross["settings"]["batch_size"]) == (
        5e-5,
        5e-5,
        8,
    )  # a pretrained body: HF Trainer's batch and rate (``finetune.FINE_TUNING``)
    assert cross["settings"]["readout"] == cross["readout"] == "segments"  # a pretrained body scores as it was trained
    assert any(f"the folder {bert_folder.resolve()}" in note for note in results["notes"])
    assert results["settings"]["models"] == f"cross={bert_folder}"
