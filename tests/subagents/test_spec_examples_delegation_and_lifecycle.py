"""The spec's delegation examples (spec/subagents.md), in Python under DESIGN §2.

Each test is the spec's Rust example with the name mapping applied: same
names, same calls, same assertions. Sections: Subagents, SubagentTask,
execution hooks, the typed delegate tool, Lifecycle Events, Stream Attribution.
"""

from __future__ import annotations

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentContextHandle,
    AgentStreamSourceKind,
    ConversationId,
    RunId,
    SubagentConfig,
    SubagentExecutionHook,
    SubagentExecutionMetadata,
    SubagentExecutionOutcome,
    SubagentLifecycleEvent,
    SubagentLifecycleKind,
    SubagentRegistry,
    SubagentTask,
    TaskId,
    TestModel,
    ToolContext,
)


async def test_an_app_runs_its_own_agent_and_delegates_to_a_registered_subagent() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    app = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", child))
        .build_app()
    )

    parent = await app.run("plan")
    assert parent.output == "parent"

    context = AgentContext()
    child_result = await app.subagents().delegate("research", "collect facts", context)
    assert child_result.output == "child"


async def test_a_subagent_task_carries_its_id_and_metadata_into_the_delegation_envelope() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    app = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", child))
        .build_app()
    )

    context = AgentContext()
    task = (
        SubagentTask("collect facts")
        .with_id(TaskId.from_string("research-1"))
        .with_metadata({"source": "docs"})
    )
    delegated = await app.subagents().delegate_task("research", task, context)

    assert delegated.name == "research"
    assert delegated.task.id.as_str() == "research-1"
    assert delegated.output() == "child"


class AuditHook(SubagentExecutionHook):
    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        child_context.metadata["subagent.audit_name"] = metadata.name

    async def after_subagent_run(
        self,
        metadata: SubagentExecutionMetadata,
        child_context: AgentContext,
        outcome: SubagentExecutionOutcome,
    ) -> None:
        assert isinstance(outcome, SubagentExecutionOutcome.Completed)


def test_an_execution_hook_is_attached_to_a_subagent_config() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    config = SubagentConfig("research", child).with_execution_hook(AuditHook())

    assert config.name == "research"


async def test_the_audit_hook_sees_a_completed_outcome_and_marks_the_child_context() -> None:
    seen: list[object] = []

    class Recorder(SubagentExecutionHook):
        async def after_subagent_run(
            self,
            metadata: SubagentExecutionMetadata,
            child_context: AgentContext,
            outcome: SubagentExecutionOutcome,
        ) -> None:
            seen.append(child_context.metadata.get("subagent.audit_name"))

    child = AgentBuilder(TestModel.with_text("child")).build()
    config = (
        SubagentConfig("research", child)
        .with_execution_hook(AuditHook())
        .with_execution_hook(Recorder())
    )
    registry = SubagentRegistry().with_subagent(config)

    result = await registry.delegate("research", "collect facts", AgentContext())

    assert result.output == "child"
    assert seen == ["research"]


async def test_the_typed_delegate_tool_runs_a_registered_child_from_tool_dependencies() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    registry = SubagentRegistry().with_subagent(SubagentConfig("research", child))
    delegate = registry.delegate_tool()
    parent = AgentContext()
    context_handle = AgentContextHandle(parent.copy())
    dependencies = parent.dependencies.copy()
    dependencies.insert(parent)
    dependencies.insert(context_handle)

    result = await delegate.call(
        ToolContext(RunId(), ConversationId(), 0).with_dependencies(dependencies),
        {"name": "research", "prompt": "collect facts"},
    )

    assert result.content["name"] == "research"
    assert result.content["output"] == "child"


async def test_delegation_publishes_a_typed_started_event_on_the_parent_context() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    app = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", child))
        .build_app()
    )
    task = SubagentTask("collect facts").with_id(TaskId.from_string("research-1"))
    context = AgentContext()

    await app.subagents().delegate_task("research", task, context)

    started = SubagentLifecycleEvent.from_value(context.events.events()[0].payload)
    assert started.kind == SubagentLifecycleKind.STARTED
    assert started.task_id.as_str() == "research-1"


async def test_child_records_are_merged_into_the_parent_stream_before_the_tool_return() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    agent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": "collect facts"})], then="parent"
            )
        )
        .subagent(SubagentConfig("research", child))
        .build()
    )

    stream = agent.run_stream("plan")
    records = [record async for record in stream]

    assert stream.result.output == "parent"
    assert [r.sequence for r in records] == list(range(len(records)))
    child_records = [r for r in records if r.source is not None]
    assert child_records, "the child's records must appear in the parent stream"
    tool_return = next(
        i for i, r in enumerate(records) if r.kind == "tool_return" and r.source is None
    )
    assert all(records.index(r) < tool_return for r in child_records)
    parent_run_id = stream.result.run_id
    child_run_ids = {r.source.run_id for r in child_records if r.source is not None}
    assert len(child_run_ids) == 1
    for position, record in enumerate(child_records):
        source = record.source
        assert source is not None
        assert source.kind == AgentStreamSourceKind.SUBAGENT
        assert source.agent_name == "research"
        assert source.agent_id == f"research-{source.task_id}"
        assert source.parent_run_id == parent_run_id
        assert source.run_id is not None and source.run_id != parent_run_id
        assert source.source_sequence == position
    assert child_records[0].kind == "run_started"
    assert child_records[-1].kind == "run_completed"
    assert child_records[-1].payload["output"] == "child"
