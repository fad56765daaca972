"""Task metrics as plain functions of plain Python values, each checked on hand-computed cases.

Classification: accuracy, macro-F1 (every class counts the same, so a model that ignores a rare genre is not
hidden by the frequent ones). Retrieval: recall@k, MRR (optionally cut at k), nDCG@k, with binary relevance (a
set of relevant documents) or graded relevance (document -> grade, as in a BEIR/TREC qrels file), defined as
trec_eval / pytrec_eval and so BEIR and MTEB define them. Generation: exact match, token F1 (SQuAD's
bag-of-words overlap) and set F1 (for a list of speakers, where order and repetition do not matter), and ROUGE-L
(``rouge-score``) for summaries. Span tags: entity chunks pooled over a test set, found by each scheme's own
rules as seqeval finds them (IOB by its default CoNLL mode, IOBES and BILOU by its strict mode). Plus bucketing
by length and latency percentiles, which every task reports beside its headline number, and a paired bootstrap
that says whether a difference between two systems on the same examples is larger than its sampling noise.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING, Literal, TypeVar

import torch

if TYPE_CHECKING:  # rouge_score loads nltk: imported where a summary is scored (``_rouge_scorer``)
    from rouge_score.rouge_scorer import RougeScorer

Label = TypeVar("Label", bound=Hashable)  # a class or a tag, whichever type the caller's labels are

# ---- classification ---------------------------------------------------------------------------


def accuracy(predicted: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
    _same_length(predicted, gold)
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold) if gold else 0.0


def macro_f1(
    predicted: Sequence[Hashable], gold: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> float:
    """Mean over ``labels`` (default: every label seen in either list) of per-class F1; a class
    never predicted and never gold contributes nothing, one never predicted but gold contributes 0."""
    _same_length(predicted, gold)
    labels = sorted(set(gold) | set(predicted), key=str) if labels is None else list(labels)
    if not labels:
        return 0.0
    scores = []
    for label in labels:
        tp = sum(p == label and g == label for p, g in zip(predicted, gold))
        fp = sum(p == label and g != label for p, g in zip(predicted, gold))
        fn = sum(p != label and g == label for p, g in zip(predicted, gold))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return sum(scores) / len(scores)


def tag_scores(predicted: Sequence[Hashable], gold: Sequence[Hashable], outside: Hashable) -> dict:
    """Per-word tags scored the way tagging is reported (CoNLL's precision, recall and F1 over the
    tags that say something, ``outside`` left out): per tag, micro over every such tag (a word counts
    only if its tag is the gold one), macro (their mean), and ``detection`` F1 (some tag vs none,
    whichever: for punctuation, "a mark goes here")."""
    _same_length(predicted, gold)

    def prf(tp: int, n_predicted: int, n_gold: int) -> dict[str, float]:
        precision = tp / n_predicted if n_predicted else 0.0
        recall = tp / n_gold if n_gold else 0.0
        return {"precision": precision, "recall": recall, "f1": _f1(tp, n_predicted, n_gold), "support": n_gold}

    tags = sorted({t for t in (*predicted, *gold) if t != outside}, key=str)
    per_tag = {
        str(t): prf(
            sum(p == g == t for p, g in zip(predicted, gold)), sum(p == t for p in predicted), sum(g == t for g in gold)
        )
        for t in tags
    }
    n_predicted = sum(p != outside for p in predicted)
    n_gold = sum(g != outside for g in gold)
    micro = prf(sum(p == g != outside for p, g in zip(predicted, gold)), n_predicted, n_gold)
    detection = prf(sum(p != outside and g != outside for p, g in zip(predicted, gold)), n_predicted, n_gold)
    gold_tags = [str(t) for t in tags if per_tag[str(t)]["support"]]
    macro = sum(per_tag[t]["f1"] for t in gold_tags) / len(gold_tags) if gold_tags else 0.0
    return {"micro": micro, "macro_f1": macro, "detection": detection, "per_tag": per_tag}


def majority_label(labels: Iterable[Label] | Mapping[Label, int]) -> Label:
    """The most frequent label (of a list of labels, or of their counts); ties go to the first in sorted order, so
    the baseline is stable."""
    counts = Counter(labels)
    best = max(counts.values())
    return min((label for label, n in counts.items() if n == best), key=str)


# ---- retrieval ----------------------------------------------------------------------------------

# A query's relevant documents: a set (each has gain 1) or a mapping document -> graded relevance,
# where a grade of 0 or less means "judged, not relevant" (trec_eval's relevance level 1).
Relevance = AbstractSet[int] | Mapping[int, float]


def gains(relevant: Relevance) -> dict[int, float]:
    """The relevant documents of one query with their gains (> 0 only)."""
    if isinstance(relevant, Mapping):
        return {doc: float(grade) for doc, grade in relevant.items() if grade > 0}
    return dict.fromkeys(relevant, 1.0)


def recall_at_k(ranked: Sequence[Sequence[int]], relevant: Sequence[Relevance], k: int) -> float:
    """Mean over queries with a relevant document of |relevant in top k| / |relevant|."""
    _same_length(ranked, relevant)
    values = [len(set(r[:k]) & g.keys()) / len(g) for r, g in zip(ranked, map(gains, relevant)) if g]
    return sum(values) / len(values) if values else 0.0


def mrr(ranked: Sequence[Sequence[int]], relevant: Sequence[Relevance], k: int | None = None) -> float:
    """Mean reciprocal rank of the first relevant document within the top ``k`` (all ranks when
    None); 0 for a query where none was ranked there."""
    _same_length(ranked, relevant)
    total = 0.0
    for r, g in zip(ranked, map(gains, relevant)):
        total += next((1.0 / rank for rank, doc in enumerate(r[:k], start=1) if doc in g), 0.0)
    return total / len(ranked) if ranked else 0.0


def ndcg_at_k(ranked: Sequence[Sequence[int]], relevant: Sequence[Relevance], k: int = 10) -> float:
    """nDCG@k with linear gains (trec_eval's ``ndcg_cut``): the sum of gain/log2(rank+1) over the top
    k, divided by the same sum for the ideal ranking (the query's relevant documents by gain, best
    first); averaged over the queries that have a relevant document. A set's members have gain 1."""
    _same_length(ranked, relevant)
    values = []
    for r, g in zip(ranked, map(gains, relevant)):
        if not g:
            continue
        dcg = sum(g.get(doc, 0.0) / math.log2(rank + 1) for rank, doc in enumerate(r[:k], start=1))
        best = sorted(g.values(), reverse=True)[:k]
        ideal = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(best, start=1))
        values.append(dcg / ideal)
    return sum(values) / len(values) if values else 0.0


# ---- generation ---------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Collapse whitespace: generation metrics should not hinge on a trailing newline."""
    return " ".join(text.split())


def exact_match(predicted: str, gold: str) -> float:
    return float(normalise(predicted) == normalise(gold))


def _f1(overlap: int, n_predicted: int, n_gold: int) -> float:
    if n_predicted == 0 and n_gold == 0:
        return 1.0
    if overlap == 0:
        return 0.0
    precision, recall = overlap / n_predicted, overlap / n_gold
    return 2 * precision * recall / (precision + recall)


def token_f1(predicted: str, gold: str) -> float:
    """SQuAD-style F1 over whitespace tokens counted with multiplicity (punctuation attached to a
    word stays part of it: "HAMLET," and "HAMLET" differ, which a comma-separated target makes
    visible rather than hides)."""
    p, g = normalise(predicted).split(), normalise(gold).split()
    overlap = sum((Counter(p) & Counter(g)).values())
    return _f1(overlap, len(p), len(g))


def split_list(text: str, separator: str = ",") -> list[str]:
    """ "A, B ,C" -> ["A", "B", "C"]: the items of a comma-separated list, empty ones dropped."""
    return [item for item in (normalise(part) for part in text.split(separator)) if item]


def set_f1(predicted: str, gold: str, separator: str = ",") -> float:
    """F1 between the *sets* of items of two comma-separated lists (for the speakers task: which
    characters speak, regardless of order or repeats)."""
    p, g = set(split_list(predicted, separator)), set(split_list(gold, separator))
    return _f1(len(p & g), len(p), len(g))


def line_breaks(text: str, words: list[str]) -> tuple[set[int], int]:
    """(the breaks of ``text`` found in ``words``, the breaks it writes): ``text``'s lines (split at "\\n", empty
    ones dropped) but its last each end a break. A line is found where its words are ``words`` from where the last
    line ended (the first line: from the start), and its break stands there, counted in words (after the third word:
    3); a line not found (a word miscopied, dropped, added or moved) puts none, and the next line is looked for at
    its first place at or after the last break found, so one miscopied line costs its own break only."""
    lines = [line.split() for line in text.split("\n") if line.strip()]
    found: set[int] = set()
    start, anchored = 0, True
    for line in lines[:-1]:
        places = [start] if anchored else range(start, len(words) - len(line) + 1)
        at = next((i for i in places if words[i : i + len(line)] == line), None)
        if at is not None:
            start = at + len(line)
            found.add(start)
        anchored = at is not None
    return found, max(len(lines) - 1, 0)


def break_f1(predicted: str, gold: str) -> float:
    """F1 over the line breaks of ``gold`` (a source's words in their lines), each at its place in the source's
    words: a predicted break is right where the line before it copies the source's words (``line_breaks``) up to
    where ``gold`` breaks, and every break written counts, right or not; no break written nor due: 1."""
    words = gold.split()
    right, written = line_breaks(predicted, words)
    due, _ = line_breaks(gold, words)
    return _f1(len(right & due), written, len(due))


# ---- reporting ----------------------------------------------------------------------------------


def bucket_label(edges: Sequence[int], value: float) -> str:
    """The label of the bucket ``[edges[i], edges[i+1])`` holding ``value``; the last is open."""
    if value < edges[0]:
        raise ValueError(f"value {value} below the first bucket edge {edges[0]}")
    for low, high in pairwise(edges):
        if low <= value < high:
            return f"{low}-{high - 1}"
    return f"{edges[-1]}+"


def bucketed(
    lengths: Sequence[float], per_example: Mapping[str, Sequence[float]], edges: Sequence[int]
) -> dict[str, dict[str, float]]:
    """Means of each per-example metric within length buckets: ``{bucket: {"n": .., metric: ..}}``,
    buckets in edge order, empty buckets left out."""
    for name, values in per_example.items():
        if len(values) != len(lengths):
            raise ValueError(f"metric {name} has {len(values)} values for {len(lengths)} lengths")
    groups: dict[str, list[int]] = {}
    for index, length in enumerate(lengths):
        groups.setdefault(bucket_label(edges, length), []).append(index)
    order = [bucket_label(edges, e) for e in edges]
    result = {}
    for label in order:
        if label in groups:
            members = groups[label]
            result[label] = {
                "n": len(members),
                **{name: sum(values[i] for i in members) / len(members) for name, values in per_example.items()},
            }
    return result


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics (NumPy's
    default), so p50 of [1, 2, 3, 4] is 2.5."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds: the median says what a user usually waits, p99 how bad the
    slow tail gets."""
    return {"p50_ms": 1000 * percentile(seconds, 50), "p99_ms": 1000 * percentile(seconds, 99)}


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], resamples: int = 10_000, seed: int = 0
) -> dict[str, float]:
    """How much system A beats system B on the same examples, with its uncertainty.

    ``a[i]`` and ``b[i]`` are the two systems' scores on example i (a query's nDCG@10, say).
    Resampling examples with replacement and recomputing the mean of ``a - b`` gives the spread a
    different draw of examples would have shown. Returns the observed mean difference, the 2.5th
    and 97.5th percentiles of the resampled means (a 95% interval) and ``p_not_better``, the
    fraction of resamples in which A is not ahead (mean difference <= 0). Why: reranking gains
    here rest on a few dozen hits in a few hundred queries, so "0.043 against 0.020" alone does
    not say whether the gap is real; an interval that excludes 0 does."""
    _same_length(a, b)
    if not a:
        raise ValueError("a paired bootstrap needs at least one example")
    diff = torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)  # (n,)
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(len(diff), (resamples, len(diff)), generator=generator)  # (resamples, n)
    means = diff[draws].mean(dim=1)  # (resamples,)
    low, high = torch.quantile(means, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return {
        "difference": float(diff.mean()),
        "ci95_low": low,
        "ci95_high": high,
        "p_not_better": float((means <= 0).double().mean()),
    }


def _same_length(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"length mismatch: {len(a)} predictions for {len(b)} references")


# ---- span labelling (NER-style chunks) ------------------------------------------------------------

Scheme = Literal["IOB", "IOBES", "BILOU"]
_SPAN_PREFIXES = frozenset("BIESLU")
# The schemes with an end: (begin, inside, last, unit) prefixes, read by seqeval's strict rules (``_strict_entities``).
_CLOSED: dict[Scheme, tuple[str, str, str, str]] = {"IOBES": ("B", "I", "E", "S"), "BILOU": ("B", "I", "L", "U")}


def _closed_fits(prefixes: AbstractSet[str], begin: str, inside: str, last: str, unit: str) -> bool:
    """Whether a set of prefixes is one of a closed scheme's (seqeval's ``auto_detect`` sets): a ``begin`` without
    its ``last``, or an ``inside`` without a ``begin``, would leave every chunk of it unclosed, so uncounted."""
    return (
        prefixes <= {begin, inside, last, unit}
        and (begin in prefixes) == (last in prefixes)
        and (inside not in prefixes or begin in prefixes)
    )


def span_scheme(tags: Iterable[str]) -> Scheme | None:
    """ "IOB", "IOBES" (also spelled BIOES) or "BILOU" when the tags are O and prefixed types (B-X ...), None when
    none is (part-of-speech tags, punctuation marks: scored tag by tag). A ValueError for prefixed tags no one
    scheme's rules can check (schemes mixed, a foreign tag beside them, a B- that never closes), rather than
    entity counts by the wrong rules."""
    prefixes: dict[str, str] = {}  # each prefix -> its first tag, to name in a refusal
    foreign = None
    for tag in tags:
        if tag == "O":
            continue
        prefix, dash, kind = tag.partition("-")
        if prefix in _SPAN_PREFIXES and dash and kind:
            prefixes.setdefault(prefix, tag)
        elif foreign is None:
            foreign = tag
    if not prefixes:
        return None
    shown = ", ".join(prefixes[p] for p in sorted(prefixes))
    if foreign is not None:
        raise ValueError(f"tag {foreign!r} is neither O nor a span tag, beside span tags ({shown})")
    if set(prefixes) <= {"B", "I"}:
        return "IOB"
    for scheme, letters in _CLOSED.items():
        if _closed_fits(prefixes.keys(), *letters):
            return scheme
    raise ValueError(
        f"tags {shown} fit no one span scheme: IOB (B-, I-), IOBES or BIOES (S-, B- ... E-) or BILOU (U-, B- ... L-)"
    )


def _split_tag(tag: str) -> tuple[str, str]:
    """(prefix letter, type) the way conlleval / seqeval read a tag, so chunks agree with theirs."""
    rest = tag[1:]
    kind = rest.split("-", 1)[1] if "-" in rest else rest
    return tag[0], kind or "_"  # "O" and a bare "B" get the placeholder type "_"


def _chunk_ends(before: str, before_type: str, now: str, now_type: str) -> bool:
    """Whether a chunk closes between two adjacent tags (conlleval's end-of-chunk, as seqeval has it)."""
    return (
        before in ("E", "S")
        or (before in ("B", "I") and now in ("B", "S", "O"))
        or (before not in ("O", ".") and before_type != now_type)
    )


def _chunk_starts(before: str, before_type: str, now: str, now_type: str) -> bool:
    """Whether a chunk opens at the current tag (conlleval's start-of-chunk, as seqeval has it)."""
    return (
        now in ("B", "S")
        or (before in ("E", "S", "O") and now in ("E", "I"))
        or (now not in ("O", ".") and before_type != now_type)
    )


def _conll_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """seqeval's default (conlleval) chunks: any tag opens or continues one, so the published CoNLL numbers."""
    found = set()
    before, before_type, opened = "O", "", 0  # "" (not "_"): a leading L/U/other-letter tag opens a chunk
    for position, tag in enumerate([*tags, "O"]):  # a closing O ends whatever chunk is still open
        now, now_type = _split_tag(tag)
        if _chunk_ends(before, before_type, now, now_type):
            found.add((before_type, opened, position - 1))
        if _chunk_starts(before, before_type, now, now_type):
            opened = position
        before, before_type = now, now_type
    return found


def _strict_entities(tags: Sequence[str], begin: str, inside: str, last: str, unit: str) -> set[tuple[str, int, int]]:
    """seqeval's strict chunks: a ``unit`` tag, or a ``begin`` and ``inside`` tags of its type closed by a ``last``;
    a chunk the scheme does not close (an I- with no B-, a B- left open) is none, as seqeval counts it."""
    found = set()
    opened: tuple[str, int] | None = None  # (type, first position) of a chunk begun and not yet closed
    for position, tag in enumerate(tags):
        prefix, kind = tag[0], tag[1:].strip("-") or "_"  # seqeval's strict reading of a tag
        if prefix not in (begin, inside, last, unit, "O"):
            raise ValueError(f"tag {tag!r} is not of the {begin}{inside}{last}{unit} scheme")
        if opened is not None and prefix in (inside, last) and kind == opened[0]:
            if prefix == last:
                found.add((kind, opened[1], position))
                opened = None
            continue
        opened = (kind, position) if prefix == begin else None
        if prefix == unit:
            found.add((kind, position, position))
    return found


def entities(tags: Sequence[str], scheme: Scheme) -> set[tuple[str, int, int]]:
    """The (type, first, last) chunks of one tag sequence by ``scheme``'s own rules, as seqeval finds them: IOB in its
    default (CoNLL) mode, so our scores match the published ones; IOBES and BILOU in strict mode, whose E/L and S/U
    conlleval misreads (it knows no L or U: two U-PER would be one entity)."""
    if scheme == "IOB":
        return _conll_entities(tags)
    return _strict_entities(tags, *_CLOSED[scheme])


def entity_counts(predicted: Sequence[str], gold: Sequence[str], scheme: Scheme) -> tuple[int, int, int]:
    """(exact-match chunks, predicted chunks, gold chunks) of one text: integers pool across texts, F1 means do not."""
    _same_length(predicted, gold)
    p, g = entities(predicted, scheme), entities(gold, scheme)
    return len(p & g), len(p), len(g)


def pooled_entity_f1(counts: Sequence[tuple[int, int, int]]) -> dict[str, float]:
    """Micro precision, recall and F1 over texts' ``entity_counts`` (0.0 on zero division), equal to seqeval's
    scores in the scheme's mode."""
    # Strict mode chunks each text on its own, as here. The default mode runs the texts together with an O
    # between them, which ends every chunk just as a text's end does here, but for tags of type "_" or a "." prefix.
    tp = sum(c[0] for c in counts)
    n_predicted = sum(c[1] for c in counts)
    n_gold = sum(c[2] for c in counts)
    return {
        "precision": tp / n_predicted if n_predicted else 0.0,
        "recall": tp / n_gold if n_gold else 0.0,
        "f1": 2 * tp / (n_predicted + n_gold) if n_predicted + n_gold else 0.0,
    }


# ---- summaries ------------------------------------------------------------------------------------


LETTERS = re.compile(r"[^\W_]+")  # a run of letters or digits, in any script


class LetterTokens:
    """What rouge-score tokenizes text that is not English with: every run of letters and digits, lower-cased, not
    stemmed (its own tokenizer keeps only a-z and 0-9, so an accented word would vanish)."""

    def tokenize(self, text: str) -> list[str]:
        return [word.lower() for word in LETTERS.findall(text)]


@cache
def _rouge_scorer(english: bool) -> RougeScorer:
    """One ROUGE-1, -2 and -L scorer per analysis, built on first use so importing metrics does not load
    rouge_score/nltk: English as summarisation papers report it (rouge-score's tokenizer, Porter stems), else
    ``LetterTokens``."""
    from rouge_score import rouge_scorer

    kinds = ["rouge1", "rouge2", "rougeL"]
    if english:
        return rouge_scorer.RougeScorer(kinds, use_stemmer=True)
    return rouge_scorer.RougeScorer(kinds, tokenizer=LetterTokens())


def rouge(prediction: str, reference: str, english: bool = True) -> tuple[float, float, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measures from rouge-score, the summarisation standard (``english``: stemmed,
    over a-z0-9 words; else over every letter, ``LetterTokens``)."""
    scores = _rouge_scorer(english).score(reference, prediction)
    return scores["rouge1"].fmeasure, scores["rouge2"].fmeasure, scores["rougeL"].fmeasure
