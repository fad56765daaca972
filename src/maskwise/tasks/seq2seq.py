"""Read-then-write: fine-tune on source -> target and evaluate by generating.

Two ways to cast the same task:

* encoder-decoder: the encoder reads the source once; the decoder is trained with teacher forcing
  (input ``[BOS] target``, labels ``target [EOS]``) and cross-attends to every source position;
* decoder-only: one sequence ``source [SEP] target [EOS]`` under a causal mask, with the loss on the
  target (and [EOS]) only — the source is context, not something to learn to write.

Evaluation generates (greedy or beam) and scores exact match, F1 over the set of comma-separated
items (the speakers, on the plays) and token F1, overall and bucketed by source length (in
characters), beside the baseline of copying the source's first line (the first speaker, when
speakers are shown). The plays hold two such tasks (``PLAYS_SEQ2SEQ``): passage -> speakers, and verse
lines from prose, scored by F1 over the line breaks beside the source left as one line.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from maskwise.data.task_readers import read_pairs
from maskwise.data.tasks import (
    Seq2SeqExample,
    first_speaker_baseline,
    rename_speakers,
    speaker_examples,
    verse_examples,
)
from maskwise.data.user_tasks import TaskSpec, UserTask
from maskwise.errors import UserError
from maskwise.families import Family
from maskwise.model.heads import IGNORE_INDEX
from maskwise.model.positions import extend_context
from maskwise.objectives.span import decoder_start_id
from maskwise.padding import pad
from maskwise.runtime import Runtime
from maskwise.tasks.classic import (
    LINES_AFTER_BLANK,
    VERSE_RULE_OF,
    VERSE_RULES,
    best_verse_rule,
    lines_after_blank,
)
from maskwise.tasks.finetune import FinetuneConfig, fine_tune
from maskwise.tasks.generate import GenerationConfig, check_generative, generate
from maskwise.tasks.reading import batches, config_of, device_of, encoded, token_ids
from maskwise.tasks.retrieve import ENGLISH_SHARE, english_share
from maskwise.tasks.seq2seq_scores import (
    Seq2SeqRecord,
    SpeakersRow,
    VerseRow,
    WrittenMetric,
    WrittenRow,
    generation_scores,
    lead_words,
)
from maskwise.tasks.unit import READ_THEN_WRITE, PlaysRow, Row, Task, Work, mean_tokens

# Source length buckets in characters (the speakers passages run up to ~600 by default).
SOURCE_EDGES = (0, 150, 300, 450, 600)
SPEAKERS, VERSE = "speakers", "verse"
# The plays' read-then-write tasks: passage -> speakers (``data.tasks.speaker_examples``), and verse lines from prose
# (``data.tasks.verse_examples``), which no rule of layout answers.
PLAYS_SEQ2SEQ = (SPEAKERS, VERSE)


@dataclass
class Seq2SeqConfig(FinetuneConfig):
    lr: float = 1e-4  # no fresh head: the whole model learns a new output format
    max_target_len: int = 64  # tokens; longer targets are cut
    num_beams: int = 1  # the evaluation's decoding
    # The plays' rows (``tasks.run.plays_rows``): one of ``PLAYS_SEQ2SEQ``, passages -> speakers or verse from prose.
    plays_task: str = SPEAKERS
    train_passages: int | None = None  # None: every passage
    test_passages: int = 300
    max_chars: int | None = None  # longest source; None: what fits the model's context
    english: bool = True  # the rows are English (``Seq2Seq.read``): ROUGE stems English words, else keeps every letter
    hide_speakers: bool = False  # speaker lines removed from the source
    mid_speech: bool = False  # each passage opens inside a speech (``data.tasks.speaker_examples``)
    rename_speakers: float = 0.0  # fraction of training draws with the cast renamed (copy, not recall)
    source_edges: tuple[int, ...] = SOURCE_EDGES  # quality by source length: the buckets' lower edges, chars
    # A user's sources are read whole up to this many characters (compare's window: its longest source, at most this);
    # a body whose positions extend (rotary, relative) reads past its pretrained context to hold them, and longer
    # sources are cut here and reported apart, never judged on their first characters.
    source_cap: int = 3000

    def validate(self) -> Seq2SeqConfig:
        if self.plays_task not in PLAYS_SEQ2SEQ:
            raise UserError(f"unknown plays task {self.plays_task!r}; known: {', '.join(PLAYS_SEQ2SEQ)}")
        if self.plays_task == VERSE and (self.hide_speakers or self.mid_speech or self.rename_speakers):
            raise UserError("hide-speakers, mid-speech and rename-speakers cut the speakers' passages: verse has none")
        super().validate()
        return self


def _source_room(model: nn.Module, max_target_len: int) -> int:
    """Source tokens that fit: all of the context for an encoder-decoder's encoder; for a decoder,
    what is left after [SEP], the target and [EOS]."""
    cfg = config_of(model)
    if cfg.kind.two_stacks:
        return cfg.max_seq_len
    room = cfg.max_seq_len - max_target_len - 2
    if room < 1:
        raise UserError(
            f"max target length {max_target_len} leaves no room for the source in a context of {cfg.max_seq_len}"
        )
    return room


def source_chars_read(model: nn.Module, tokenizer, source: str, max_target_len: int) -> int:
    """How many of ``source``'s characters the model reads (``source_ids`` keeps the tokens that fit)."""
    [text] = encoded(tokenizer, [source])
    return text.chars_read(_source_room(model, max_target_len))


def source_ids(model: nn.Module, tokenizer, source: str, max_target_len: int) -> list[int]:
    """The source as the model reads it: cut to fit (from the end: the passage's first speakers are
    the first targets), plus [SEP] for a decoder, whose target follows in the same sequence."""
    [ids] = token_ids(tokenizer, [source])
    kept = list(ids[: _source_room(model, max_target_len)])
    return kept + [tokenizer.sep_id] if config_of(model).kind.causal else kept


def room_for_whole(model: nn.Module, tokenizer, sources: Sequence[str], max_target_len: int) -> int:
    """Let ``model`` read the longest of ``sources`` whole (a decoder with its answer after it), past its pretrained
    context where its positions allow it (``positions.extend_context``); how many positions past it now reads."""
    longest = max(map(len, token_ids(tokenizer, sources)))
    return extend_context(model, longest + (0 if config_of(model).kind.two_stacks else max_target_len + 2))


def seq2seq_batch(
    model: nn.Module, tokenizer, examples: Sequence[Seq2SeqExample], max_target_len: int
) -> dict[str, torch.Tensor]:
    """Teacher-forcing inputs and labels for either family (see the module docstring)."""
    device, eos = device_of(model), tokenizer.eos_id
    sources = [source_ids(model, tokenizer, e.source, max_target_len) for e in examples]
    targets = [[*ids[:max_target_len], eos] for ids in token_ids(tokenizer, [e.target for e in examples])]
    if config_of(model).kind.two_stacks:
        ids, mask = pad(sources, tokenizer.pad_id, "right", device)
        dec, dec_mask = pad(
            [[decoder_start_id(tokenizer), *t[:-1]] for t in targets], tokenizer.pad_id, "right", device
        )
        labels, _ = pad(targets, IGNORE_INDEX, "right", device)
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "decoder_input_ids": dec,
            "decoder_attention_mask": dec_mask,
            "labels": labels,
        }
    # decoder: position t predicts token t+1; only predictions of target tokens carry a loss
    seqs = [s + t for s, t in zip(sources, targets)]
    label_seqs = [[IGNORE_INDEX] * (len(s) - 1) + t + [IGNORE_INDEX] for s, t in zip(sources, targets)]
    ids, mask = pad(seqs, tokenizer.pad_id, "right", device)
    labels, _ = pad(label_seqs, IGNORE_INDEX, "right", device)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train_seq2seq(
    model: nn.Module,
    tokenizer,
    train: Sequence[Seq2SeqExample],
    cfg: Seq2SeqConfig,
    augment: Callable[[Seq2SeqExample, random.Random], Seq2SeqExample] | None = None,
    augment_prob: float = 0.0,
    runtime: Runtime | None = None,
) -> nn.Module:
    """Teacher-forced fine-tuning on random batches of ``train``; each drawn example is replaced by
    ``augment(example, rng)`` with probability ``augment_prob`` (a fresh variant every draw, e.g.
    ``data.tasks.rename_speakers``)."""
    check_generative(model)
    if not train:
        raise UserError("no training examples")

    def step_loss(rng: random.Random) -> torch.Tensor:
        chosen = [train[rng.randrange(len(train))] for _ in range(cfg.batch_size)]
        if augment is not None and augment_prob > 0:  # no draws otherwise: batches stay as without one
            chosen = [augment(e, rng) if rng.random() < augment_prob else e for e in chosen]
        return model(**seq2seq_batch(model, tokenizer, chosen, cfg.max_target_len)).loss

    fine_tune(model, step_loss, cfg, desc="seq2seq", runtime=runtime)
    return model


def predict_seq2seq(
    model: nn.Module,
    tokenizer,
    sources: Sequence[str],
    gen: GenerationConfig,
    max_target_len: int = 64,
    batch_size: int = 32,
    progress: bool = True,
) -> list[str]:
    """Generate a target for each source (greedy or beam, as ``gen`` says; at most
    ``max_target_len`` tokens plus [EOS])."""
    check_generative(model)
    gen = replace(gen, max_new_tokens=min(gen.max_new_tokens, max_target_len + 1))
    outputs: list[str] = []
    chunks = batches(len(sources), batch_size)
    for chunk in tqdm(chunks, desc="generate", unit="batch", leave=False, disable=not progress or len(chunks) < 2):
        prompts = [source_ids(model, tokenizer, sources[i], max_target_len) for i in chunk]
        result = generate(model, prompts, gen, tokenizer.eos_id, tokenizer.pad_id, decoder_start_id(tokenizer))
        outputs.extend(tokenizer.decode(tokens) for tokens in result.tokens)
    return outputs


def evaluate_seq2seq(
    model: nn.Module,
    tokenizer,
    test: Sequence[Seq2SeqExample],
    gen: GenerationConfig,
    max_target_len: int = 64,
    progress: bool = True,
    source_edges: Sequence[int] = SOURCE_EDGES,
    lead: int | None = None,
    train_examples: int | None = None,
    hide_speakers: bool | None = None,
    mid_speech: bool | None = None,
    positions_past_pretrained: int = 0,
    plays_task: str | None = None,
    verse_train: Sequence[Seq2SeqExample] | None = None,
    english: bool = True,
) -> Seq2SeqRecord:
    """Generate each test target and score it beside a baseline: the source's first ``lead`` words (a user's
    rows: the lead of a summary, the classic floor), else its first line (the plays: the first speaker; on verse, the
    source as one line). With ``verse_train``, the plays' verse task's training rows, each item's line breaks are
    scored too, beside both verse rules, the one better on ``verse_train`` the classic method (never chosen on the
    test items)."""
    predicted = predict_seq2seq(model, tokenizer, [e.source for e in test], gen, max_target_len, progress=progress)
    verse = verse_train is not None
    scores = partial(generation_scores, examples=test, source_edges=source_edges, breaks=verse, english=english)
    if lead is None:
        baseline = [first_speaker_baseline(e.source) for e in test]
        baseline_name = "the source as one line" if verse else "copy the first line of the source"
    else:
        baseline, baseline_name = [" ".join(e.source.split()[:lead]) for e in test], f"the source's first {lead} words"
    rules, on_training, classic = None, None, None
    if verse_train is not None:
        chosen, on_training = best_verse_rule(verse_train)
        rules = [{"name": rule, **scores([write(e.source) for e in test])} for rule, write in VERSE_RULE_OF.items()]
        classic = next(rule for rule in rules if rule["name"] == chosen)
    elif lead is None:
        classic = {"name": LINES_AFTER_BLANK, **scores([lines_after_blank(e.source) for e in test])}
    return Seq2SeqRecord.from_json(
        {
            "family": config_of(model).family,
            "decoding": f"beam {gen.num_beams}" if gen.num_beams > 1 else "greedy",
            "train_examples": train_examples,
            "hide_speakers": hide_speakers,
            "mid_speech": mid_speech,
            "plays_task": plays_task,
            "n_test": len(test),
            "source_chars": [len(e.source) for e in test],
            "chars_read": [source_chars_read(model, tokenizer, e.source, max_target_len) for e in test],
            "positions_past_pretrained": positions_past_pretrained,
            **scores(predicted),
            "baseline": {"name": baseline_name, **scores(baseline)},
            "classic": classic,
            "rules": rules,
            "rules_on_training": on_training,
            "examples": [
                {"source": e.source, "target": e.target, "predicted": p} for e, p in list(zip(test, predicted))[:5]
            ],
        }
    )


# ---- the unit: its plays' rows, its run, its commands and its compare rows ---------------------------


def _plays_source_chars(cfg: Seq2SeqConfig, model: nn.Module | None) -> int:
    """The config's longest source, else one that fits whatever the tokenizer: a character per token at
    worst, less the target's room for a decoder, which reads source and target in one sequence; on verse, no
    longer than the target's room, which holds the source's characters again."""
    if cfg.max_chars is not None:
        return cfg.max_chars
    assert model is not None, "the plays' passages are cut to a model's context unless max_chars is set"
    layout = config_of(model)
    room = layout.max_seq_len if layout.kind.two_stacks else layout.max_seq_len - (cfg.max_target_len + 2)
    return max(32, min(room, cfg.max_target_len) if cfg.plays_task == VERSE else room)


class Seq2Seq(Task[Seq2SeqConfig]):
    """Read-then-write: a target generated from a source, scored beside the lead (the source's first words)."""

    kind = "seq2seq"
    claim = READ_THEN_WRITE
    config = Seq2SeqConfig
    record = Seq2SeqRecord
    # Verse from prose is judged: no rule of layout answers it, where the lines after a blank line name every speaker.
    plays_rows = (
        PlaysRow(VERSE, VerseRow("verse line breaks F1", True, "the source as one line", VERSE_RULES)),
        PlaysRow(kind, SpeakersRow("passage -> speakers F1", True, "copy the first line", LINES_AFTER_BLANK), False),
    )

    def plays(
        self, cfg: Seq2SeqConfig, model: nn.Module | None, split: str, training: bool
    ) -> tuple[list[Seq2SeqExample] | None, list[Seq2SeqExample]]:
        """The plays' rows ``cfg.plays_task`` names (passage -> speakers, or verse from prose): ``train_passages`` of
        the train split's, ``test_passages`` of the split's."""
        draw = (
            partial(verse_examples, max_chars=_plays_source_chars(cfg, model))
            if cfg.plays_task == VERSE
            else partial(
                speaker_examples,
                max_chars=_plays_source_chars(cfg, model),
                hide_speakers=cfg.hide_speakers,
                mid_speech=cfg.mid_speech,
            )
        )
        train = draw("train", limit=cfg.train_passages, seed=cfg.data_seed) if training else None
        return train, draw(split, limit=cfg.test_passages, seed=cfg.test_seed)

    def run(
        self, model, tokenizer, cfg: Seq2SeqConfig, runtime: Runtime, data, label: str
    ) -> tuple[nn.Module, Callable[[], Seq2SeqRecord], list[Seq2SeqExample]]:
        train, test = data or self.plays(cfg, model, "test", True)
        assert train is not None  # the plays' training rows were asked for
        past = room_for_whole(model, tokenizer, [e.source for e in [*train, *test]], cfg.max_target_len)
        train_seq2seq(
            model, tokenizer, train, cfg, augment=rename_speakers, augment_prob=cfg.rename_speakers, runtime=runtime
        )
        generation = GenerationConfig(max_new_tokens=cfg.max_target_len + 1, num_beams=cfg.num_beams)  # and [EOS]
        # the plays' verse rows, drawn here or by the command line (``maskwise finetune seq2seq --plays-task verse``)
        verse = cfg.plays_task == VERSE
        # a user's rows: the lead baseline, not the first speaker
        lead = None if data is None or verse else lead_words(train)

        def evaluate() -> Seq2SeqRecord:
            return evaluate_seq2seq(
                model,
                tokenizer,
                test,
                generation,
                max_target_len=cfg.max_target_len,
                progress=cfg.progress,
                source_edges=cfg.source_edges,
                lead=lead,
                train_examples=len(train),
                positions_past_pretrained=past,
                plays_task=cfg.plays_task if data is None else None,
                verse_train=train if verse else None,
                english=cfg.english,
            )

        return model, evaluate, test

    def kept(
        self, trained: nn.Module, record: Seq2SeqRecord, cfg: Seq2SeqConfig
    ) -> tuple[dict[str, Any], nn.Module, None]:
        return {"max_target_len": cfg.max_target_len}, trained, None

    def summary(self, record: Seq2SeqRecord) -> str:
        r, base = record, record.baseline
        if r.per_example.break_f1 is not None:  # the plays' verse
            scored = [("model", r), (base.name, base), *[(rule.name, rule) for rule in r.rules or []]]
            return (
                f"verse from prose ({r.family}, {r.decoding}) on {r.n_test} sources: line breaks F1 "
                + "; ".join(f"{name} {i.score():.3f}" for name, s in scored if (i := VerseRow.breaks(s)) is not None)
                + (f" (the classic method, chosen on the training rows: {r.classic.name})" if r.classic else "")
            )
        return (
            f"seq2seq ({r.family}, {r.decoding}) on {r.n_test} passages: exact match "
            f"{r.exact_match:.3f} (copy first line {base.exact_match:.3f}), items F1 "
            f"{r.items_f1:.3f} ({base.items_f1:.3f}), token F1 {r.token_f1:.3f} "
            f"({base.token_f1:.3f})"
        )

    def read(self, spec: TaskSpec) -> UserTask:
        """``read_pairs``' rows, scored by ROUGE-L (summarisation's and headline writing's own score), its analysis
        fixed by the rows' language (``tasks.retrieve.english_share``, BM25's rule) before any number is seen."""
        train, test = read_pairs(spec)
        english = english_share([t for e in [*train, *test] for t in (e.source, e.target)]) >= ENGLISH_SHARE
        analysis = (
            "English words stemmed (rouge-score's own tokenizer and Porter stemmer)"
            if english
            else "every letter kept, lower-cased, not stemmed: the rows are not English"
        )
        return UserTask(
            spec,
            train,
            test,
            len(train),
            len(test),
            details={
                "metric": "ROUGE-L",
                "english": english,
                "why_metric": f"ROUGE-L F1 (rouge-score), {analysis}, decides on the longest sources read whole; "
                "token F1 and ROUGE-1 and -2 on the same sources beside it",
                "longest_target_chars": max(len(e.target) for e in [*train, *test]),
            },
        )

    def configure(self, cfg: Seq2SeqConfig, task: UserTask, context: int) -> Seq2SeqConfig:
        """No speaker renaming (the plays' augmentation); room for the longest target, a character a token at
        worst."""
        longest = task.details["longest_target_chars"]
        if longest + 2 > context // 2:
            where = max([*task.train, *task.test], key=lambda e: len(e.target)).origin
            raise UserError(
                f"task {task.spec.name}: {where} has a target of {longest} characters; at most "
                f"{context // 2 - 2} fit (half the smallest context, {context} tokens, a character a "
                "token at worst): shorten it or drop the row"
            )
        # The window: the longest source, up to the cap. Up to three buckets of the test sources it holds whole
        # (terciles; each edge a length a test source has, so that no bucket is empty): the seed predicts the
        # encoder-decoder's lead grows with the source.
        window = min(cfg.source_cap, max(len(e.source) for e in [*task.train, *task.test]))
        lengths = sorted(n for e in task.test if (n := len(e.source)) <= window) or [window]
        edges = tuple(dict.fromkeys((lengths[0], lengths[len(lengths) // 3], lengths[2 * len(lengths) // 3])))
        return replace(
            cfg,
            english=task.details["english"],
            rename_speakers=0.0,
            mid_speech=False,
            max_target_len=max(8, longest + 1),
            source_edges=edges,
            max_chars=window,
        )

    def shorter(self, cfg: Seq2SeqConfig, task: UserTask, context: int) -> Seq2SeqConfig | None:
        """A window a quarter shorter, down to what the smallest pretrained context holds (no reading past it)."""
        floor = context - 2
        if cfg.max_chars is None or cfg.max_chars <= floor:
            return None
        return self.configure(replace(cfg, source_cap=max(floor, cfg.max_chars * 3 // 4)), task, context)

    def reading(self, cfg: Seq2SeqConfig, task: UserTask, context: int) -> str | None:
        window, given = cfg.max_chars or 0, [len(e.source) for e in task.test]
        cut = sum(n > window for n in given)
        past = (
            f"; a body with rotary or relative positions reads past its pretrained context (the smallest here "
            f"{context} tokens) to hold them, one with a learned position table reads their start (each "
            "fine-tune's record: positions_past_pretrained, chars_read)"
            if window > context - 2
            else ""
        )
        if cut == len(given):
            return (
                f"every test source ({min(given):,}-{max(given):,} characters) is longer than the {window:,} "
                f"read: all are cut there and judged so, and the trend by source length is not measured" + past
            )
        return (
            f"sources read whole up to {window:,} characters (test sources {min(given):,}-{max(given):,})"
            + past
            + (
                f"; {cut} of {len(given)} test sources are longer, read to their first {window:,} characters and "
                "reported apart, never judged"
                if cut
                else ""
            )
        )

    def run_data(self, task: UserTask, cfg: Seq2SeqConfig) -> tuple[list[Seq2SeqExample], list[Seq2SeqExample]]:
        """The rows with each source cut to ``cfg.max_chars`` characters: every family reads the same source (the
        encoder-decoder's encoder holds the smallest context; a decoder-only model reads it with the target)."""

        def cut(rows: list[Seq2SeqExample]) -> list[Seq2SeqExample]:
            return [replace(e, source=e.source[: cfg.max_chars]) for e in rows]

        return cut(task.train), cut(task.test)

    def user_rows(self, task: UserTask, cfg: Seq2SeqConfig) -> tuple[Row, ...]:
        """ROUGE-L on the longest sources read whole (judged: where the seed predicts the encoder-decoder ahead), with
        token F1, ROUGE-1 and ROUGE-2 on the same sources beside it; then ROUGE-L on each shorter bucket, on sources
        longer than the window (read to its end: reported, never judged) and on all sources, each beside the lead
        baseline on the same sources."""
        given = [len(e.source) for e in task.test]
        window = cfg.max_chars or max(given)
        spans = list(zip(cfg.source_edges, [*cfg.source_edges[1:], window + 1]))

        def row(low: int, high: int | None, name: str, metric: WrittenMetric = "ROUGE-L") -> Row:
            label = f"{task.spec.name}: {metric}, {name} (seq2seq)"
            return WrittenRow(label, True, given=tuple(given), low=low, high=high, metric=metric)

        def beside(low: int, high: int | None, name: str) -> tuple[Row, ...]:
            """The judged sources' other scores, reported beside its ROUGE-L."""
            return tuple(row(low, high, name, metric) for metric in ("token F1", "ROUGE-1", "ROUGE-2"))

        def named(low: int, high: int) -> str:
            return f"sources of {low}+ characters" if high > max(given) else f"sources of {low}-{high - 1} characters"

        if min(given) > window:  # no source read whole: judged on all of them, cut, and the label says so
            cut_all = f"all sources, cut at {window} characters (the trend by source length not measured)"
            return row(0, None, cut_all), *beside(0, None, cut_all)
        (low, high), *shorter_spans = reversed(spans)
        shorter = [row(a, b, named(a, b)) for a, b in shorter_spans]
        cut = (
            (row(window + 1, None, f"sources over {window} characters, read to their first {window}"),)
            if max(given) > window
            else ()
        )
        every = (row(0, None, "all sources"),) if shorter or cut else ()
        return (
            row(low, high, named(low, high)),
            *beside(low, high, named(low, high)),
            *reversed(shorter),
            *cut,
            *every,
        )

    def work(self, cfg: Seq2SeqConfig, task: UserTask | None, per_char: float) -> Work:
        """Each step's batch of sources with their targets trained; each test source read, then one decoding call a
        target token for each batch of 32 sources (``predict_seq2seq``'s)."""
        n, length = (
            (task.test_rows, mean_tokens([e.source for e in task.test], per_char))
            if task
            else (cfg.test_passages, (cfg.max_chars or 120) * per_char)
        )
        if cfg.max_chars:
            length = min(length, cfg.max_chars * per_char + 2)
        return Work(
            cfg.steps * cfg.batch_size * (length + cfg.max_target_len),
            n * length,
            -(-n // 32) * cfg.max_target_len,
            length=length + cfg.max_target_len,
        )

    def texts(self, rows: Sequence[Seq2SeqExample]) -> list[str]:
        return [e.source for e in rows]

    def cannot(self, family: Family) -> str | None:
        return (
            None
            if family.writes
            else "cannot: no decoder to write the answer (an encoder labels positions it is given)"
        )
