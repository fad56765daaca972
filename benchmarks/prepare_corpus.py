"""Peak memory and speed of preparing a corpus larger than one would like to hold: generate a
multi-GB corpus of pseudo-words as Parquet shards, then prepare it the way ``maskwise pretrain``
does (one hashing pass, a tokenizer trained on a sample, documents streamed in chunks into the
memory-mapped token files) in a fresh process, and report that process's peak RSS and tokens/s.

    python benchmarks/prepare_corpus.py [--gb 2] [--tokenizer bpe] [--vocab-size 8192] [--dir /tmp]

The corpus and the cache live in a temporary folder under ``--dir`` that is deleted afterwards
(``--keep`` keeps it). The issue's bar: peak RSS under 1 GB while preparing 2 GB of text. The
preparation runs in a child process so that the generator's memory is not counted; its peak is the
kernel's high-water mark (``VmHWM``, else ``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DOCUMENTS_PER_BATCH = 2000
BATCHES_PER_SHARD = 32
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def pseudo_words(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` distinct made-up words of 1-4 syllables, some with trailing punctuation."""
    words: set[str] = set()
    while len(words) < count:
        word = "".join(rng.choice(SYLLABLES, size=rng.integers(1, 5)))
        words.add(word + rng.choice(["", "", "", "", "", "", ",", "."]))
    return np.array(sorted(words), dtype=object)


def generate(folder: Path, target_bytes: int, seed: int = 0) -> tuple[int, int]:
    """Parquet shards of documents (Zipf-distributed words, 100-1,500 per document) until
    ``target_bytes`` of text; returns (documents, bytes of text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    vocabulary = pseudo_words(rng, 50_000)
    weights = 1.0 / (np.arange(len(vocabulary)) + 2.7)
    cumulative = np.cumsum(weights / weights.sum())
    documents = written = shard = 0
    writer = None
    batches_in_shard = 0
    while written < target_bytes:
        if writer is None:
            writer = pq.ParquetWriter(folder / f"shard-{shard:04d}.parquet", pa.schema([("text", pa.string())]))
        lengths = rng.integers(100, 1500, size=DOCUMENTS_PER_BATCH)
        picks = np.searchsorted(cumulative, rng.random(lengths.sum()))
        words = vocabulary[np.minimum(picks, len(vocabulary) - 1)]
        ends = np.cumsum(lengths)
        texts = [" ".join(words[end - length : end]) for end, length in zip(ends, lengths)]
        writer.write_table(pa.table({"text": texts}), row_group_size=DOCUMENTS_PER_BATCH)
        documents += len(texts)
        written += sum(len(text) for text in texts)  # ASCII: characters are bytes
        batches_in_shard += 1
        if batches_in_shard == BATCHES_PER_SHARD:
            writer.close()
            writer, batches_in_shard, shard = None, 0, shard + 1
    if writer is not None:
        writer.close()
    return documents, written


def peak_rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def prepare(data: str, tokenizer_kind: str, vocab_size: int) -> dict:
    """What ``maskwise pretrain`` does before its first step, timed phase by phase (run in the child)."""
    from maskwise.data.corpus import load_corpus
    from maskwise.data.stream import TokenStream
    from maskwise.data.tokenizers import build_tokenizer

    start = time.perf_counter()
    corpus = load_corpus(data)
    scanned = time.perf_counter()
    tokenizer = build_tokenizer(tokenizer_kind, corpus, vocab_size)
    trained = time.perf_counter()
    train = TokenStream.from_texts(corpus.train_part, tokenizer, cache_key=f"{corpus.fingerprint}/train", progress=True)
    val = TokenStream.from_texts(corpus.val_part, tokenizer, cache_key=f"{corpus.fingerprint}/val", progress=True)
    tokenized = time.perf_counter()
    tokens = len(train) + len(val)
    return {
        "documents": len(corpus.train_part) + len(corpus.val_part),
        "characters": corpus.train_part.source_chars,
        "tokens": tokens,
        "dtype": str(train.ids.dtype),
        "vocab_size": tokenizer.vocab_size,
        "hash_s": round(scanned - start, 1),
        "tokenizer_s": round(trained - scanned, 1),
        "tokenize_s": round(tokenized - trained, 1),
        "total_s": round(tokenized - start, 1),
        "tokens_per_s": round(tokens / max(tokenized - trained, 1e-9)),
        "peak_rss_mb": round(peak_rss_bytes() / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="size of the generated text in GB (10^9 bytes)")
    parser.add_argument("--tokenizer", default="bpe", help="char, wordpiece or bpe")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary folder goes")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpus and cache")
    parser.add_argument("--prepare-only", metavar="DATA", help=argparse.SUPPRESS)  # the child's entry point
    args = parser.parse_args()
    if args.prepare_only:
        print(json.dumps(prepare(args.prepare_only, args.tokenizer, args.vocab_size)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="maskwise-prepare-", dir=args.dir))
    try:
        shards = work / "shards"
        shards.mkdir()
        start = time.perf_counter()
        documents, written = generate(shards, int(args.gb * 1e9))
        on_disk = sum(file.stat().st_size for file in shards.iterdir())
        print(
            f"generated {documents:,} documents, {written / 1e9:.2f} GB of text ({on_disk / 1e9:.2f} GB of "
            f"Parquet) in {time.perf_counter() - start:.0f} s under {work}",
            flush=True,
        )
        env = {**os.environ, "MASKWISE_CACHE": str(work / "cache")}
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--prepare-only",
                str(shards / "*.parquet"),
                "--tokenizer",
                args.tokenizer,
                "--vocab-size",
                str(args.vocab_size),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        result = json.loads(child.stdout.strip().splitlines()[-1])
        print(json.dumps(result))
        verdict = "under" if result["peak_rss_mb"] < 1024 else "OVER"
        print(
            f"peak RSS of the preparation: {result['peak_rss_mb']:.0f} MB ({verdict} the 1 GB bar); "
            f"{result['tokens_per_s']:,} tokens/s tokenizing ({result['tokens']:,} tokens, {result['dtype']})"
        )
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
