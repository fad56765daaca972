"""Every task kind ``compare`` can judge, declared once: how a user's files are read and checked, how its
fine-tune is configured for them, which claim of the rule of thumb it belongs to, and its row (the
per-item scores, the trivial baseline, the direction) on the plays and on a user's rows.

The claims are the design notes' three; each task belongs to one, fixed here before any number is
seen: classify, tag, embed (retrieval) and rerank are the encoder's jobs; seq2seq is read-then-write.
(Generation is read on held-out next-token loss of the corpus itself, which every compare measures.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from maskwise.data.beir import beir_splits, open_beir
from maskwise.data.tagging import tagged_from_file, windows_of
from maskwise.data.task_files import (
    labelled_texts_from_file,
    retrieval_split,
    seq2seq_from_file,
    user_split,
)
from maskwise.data.user_tasks import TaskSpec, UserTask, distribution
from maskwise.errors import UserError
from maskwise.families import Family
from maskwise.runs import (
    CONFIG_FILE,
    HEAD_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    save_weights,
    write_json,
)
from maskwise.tasks.finetune import FinetuneConfig
from maskwise.tasks.rerank import hard_negatives
from maskwise.tasks.retrieve import bm25_ranking

ENCODER_JOBS = "embed, score or classify => encoder"
GENERATE = "generate => decoder"
READ_THEN_WRITE = "read-then-write => encoder-decoder"
# claim -> (the family it predicts wins, the family it is compared with)
CLAIMS: dict[str, tuple[str, str]] = {ENCODER_JOBS: ("encoder", "decoder"), GENERATE: ("decoder", "encoder"),
                                      READ_THEN_WRITE: ("encoder-decoder", "decoder")}
# A classification test set whose most frequent label has this many times the rows of its rarest is read by
# balanced accuracy (the mean of per-label recalls), where accuracy would reward always answering the majority.
IMBALANCE = 1.5


@dataclass(frozen=True)
class Row:
    """How one task's evaluation record becomes a compare row: per-item scores and a baseline to clear."""

    label: str
    higher: bool
    scores: Callable[[dict], list[float]]  # the record -> one score per test item
    baseline: Callable[[dict], list[float] | float]  # per item (paired), or a constant
    baseline_name: str


@dataclass(frozen=True)
class Task:
    """One task kind: its claim, its rows, and how a user's files become its rows."""

    kind: str  # the fine-tune's name (``recipes.TASKS``, ``maskwise finetune KIND``)
    claim: str
    plays_row: Row | None  # its row when compare reads the plays (None: the plays' compare has none)
    # Its rows on a user's file at its configured settings: the first is judged under its claim, any others are
    # reported beside it (seq2seq: every source-length bucket, the longest judged).
    user_rows: Callable[[UserTask, FinetuneConfig], tuple[Row, ...]]
    read: Callable[[TaskSpec], UserTask]  # reads and checks every file, or raises a one-line UserError
    # The scale's config adjusted to the user's rows (settings that only the plays' rows have turned off);
    # (config, task, tokens of context the smallest family's stack holds) -> config, or a one-line UserError.
    configure: Callable[[FinetuneConfig, UserTask, int], FinetuneConfig] = lambda cfg, task, context: cfg
    # What ``run_task`` is given as the caller's rows (``tasks.run.run_task``'s ``data``).
    run_data: Callable[[UserTask, FinetuneConfig], Any] = lambda task, cfg: (task.train, task.test)
    # What a fine-tune folder keeps: (what ``run_task`` trained, its record, its config) -> (the config.json
    # task record ``interop.folders`` reads back, the module saved as the model, the head saved beside it or None).
    kept: Callable[[Any, dict, FinetuneConfig], tuple[dict, Any, Any]] = lambda trained, record, cfg: ({}, trained,
                                                                                                        None)
    # The text of each test item a model reads (to warn when the pretraining corpus holds it verbatim).
    test_texts: Callable[[UserTask], list[str]] = lambda task: [e.text for e in task.test]
    # Whether a family cannot do it (asked of ``ModelConfig.kind``), and the report's cell that says why.
    cannot: tuple[Callable[[Family], bool], str] | None = None
    # Choices that could decide its verdict, fixed before any number is seen: name -> its config's changes (its row's
    # label says which). compare fine-tunes each variant too and reports it beside the judged row: its effect shows.
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)


def save_fine_tune(out: Path, model, tokenizer, task: dict, head=None) -> None:
    """Lay a fine-tune out as a run folder (``maskwise finetune``'s and compare's), so that every command and
    ``maskwise export`` open it like any run."""
    save_weights(model, out / MODEL_FILE)
    if head is not None:
        save_weights(head, out / HEAD_FILE)
    tokenizer.save(out / TOKENIZER_FILE)
    write_json(out / CONFIG_FILE, {"model": model.cfg.to_dict(), "task": task})


def keep_fine_tune(out: Path, kind: str, trained, record: dict, cfg: FinetuneConfig, tokenizer, base: str) -> None:
    """Write what ``run_task`` trained for task ``kind`` into the fine-tune folder ``out`` (created)."""
    task, model, head = TASKS[kind].kept(trained, record, cfg)
    out.mkdir(parents=True, exist_ok=True)
    save_fine_tune(out, model, tokenizer, {"kind": kind, "base": base, **task}, head)


def _within(cfg, task: UserTask, context: int):
    """Every family reads at most the smallest family's context (the encoder-decoder's encoder holds half the
    block), so that no family sees more of a text than another."""
    return replace(cfg, max_len=min(cfg.max_len or context, context))


def _unseen(spec: TaskSpec, train: Counter, test: Counter, what: str) -> None:
    """Refuse test labels that no training row has: no head can answer them, and they would be scored as misses."""
    unseen = {label: n for label, n in test.items() if label not in train}
    if unseen:
        shown = ", ".join(f"{label!r} ({n})" for label, n in sorted(unseen.items())[:5])
        raise UserError(f"task {spec.name}: {sum(unseen.values())} test row(s) of {spec.test or spec.data} have "
                        f"{what} no training row has: {shown}; add training rows of them or drop those rows")


# ---- classify --------------------------------------------------------------------------------------


def _read_classify(spec: TaskSpec) -> UserTask:
    train, test = user_split(lambda path: labelled_texts_from_file(path, (spec.text, spec.label)), spec.data,
                             spec.test)
    classes, tested = Counter(e.label for e in train), Counter(e.label for e in test)
    if len(classes) < 2:
        raise UserError(f"task {spec.name}: the training rows' {spec.label!r} column holds one label "
                        f"({next(iter(classes))!r}); classification needs at least 2")
    _unseen(spec, classes, tested, "labels")
    balanced = max(tested.values()) >= IMBALANCE * min(tested.values()) and len(tested) > 1
    metric = "balanced accuracy" if balanced else "accuracy"
    return UserTask(spec, train, test, len(train), len(test), distribution([e.label for e in train]),
                    {"metric": metric, "why_metric": (
                        f"test labels imbalanced (largest/smallest {max(tested.values()) / min(tested.values()):.1f}"
                        f" >= {IMBALANCE}): balanced accuracy, the mean of per-label recalls" if balanced else
                        f"test labels balanced within {IMBALANCE}x: accuracy")})


def _classify_row(task: UserTask) -> Row:
    key = "balanced_correct" if task.details["metric"] == "balanced accuracy" else "correct"
    return Row(f"{task.spec.name}: {task.details['metric']} (classify)", True, lambda r: r[key],
               lambda r: r["baseline"][key], "majority class")


CLASSIFY = Task("classify", ENCODER_JOBS,
                Row("line order accuracy (classification)", True, lambda r: r["correct"],
                    lambda r: r["baseline"]["correct"], "majority class"),
                lambda task, cfg: (_classify_row(task),), _read_classify, _within,
                kept=lambda model, record, cfg: ({"labels": model.labels, "pooling": model.pooling,
                                                  "freeze": cfg.freeze}, model.body, model.head))


# ---- tag -------------------------------------------------------------------------------------------


def _read_tag(spec: TaskSpec) -> UserTask:
    train, test = user_split(tagged_from_file, spec.data, spec.test)
    tags = Counter(t for e in train for t in e.tags)
    _unseen(spec, tags, Counter(t for e in test for t in e.tags), "tags")
    return UserTask(spec, train, test, len(train), len(test), distribution([t for e in train for t in e.tags]),
                    {"read_out": "each word's last character, where a causal reader has read the whole word "
                                 "(judged); its first character reported beside it (`.first`)"})


TAG = Task("tag", ENCODER_JOBS,
           # Per text, paired with the verse rule on the same text: whether a mark follows a word is decided by
           # what comes after it, which only a bidirectional reader has seen.
           Row("punctuation restoration F1 per text (tagging)", True, lambda r: r["per_example"]["f1"],
               lambda r: r["line_break_rule"]["per_example"]["f1"], "a mark before every line break"),
           lambda task, cfg: (Row(f"{task.spec.name}: F1 per text, read at each word's {cfg.read_out} character (tag)",
                                  True, lambda r: r["per_example"]["f1"], lambda r: r["baseline"]["per_example"]["f1"],
                                  "most frequent tag"),),
           _read_tag, test_texts=lambda task: [" ".join(e.words) for e in task.test],
           configure=lambda cfg, task, context: replace(cfg, window_chars=context - 2),  # room for [CLS], [SEP]
           run_data=lambda task, cfg: (windows_of(task.train, cfg.window_chars),
                                       windows_of(task.test, cfg.window_chars)),
           kept=lambda model, record, cfg: ({"tags": model.tags, "train_counts": record["train_counts"],
                                             "read_out": model.read_out}, model.body, model.head),
           # Read at the last character, a causal reader has read the whole word; at the first it has seen one
           # character of it: on tags that the word itself decides (part of speech) this can decide the verdict.
           variants={"first": {"read_out": "first"}})


# ---- embed (retrieval) and rerank ------------------------------------------------------------------


def _read_retrieval(spec: TaskSpec) -> UserTask:
    if Path(spec.data).expanduser().is_dir():  # a BEIR folder: its train qrels, then test (else dev)
        if spec.test:
            raise UserError(f"task {spec.name}: a BEIR folder is tested on its own test (or dev) qrels; drop test=")
        splits = beir_splits(spec.data)
        held_out = next((s for s in ("test", "dev") if s in splits), None)
        if "train" not in splits or held_out is None:
            raise UserError(f"task {spec.name}: BEIR folder {spec.data} needs qrels/train.tsv and qrels/test.tsv "
                            f"(or dev.tsv); it has {', '.join(splits) or 'none'}")
        folder = open_beir(spec.data, ("train", held_out))
        train, test = folder.split("train"), folder.split(held_out)
        return UserTask(spec, train, test, len(train.queries), len(test.queries),
                        details={"collection": len(folder.docs), "metric": "nDCG@10", "beir_split": held_out})
    train, test = retrieval_split(spec.data, spec.test)
    return UserTask(spec, train, test, len(train.queries), len(test.queries),
                    details={"collection": len(test.docs), "metric": "recall@10"})


def _embed_row(task: UserTask) -> Row:
    metric = task.details["metric"].lower()
    if metric == "ndcg@10":  # graded judgements: the random ranking's own nDCG@10 over the same queries
        return Row(f"{task.spec.name}: nDCG@10 (embed, retrieval)", True, lambda r: r["per_query"]["ndcg@10"],
                   lambda r: r["baseline"]["ndcg@10"], "random ranking")
    return Row(f"{task.spec.name}: recall@10 (embed, retrieval)", True, lambda r: r["per_query"]["recall@10"],
               lambda r: r["baseline"]["expected"]["recall@10"], "random")


EMBED = Task("embed", ENCODER_JOBS,
             Row("retrieval recall@10 (ICT)", True, lambda r: r["per_query"]["recall@10"],
                 lambda r: r["baseline"]["expected"]["recall@10"], "random"),
             lambda task, cfg: (_embed_row(task),), _read_retrieval, _within,
             run_data=lambda task, cfg: (task.train.pairs(), task.test),
             test_texts=lambda task: list(task.test.queries),
             kept=lambda model, record, cfg: ({"pooling": model.pooling, "normalize": True,
                                               "max_len": record["max_len"], "temperature": record["temperature"]},
                                              model.body, None))


def _read_rerank(spec: TaskSpec) -> UserTask:
    if Path(spec.data).expanduser().is_dir():
        raise UserError(f"task {spec.name}: rerank reads query/positive rows (.jsonl, .csv or .tsv); a BEIR "
                        f"folder serves an embed task")
    task = _read_retrieval(spec)
    return replace(task, details={**task.details, "first_stage": "BM25", "metric": "nDCG@10"})


def _rerank_data(task: UserTask, cfg) -> tuple:
    """BM25's near misses as training negatives, and its top ``cfg.candidates`` as each test query's candidates."""
    negatives = hard_negatives(bm25_ranking(task.train, cfg.n_negatives + 1), task.train.relevant, cfg.n_negatives)
    return task.train, negatives, task.test, bm25_ranking(task.test, cfg.candidates)


RERANK = Task("rerank", ENCODER_JOBS, None,
              lambda task, cfg: (Row(f"{task.spec.name}: nDCG@10 over BM25's top candidates (rerank)", True,
                                     lambda r: r["per_query"]["ndcg@10"],
                                     lambda r: r["per_query"]["first_stage_ndcg@10"], "BM25's own order"),),
              _read_rerank, _within, run_data=_rerank_data, test_texts=lambda task: list(task.test.queries),
              kept=lambda model, record, cfg: ({"reranker": record["kind"], "first_stage": "BM25", "negatives": "bm25",
                                                "max_len": record["max_len"]},
                                               *((model.body, model.head) if record["kind"] == "cross"
                                                 else (model, None))))


# ---- seq2seq ---------------------------------------------------------------------------------------


def _read_seq2seq(spec: TaskSpec) -> UserTask:
    train, test = user_split(seq2seq_from_file, spec.data, spec.test)
    return UserTask(spec, train, test, len(train), len(test),
                    details={"metric": "token F1", "longest_target_chars": max(len(e.target) for e in [*train, *test])})


def _configure_seq2seq(cfg, task: UserTask, context: int):
    """No speaker renaming (the plays' augmentation); room for the longest target, a character a token at worst."""
    longest = task.details["longest_target_chars"]
    if longest + 2 > context // 2:
        where = max([*task.train, *task.test], key=lambda e: len(e.target)).origin
        raise UserError(f"task {task.spec.name}: {where} has a target of {longest} characters; at most "
                        f"{context // 2 - 2} fit (half the smallest context, {context} tokens, a character a "
                        "token at worst): shorten it or drop the row")
    # Up to three source-length buckets of the test rows as every family reads them (terciles; each edge a length a
    # test source has, so that no bucket is empty): the seed predicts the encoder-decoder's lead grows with the source.
    lengths = sorted(min(len(e.source), context - 2) for e in task.test)
    edges = tuple(dict.fromkeys((lengths[0], lengths[len(lengths) // 3], lengths[2 * len(lengths) // 3])))
    return replace(cfg, rename_speakers=0.0, mid_speech=False, max_target_len=max(8, longest + 1),
                   source_edges=edges, max_chars=context - 2)


def _seq2seq_data(task: UserTask, cfg) -> tuple[list, list]:
    """The rows with each source cut to ``cfg.max_chars`` characters: every family reads the same source (the
    encoder-decoder's encoder holds the smallest context; a decoder-only model reads it with the target)."""
    def cut(rows):
        return [replace(e, source=e.source[:cfg.max_chars]) for e in rows]

    return cut(task.train), cut(task.test)


def _seq2seq_rows(task: UserTask, cfg) -> tuple[Row, ...]:
    """Token F1 on the longest sources (judged: where the seed predicts the encoder-decoder ahead), then on each
    shorter bucket and on all sources (reported), each beside the lead baseline on the same sources."""
    spans = list(zip(cfg.source_edges, [*cfg.source_edges[1:], None]))

    def row(low: int | None, high: int | None, name: str) -> Row:
        def within(key: str):
            def scores(record: dict) -> list[float]:
                values = (record["baseline"] if key == "baseline" else record)["per_example"]["token_f1"]
                return [v for v, n in zip(values, record["source_chars"])
                        if (low is None or n >= low) and (high is None or n < high)]
            return scores
        return Row(f"{task.spec.name}: token F1, {name} (seq2seq)", True, within("model"), within("baseline"),
                   "lead (the source's first words)")

    def named(low: int, high: int | None) -> str:
        return f"sources of {low}+ characters" if high is None else f"sources of {low}-{high - 1} characters"

    judged = row(*spans[-1], named(*spans[-1]))
    shorter = tuple(row(low, high, named(low, high)) for low, high in spans[:-1])
    return (judged, *shorter, row(None, None, "all sources")) if shorter else (judged,)


SEQ2SEQ = Task("seq2seq", READ_THEN_WRITE,
               Row("passage -> speakers F1", True, lambda r: r["per_example"]["items_f1"],
                   lambda r: r["baseline"]["per_example"]["items_f1"], "copy the first line"),
               _seq2seq_rows,
               _read_seq2seq, _configure_seq2seq, _seq2seq_data, test_texts=lambda task: [e.source for e in task.test],
               kept=lambda model, record, cfg: ({"max_target_len": cfg.max_target_len}, model, None),
               cannot=(lambda kind: not kind.writes,
                       "cannot: no decoder to write the answer (an encoder labels positions it is given)"))

# The registry: every kind a user's --task may name, in the report's order.
TASKS: dict[str, Task] = {t.kind: t for t in (TAG, CLASSIFY, EMBED, RERANK, SEQ2SEQ)}


def read_tasks(specs: list[TaskSpec]) -> list[UserTask]:
    """Every spec read and checked (names distinct), in the order given."""
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--task names {', '.join(twice)} more than once; each task needs its own name")
    return [TASKS[s.kind].read(s) for s in specs]


LEAK_MIN_CHARS = 20  # shorter test texts (a two-word query) occur in any corpus by chance, not by a leak


def leaked(tasks: list[UserTask], corpus: str) -> dict[str, int]:
    """Per task, how many of its test items' texts (of ``LEAK_MIN_CHARS`` or more) occur verbatim in ``corpus``."""
    counts = {}
    for task in tasks:
        texts = [t.strip() for t in TASKS[task.spec.kind].test_texts(task) if len(t.strip()) >= LEAK_MIN_CHARS]
        found = sum(text in corpus for text in texts)
        if found:
            counts[task.spec.name] = found
    return counts
