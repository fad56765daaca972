"""The classic methods a practitioner tries before a transformer, fitted on the same training rows and scored on the
same test items as the families: the bar a fine-tuned body has to clear before it is worth shipping.

- classify: TF-IDF word 1-2-grams with logistic regression (scikit-learn), its C chosen by cross-validation on the
  training rows under the task's own metric, with balanced class weights where that metric is balanced accuracy;
- tag: each word's most frequent training tag, else the most frequent tag overall;
- retrieval: Okapi BM25 (``retrieve.bm25_ranking``, the rerank first stage's own);
- speakers of a play's passage: the lines that follow a blank line (a speech opens with its speaker's name).

Each reads either the characters a family reads (``chars_read``: the text cut where the smallest context cuts it) or
the whole text, so that a report can show what the cut costs. Rerank and seq2seq on a user's rows have theirs as
their trivial baseline already (BM25's order; the lead), and their rows say so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from maskwise.data.tagging import TaggedText
from maskwise.tasks.metrics import majority_label
from maskwise.tasks.reading import text_room

TFIDF_LOGISTIC = "TF-IDF word 1-2-grams + logistic regression, C cross-validated"
WORD_TAGGER = "each word's most frequent training tag"
BM25 = "BM25"
LINES_AFTER_BLANK = "the lines that follow a blank line"
CS = (0.1, 1.0, 10.0, 100.0)  # the logistic regression's inverse regularisation strengths cross-validation picks from
CV_FOLDS = 5  # at most; fewer where the rarest training label has fewer rows


def chars_read(tokenizer, texts: Sequence[str], max_len: int, family: str) -> list[int]:
    """How many of each text's characters a model of ``family`` reads at ``max_len`` tokens (``reading.encode_texts``
    keeps the first ``max_len`` less its frame)."""
    room = text_room(tokenizer, family, max_len)
    read = []
    for text in texts:
        _, offsets = tokenizer.encode_offsets(text)
        kept = offsets[:room]
        read.append(len(text) if len(offsets) <= room else (kept[-1][1] if kept else 0))
    return read


def tfidf_logistic_regression(
    train_texts: Sequence[str], train_labels: Sequence[str], test_texts: Sequence[str], balanced: bool = False
) -> list[str]:
    """Each test text's label by TF-IDF (sublinear term frequency, word 1- and 2-grams) and logistic regression, fitted
    as a practitioner fits it: C chosen from ``CS`` by stratified cross-validation on the training rows alone, scored
    by the task's metric; where that is balanced accuracy (``balanced``), each class weighted by the inverse of its
    count. A class with one training row leaves no folds to choose by: C = 1, scikit-learn's default."""
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
    return [str(label) for label in model.predict(vectorizer.transform(test_texts))]


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
