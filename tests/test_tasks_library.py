"""Tasks through the library: pooling under padding, the optimizer's body/head groups, and one tiny
end-to-end run per task (a few steps on tiny models: this checks the plumbing, not the quality,
which benchmarks/tasks_quality.py measures)."""

import copy
import math

import pytest
import torch

from maskwise.config import preset
from maskwise.data.corpus import load_corpus
from maskwise.data.tasks import (
    RetrievalSet,
    genre_examples,
    ict_retrieval,
    speaker_examples,
)
from maskwise.data.tokenizers import build_tokenizer
from maskwise.errors import UserError
from maskwise.model.heads import pool
from maskwise.model.transformer import build_model
from maskwise.padding import pad
from maskwise.runtime import resolve
from maskwise.tasks.classify import (
    HEAD_PREFIX,
    ClassifyConfig,
    SequenceClassifier,
    evaluate_classifier,
    train_classifier,
    zero_shot_classify,
)
from maskwise.tasks.embed import EmbedConfig, Embedder, info_nce, train_bi_encoder
from maskwise.tasks.fill_mask import (
    break_exercise,
    decoder_token_nats,
    fill_mask,
    nats_per_char_blocks,
)
from maskwise.tasks.finetune import FinetuneConfig, fine_tune, finetune_optimizer
from maskwise.tasks.generate import GenerationConfig
from maskwise.tasks.rerank import (
    RerankConfig,
    RerankRecord,
    cross_encoder_scorer,
    evaluate_reranker,
    generative_scorer,
    hard_negatives,
    random_negatives,
    train_cross_encoder,
    train_generative_reranker,
)
from maskwise.tasks.retrieve import evaluate_retrieval, rank, search
from maskwise.tasks.run import run_task
from maskwise.tasks.seq2seq import (
    Seq2SeqConfig,
    evaluate_seq2seq,
    seq2seq_batch,
    train_seq2seq,
)

PRESETS = {"encoder": "bert", "decoder": "gpt2", "encoder-decoder": "t5"}
QUICK = {"steps": 2, "batch_size": 4, "progress": False}


@pytest.fixture(scope="module")
def tokenizer(small_text):
    return build_tokenizer("char", load_corpus(str(small_text)))


def tiny(family: str, tokenizer, context: int = 96):
    torch.manual_seed(0)
    return build_model(
        preset(PRESETS[family], vocab_size=tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2, max_seq_len=context)
    )


@pytest.fixture(scope="module")
def retrieval():
    """A small ICT set: 12 queries whose passages are among the first 40 of the test collection."""
    full = ict_retrieval("test")
    keep = [i for i, d in enumerate(full.relevant) if d < 40][:12]
    return RetrievalSet(tuple(full.queries[i] for i in keep), full.docs[:40], tuple(full.relevant[i] for i in keep))


# ---- pooling and the optimizer ------------------------------------------------------------------


@pytest.mark.unit
def test_pool_reads_real_tokens_under_left_and_right_padding():
    h = torch.arange(2 * 4 * 1, dtype=torch.float32).view(2, 4, 1)  # row 0: 0..3, row 1: 4..7
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    assert pool(h, right, "cls")[:, 0].tolist() == [0, 4]
    assert pool(h, left, "cls")[:, 0].tolist() == [1, 4]
    assert pool(h, right, "last")[:, 0].tolist() == [2, 7]
    assert pool(h, left, "last")[:, 0].tolist() == [3, 7]
    assert pool(h, right, "mean")[:, 0].tolist() == [1, 5.5]
    assert pool(h, left, "mean")[:, 0].tolist() == [2, 5.5]


@pytest.mark.unit
@pytest.mark.parametrize(
    "family, side, poolings",
    [
        ("decoder", "left", ("last", "mean")),
        ("decoder", "right", ("last", "mean")),
        ("encoder", "right", ("cls", "mean")),
        ("encoder-decoder", "right", ("mean",)),
    ],
)
def test_pooled_body_states_do_not_depend_on_padding(tokenizer, family, side, poolings):
    model = tiny(family, tokenizer).eval()
    short, longer = tokenizer.encode("To be"), tokenizer.encode("or not to be, that")
    ids, mask = pad([short, longer], tokenizer.pad_id, side)
    alone_ids, alone_mask = pad([short], tokenizer.pad_id, side)
    with torch.no_grad():
        batched, alone = model.read(ids, mask), model.read(alone_ids, alone_mask)
    for how in poolings:
        torch.testing.assert_close(pool(batched, mask, how)[0], pool(alone, alone_mask, how)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.unit
@pytest.mark.parametrize(
    "family, side, pooling",
    [
        ("encoder", "right", "cls"),
        ("encoder", "left", "cls"),
        ("decoder", "left", "last"),
        ("decoder", "right", "last"),
        ("encoder-decoder", "right", "cls"),
    ],
)
def test_a_one_position_classifier_reads_that_position_alone_as_the_pooled_full_read(tokenizer, family, side, pooling):
    classifier = SequenceClassifier(tiny(family, tokenizer), ["a", "b", "c"], pooling).eval()
    ids, mask = pad([tokenizer.encode("To be"), tokenizer.encode("or not to be, that")], tokenizer.pad_id, side)
    with torch.no_grad():
        expected = classifier.head(pool(classifier.body.read(ids, mask), mask, pooling))
        torch.testing.assert_close(classifier(ids, mask), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.unit
def test_body_and_head_learning_rates_differ_in_the_optimizer(tokenizer):
    classifier = SequenceClassifier(tiny("encoder", tokenizer), ["a", "b"])
    optimizer = finetune_optimizer(classifier, FinetuneConfig(lr=2e-5, head_lr=1e-3), (HEAD_PREFIX,))
    lrs = {group["name"]: group["lr"] for group in optimizer.param_groups}
    assert {k: v for k, v in lrs.items() if k.startswith("head")} == {"head.decay": 1e-3, "head.no_decay": 1e-3}
    assert {v for k, v in lrs.items() if k.startswith("body")} == {2e-5}
    head_params = {id(p) for p in classifier.head.parameters()}
    for group in optimizer.param_groups:
        assert all((id(p) in head_params) == group["name"].startswith("head") for p in group["params"])
    probe = SequenceClassifier(tiny("encoder", tokenizer), ["a", "b"], freeze=True)
    groups = finetune_optimizer(probe, FinetuneConfig(), (HEAD_PREFIX,)).param_groups
    assert {g["name"] for g in groups} == {"head.decay", "head.no_decay"}  # a probe trains the head only


@pytest.mark.integration
@pytest.mark.parametrize("bf16", [False, True])
def test_fine_tune_bf16_autocasts_the_forward_and_keeps_fp32_weights(tokenizer, bf16):
    model = tiny("decoder", tokenizer)
    ids = torch.tensor([tokenizer.encode("To be, or not to be")])
    seen = []

    def step_loss(rng):
        out = model(ids, labels=ids)
        seen.append(model.stack.blocks[0].ffn.up(out.loss.new_ones(1, model.cfg.d_model)).dtype)
        return out.loss

    losses = fine_tune(model, step_loss, FinetuneConfig(**{**QUICK, "bf16": bf16}))
    assert all(math.isfinite(x) for x in losses)
    assert set(seen) == {torch.bfloat16 if bf16 else torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.unit
def test_info_nce_prefers_matching_pairs():
    q = torch.nn.functional.normalize(torch.eye(4) + 0.01, dim=-1)
    assert info_nce(q, q) < info_nce(q, q.roll(1, dims=0))
    assert float(info_nce(q, q, temperature=0.01)) < 1e-3


@pytest.mark.unit
def test_seq2seq_batch_labels_the_target_only(tokenizer):
    from maskwise.data.tasks import Seq2SeqExample

    example = Seq2SeqExample("A\nhi", "A", "x")
    decoder = tiny("decoder", tokenizer)
    batch = seq2seq_batch(decoder, tokenizer, [example], max_target_len=8)
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    source = tokenizer.encode("A\nhi") + [tokenizer.sep_id]
    assert ids == source + tokenizer.encode("A") + [tokenizer.eos_id]
    # position t predicts token t+1: the labelled positions predict "A" then [EOS]
    assert labels == [-100] * (len(source) - 1) + tokenizer.encode("A") + [tokenizer.eos_id, -100]
    batch = seq2seq_batch(tiny("encoder-decoder", tokenizer), tokenizer, [example], max_target_len=8)
    assert batch["labels"][0].tolist() == tokenizer.encode("A") + [tokenizer.eos_id]
    assert batch["decoder_input_ids"][0, 0] == tokenizer.pad_id  # the span objective's decoder start


# ---- one tiny run per task ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("family, freeze", [("encoder", False), ("decoder", True), ("encoder-decoder", False)])
def test_classify_end_to_end(tokenizer, family, freeze):
    train, test = genre_examples("train", per_genre=4), genre_examples("test", per_genre=2)
    model = train_classifier(tiny(family, tokenizer), tokenizer, train, ClassifyConfig(freeze=freeze, **QUICK))
    result = evaluate_classifier(model, tokenizer, test, [e.label for e in train])
    assert result.mode == ("probe" if freeze else "finetune") and result.pooling == model.pooling
    assert 0 <= result.accuracy <= 1 and result.baseline.accuracy == pytest.approx(1 / 6)


@pytest.mark.unit
def test_an_unknown_plays_task_is_refused_before_rows_are_drawn(tokenizer):
    cfg = ClassifyConfig(plays_task="sonnets", steps=1)
    known = "genre, line-order, word-order, sentence-mark"
    with pytest.raises(UserError, match=f"unknown plays task 'sonnets'; known: {known}"):
        run_task(cfg, tiny("encoder", tokenizer), tokenizer, resolve("cpu", "fp32"))


@pytest.mark.integration
@pytest.mark.precision("fp32")
def test_a_fine_tune_with_a_seed_is_the_same_whatever_the_global_random_state(tokenizer):
    """The fresh head is drawn from the run's seed, not from whatever torch's generator held (torch seeds
    it at random in every process), so one seed gives one result."""
    train = genre_examples("train", per_genre=4)
    cfg = ClassifyConfig(**{**QUICK, "steps": 2})
    body = tiny("encoder", tokenizer)
    heads = []
    for state in (1, 2):
        torch.manual_seed(state)
        model = train_classifier(copy.deepcopy(body), tokenizer, train, cfg)
        heads.append([p.detach().clone() for p in model.head.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*heads))


@pytest.mark.integration
def test_zero_shot_classify_by_prompting(tokenizer):
    texts = [e.text for e in genre_examples("test", per_genre=1)]
    labels = zero_shot_classify(tiny("decoder", tokenizer), tokenizer, texts, ["comedy", "tragedy"])
    assert len(labels) == len(texts) and set(labels) <= {"comedy", "tragedy"}


@pytest.mark.unit
def test_zero_shot_picks_the_label_with_the_best_log_probability_per_token(tokenizer, monkeypatch):
    """Known continuation scores, known answers: per token by default (a short label does not win on
    length alone), by the sum when asked."""
    from maskwise.tasks import classify

    labels = ["roman", "tragedy"]  # " roman" 6 characters, " tragedy" 8
    sums = torch.tensor(
        [
            -6.0,
            -7.2,  # text 0: means -1.00 vs -0.90: tragedy per token, roman by sum
            -3.0,
            -8.0,
        ]
    )  # text 1: roman either way
    seen = {}

    def scores(model, prompts, continuations, pad_id, batch_size, start):
        seen["continuations"] = continuations
        return sums.clone()

    monkeypatch.setattr(classify, "continuation_logprobs", scores)
    model = tiny("decoder", tokenizer)
    assert zero_shot_classify(model, tokenizer, ["a", "b"], labels) == ["tragedy", "roman"]
    assert zero_shot_classify(model, tokenizer, ["a", "b"], labels, per_token=False) == ["roman", "roman"]
    assert [len(ids) for ids in seen["continuations"]] == [6, 8, 6, 8]  # each prompt with each label, in order


@pytest.mark.integration
def test_embed_and_retrieve_end_to_end(tokenizer, retrieval):
    pairs = ict_retrieval("train", max_queries=20).pairs()
    bi = train_bi_encoder(tiny("encoder", tokenizer), tokenizer, pairs, EmbedConfig(max_len=48, **QUICK))
    result = evaluate_retrieval(Embedder(bi, tokenizer, max_len=48), retrieval, k=10)
    assert result.n_queries == 12 and 0 <= result.ndcg_at_10 <= 1
    assert sum(b.n for b in result.by_passage_chars.values()) == 12
    assert 0 <= result.baseline.recall_at_10 <= 1 and result.baseline.expected.recall_at_10 == 10 / 40

    def external(texts):  # any callable embedder is a baseline: here, letter counts
        return torch.stack(
            [torch.tensor([t.lower().count(c) for c in "etaoinshr"], dtype=torch.float32) for t in texts]
        )

    assert evaluate_retrieval(external, retrieval, k=10).n_docs == 40
    _, index = search(torch.eye(3), torch.tensor([[0.0, 1, 0], [1, 0, 0], [0.5, 0.5, 0]]), k=2)
    assert index.tolist() == [[1, 2], [0, 2], [0, 1]]


@pytest.mark.integration
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_rerank_end_to_end(tokenizer, retrieval, family):
    model = tiny(family, tokenizer, context=128)
    embedder = Embedder(
        train_bi_encoder(tiny("encoder", tokenizer), tokenizer, retrieval.pairs(), EmbedConfig(max_len=48, **QUICK)),
        tokenizer,
        max_len=48,
    )
    ranked, _ = rank(embedder, retrieval, k=4)
    negatives = hard_negatives(ranked, retrieval.relevant, 3)
    cfg = RerankConfig(n_negatives=3, max_len=128, **{**QUICK, "batch_size": 2})
    if family == "encoder":
        score = cross_encoder_scorer(train_cross_encoder(model, tokenizer, retrieval, negatives, cfg), tokenizer)
    else:
        score = generative_scorer(train_generative_reranker(model, tokenizer, retrieval, negatives, cfg), tokenizer)
    candidates, _ = rank(embedder, retrieval, k=5)
    result = evaluate_reranker(score, retrieval, candidates, family, progress=False)
    assert result.candidates_per_query == 5 and result.latency.p99_ms >= result.latency.p50_ms
    assert result.recall["recall@5"] == result.baseline.recall["recall@5"] == result.random_order.recall["recall@5"]
    for baseline, g in (
        (result.random_order, result.ndcg_at_10_gain.over_random_order),
        (result.baseline, result.ndcg_at_10_gain.over_first_stage),
    ):
        assert g.difference == pytest.approx(result.ndcg_at_10 - baseline.ndcg_at_10)
        assert g.ci95_low <= g.difference <= g.ci95_high and 0 <= g.p_not_better <= 1
    written = result.to_json()  # each recall beside mrr and ndcg@10, as ranking_metrics writes them
    assert {"recall@1", "recall@5", "recall@10", "mrr", "ndcg@10"} <= set(written) and "recall" not in written
    assert set(written["baseline"]) == {"name", "recall@1", "recall@5", "recall@10", "mrr", "ndcg@10"}
    assert RerankRecord.from_json(written) == result


@pytest.mark.unit
def test_random_negatives_are_distinct_seeded_and_never_the_relevant_document(retrieval):
    drawn = random_negatives(retrieval, 3, seed=1)
    assert len(drawn) == len(retrieval.relevant)
    assert all(len(set(negs)) == 3 and rel not in negs for negs, rel in zip(drawn, retrieval.relevant))
    assert drawn == random_negatives(retrieval, 3, seed=1) != random_negatives(retrieval, 3, seed=2)
    with pytest.raises(UserError, match="more than"):
        random_negatives(retrieval, len(retrieval.docs), seed=0)


@pytest.mark.integration
@pytest.mark.parametrize("family", ["encoder-decoder", "decoder"])
def test_seq2seq_end_to_end(tokenizer, family):
    model = tiny(family, tokenizer, context=128)
    train = speaker_examples("train", max_chars=80, limit=20)
    test = speaker_examples("test", max_chars=80, limit=4)
    cfg = Seq2SeqConfig(max_target_len=16, **QUICK)
    drawn = []

    def augment(example, rng):  # records what the loop hands over, changes nothing
        drawn.append(example)
        return example

    plain, unused = tiny(family, tokenizer, context=128), tiny(family, tokenizer, context=128)
    train_seq2seq(plain, tokenizer, train, cfg)
    train_seq2seq(unused, tokenizer, train, cfg, augment=augment, augment_prob=0.0)
    assert not drawn  # probability 0: never called, and the batches are those drawn without it
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), unused.state_dict().values()))
    train_seq2seq(model, tokenizer, train, cfg, augment=augment, augment_prob=0.5)
    assert drawn and set(drawn) <= set(train)
    assert 0 < len(drawn) < cfg.steps * cfg.batch_size  # a fraction of the draws, not all or none
    for beams in (1, 2):
        result = evaluate_seq2seq(
            model,
            tokenizer,
            test,
            GenerationConfig(max_new_tokens=17, num_beams=beams),
            cfg.max_target_len,
            progress=False,
        )
        assert result.n_test == 4 and 0 <= result.items_f1 <= 1
    assert result.baseline.items_f1 > 0.4  # the first line names one of the passage's speakers


@pytest.mark.unit
def test_decoder_token_nats_match_the_models_own_loss_across_windows(tokenizer):
    """Per-token nats in half-overlapping windows: in the first window they are the model's own
    shifted loss; every token but the first is scored exactly once; blocks weigh by characters."""
    decoder = tiny("decoder", tokenizer, context=16)
    text = "To be, or not to be: that is the question."
    ids = tokenizer.encode(text)
    nats = decoder_token_nats(decoder, tokenizer, ids)
    assert len(nats) == len(ids) - 1
    head = torch.tensor([ids[:16]])
    labels = torch.cat([head[:, 1:], torch.full((1, 1), -100)], dim=1)
    with torch.no_grad():
        own = float(decoder(head, labels=labels).loss_sum)
    assert sum(nats[:15]) == pytest.approx(own, rel=1e-5)
    blocks = nats_per_char_blocks(decoder, tokenizer, text, blocks=4)
    assert len(blocks) == 4
    size = -(-len(nats) // 4)
    assert blocks[0] == pytest.approx(sum(nats[:size]) / size, rel=1e-5)  # characters: one per token


@pytest.mark.integration
def test_fill_mask_and_break(tokenizer):
    encoder, decoder = tiny("encoder", tokenizer), tiny("decoder", tokenizer)
    predictions = fill_mask(encoder, tokenizer, "To be, or [MASK]ot to [MASK]", top_k=3)
    assert len(predictions) == 2 and all(len(p) == 3 for p in predictions)
    assert all(0 < prob <= 1 for p in predictions for _, prob in p)
    result = break_exercise(
        encoder, tokenizer, decoder, tokenizer, "HAMLET\n", "To be, or not to be: that is", max_new_tokens=8
    )
    assert len(result["decoder"]["sample"]) <= 8
    enc = result["encoder"]
    both = enc["loss_both_sides"]
    assert both["bits_per_char"] == pytest.approx(both["nats_per_char"] / math.log(2))
