"""Id value types."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from storage import SeededIds
from subagents import ConversationId, RunId, TaskId


def test_ids_compare_and_hash_by_value_within_one_type() -> None:
    assert TaskId.from_string("a") == TaskId("a")
    assert hash(TaskId("a")) == hash(TaskId("a"))
    assert len({TaskId("a"), TaskId("a"), TaskId("b")}) == 2
    assert TaskId("a") != RunId("a")
    assert TaskId("a") != "a"


def test_ids_show_their_string() -> None:
    task_id = TaskId.from_string("research-1")

    assert task_id.as_str() == "research-1"
    assert str(task_id) == "research-1"
    assert repr(task_id) == "TaskId('research-1')"


def test_fresh_ids_are_unique_and_seedable() -> None:
    assert RunId() != RunId()
    assert ConversationId().as_str().startswith("conv_")
    assert RunId.generate(SeededIds(3)) == RunId.generate(SeededIds(3))


def test_ids_are_immutable_and_picklable() -> None:
    run_id = RunId("r")

    with pytest.raises(AttributeError):
        run_id._value = "other"
    assert pickle.loads(pickle.dumps(run_id)) == run_id


@pytest.mark.parametrize("bad", ["", 7, b"x"])
def test_an_id_needs_a_non_empty_string(bad: object) -> None:
    with pytest.raises(TypeError):
        TaskId(bad)  # type: ignore[arg-type]


def test_ids_are_not_msgspec_natives_without_the_hooks() -> None:
    # Records encode ids through their hooks; the raw encoder refuses them,
    # which is why every record goes through Record.to_value().
    with pytest.raises(TypeError):
        msgspec.json.encode(TaskId("a"))
