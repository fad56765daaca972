"""BM25's cost as the classic column pays it: 1,000 queries ranked over 10,000 documents.

    OMP_NUM_THREADS=1 python benchmarks/bench_bm25.py [--docs 10000] [--queries 1000] [--words 150] [--k 101]

The documents are synthetic but wordy: ``--words`` words each on average (60 to 240), drawn Zipf-wise from a
vocabulary of English function words and 20,000 made-up stems with English endings (-s, -ed, -ing, 's), so the
collection reads as English (``Bm25Analysis.of`` picks the English analysis, Porter stems and all) and has a long
tail of rare words, as real text does. Queries are 4 to 12 words from the same distribution. One call of
``bm25_search`` does everything the classic column does: analyses the documents (the English rule included), builds
the postings, and ranks every query's top ``--k`` (``with_bm25`` asks for 101). Prints seconds per phase and in all;
with bm25s installed (the test extra), bm25s's ``method="lucene"`` on the same tokens too, for context.
"""

from __future__ import annotations

import argparse
import random
import string
import time

from maskwise.tasks.retrieve import Bm25Analysis, bm25_search

FUNCTION = (
    "the of and to a in that is was he for it with as his on be at by i this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so said what up"
).split()
ENDINGS = ("", "", "", "s", "ed", "ing", "'s")


def corpus(n_docs: int, n_queries: int, words: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    stems = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(20_000)]
    vocab = [*FUNCTION, *(stem + rng.choice(ENDINGS) for stem in stems)]
    # Function words take about 40% of running text, as in English; content words follow Zipf's law.
    weights = [8.0 / (r + 1) for r in range(len(FUNCTION))] + [1 / (r + 1) for r in range(len(vocab) - len(FUNCTION))]

    def text(n: int) -> str:
        return " ".join(rng.choices(vocab, weights, k=n)).capitalize() + "."

    docs = [text(rng.randint(words * 2 // 5, words * 8 // 5)) for _ in range(n_docs)]
    return docs, [text(rng.randint(4, 12)) for _ in range(n_queries)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--words", type=int, default=150)
    parser.add_argument("--k", type=int, default=101)
    args = parser.parse_args()
    docs, queries = corpus(args.docs, args.queries, args.words)
    tokens = sum(len(d.split()) for d in docs)
    print(f"{len(docs):,} documents ({tokens:,} words), {len(queries):,} queries, top {args.k}")

    started = time.perf_counter()
    analysis = Bm25Analysis.of(docs)
    decided = time.perf_counter()
    bm25_search(queries, docs, args.k, analysis=analysis)
    done = time.perf_counter()
    print(f"English rule: {decided - started:.2f} s ({analysis.describe()})")
    print(f"maskwise bm25_search (analysis, postings, ranking): {done - decided:.2f} s")
    print(f"total: {done - started:.2f} s")

    try:
        import bm25s
    except ImportError:
        return
    started = time.perf_counter()
    doc_terms = [analysis.terms(d) for d in docs]
    query_terms = [analysis.terms(q) for q in queries]
    analysed = time.perf_counter()
    library = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    library.index(doc_terms, show_progress=False)
    library.retrieve(query_terms, k=args.k, show_progress=False)
    print(
        f"context: bm25s lucene on the same terms: {time.perf_counter() - analysed:.2f} s "
        f"(+ {analysed - started:.2f} s of maskwise's analysis, warm stem cache)"
    )


if __name__ == "__main__":
    main()
