"""The plays' verse task (verse lines from prose): its metric on hand-computed cases, its two rules and the choice
between them on the training rows, its classic method's score on the test plays, and its row read from a record."""

import json
import statistics

import pytest

from maskwise.data.tasks import Seq2SeqExample, verse_examples
from maskwise.errors import UserError
from maskwise.tasks.classic import (
    AFTER_MARKS,
    TEN_SYLLABLES,
    best_verse_rule,
    break_after_marks,
    break_every_ten_syllables,
    rule_scores,
    syllables,
)
from maskwise.tasks.metrics import break_f1, line_breaks
from maskwise.tasks.registry import TASKS
from maskwise.tasks.seq2seq import VERSE, Seq2SeqConfig, VerseRow
from maskwise.tasks.seq2seq_scores import Seq2SeqRecord, generation_scores

pytestmark = pytest.mark.unit

GOLD = "a b c\nd e\nf g h"  # eight words, breaks after the third and the fifth


@pytest.mark.parametrize(
    "predicted, expected",
    [
        (GOLD, 1.0),
        ("a b c d e f g h", 0.0),  # no break written: recall 0
        ("a b c\nd e f g h", 2 / 3),  # one of two: precision 1, recall 1/2
        ("a b\nc d e\nf g h", 0.5),  # after the 2nd (wrong) and the 5th (right): 1 of 2 written, 1 of 2 due
        ("a x c\nd e\nf g h", 0.5),  # a miscopied line scores no break; the next is found again
        ("a b c\ne\nf g h", 0.5),  # "d" dropped: the line after it does not copy the source from the last break
        ("d e\na b c f g h", 0.0),  # a line moved: it does not copy the source from its start
        ("a b c\n\nd e\nf g h\n", 1.0),  # empty lines are no lines
        ("a b c\nd e\nf g h\nz", 0.8),  # an added line: its break written and wrong (2 of 3, 2 of 2)
    ],
)
def test_break_f1_on_hand_computed_cases(predicted, expected):
    assert break_f1(predicted, GOLD) == pytest.approx(expected)


def test_breaks_are_counted_in_words_of_the_source():
    assert line_breaks(GOLD, GOLD.split()) == ({3, 5}, 2)
    assert line_breaks("a b\nzz\nd e\nf", GOLD.split()) == ({2, 5}, 3)  # "zz" is not found; "d e" is, after it
    assert break_f1("one line", "one line") == 1.0  # no break due, none written


def test_syllables_are_vowel_groups_less_a_silent_final_e():
    words = ("love", "thee", "table", "heaven", "I", "o'er", "Rome,", "beautiful")
    assert [syllables(w) for w in words] == [1, 1, 2, 2, 1, 1, 1, 3]


def test_the_rules_break_after_ten_syllables_and_after_marks():
    source = "Now is the winter of our discontent made glorious summer by this sun of York;"
    assert (
        break_every_ten_syllables(source)
        == "Now is the winter of our discontent\nmade glorious summer by this sun of York;"
    )
    assert (
        break_after_marks("O, Romeo, Romeo! wherefore art thou Romeo?")
        == "O,\nRomeo,\nRomeo!\nwherefore art thou Romeo?"
    )
    assert break_after_marks("'Tis so,' he said") == "'Tis so,'\nhe said"  # a quote after the mark


def test_the_classic_rule_is_chosen_on_the_training_rows_never_the_test_rows():
    marks = [Seq2SeqExample("O, Romeo, Romeo!", "O,\nRomeo,\nRomeo!", "x")]  # the marks rule writes this exactly
    assert best_verse_rule(marks) == (AFTER_MARKS, {TEN_SYLLABLES: 0.0, AFTER_MARKS: 1.0})
    metre = [Seq2SeqExample("a a a a a a a a a a b b", "a a a a a a a a a a\nb b", "x")]
    assert best_verse_rule(metre)[0] == TEN_SYLLABLES


def test_on_the_plays_the_syllable_rule_is_chosen_and_no_rule_reaches_0_9():
    train, test = verse_examples("train", limit=500), verse_examples("test", limit=300)
    chosen, on_training = best_verse_rule(train)
    assert chosen == TEN_SYLLABLES and on_training[TEN_SYLLABLES] > on_training[AFTER_MARKS]
    on_test = {rule: statistics.mean(rule_scores(rule, test)) for rule in on_training}
    assert 0.3 < on_test[AFTER_MARKS] < on_test[TEN_SYLLABLES] < 0.9  # 0.39, 0.52 on this draw


def test_the_verse_row_reads_break_f1_from_a_record_read_back_from_json():
    test = [Seq2SeqExample("a b c d e f g h", GOLD, "x")] * 2
    scores = {"name": "r", **generation_scores(["a b c\nd e f g h", GOLD], test, (0,), breaks=True)}
    record = Seq2SeqRecord.from_json(
        {
            "family": "encoder-decoder",
            "decoding": "greedy",
            "n_test": 2,
            "source_chars": [15, 15],
            **generation_scores([GOLD, GOLD], test, (0,), breaks=True),
            "baseline": {"name": "the source as one line", **generation_scores(["a b c d e f g h"] * 2, test, (0,))},
            "classic": scores,
            "rules": [scores, scores],
            "rules_on_training": {"r": 0.5},
            "examples": [],
            "plays_task": VERSE,
        }
    )
    again = Seq2SeqRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record and again.rules is not None and again.rules[0].per_example.break_f1 == [2 / 3, 1.0]
    row = next(p.row for p in TASKS["seq2seq"].plays_rows if p.key == VERSE)
    assert isinstance(row, VerseRow)
    scored = row.scored(record.to_json())
    assert list(scored.scores.values) == [1.0, 1.0] and scored.classic is not None
    assert scored.baseline is None  # a record scored without breaks: not measured, never a silent 0
    assert TASKS["seq2seq"].summary(record).startswith("verse from prose (encoder-decoder, greedy) on 2 sources")


def test_verse_refuses_the_speakers_settings():
    with pytest.raises(UserError, match="verse has none"):
        Seq2SeqConfig(plays_task=VERSE, rename_speakers=0.5).validate()
    with pytest.raises(UserError, match="unknown plays task"):
        Seq2SeqConfig(plays_task="sonnets").validate()
