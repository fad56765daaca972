"""The classic methods a practitioner tries before a transformer, fitted on the same training rows and scored on the
same test items as the families: the bar a fine-tuned body has to clear before it is worth shipping.

- classify: TF-IDF word 1-2-grams with logistic regression (scikit-learn), its C chosen by cross-validation on the
  training rows under the task's own metric, with balanced class weights where that metric is balanced accuracy;
- tag: each word's most frequent training tag, else the most frequent tag overall;
- retrieval: Okapi BM25 (``retrieve.bm25_ranking``, the rerank first stage's own);
- speakers of a play's passage: the lines that follow a blank line (a speech opens with its speaker's name);
- verse lines from prose: of two rules written before any model ran (a break every ten syllables; a break after
  every mark), the one that scores better on the training rows.

Each reads either the characters a family reads (``chars_read``: the text cut where the smallest context cuts it) or
the whole text, so that a report can show what the cut costs. Rerank and seq2seq on a user's rows have theirs as
their trivial baseline already (BM25's order; the lead), and their rows say so.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Sequence

from maskwise.data.tagging import TaggedText
from maskwise.data.tasks import Seq2SeqExample
from maskwise.tasks.metrics import break_f1, majority_label
from maskwise.tasks.reading import encoded, text_room

TFIDF_LOGISTIC = "TF-IDF word 1-2-grams + logistic regression, C cross-validated"
WORD_TAGGER = "each word's most frequent training tag"
BM25 = "BM25"
LINES_AFTER_BLANK = "the lines that follow a blank line"
TEN_SYLLABLES = "a break every ten syllables"
AFTER_MARKS = "a break after every , . ; : ! ?"
VERSE_RULES = f"the better verse rule on the training rows ({TEN_SYLLABLES}, or {AFTER_MARKS})"
MARKED = re.compile(r"[,.;:!?][^A-Za-z]*$")  # a word that ends in a mark, then perhaps quotes or a bracket
CS = (0.1, 1.0, 10.0, 100.0)  # the logistic regression's inverse regularisation strengths cross-validation picks from
CV_FOLDS = 5  # at most; fewer where the rarest training label has fewer rows


def chars_read(tokenizer, texts: Sequence[str], max_len: int, family: str) -> list[int]:
    """How many of each text's characters a model of ``family`` reads at ``max_len`` tokens (``reading.encode_texts``
    keeps the first ``max_len`` less its frame)."""
    room = text_room(tokenizer, family, max_len)
    return [e.chars_read(room) for e in encoded(tokenizer, texts)]


def tfidf_logistic_regression(
    train_texts: Sequence[str], train_labels: Sequence[str], test_texts: Sequence[str], balanced: bool = False
) -> list[str]:
    """Each test text's label by TF-IDF (sublinear term frequency, word 1- and 2-grams) and logistic regression, fitted
    as a practitioner fits it: C chosen from ``CS`` by stratified cross-validation on the training rows alone, scored
    by the task's metric; where that is balanced accuracy (``balanced``), each class weighted by the inverse of its
    count. A class with one training row leaves no folds to choose by: C = 1, scikit-learn's default."""
    return list(_tfidf_logistic(tuple(train_texts), tuple(train_labels), tuple(test_texts), balanced))


@functools.lru_cache(maxsize=8)  # fitted once per rows: compare scores it beside every family at every point
def _tfidf_logistic(
    train_texts: tuple[str, ...], train_labels: tuple[str, ...], test_texts: tuple[str, ...], balanced: bool
) -> tuple[str, ...]:
    from sklearn.feature_extraction.text import TfidfVectorizer  # at call time: scikit-learn loads in a second
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    features, labels = vectorizer.fit_transform(train_texts), list(train_labels)
    weights = "balanced" if balanced else None
    folds = min(CV_FOLDS, min(Counter(labels).values()))

    def fold_score(c: float) -> float:
        """The mean held-out score of C = ``c`` over the training rows' folds."""
        model = LogisticRegression(C=c, class_weight=weights, max_iter=2000)
        split = StratifiedKFold(folds, shuffle=True, random_state=0)
        metric = "balanced_accuracy" if balanced else "accuracy"
        return float(cross_val_score(model, features, labels, cv=split, scoring=metric).mean())

    chosen = max(CS, key=fold_score) if folds >= 2 else 1.0  # ties: the stronger regularisation, listed first
    model = LogisticRegression(C=chosen, class_weight=weights, max_iter=2000).fit(features, labels)
    return tuple(str(label) for label in model.predict(vectorizer.transform(test_texts)))


def most_frequent_tags(train: Sequence[TaggedText], test: Sequence[TaggedText]) -> list[list[str]]:
    """Each test word's most frequent tag among the training words spelt the same (ties: the tag first in sorted
    order), else the most frequent training tag."""
    by_word: dict[str, Counter[str]] = {}
    for example in train:
        for word, tag in zip(example.words, example.tags):
            by_word.setdefault(word, Counter())[tag] += 1
    tag_of = {word: majority_label(counts) for word, counts in by_word.items()}  # once a word, not once a use
    fallback = majority_label(tag for example in train for tag in example.tags)
    return [[tag_of.get(w, fallback) for w in example.words] for example in test]


def lines_after_blank(source: str) -> str:
    """The speakers a play's passage names by layout: every non-empty line that follows a blank line, in order,
    once each, comma-separated (as the task's targets are written)."""
    lines = source.split("\n")
    names = [line.strip() for before, line in zip(lines, lines[1:]) if not before.strip() and line.strip()]
    return ", ".join(dict.fromkeys(names))


def syllables(word: str) -> int:
    """A word's syllables counted as its groups of vowels (a e i o u y), less a silent final e ("love": 1; not
    "thee", "table"), at least 1."""
    letters = re.sub(r"[^a-z]", "", word.lower())
    groups = len(re.findall(r"[aeiouy]+", letters))
    silent = groups > 1 and letters.endswith("e") and not letters.endswith(("ee", "le"))
    return max(1, groups - silent)


def break_every_ten_syllables(source: str) -> str:
    """``source``'s words with a line break after each word that brings its line to ten syllables or more (a
    pentameter's), none after the last word."""
    words, lines, line, count = source.split(), [], [], 0
    for word in words:
        line.append(word)
        count += syllables(word)
        if count >= 10:
            lines.append(" ".join(line))
            line, count = [], 0
    return "\n".join([*lines, " ".join(line)] if line else lines)


def break_after_marks(source: str) -> str:
    """``source``'s words with a line break after each word that ends in , . ; : ! or ? (then perhaps a quote or a
    bracket), none after the last word."""
    words = source.split()
    return "".join(w + ("\n" if MARKED.search(w) else " ") for w in words[:-1]) + (words[-1] if words else "")


# The verse task's rules, by name: what ``best_verse_rule`` chooses among.
VERSE_RULE_OF: dict[str, Callable[[str], str]] = {
    TEN_SYLLABLES: break_every_ten_syllables,
    AFTER_MARKS: break_after_marks,
}


def rule_scores(rule: str, rows: Sequence[Seq2SeqExample]) -> list[float]:
    """Each row's break F1 (``metrics.break_f1``) of verse rule ``rule`` on its source."""
    return [break_f1(VERSE_RULE_OF[rule](e.source), e.target) for e in rows]


def best_verse_rule(train: Sequence[Seq2SeqExample]) -> tuple[str, dict[str, float]]:
    """(the verse rule with the higher mean break F1 on the training rows ``train``, each rule's mean there): chosen
    as a practitioner would, never on the test rows; a tie goes to the rule listed first."""
    chosen, means = _best_verse_rule(tuple(train))
    return chosen, dict(means)


@functools.lru_cache(maxsize=8)  # chosen once per rows: every writing family is scored beside it at every point
def _best_verse_rule(train: tuple[Seq2SeqExample, ...]) -> tuple[str, tuple[tuple[str, float], ...]]:
    means = {rule: sum(rule_scores(rule, train)) / max(len(train), 1) for rule in VERSE_RULE_OF}
    return max(means, key=means.__getitem__), tuple(means.items())
