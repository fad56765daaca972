"""Task data: split by play, deterministic, the speakers target format, and users' files."""

import random
import re

import pytest

from maskwise.data.plays import GENRES, Play, Scene, Speech, split_plays
from maskwise.data.task_files import (
    hold_out,
    labelled_texts_from_file,
    read_task_file,
    retrieval_from_file,
    seq2seq_from_file,
)
from maskwise.data.tasks import (
    LINE_ORDERS,
    SENTENCE_MARKS,
    WORD_ORDERS,
    Seq2SeqExample,
    as_prose,
    capitalised_words,
    first_speaker_baseline,
    genre_examples,
    ict_retrieval,
    line_order_examples,
    rename_speakers,
    render_passage,
    sentence_mark_examples,
    speaker_examples,
    speakers_target,
    verse_examples,
    word_order_examples,
)
from maskwise.errors import UserError

pytestmark = pytest.mark.unit


def _slugs(split):
    return {play.slug for play in split_plays()[split]}


def test_no_play_in_two_splits_and_examples_stay_in_their_split():
    slugs = {name: _slugs(name) for name in ("train", "val", "test")}
    assert not (slugs["train"] & slugs["val"] or slugs["train"] & slugs["test"] or slugs["val"] & slugs["test"])
    for name in ("val", "test"):
        assert {e.origin for e in genre_examples(name, per_genre=20)} <= slugs[name]
        assert {e.origin for e in speaker_examples(name, limit=50)} <= slugs[name]


def test_genre_examples_balanced_and_deterministic():
    examples = genre_examples("test", per_genre=30)
    assert examples == genre_examples("test", per_genre=30)
    counts = {g: sum(e.label == g for e in examples) for g in GENRES}
    assert set(counts.values()) == {30}  # every genre appears in every split, capped per genre
    assert all(len(e.text) >= 80 for e in examples)
    assert examples != genre_examples("test", per_genre=30, seed=1)


def test_line_order_pairs_are_consecutive_lines_half_of_them_swapped():
    examples = line_order_examples("test", per_order=200)
    assert examples == line_order_examples("test", per_order=200)
    assert examples != line_order_examples("test", per_order=200, seed=1)
    assert {e.label: sum(x.label == e.label for x in examples) for e in examples} == dict.fromkeys(LINE_ORDERS, 200)
    assert {e.origin for e in examples} <= _slugs("test")
    consecutive = {
        (speech.text.split("\n")[i], speech.text.split("\n")[i + 1])
        for play in split_plays()["test"]
        for speech in play.speeches
        for i in range(len(speech.text.split("\n")) - 1)
    }
    for e in examples:
        first, second = e.text.split("\n")
        assert min(len(first.split()), len(second.split())) >= 4
        assert ((first, second) if e.label == "in order" else (second, first)) in consecutive
    lines = [line for e in examples for line in e.text.split("\n")]
    assert len(set(lines)) > 0.99 * len(lines)  # disjoint pairs: a line (bar repeated verses) is in one item


def test_word_order_lines_keep_their_words_and_first_word_half_of_them_shuffled():
    examples = word_order_examples("test", per_order=200)
    assert examples == word_order_examples("test", per_order=200)
    assert examples != word_order_examples("test", per_order=200, seed=1)
    assert {label: sum(e.label == label for e in examples) for label in WORD_ORDERS} == dict.fromkeys(WORD_ORDERS, 200)
    assert {e.origin for e in examples} <= _slugs("test")
    lines = {
        " ".join(line.split())
        for play in split_plays()["test"]
        for speech in play.speeches
        for line in speech.text.split("\n")
    }
    by_words = {}
    for line in lines:
        words = line.split()
        by_words.setdefault((words[0], tuple(sorted(words[1:]))), set()).add(line)
    for e in examples:
        words = e.text.split()
        assert len(words) >= 5
        originals = by_words[(words[0], tuple(sorted(words[1:])))]  # the lines with its first word and its words
        if e.label == "as written":
            assert e.text in originals
        else:
            assert originals - {e.text}  # another order of a line's words than its own, its first word kept


def test_sentence_marks_are_balanced_unpunctuated_sentences_of_the_split():
    examples = sentence_mark_examples("test", per_mark=100)
    assert examples == sentence_mark_examples("test", per_mark=100)
    assert {label: sum(e.label == label for e in examples) for label in SENTENCE_MARKS.values()} == dict.fromkeys(
        SENTENCE_MARKS.values(), 100
    )
    assert {e.origin for e in examples} <= _slugs("test")
    spoken = " ".join(
        " ".join(re.sub("[,.;:!?]", "", speech.text).split())
        for play in split_plays()["test"]
        for speech in play.speeches
    )
    for e in examples:
        assert not set(",.;:!?") & set(e.text) and len(e.text.split()) >= 4
        assert e.text in spoken  # a stretch of a test speech, its marks taken out


def test_ict_pairs_take_one_line_out():
    data = ict_retrieval("test", max_queries=40)
    assert data == ict_retrieval("test", max_queries=40)
    assert len(data.queries) == 40 and len(data.docs) > 40
    for query, doc in data.pairs():
        assert query not in doc.split("\n")  # the line was removed from its passage
        assert len(doc.split("\n")) >= 3  # speeches of >= 4 lines, one taken out
        assert len(query.split()) >= 4


def test_speakers_target_order_of_first_speech_each_once():
    speeches = [Speech("B", "one"), Speech("A", "two"), Speech("B", "three"), Speech("C", "four")]
    assert speakers_target(speeches) == "B, A, C"
    assert render_passage(speeches[:2]) == "B\none\n\nA\ntwo"
    assert render_passage(speeches[:2], hide_speakers=True) == "one\n\ntwo"
    assert first_speaker_baseline(render_passage(speeches)) == "B"


def test_speaker_examples_respect_length_and_hiding():
    shown = speaker_examples("val", max_chars=300, limit=60)
    assert all(len(e.source) <= 300 and e.source.count("\n\n") >= 1 for e in shown)  # >= 2 speeches
    for e in shown:
        first = e.target.split(", ")[0]
        assert e.source.startswith(first + "\n")
    hidden = speaker_examples("val", max_chars=300, limit=60, hide_speakers=True)
    for h, s in zip(hidden, shown, strict=True):  # the same passages, speaker lines removed
        assert h.target == s.target
        assert h.source == "\n\n".join(block.split("\n", 1)[1] for block in s.source.split("\n\n"))
    scenes = speaker_examples("test", whole_scenes=True, max_chars=4000)
    assert scenes and all(len(e.source) <= 4000 for e in scenes)
    whole = {s.speeches for p in split_plays()["test"] for s in p.scenes}
    assert all(any(render_passage(w) == e.source for w in whole) for e in scenes[:5])  # never cut


def test_rename_speakers_renames_consistently_and_keeps_the_text():
    speeches = [Speech("FIRST CITIZEN", "one"), Speech("Clown", "two"), Speech("FIRST CITIZEN", "three")]
    example = Seq2SeqExample(render_passage(speeches), speakers_target(speeches), "x")
    rng = random.Random(0)
    renamed = rename_speakers(example, rng)
    citizen, clown = renamed.target.split(", ")
    assert renamed.source == render_passage([Speech(citizen, "one"), Speech(clown, "two"), Speech(citizen, "three")])
    assert [len(w) for w in citizen.split(" ")] == [5, 7] and citizen.isupper()  # the same shape
    assert len(clown) == 5 and clown[0].isupper() and clown[1:].islower()
    assert rename_speakers(example, rng).target != renamed.target  # a fresh draw each call
    for shown in speaker_examples("val", max_chars=300, limit=30):  # first speaker still starts the source
        again = rename_speakers(shown, random.Random(2))
        assert again.source.startswith(again.target.split(", ")[0] + "\n")


def test_rename_speakers_renames_names_in_the_text_too():
    hidden = Seq2SeqExample(
        "My true Paulina,\nall is well, Leontes.\n\nAy, LEONTES; and ALL of you.", "LEONTES, ALL", "x"
    )
    renamed = rename_speakers(hidden, random.Random(3))
    leontes, everyone = renamed.target.split(", ")
    assert renamed.source == (
        f"My true Paulina,\nall is well, {leontes.capitalize()}.\n\nAy, {leontes}; and {everyone} of you."
    )  # "all" is just a word; PAULINA is no speaker
    shown = Seq2SeqExample("LEONTES\nGood Paulina.\n\nPAULINA\nMy lord Leontes.", "LEONTES, PAULINA", "y")
    renamed = rename_speakers(shown, random.Random(4))
    leontes, paulina = renamed.target.split(", ")
    assert renamed.source == f"{leontes}\nGood {paulina.capitalize()}.\n\n{paulina}\nMy lord {leontes.capitalize()}."


def test_user_files_jsonl_and_csv(tmp_path):
    jsonl = tmp_path / "cls.jsonl"
    jsonl.write_text('{"text": "hello", "label": 1}\n\n{"text": "bye", "label": "b"}\n')
    rows = labelled_texts_from_file(jsonl)
    assert [(r.text, r.label) for r in rows] == [("hello", "1"), ("bye", "b")]
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('query,positive\nq1,"doc, one"\nq2,doc two\nq3,"doc, one"\n')
    data = retrieval_from_file(csv_file)
    assert data.docs == ("doc, one", "doc two") and data.relevant == (0, 1, 0)
    s2s = tmp_path / "s2s.jsonl"
    s2s.write_text('{"source": "A\\nhi", "target": "A"}\n')
    assert seq2seq_from_file(s2s)[0].target == "A"
    train, held = hold_out(list(range(20)))
    assert len(held) == 2 and sorted(train + held) == list(range(20))  # a random 10%, each split in file order
    assert held != [18, 19] and train == sorted(train) and hold_out(list(range(20))) == (train, held)  # seeded


@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("bad.jsonl", '{"text": "a", "label": "x"}\n{"text": oops}\n', "line 2"),
        ("bad.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "b"}\n', "line 3"),
        ("bad.jsonl", '["text", "label"]\n', "line 1"),
        ("bad.csv", "text,label\na,x\n,y\n", "line 3"),
        ("bad.csv", "text,other\na,x\n", "label"),
        ("bad.csv", "text,label\na,x,extra\n", "line 2"),
        ("bad.txt", "text\n", ".jsonl, .csv or .tsv"),
    ],
)
def test_bad_rows_name_their_line(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UserError, match=needle):
        read_task_file(path, ("text", "label"))


def test_mid_speech_passages_hide_the_first_speaker_and_name_those_shown():
    whole = speaker_examples("test", max_chars=120, seed=3)
    cut = speaker_examples("test", max_chars=120, mid_speech=True, seed=3)
    assert len(cut) == len(whole) > 50  # the same windows
    for full, excerpt in zip(whole, cut):
        first_speaker, rest = full.source.split("\n", 1)
        assert excerpt.source == rest  # the passage less its first speaker line
        shown = excerpt.target.split(", ")
        assert all(f"\n\n{name}\n" in excerpt.source for name in shown)  # each answer stands in the source
        # the hidden first speaker is an answer exactly when a later speech of the passage shows them
        assert (first_speaker in shown) == (f"\n\n{first_speaker}\n" in excerpt.source)
        assert first_speaker_baseline(excerpt.source) not in shown  # the first line is verse, never an answer


def test_verse_sources_are_prose_of_the_targets_words_drawn_by_play():
    assert verse_examples("test", limit=200, seed=1) == verse_examples("test", limit=200, seed=1)  # seeded
    assert verse_examples("test", limit=200, seed=1) != verse_examples("test", limit=200)
    for split in ("train", "test"):
        drawn = verse_examples(split, limit=200, seed=1)
        assert len(drawn) == 200 and {e.origin for e in drawn} <= _slugs(split)  # the split's own plays
        for e in drawn:
            lines = e.target.split("\n")
            assert 2 <= len(lines) <= 4 and len(e.source) <= 120
            assert e.source == " ".join(lines) and "\n" not in e.source  # the same words, only the breaks differ
    whole = verse_examples("test", max_chars=60)
    assert max(len(e.source) for e in whole) <= 60 < max(len(e.source) for e in verse_examples("test"))
    with pytest.raises(UserError, match="lines per verse source"):
        verse_examples("test", n_lines=(1, 3))


def test_verse_is_printed_as_prose_keeping_the_capitals_prose_keeps():
    speech = Speech("A", "O Rome, I would\nThat I were there.\nAnd Rome would\nKnow it")
    plays = [Play("p", "P", "comedy", (Scene("1", "1", (speech, Speech("B", "and then I saw Rome again")), ()),))]
    assert capitalised_words(plays) == {"i", "rome"}  # after a word with no mark: "I", a name; not "That", "Know"
    lines = speech.text.split("\n")
    # "That" continues a sentence: lower case; "And" opens one; "Know" continues it
    prose = ["O Rome, I would", "that I were there.", "And Rome would", "know it"]
    assert as_prose(lines, capitalised_words(plays)) == prose
    assert as_prose(["Let us go", "I say, and Rome"], frozenset({"i"})) == ["Let us go", "I say, and Rome"]
    assert as_prose(["Let us go", "'Tis Rome"], frozenset()) == ["Let us go", "'tis Rome"]  # the letter after a mark
    printed = "\n".join(as_prose(lines, capitalised_words(plays)))
    drawn = verse_examples("test", plays=plays)  # one comedy: the test play; B's one line is not verse
    assert drawn and all(e.target in printed for e in drawn)
