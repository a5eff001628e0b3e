"""Stream records, the sequencing sink, and attribution of (grand)child records."""

from __future__ import annotations

from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    AgentStreamRecord,
    AgentStreamSink,
    AgentStreamSource,
    AgentStreamSourceKind,
    PayloadError,
    RunId,
    SubagentConfig,
    TaskId,
    TestModel,
)


def _delegating(name: str, text: str, subagent: SubagentConfig) -> Any:
    return (
        AgentBuilder(
            TestModel.with_tool_calls([("delegate", {"name": name, "prompt": "go"})], then=text)
        )
        .name(text)
        .subagent(subagent)
        .build()
    )


def test_a_sink_numbers_records_in_push_order() -> None:
    records: list[AgentStreamRecord] = []
    sink = AgentStreamSink(records.append)

    sink.push("a", 1)
    sink.push("b", {"x": 2})

    assert [(r.sequence, r.kind, r.payload) for r in records] == [(0, "a", 1), (1, "b", {"x": 2})]
    assert sink.live


def test_stream_records_round_trip_through_values() -> None:
    record = AgentStreamRecord(
        sequence=4,
        kind="text_delta",
        payload={"content": "hi"},
        source=AgentStreamSource(
            agent_id="research-t",
            agent_name="research",
            task_id=TaskId.from_string("t"),
            run_id=RunId.from_string("child"),
            parent_run_id=RunId.from_string("parent"),
            source_sequence=1,
        ),
    )

    value = record.to_value()

    assert value["source"]["kind"] == "subagent"
    assert value["source"]["task_id"] == "t"
    assert AgentStreamRecord.from_value(value) == record
    assert AgentStreamSourceKind("subagent") is AgentStreamSourceKind.SUBAGENT


def test_a_malformed_record_value_names_the_bad_path() -> None:
    with pytest.raises(PayloadError) as caught:
        AgentStreamRecord.from_value({"sequence": "first", "kind": "x"})

    assert "$.sequence" in caught.value.detail


async def test_grandchild_records_keep_their_own_attribution_in_the_top_stream() -> None:
    helper = AgentBuilder(TestModel.with_text("helper")).build()
    research = _delegating(
        "helper", "research", SubagentConfig("helper", helper).with_nested_delegation(True)
    )
    parent = _delegating("research", "parent", SubagentConfig("research", research))

    stream = parent.run_stream("plan")
    records = [r async for r in stream]

    assert stream.result.output == "parent"
    assert [r.sequence for r in records] == list(range(len(records)))
    by_agent: dict[str | None, list[AgentStreamRecord]] = {}
    for record in records:
        by_agent.setdefault(record.source and record.source.agent_name, []).append(record)
    assert set(by_agent) == {None, "research", "helper"}
    research_runs = {r.source.run_id for r in by_agent["research"] if r.source}
    helper_parents = {r.source.parent_run_id for r in by_agent["helper"] if r.source}
    assert helper_parents == research_runs
    assert {r.source.parent_run_id for r in by_agent["research"] if r.source} == {
        stream.result.run_id
    }
    assert [r.source.source_sequence for r in by_agent["helper"] if r.source] == list(
        range(len(by_agent["helper"]))
    )
    # Blocking: the helper finishes inside research's tool call, which finishes
    # inside the parent's.
    last_helper = records.index(by_agent["helper"][-1])
    research_return = next(
        records.index(r) for r in by_agent["research"] if r.kind == "tool_return"
    )
    parent_return = next(records.index(r) for r in by_agent[None] if r.kind == "tool_return")
    assert last_helper < research_return < parent_return


async def test_child_text_streams_live_inside_a_parent_stream() -> None:
    child = AgentBuilder(TestModel.with_text("child words")).build()
    parent = _delegating("research", "parent", SubagentConfig("research", child))

    records = [r async for r in parent.run_stream("plan")]

    deltas = [r for r in records if r.kind == "text_delta" and r.source is not None]
    assert [d.payload["content"] for d in deltas] == ["child words"]
