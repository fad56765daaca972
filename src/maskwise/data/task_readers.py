"""One reader per kind of task file, shared by ``maskwise finetune KIND --data`` and ``compare --task``: each reads a
``TaskSpec``'s files into train and test rows (a random hold-out without a test file) and refuses, in one line, what no
fine-tune could use. What a verdict needs on top (enough test items) is compare's (``tasks.registry.read_tasks``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from maskwise.data.beir import GradedRetrievalSet, beir_splits, open_beir
from maskwise.data.tagging import TaggedText, tagged_from_file
from maskwise.data.task_files import (
    labelled_texts_from_file,
    retrieval_split,
    seq2seq_from_file,
    user_split,
)
from maskwise.data.tasks import LabelledText, RetrievalSet, Seq2SeqExample
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError

Retrieval = RetrievalSet | GradedRetrievalSet  # a file's query/positive rows, or a BEIR folder's graded judgements


def refuse_unseen(spec: TaskSpec, train: Counter, test: Counter, what: str) -> None:
    """Refuse test labels that no training row has: no head can answer them, and they would be scored as misses."""
    unseen = {label: n for label, n in test.items() if label not in train}
    if unseen:
        shown = ", ".join(f"{label!r} ({n})" for label, n in sorted(unseen.items())[:5])
        raise UserError(
            f"task {spec.name}: {sum(unseen.values())} test row(s) of {spec.test or spec.data} have "
            f"{what} no training row has: {shown}; add training rows of them or drop those rows"
        )


def read_labelled(spec: TaskSpec) -> tuple[list[LabelledText], list[LabelledText]]:
    """Labelled texts from ``spec``'s text and label columns: at least 2 training labels, no test label unseen."""
    train, test = user_split(lambda path: labelled_texts_from_file(path, (spec.text, spec.label)), spec.data, spec.test)
    classes = Counter(e.label for e in train)
    if len(classes) < 2:
        raise UserError(
            f"task {spec.name}: the training rows' {spec.label!r} column holds one label "
            f"({next(iter(classes))!r}); classification needs at least 2"
        )
    refuse_unseen(spec, classes, Counter(e.label for e in test), "labels")
    return train, test


def read_tagged(spec: TaskSpec) -> tuple[list[TaggedText], list[TaggedText]]:
    """Tagged sentences (CoNLL columns or JSONL words/tags): no test tag that no training row has."""
    train, test = user_split(tagged_from_file, spec.data, spec.test)
    refuse_unseen(spec, Counter(t for e in train for t in e.tags), Counter(t for e in test for t in e.tags), "tags")
    return train, test


def read_pairs(spec: TaskSpec) -> tuple[list[Seq2SeqExample], list[Seq2SeqExample]]:
    """Source/target rows."""
    return user_split(seq2seq_from_file, spec.data, spec.test)


def read_retrieval(spec: TaskSpec) -> UserTask:
    """Query/positive rows, or a BEIR folder: its train qrels to fine-tune on, its test (else dev) qrels to score."""
    if Path(spec.data).expanduser().is_dir():
        if spec.test:
            raise UserError(f"task {spec.name}: a BEIR folder is tested on its own test (or dev) qrels; drop test=")
        splits = beir_splits(spec.data)
        held_out = next((s for s in ("test", "dev") if s in splits), None)
        if "train" not in splits or held_out is None:
            raise UserError(
                f"task {spec.name}: BEIR folder {spec.data} needs qrels/train.tsv and qrels/test.tsv "
                f"(or dev.tsv); it has {', '.join(splits) or 'none'}"
            )
        folder = open_beir(spec.data, ("train", held_out))
        train, test = folder.split("train"), folder.split(held_out)
        return UserTask(
            spec,
            train,
            test,
            len(train.queries),
            len(test.queries),
            details={"collection": len(folder.docs), "metric": "nDCG@10", "beir_split": held_out},
        )
    rows, tested = retrieval_split(spec.data, spec.test)
    return UserTask(
        spec,
        rows,
        tested,
        len(rows.queries),
        len(tested.queries),
        details={"collection": len(tested.docs), "metric": "recall@10"},
    )
