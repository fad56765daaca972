"""Build a corpus and three task files from real scientific English shipped inside a PyPI package.

Source: ACLSum (Takeshita et al., "ACLSum: A New Dataset for Aspect-based Summarization of Scientific
Publications", NAACL 2024) as shipped inside the PyPI package ``aclsum`` (0.1.2, a 5 MB wheel; files under
``aclsum/dataset/``): 250 ACL Anthology papers (2006-2022), each as the full text parsed by S2ORC
(``paper_jsons/<id>.json``: title, abstract, body paragraphs with their section heading, figure and table captions
and the paragraphs that cite them) and, in ``train.jsonl`` / ``val.jsonl`` / ``test.jsonl``, the sentences of its
abstract, introduction and conclusion with the annotators' sentence labels (which sentences state the paper's
challenge, approach or outcome). A kind of text this project had not used: research papers, not news or verse.

Licence as stated by the package: "License: MIT" (the packaging and annotations). The papers are ACL Anthology
papers (most under CC BY 4.0); the S2ORC parses are under ODC-By. Nothing is redistributed here: the script reads the
installed package's files at run time.

Install (data only; the package's one dependency, ``sienna``, is not needed):
    pip install --no-deps aclsum==0.1.2

Usage:
    python benchmarks/prepare_trend_data.py OUT_DIR

Writes into OUT_DIR (every test row comes from a held-out paper, and no held-out paper is in corpus.jsonl):
    corpus.jsonl                          {"text": title, abstract, then each section's heading and paragraphs}, one
                                          line a training paper (~5 MB)
    aspects_train.jsonl / _test.jsonl     classify: {"text": a sentence of an abstract, introduction or conclusion,
                                          "label": challenge | approach | outcome | none}, the annotators' label
                                          (sentences they gave two aspects are dropped); "none" is the majority
    captions_train.jsonl / _test.jsonl    embed (and rerank): {"query": a figure or table caption (its "Figure N:"
                                          label dropped), "positive": the first body paragraph that cites it}
    headings_train.jsonl / _test.jsonl    seq2seq: {"source": a section's paragraphs (joined by newlines, whole
                                          paragraphs up to 2,000 characters; a longer first paragraph cut at a word
                                          boundary), "target": the section's heading as the authors wrote it}

Sizes (printed by the script): corpus 5.6 MB (200 papers); aspects 3,000 train / 600 test rows (62% "none");
captions 872 / 209 rows (200 distinct test paragraphs); headings 2,892 / 600 rows, sources 201-2,000 characters
(mean ~1,200). Targets are at most 60 characters (compare refuses a
target longer than half the smallest context).

Split: the 250 papers (sorted by id) are shuffled with a fixed seed and cut 80/20 at the paper level. Test rows
whose text (sentence, caption, source) a training paper has verbatim are dropped (shared boilerplate such as "The
paper is organized as follows."), and so are sentences of fewer than 5 words (parser fragments). Each task's rows are
then shuffled with the same seed and capped (3,000 train, 600 test). Deterministic; stdlib only. The ACLSum sentences
are pre-tokenised ("we explore , ..."); a few rules detokenise them so that they read like the corpus.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import random
import re
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

DIST = "aclsum"
DATA_PREFIX = "aclsum/dataset/"
INSTALL_HINT = "pip install --no-deps aclsum==0.1.2"

SEED = 20240607
TEST_FRACTION = 0.2
TRAIN_CAP = 3000
TEST_CAP = 600
ASPECTS = ("challenge", "approach", "outcome")
PARTS = ("abstract", "introduction", "conclusion")
MAX_TARGET_CHARS = 60
MIN_SOURCE_CHARS, MAX_SOURCE_CHARS = 200, 2000
MIN_CAPTION_CHARS = 30
MIN_SENTENCE_WORDS = 5  # drops parser fragments ("1.")
MIN_PARAGRAPH_CHARS = 100

CAPTION_LABEL = re.compile(r"^\s*(?:figure|fig\.|table)\s*\d+[a-z]?\s*[:.]?\s*", re.IGNORECASE)
Row = dict[str, str]
Paper = dict[str, Any]


def find_data() -> tuple[md.Distribution, Path]:
    """The installed aclsum distribution and its dataset folder; exit 2 with the install command if missing."""
    try:
        dist = md.distribution(DIST)
    except md.PackageNotFoundError:
        print(f"error: the ACLSum data is not installed; run: {INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(2) from None
    marker = next((f for f in dist.files or [] if str(f) == DATA_PREFIX + "train.jsonl"), None)
    if marker is None:
        print(f"error: {DIST} {dist.version} has no {DATA_PREFIX}train.jsonl; run: {INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(2)
    return dist, Path(str(marker.locate())).parent


def detokenize(sentence: str) -> str:
    """Undo the PTB-style spacing of ACLSum's sentences ("results , we" -> "results, we")."""
    text = " ".join(sentence.split())
    text = re.sub(r" ([,.;:?!%)\]])", r"\1", text)
    text = re.sub(r"([(\[]) ", r"\1", text)
    text = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", text)
    return text.replace("`` ", '"').replace(" ''", '"')


def load_papers(folder: Path) -> dict[str, Paper]:
    """Paper id -> S2ORC parse, with the annotated sentences (by split file order) attached as "aclsum"."""
    papers: dict[str, Paper] = {}
    for path in sorted((folder / "paper_jsons").glob("*.json")):
        papers[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    for name in ("train", "val", "test"):
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row["id"] in papers:
                    papers[row["id"]]["aclsum"] = row
    return papers


def sections(paper: Paper) -> list[tuple[str, list[str]]]:
    """Consecutive body paragraphs grouped by (heading, number): [(heading, paragraphs)]."""
    out: list[tuple[str, list[str]]] = []
    last: tuple[str, str] | None = None
    for block in paper["pdf_parse"]["body_text"]:
        key = (" ".join(block["section"].split()), str(block.get("sec_num")))
        text = " ".join(block["text"].split())
        if not text:
            continue
        if key == last:
            out[-1][1].append(text)
        else:
            out.append((key[0], [text]))
            last = key
    return out


def paper_text(paper: Paper) -> str:
    lines = [paper["title"], paper.get("abstract") or ""]
    for heading, paragraphs in sections(paper):
        lines += [heading, *paragraphs] if heading else paragraphs
    return "\n".join(line for line in lines if line.strip())


def aspect_rows(paper: Paper) -> list[Row]:
    row = paper.get("aclsum")
    if row is None:
        return []
    out = []
    for part in PARTS:
        for i, sentence in enumerate(row["sentences"][part]):
            labels = [a for a in ASPECTS if row["highlights"][a][part][i]]
            if len(labels) <= 1 and len((text := detokenize(sentence)).split()) >= MIN_SENTENCE_WORDS:
                out.append({"text": text, "label": labels[0] if labels else "none"})
    return out


def caption_rows(paper: Paper) -> list[Row]:
    parse = paper["pdf_parse"]
    paragraphs = [b for b in parse["body_text"] if len(b["text"].strip()) >= MIN_PARAGRAPH_CHARS]
    out = []
    for key, entry in sorted(parse.get("ref_entries", {}).items()):
        caption = " ".join(CAPTION_LABEL.sub("", entry.get("text") or "").split())
        if len(caption) < MIN_CAPTION_CHARS:
            continue
        citing = next((b for b in paragraphs if any(s.get("ref_id") == key for s in b["ref_spans"])), None)
        if citing is not None:
            out.append({"query": caption, "positive": " ".join(citing["text"].split())})
    return out


def bounded_source(paragraphs: list[str]) -> str:
    """Whole paragraphs up to MAX_SOURCE_CHARS; a longer first paragraph cut back to a word boundary."""
    kept: list[str] = []
    for p in paragraphs:
        if len("\n".join([*kept, p])) > MAX_SOURCE_CHARS:
            break
        kept.append(p)
    if kept:
        return "\n".join(kept)
    cut = paragraphs[0][:MAX_SOURCE_CHARS]
    return cut[: cut.rfind(" ")].rstrip() if " " in cut else cut


def heading_rows(paper: Paper) -> list[Row]:
    out = []
    for heading, paragraphs in sections(paper):
        if not (3 <= len(heading) <= MAX_TARGET_CHARS) or not re.search(r"[A-Za-z]{2}", heading):
            continue
        source = bounded_source(paragraphs)
        if len(source) >= MIN_SOURCE_CHARS:
            out.append({"source": source, "target": heading})
    return out


def write_jsonl(path: Path, rows: list[Row]) -> int:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)


def capped(rows: list[Row], cap: int) -> list[Row]:
    rows = list(rows)
    random.Random(SEED).shuffle(rows)
    return rows[:cap]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: python {Path(argv[0]).name} OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    dist, folder = find_data()
    papers = load_papers(folder)
    ids = sorted(papers)
    random.Random(SEED).shuffle(ids)
    n_test = round(len(ids) * TEST_FRACTION)
    split = {"test": sorted(ids[:n_test]), "train": sorted(ids[n_test:])}
    out.mkdir(parents=True, exist_ok=True)

    counts: dict[str, int] = {}
    corpus = [{"text": paper_text(papers[i])} for i in split["train"]]
    counts["corpus.jsonl"] = write_jsonl(out / "corpus.jsonl", corpus)
    tasks = {
        "aspects": (aspect_rows, "text"),
        "captions": (caption_rows, "query"),
        "headings": (heading_rows, "source"),
    }
    source_chars: list[int] = []
    for name, (make, key) in tasks.items():
        train = [r for i in split["train"] for r in make(papers[i])]
        seen = {r[key] for r in train}
        # boilerplate that other papers share verbatim ("The paper is organized as follows.") is no held-out item
        test = [r for i in split["test"] for r in make(papers[i]) if r[key] not in seen]
        for part, rows in (("train", capped(train, TRAIN_CAP)), ("test", capped(test, TEST_CAP))):
            counts[f"{name}_{part}.jsonl"] = write_jsonl(out / f"{name}_{part}.jsonl", rows)
            if name == "headings":
                source_chars += [len(r["source"]) for r in rows]

    print(
        f"source: {dist.metadata['Name']} {dist.version} ({len(papers)} ACL papers; "
        f"{len(split['train'])} train / {len(split['test'])} test papers)"
    )
    for name, n in counts.items():
        print(f"{name:24s} {n:6d} rows  {(out / name).stat().st_size / 1e6:6.2f} MB")
    print(
        f"headings sources: mean {statistics.mean(source_chars):.0f} characters, "
        f"median {statistics.median(source_chars):.0f}, {min(source_chars)}-{max(source_chars)}"
    )
    d = shlex.quote(str(out))
    print("\nrun:")
    print(
        f"maskwise compare --data {d}/corpus.jsonl \\\n"
        f"  --task aspects=classify:{d}/aspects_train.jsonl,test={d}/aspects_test.jsonl \\\n"
        f"  --task captions=embed:{d}/captions_train.jsonl,test={d}/captions_test.jsonl \\\n"
        f"  --task headings=seq2seq:{d}/headings_train.jsonl,test={d}/headings_test.jsonl \\\n"
        f"  --trend --out {shlex.quote(str(out.with_name(out.name + '_compare')))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
