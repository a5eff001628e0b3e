"""SubagentTask and the SubagentResult envelope."""

from __future__ import annotations

import pytest

from subagents import PayloadError, SubagentTask, TaskId


def test_tasks_are_immutable_and_builders_return_new_tasks() -> None:
    base = SubagentTask("collect facts")
    named = base.with_id(TaskId.from_string("research-1")).with_metadata({"source": "docs"})

    assert base.id != named.id
    assert base.metadata == {}
    assert named.prompt == "collect facts"
    assert named.metadata == {"source": "docs"}
    with pytest.raises(AttributeError):
        named.prompt = "other"


def test_each_task_gets_a_fresh_id_by_default() -> None:
    assert SubagentTask("a").id != SubagentTask("a").id


def test_a_task_round_trips_through_values() -> None:
    task = SubagentTask("x").with_id(TaskId("t")).with_metadata({"k": [1]})

    assert task.to_value() == {"id": "t", "prompt": "x", "metadata": {"k": [1]}}
    assert SubagentTask.from_value(task.to_value()) == task


def test_bad_task_input_is_refused() -> None:
    with pytest.raises(TypeError):
        SubagentTask(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SubagentTask("x").with_metadata(["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        SubagentTask.from_value({"prompt": "x"})
