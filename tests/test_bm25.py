"""BM25 as the field runs it: Lucene's variant, checked against bm25s's ``method="lucene"`` on the same tokens; words
with digits and accents kept; Elasticsearch's English analysis where the documents are English and not elsewhere."""

import random

import pytest

from maskwise.data.tasks import RetrievalSet
from maskwise.tasks.retrieve import (
    ENGLISH_SHARE,
    Bm25Analysis,
    RetrievalRecord,
    bm25_ranking,
    bm25_search,
    english_share,
    evaluate_retrieval,
    with_bm25,
    words,
)

pytestmark = pytest.mark.unit

ENGLISH = (
    "The horses were running across the fields of the old farm in 2016.",
    "A king's crown is heavy, and the kingdom is not at peace with its neighbours.",
    "Rain fell on the hills all night; by morning the rivers had flooded the valley.",
    "She sings of the sea and of the ships that never came home.",
)
FRENCH = (
    "Le président a annoncé une nouvelle élection pour 2016, selon le journal du soir.",
    "Les habitants de la ville ont manifesté contre la fermeture de l'usine.",
    "Il pleuvait sur les collines; au matin les rivières avaient inondé la vallée.",
    "Elle chante la mer et les navires qui ne sont jamais rentrés au port.",
)
GERMAN = (
    "Was bleibt, ist die Erinnerung an den Winter, in dem die Kinder im Schnee spielten.",
    "Er will nicht nach Hause, weil es dort zu kalt ist und der Ofen nicht brennt.",
)


def synthetic(seed: int, n_docs: int, n_queries: int) -> tuple[list[str], list[str]]:
    """Documents and queries over a Zipf-weighted vocabulary: common words in many documents, rare ones in few,
    lengths from 3 to 120 words, queries of 1 to 8 words with repeats."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(600)]
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    docs = [" ".join(rng.choices(vocab, weights, k=rng.randint(3, 120))) for _ in range(n_docs)]
    queries = [" ".join(rng.choices(vocab, weights, k=rng.randint(1, 8))) for _ in range(n_queries)]
    return docs, queries


@pytest.mark.parametrize("k1, b", [(1.2, 0.75), (0.9, 0.4), (2.0, 1.0)])
def test_top_100_and_scores_are_bm25s_lucene_variants_on_the_same_tokens(k1, b):
    """bm25s's ``method="lucene"`` (Lucene's idf ln(1 + (N - df + 0.5) / (df + 0.5)), no (k1 + 1) factor): the same
    top 100 in the same order up to ties in score (scores equal to 9 decimals: b = 1 makes many, equal in exact
    arithmetic and a rounding apart in floats), and the same scores (the constant between them is 1)."""
    bm25s = pytest.importorskip("bm25s")
    docs, queries = synthetic(0, 800, 60)
    analysis = Bm25Analysis(english=False)
    ranked, scored = bm25_search(queries, docs, 100, k1=k1, b=b, analysis=analysis)
    library = bm25s.BM25(k1=k1, b=b, method="lucene", dtype="float64")
    library.index([analysis.terms(d) for d in docs], show_progress=False)
    for query, ours, our_scores in zip(queries, ranked, scored):
        theirs = library.get_scores(analysis.terms(query))
        key = {i: (-round(float(theirs[i]), 9), i) for i in range(len(docs))}  # a tie: equal to 9 decimals
        expected = sorted(key.values())[:100]
        got = sorted(key[i] for i in ours)
        assert [score for score, _ in got] == [score for score, _ in expected]  # the same scores at every rank
        last = expected[-1][0]  # a tie across rank 100 may keep either; every other document is the same
        assert [k for k in got if k[0] != last] == [k for k in expected if k[0] != last]
        assert list(zip(our_scores, ours)) == sorted(zip(our_scores, ours), key=lambda p: (-p[0], p[1]))
        assert our_scores == pytest.approx([float(theirs[i]) for i in ours], rel=1e-9, abs=1e-12)
        top, top_scores = library.retrieve([analysis.terms(query)], k=100, show_progress=False)
        assert our_scores == pytest.approx(top_scores[0].tolist(), rel=1e-9, abs=1e-12)


def test_a_repeated_query_word_counts_once_per_occurrence_as_lucene_and_bm25s_count_it():
    docs = ("a horse a horse", "my kingdom for a horse", "the king is dead", "rain")

    def scores(query: str) -> dict[int, float]:
        (ranked,), (scored,) = bm25_search([query], docs, 4)
        return dict(zip(ranked, scored))

    once, twice = scores("horse king"), scores("horse horse king")
    assert once[0] > 0 and once[2] > 0
    assert twice[0] == pytest.approx(2 * once[0]) and twice[1] == pytest.approx(2 * once[1])
    assert twice[2] == pytest.approx(once[2]) and twice[3] == once[3] == 0.0


def test_words_keep_digits_and_accented_letters_and_split_on_underscores():
    assert words("Élection 2016: l'été_chaud, O'er") == ["élection", "2016", "l'été", "chaud", "o'er"]
    data = RetrievalSet(("élection", "2016", "Straße"), FRENCH + ("In der Straße",), (0, 0, 4))
    assert [r[0] for r in bm25_ranking(data, 3)] == [0, 0, 4]  # the old [a-z']+ tokenizer matched none of them


def test_english_documents_get_stop_words_possessives_and_porter_stems_and_french_ones_do_not():
    assert english_share(ENGLISH) >= ENGLISH_SHARE > english_share(FRENCH)
    assert english_share(FRENCH) == 0.0 and english_share(()) == 0.0
    english, french = Bm25Analysis.of(ENGLISH), Bm25Analysis.of(FRENCH)
    assert english.english and not french.english
    assert english.terms("The king's horses were running in 2016") == ["king", "hors", "were", "run", "2016"]
    french_text = "Les rivières avaient inondé la vallée"
    assert french.terms(french_text) == words(french_text) == ["les", "rivières", "avaient", "inondé", "la", "vallée"]
    assert not Bm25Analysis.of(GERMAN).english  # "was", "in", "will" are German words too: not counted
    assert english.describe() == (
        "BM25 (Lucene variant, k1 1.2, b 0.75; English analysis: lower-case, Lucene's 33 English stop words, Porter "
        "stems)"
    )
    assert french.describe().endswith("lower-case words, no stop words or stems: the documents are not English)")
    # a stem finds the document: "flood" and "river" match "flooded" and "rivers" only through Porter
    data = RetrievalSet(("flood river", "a king and his kingdom"), ENGLISH, (2, 1))
    assert [r[0] for r in bm25_ranking(data, 1)] == [2, 1]
    plain = bm25_ranking(data, 4, analysis=Bm25Analysis(english=False))
    assert plain[0] == [0, 1, 2, 3]  # no word in common: every score 0, index order


def test_the_retrieval_record_names_the_analysis_bm25_ran():
    rows = RetrievalSet(("horses running", "sea ships"), ENGLISH, (0, 3))

    def embedder(texts):
        import torch

        return torch.ones(len(texts), 4)

    record = with_bm25(evaluate_retrieval(embedder, rows), rows, [20, 20, 20, 20])
    assert record.classic_method is not None and "English analysis" in record.classic_method
    assert RetrievalRecord.from_json(record.to_json()).classic_method == record.classic_method
