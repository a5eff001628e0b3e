"""The event bus, lifecycle payloads and previews."""

from __future__ import annotations

import pytest

from subagents import (
    AgentEvent,
    EventBus,
    PayloadError,
    RunId,
    SubagentLifecycleEvent,
    SubagentLifecycleKind,
    TaskId,
    compact_preview,
)


def test_the_bus_keeps_events_in_order_and_hands_out_snapshots() -> None:
    bus = EventBus()
    bus.publish(AgentEvent(kind="a", payload=1))
    snapshot = bus.events()
    bus.publish(AgentEvent(kind="b", payload=2, metadata={"m": True}))

    assert [e.kind for e in snapshot] == ["a"]
    assert [e.kind for e in bus.events()] == ["a", "b"]
    assert bus.of_kind("b")[0].metadata == {"m": True}
    copy = bus.copy()
    copy.publish(AgentEvent(kind="c"))
    assert len(bus) == 2 and len(copy) == 3


def test_a_lifecycle_event_round_trips_with_typed_ids_and_kind() -> None:
    event = SubagentLifecycleEvent(
        kind=SubagentLifecycleKind.COMPLETED,
        name="research",
        task_id=TaskId.from_string("research-1"),
        run_id=RunId.from_string("run-9"),
        metadata={"request_count": 1},
    )

    value = event.to_value()

    assert value == {
        "kind": "completed",
        "name": "research",
        "task_id": "research-1",
        "run_id": "run-9",
        "metadata": {"request_count": 1},
    }
    assert SubagentLifecycleEvent.from_value(value) == event
    assert [k.value for k in SubagentLifecycleKind] == ["started", "completed", "failed"]


def test_a_lifecycle_payload_with_a_bad_field_raises_payload_error_naming_it() -> None:
    with pytest.raises(PayloadError) as caught:
        SubagentLifecycleEvent.from_value({"kind": "paused", "name": "x", "task_id": "t"})

    assert caught.value.type == "SubagentLifecycleEvent"
    assert "$.kind" in caught.value.detail


@pytest.mark.parametrize(
    ("text", "preview"),
    [
        ("  collect \n\t facts  ", "collect facts"),
        ("", ""),
        ("x" * 240, "x" * 240),
        ("x" * 241, "x" * 239 + "…"),
    ],
)
def test_previews_collapse_whitespace_and_cap_length(text: str, preview: str) -> None:
    assert compact_preview(text) == preview
