"""Task datasets derived from the plays, and the user's own task files.

Every dataset is cut from the plays of one split of ``split_plays`` (train / val / test, by play,
stratified by genre), so no play contributes to two splits and a task's test score is on plays the
model never fine-tuned on; the test plays are also kept out of pretraining. Every random choice is
drawn from ``random.Random`` seeded by the split name and a seed, so a dataset is the same on every
run and machine.

The tasks:

* genre classification: a window of 1-3 consecutive speeches ("SPEAKER\\ntext" blocks) -> the
  play's genre, at most ``per_genre`` windows per genre (balanced, so the majority baseline is the
  chance rate, and small enough that CPU fine-tuning takes minutes);
* line order: two consecutive lines of a speech, printed in order or swapped -> which. Both labels
  hold the same words, so no bag of words separates them, and the test plays hold thousands of
  such pairs (genre has six test plays: a verdict on six items);
* word order: a line of a speech as written, or with its words after the first shuffled -> which;
  what separates them is the order the words take and which word ends the line;
* sentence mark: a sentence of a speech with its punctuation removed -> the mark that ended it
  (statement, question, exclamation), as many of each: a sentence's kind, read from its words and
  their order, over a thousand test sentences;
* retrieval as the inverse cloze task (ICT, Lee et al. 2019): the query is one line taken out of a
  speech of at least four lines, its one relevant document is that speech without the line, and
  the collection is every such speech of the split's plays;
* read-then-write extraction: a passage of consecutive speeches as printed -> its speakers in order
  of first speech, comma-separated, each once. ``hide_speakers`` removes the speaker lines from the
  source, so the names must be inferred from the text (address, self-reference) instead of copied.
* read-then-write layout: a few lines of a verse speech printed as prose (joined by spaces) -> the
  same words with their line breaks restored (lines joined by "\\n"); the metre, not a mark, says where
  a line ends.

The user's own task files: ``data.task_files``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from string import ascii_uppercase

from maskwise.data.plays import GENRES, Play, Speech, drawn_once, render_speech, split_plays
from maskwise.errors import UserError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str
    origin: str  # play slug, or "file:line" for the user's data


@dataclass(frozen=True)
class RetrievalSet:
    """Queries, a document collection, and the index of each query's relevant document.

    ``relevant[i]`` is the one relevant document of ``queries[i]`` (ICT has exactly one). The
    training pairs of a bi-encoder are ``(queries[i], docs[relevant[i]])``."""

    queries: tuple[str, ...]
    docs: tuple[str, ...]
    relevant: tuple[int, ...]

    def pairs(self) -> list[tuple[str, str]]:
        return [(q, self.docs[d]) for q, d in zip(self.queries, self.relevant)]


@dataclass(frozen=True)
class Seq2SeqExample:
    source: str
    target: str
    origin: str


def _rng(seed: int, split: str, task: str) -> random.Random:
    return random.Random(f"{task}/{split}/{seed}")  # str seeds hash with sha512: stable everywhere


def _plays(split: str, plays: Sequence[Play] | None) -> tuple[Play, ...]:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    return split_plays(plays)[split]


# ---- genre classification -----------------------------------------------------------------------


@drawn_once
def genre_examples(
    split: str,
    per_genre: int = 300,
    window: tuple[int, int] = (1, 3),
    min_chars: int = 80,
    seed: int = 0,
    plays: Sequence[Play] | None = None,
) -> list[LabelledText]:
    """Windows of ``window[0]..window[1]`` consecutive speeches (length drawn per window) -> genre.

    The windows tile each play without overlap; windows shorter than ``min_chars`` (a lone "Ay, my
    lord.") say nothing about genre and are dropped; each genre keeps a random ``per_genre``.
    Sorted by genre then position in the play, then shuffled once, so batches mix genres."""
    if not 1 <= window[0] <= window[1]:
        raise UserError(f"genre window must satisfy 1 <= low <= high, got {window}")
    rng = _rng(seed, split, "genre")
    by_genre: dict[str, list[LabelledText]] = {genre: [] for genre in GENRES}
    for play in _plays(split, plays):
        speeches = play.speeches
        start = 0
        while start < len(speeches):
            size = rng.randint(*window)
            text = "\n\n".join(render_speech(s) for s in speeches[start : start + size])
            start += size
            if len(text) >= min_chars:
                by_genre[play.genre].append(LabelledText(text, play.genre, play.slug))
    examples = []
    for genre in GENRES:
        candidates = by_genre[genre]
        rng.shuffle(candidates)
        examples.extend(candidates[:per_genre])
    rng.shuffle(examples)
    return examples


LINE_ORDERS = ("in order", "swapped")


@drawn_once
def line_order_examples(
    split: str, per_order: int = 300, min_words: int = 4, seed: int = 0, plays: Sequence[Play] | None = None
) -> list[LabelledText]:
    """Pairs of consecutive lines of one speech, ``per_order`` printed as written and as many swapped.

    The pairs tile each speech without overlap (lines 1-2, 3-4, ...), so no line is in two items;
    a pair with a line under ``min_words`` words ("O!") says nothing about order and is dropped.
    A random ``2 * per_order`` of them, half of each label, shuffled."""
    rng = _rng(seed, split, "line-order")
    pairs: list[tuple[str, str, str]] = []
    for play in _plays(split, plays):
        for speech in play.speeches:
            lines = speech.text.split("\n")
            pairs.extend(
                (lines[i], lines[i + 1], play.slug)
                for i in range(0, len(lines) - 1, 2)
                if min(len(lines[i].split()), len(lines[i + 1].split())) >= min_words
            )
    rng.shuffle(pairs)
    examples = [
        LabelledText(f"{first}\n{second}" if i % 2 == 0 else f"{second}\n{first}", LINE_ORDERS[i % 2], slug)
        for i, (first, second, slug) in enumerate(pairs[: 2 * per_order])
    ]
    rng.shuffle(examples)
    return examples


WORD_ORDERS = ("as written", "shuffled")


@drawn_once
def word_order_examples(
    split: str, per_order: int = 300, min_words: int = 5, seed: int = 0, plays: Sequence[Play] | None = None
) -> list[LabelledText]:
    """Lines of a speech (at least ``min_words`` words, two of them different after the first), ``per_order``
    as written and as many with every word after the first shuffled into another order; each line in one item.

    The first word stays: it carries the verse line's capital, a cue fine-tuning finds without reading order."""
    rng = _rng(seed, split, "word-order")
    lines = [
        (line, play.slug)
        for play in _plays(split, plays)
        for speech in play.speeches
        for line in speech.text.split("\n")
        if len(line.split()) >= min_words and len(set(line.split()[1:])) > 1
    ]
    rng.shuffle(lines)
    examples = []
    for i, (line, slug) in enumerate(lines[: 2 * per_order]):
        words = line.split()
        if i % 2:
            shuffled = words
            while shuffled == words:  # ends: two different words follow the first
                shuffled = words[:1] + rng.sample(words[1:], len(words) - 1)
            words = shuffled
        examples.append(LabelledText(" ".join(words), WORD_ORDERS[i % 2], slug))
    rng.shuffle(examples)
    return examples


SENTENCE_MARKS = {".": "statement", "?": "question", "!": "exclamation"}
SENTENCE = re.compile(r"[^.?!]+[.?!]")
PUNCTUATION = re.compile(r"[,.;:!?]")


@drawn_once
def sentence_mark_examples(
    split: str, per_mark: int = 300, min_words: int = 4, seed: int = 0, plays: Sequence[Play] | None = None
) -> list[LabelledText]:
    """Sentences of the speeches (text up to a ``.``, ``?`` or ``!``, lines joined by spaces), their
    punctuation removed, labelled by the mark that ended them; a random ``per_mark`` of each kind
    (the test plays hold 815 exclamations of at least ``min_words`` words), shuffled."""
    rng = _rng(seed, split, "sentence-mark")
    by_mark: dict[str, list[LabelledText]] = {label: [] for label in SENTENCE_MARKS.values()}
    for play in _plays(split, plays):
        for speech in play.speeches:
            for sentence in SENTENCE.findall(speech.text.replace("\n", " ")):
                words, label = PUNCTUATION.sub("", sentence).split(), SENTENCE_MARKS[sentence[-1]]
                if len(words) >= min_words:
                    by_mark[label].append(LabelledText(" ".join(words), label, play.slug))
    examples = []
    for candidates in by_mark.values():
        rng.shuffle(candidates)
        examples.extend(candidates[:per_mark])
    rng.shuffle(examples)
    return examples


# ---- retrieval (inverse cloze) -------------------------------------------------------------------


@drawn_once
def ict_retrieval(
    split: str,
    min_lines: int = 4,
    min_query_words: int = 4,
    max_queries: int | None = None,
    max_docs: int | None = None,
    seed: int = 0,
    plays: Sequence[Play] | None = None,
) -> RetrievalSet:
    """The inverse cloze task over one split.

    Every speech with at least ``min_lines`` lines and a line of at least ``min_query_words`` words
    yields one (query line, speech without it) pair; the line is drawn among those long enough to
    say something ("O!" matches anything). All such speeches form the collection; ``max_queries``
    keeps a random subset of the queries (the collection stays whole, so the task does not get
    easier). ``max_docs`` cuts the collection itself to a random subset of the speeches (and the
    queries to theirs): a smaller haystack, for models too small to search the whole split."""
    if min_lines < 2:
        raise UserError(f"ICT needs speeches of at least 2 lines, got min_lines={min_lines}")
    rng = _rng(seed, split, "ict")
    queries, docs = [], []
    for play in _plays(split, plays):
        for speech in play.speeches:
            lines = speech.text.split("\n")
            if len(lines) < min_lines:
                continue
            eligible = [i for i, line in enumerate(lines) if len(line.split()) >= min_query_words]
            if not eligible:
                continue
            taken = rng.choice(eligible)
            queries.append(lines[taken])
            docs.append("\n".join(lines[:taken] + lines[taken + 1 :]))
    if max_docs is not None and max_docs < len(docs):
        keep = sorted(rng.sample(range(len(docs)), max_docs))
        queries, docs = [queries[i] for i in keep], [docs[i] for i in keep]
    relevant = list(range(len(docs)))
    if max_queries is not None and max_queries < len(queries):
        keep = sorted(rng.sample(range(len(queries)), max_queries))
        queries, relevant = [queries[i] for i in keep], [relevant[i] for i in keep]
    return RetrievalSet(tuple(queries), tuple(docs), tuple(relevant))


# ---- read-then-write extraction: passage -> speakers --------------------------------------------


def speakers_target(speeches: Sequence[Speech]) -> str:
    """ "A, B, C": the speakers in order of first speech, each once."""
    return ", ".join(dict.fromkeys(s.speaker for s in speeches))


def render_passage(speeches: Sequence[Speech], hide_speakers: bool = False) -> str:
    """Speeches as printed ("SPEAKER\\ntext" blocks separated by a blank line), or their text only."""
    return "\n\n".join(s.text if hide_speakers else render_speech(s) for s in speeches)


@drawn_once
def speaker_examples(
    split: str,
    n_speeches: tuple[int, int] = (2, 6),
    max_chars: int = 600,
    whole_scenes: bool = False,
    hide_speakers: bool = False,
    mid_speech: bool = False,
    limit: int | None = None,
    seed: int = 0,
    plays: Sequence[Play] | None = None,
) -> list[Seq2SeqExample]:
    """Passages of consecutive speeches within a scene -> their speakers.

    ``mid_speech``: each passage opens inside its first speech, whose speaker line is left out, as an
    excerpt cut from a page would; the target names the speakers the passage shows. Then the answer
    is never the source's first line: it must be found and copied wherever it stands.

    Source length is controlled two ways: each window takes ``n_speeches[0]..n_speeches[1]``
    speeches (drawn per window), then drops speeches from its end until it fits ``max_chars``, but
    never below ``n_speeches[0]`` (a window that cannot fit, or a scene's last window that is too
    short, is skipped: a lower bound of 2 guarantees every passage a second speech).
    ``whole_scenes`` makes each scene one passage instead, kept only if it fits. Lengths are
    measured on the passage as printed, so the ``hide_speakers`` variant holds the same passages.
    Windows tile each scene without overlap; ``limit`` keeps a random subset."""
    if not 1 <= n_speeches[0] <= n_speeches[1]:
        raise UserError(f"speeches per passage must satisfy 1 <= low <= high, got {n_speeches}")
    rng = _rng(seed, split, "speakers")
    examples = []
    for play in _plays(split, plays):
        for scene in play.scenes:
            if whole_scenes:
                windows = [scene.speeches] if scene.speeches else []
            else:
                windows, start = [], 0
                while start < len(scene.speeches):
                    size = rng.randint(*n_speeches)
                    windows.append(scene.speeches[start : start + size])
                    start += size
            for speeches in windows:
                if not whole_scenes:
                    while len(speeches) > n_speeches[0] and len(render_passage(speeches)) > max_chars:
                        speeches = speeches[:-1]
                    if len(speeches) < n_speeches[0]:  # a scene's short last window
                        continue
                if len(render_passage(speeches)) <= max_chars:
                    source = render_passage(speeches, hide_speakers)
                    if mid_speech:  # the passage as printed, less the first speech's speaker line
                        source = source.split("\n", 1)[1] if not hide_speakers else source
                        shown = speeches[1:]
                    else:
                        shown = speeches
                    examples.append(Seq2SeqExample(source, speakers_target(shown), play.slug))
    if limit is not None and limit < len(examples):
        examples = [examples[i] for i in sorted(rng.sample(range(len(examples)), limit))]
    return examples


def rename_speakers(example: Seq2SeqExample, rng: random.Random) -> Seq2SeqExample:
    """The same passage with every speaker renamed to random letters of the same shape (word count
    and lengths, upper or capitalised case), consistently wherever the name stands: the speaker
    lines, the text (as a whole word starting with a capital: "BENEDICK" is "Benedick" in an
    address) and the target. "FIRST CITIZEN" may become "QWUVE BZKTOAR".

    Why: the test plays' casts are not the training plays' (about 15% of the test passages'
    speakers also speak in a training play), and a small model fine-tuned on real names learns the
    training cast instead of copying. A renamed passage can only be answered by copying from the
    source: from one pretrained encoder-decoder, 1000 fine-tuning steps gave test speakers F1 0.632
    with real names only and 0.912 with half the draws renamed (docs/results.md, Task quality). With the speaker
    lines hidden, a name the text never says cannot be recovered, renamed or not; what renaming
    leaves to learn is copying the names the text does say."""
    speakers = example.target.split(", ")

    def random_name(name: str) -> str:
        words = ["".join(rng.choice(ascii_uppercase) for _ in word) for word in name.split(" ")]
        return " ".join(w if word.isupper() else w.capitalize() for w, word in zip(words, name.split(" ")))

    new = {speaker: random_name(speaker) for speaker in speakers}
    by_upper = {speaker.upper(): name for speaker, name in new.items()}
    longest_first = sorted(speakers, key=len, reverse=True)  # "LADY MACBETH" before "MACBETH"
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(s) for s in longest_first) + r")\b", re.IGNORECASE)

    def rename(match: re.Match) -> str:
        found = match.group(0)
        if found in new:
            return new[found]  # a speaker line, or the name exactly as the cast list spells it
        if not found[0].isupper():
            return found  # "all", "page": an ordinary word that a speaker happens to be called
        name = by_upper[found.upper()]
        return name.upper() if found.isupper() else " ".join(w.capitalize() for w in name.split(" "))

    return Seq2SeqExample(pattern.sub(rename, example.source), ", ".join(new[s] for s in speakers), example.origin)


# ---- read-then-write layout: verse lines from prose ------------------------------------------------

LINE_OPENS_CAPITAL = re.compile(r"^([^A-Za-z]*)([A-Z])")  # a verse line opens with a capital (after a quote, a dash)
ENDS_SENTENCE = re.compile(r"[.!?][^A-Za-z]*$")  # the line closes a sentence (a mark, then quotes or brackets)


def _bare(word: str) -> str:
    """A word's letters: "Caesar," and "Caesar" are one word to ``capitalised_words``."""
    return re.sub(r"[^A-Za-z]", "", word)


def is_verse(speech: Speech, min_lines: int = 3) -> bool:
    """A speech printed as verse: at least ``min_lines`` lines, each opening with a capital. Prose is printed in
    lines the page wrapped, most of which open in lower case, so a few lines all capitalised are verse (or a
    song's)."""
    lines = speech.text.split("\n")
    return len(lines) >= min_lines and all(LINE_OPENS_CAPITAL.match(line) for line in lines)


def capitalised_words(plays: Sequence[Play]) -> frozenset[str]:
    """The words ``plays`` capitalise more often than not inside a line after a word with no mark after it: names,
    "I", "O", "God"; what prose keeps capitalised wherever it stands. More often, not ever: a speaker's name the
    source ran into a line ("Lord Chief-Justice And so they are.") capitalises an "And" now and then."""
    upper: Counter[str] = Counter()
    lower: Counter[str] = Counter()
    for play in plays:
        for speech in play.speeches:
            for line in speech.text.split("\n"):
                words = line.split()
                for before, word in zip(words, words[1:]):
                    if before[-1].isalpha() and (bare := _bare(word)):
                        (upper if bare[0].isupper() else lower)[bare.lower()] += 1
    return frozenset(word for word, n in upper.items() if n > lower[word])


def as_prose(lines: Sequence[str], capitalised: frozenset[str]) -> list[str]:
    """Verse ``lines`` as prose prints them: a line that neither opens a sentence (the first line, or one after a
    line ending in . ! ?) nor opens with a word of ``capitalised`` opens in lower case. Else a break before every
    capital would find most lines: at 0.82 F1 on the test plays, the one-line rule the task would be."""
    prose = [lines[0]]
    for before, line in zip(lines, lines[1:]):
        keeps = ENDS_SENTENCE.search(before) or _bare(line.split()[0]).lower() in capitalised
        prose.append(line if keeps else LINE_OPENS_CAPITAL.sub(lambda m: m[1] + m[2].lower(), line, count=1))
    return prose


@drawn_once
def verse_examples(
    split: str,
    n_lines: tuple[int, int] = (2, 4),
    max_chars: int = 120,
    limit: int | None = None,
    seed: int = 0,
    plays: Sequence[Play] | None = None,
) -> list[Seq2SeqExample]:
    """Runs of consecutive lines of a verse speech (``is_verse``) printed as prose -> the same words in their lines.

    The source is the lines (``as_prose``) joined by a space, the target the same lines joined by "\\n": the
    target's words are the source's, in order, and only the breaks differ. Each window takes
    ``n_lines[0]..n_lines[1]`` lines (drawn per window) and drops lines from its end until the source fits
    ``max_chars``, never below ``n_lines[0]`` (a window that cannot fit, or a speech's short last window, is
    skipped). Windows tile each speech without overlap; ``limit`` keeps a random subset."""
    if not 2 <= n_lines[0] <= n_lines[1]:
        raise UserError(f"lines per verse source must satisfy 2 <= low <= high, got {n_lines}")
    rng = _rng(seed, split, "verse")
    chosen = _plays(split, plays)
    capitalised = capitalised_words(chosen)  # the split's own plays: nothing of another split decides its sources
    examples = []
    for play in chosen:
        for speech in play.speeches:
            if not is_verse(speech):
                continue
            lines = as_prose([line.strip() for line in speech.text.split("\n")], capitalised)
            start = 0
            while start < len(lines):
                size = rng.randint(*n_lines)
                window = lines[start : start + size]
                start += size
                while len(window) > n_lines[0] and len(" ".join(window)) > max_chars:
                    window = window[:-1]
                if len(window) >= n_lines[0] and len(" ".join(window)) <= max_chars:
                    examples.append(Seq2SeqExample(" ".join(window), "\n".join(window), play.slug))
    if limit is not None and limit < len(examples):
        examples = [examples[i] for i in sorted(rng.sample(range(len(examples)), limit))]
    return examples


def first_speaker_baseline(source: str) -> str:
    """Copy the first line of the source: the first speaker when speakers are shown (a floor every
    model should beat); a line of verse when they are hidden."""
    return source.split("\n", 1)[0].strip()
