"""A task's record is a typed dataclass whose JSON (a results file, a compare's cache) reads back as the same record."""

from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from maskwise.tasks.record import Fields, Record, key

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Part(Fields):
    f1: float
    per_item: list[float]


@dataclass(frozen=True)
class Toy(Record):
    task: ClassVar[str] = "toy"
    ndcg_at_10: float = field(metadata=key("ndcg@10"))
    baseline: Part
    per_label: dict[str, Part]
    parts: list[Part]
    maybe: Part | None = None
    settings: dict[str, int] = field(default_factory=dict)


def toy() -> Toy:
    return Toy(0.5, Part(0.1, [0.0, 0.2]), {"a": Part(1.0, [1.0])}, [Part(0.3, [])], settings={"steps": 2})


def test_a_record_writes_its_fields_by_their_json_keys_and_leads_with_its_task():
    written = toy().timed(1.5).to_json()
    assert list(written)[:2] == ["task", "finetune_s"] and written["task"] == "toy" and written["finetune_s"] == 1.5
    assert written["ndcg@10"] == 0.5 and "ndcg_at_10" not in written
    assert written["baseline"] == {"f1": 0.1, "per_item": [0.0, 0.2]} and written["per_label"]["a"]["f1"] == 1.0
    assert "maybe" not in written and written["parts"] == [{"f1": 0.3, "per_item": []}]  # None: left out
    assert "finetune_s" not in toy().to_json()


def test_its_json_reads_back_as_the_same_record_nested_parts_rebuilt():
    again = Toy.from_json(toy().to_json())
    assert again == toy() and isinstance(again.baseline, Part) and isinstance(again.per_label["a"], Part)
    assert isinstance(again.parts[0], Part)
    with_part = Toy.from_json({**toy().to_json(), "maybe": {"f1": 0.9, "per_item": [1.0]}})
    assert with_part.maybe == Part(0.9, [1.0])


def test_keys_beside_a_record_are_left_to_the_caller_and_a_missing_field_is_an_error():
    assert Toy.from_json({**toy().to_json(), "folder": "fine-tuned/x"}) == toy()  # a compare keeps its folder beside
    written = toy().to_json()
    del written["baseline"]
    with pytest.raises(TypeError, match="baseline"):
        Toy.from_json(written)
