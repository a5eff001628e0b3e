"""SubagentRegistry, SubagentConfig and the blocking ``delegate`` tool: behaviour and failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage import ManualClock, SeededIds
from subagents import (
    AgentBuilder,
    AgentConfigError,
    AgentContext,
    AgentContextHandle,
    AgentStreamRecord,
    ConversationId,
    Dependencies,
    FunctionModel,
    FunctionTool,
    MissingSubagent,
    ModelError,
    ModelRequestParameters,
    RecursiveSubagentDelegation,
    RetryPromptPart,
    RunId,
    SubagentCapabilityInheritancePolicy,
    SubagentConfig,
    SubagentDelegationMode,
    SubagentLifecycleEvent,
    SubagentLifecycleKind,
    SubagentRegistry,
    SubagentRunFailed,
    SubagentTask,
    SubagentToolInheritancePolicy,
    TaskId,
    TestModel,
    ToolArgumentError,
    ToolContext,
    ToolError,
)
from subagents._agent._context import SUBAGENT_STACK_KEY


def _child(text: str = "child") -> Any:
    return AgentBuilder(TestModel.with_text(text)).build()


def _registry(*configs: SubagentConfig, **kwargs: Any) -> SubagentRegistry:
    registry = SubagentRegistry(**kwargs)
    for config in configs:
        registry = registry.with_subagent(config)
    return registry


def _lifecycle(context: AgentContext) -> list[SubagentLifecycleEvent]:
    return [
        SubagentLifecycleEvent.from_value(e.payload)
        for e in context.events.events()
        if e.kind.startswith("subagent_") and e.kind != "subagent_stream_record"
    ]


def _tool_context(*values: object) -> ToolContext:
    dependencies = Dependencies()
    for value in values:
        dependencies.insert(value)
    return ToolContext(RunId(), ConversationId(), 0).with_dependencies(dependencies)


# ------------------------------------------------------------------ delegation


async def test_delegating_to_an_unknown_name_raises_missing_subagent_and_publishes_failed() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    context = AgentContext()
    task = SubagentTask("x").with_id(TaskId.from_string("t-1")).with_metadata({"k": "v"})

    with pytest.raises(MissingSubagent) as caught:
        await registry.delegate_task("writer", task, context)

    assert caught.value.name == "writer"
    assert caught.value.registered == ["research"]
    [failed] = _lifecycle(context)
    assert [e.kind for e in context.events.events()] == ["subagent_failed"]
    assert failed.kind == SubagentLifecycleKind.FAILED
    assert failed.task_id == TaskId.from_string("t-1")
    assert failed.metadata == {"k": "v", "error": "missing_subagent"}


async def test_completed_event_reports_duration_request_count_and_previews() -> None:
    clock = ManualClock()

    def answer(messages: Any, params: ModelRequestParameters) -> str:
        clock.advance(2.5)
        return "found   three\n\nfacts"

    child = AgentBuilder(FunctionModel(answer)).build()
    registry = _registry(SubagentConfig("research", child), clock=clock)
    context = AgentContext()
    task = (
        SubagentTask("collect\n   facts")
        .with_id(TaskId.from_string("r-1"))
        .with_metadata({"source": "docs"})
    )

    delegated = await registry.delegate_task("research", task, context)

    started, completed = _lifecycle(context)
    assert started.metadata == {
        "source": "docs",
        "agent_id": "research-r-1",
        "prompt_preview": "collect facts",
    }
    assert started.run_id is None
    assert completed.kind == SubagentLifecycleKind.COMPLETED
    assert completed.run_id == delegated.run_id
    assert completed.metadata == {
        "source": "docs",
        "agent_id": "research-r-1",
        "prompt_preview": "collect facts",
        "duration_seconds": 2.5,
        "request_count": 1,
        "result_preview": "found three facts",
    }


async def test_previews_are_capped_at_240_characters() -> None:
    registry = _registry(SubagentConfig("research", _child("word " * 100)))
    context = AgentContext()

    await registry.delegate("research", "a  b " * 200, context)

    started, completed = _lifecycle(context)
    assert len(started.metadata["prompt_preview"]) == 240
    assert started.metadata["prompt_preview"].endswith("…")
    assert "  " not in started.metadata["prompt_preview"]
    assert len(completed.metadata["result_preview"]) == 240


async def test_a_task_agent_id_in_metadata_names_the_child_agent() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    context = AgentContext()
    task = SubagentTask("x").with_metadata({"agent_id": "research-bg-1"})

    await registry.delegate_task("research", task, context)

    started, _ = _lifecycle(context)
    assert started.metadata["agent_id"] == "research-bg-1"


async def test_the_parents_usage_includes_the_childs() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    context = AgentContext()

    result = await registry.delegate("research", "x", context)

    assert result.usage.requests == 1
    assert context.usage == result.usage


async def test_a_parent_run_usage_includes_its_delegation() -> None:
    agent = (
        AgentBuilder(
            TestModel.with_tool_calls([("delegate", {"name": "research", "prompt": "x"})], "done")
        )
        .subagent(SubagentConfig("research", _child()))
        .build()
    )

    result = await agent.run("plan")

    # Two parent requests plus the child's one.
    assert result.usage.requests == 3
    assert result.usage.tool_calls == 1


async def test_children_share_the_parents_dependency_values() -> None:
    class Database:
        pass

    seen: list[object] = []

    async def lookup(ctx: ToolContext, args: Any) -> str:
        seen.append(ctx.dependency(Database))
        return "ok"

    tool = FunctionTool("lookup", None, {"type": "object"}, lookup)
    child = AgentBuilder(TestModel.with_tool_calls([("lookup", {})], "child")).tool(tool).build()
    registry = _registry(SubagentConfig("research", child))
    database = Database()
    context = AgentContext()
    context.dependencies.insert(database)

    await registry.delegate("research", "x", context)

    assert seen == [database]


async def test_a_failing_child_run_raises_subagent_run_failed_and_publishes_failed() -> None:
    def broken(messages: Any, params: ModelRequestParameters) -> str:
        raise ConnectionError("provider down")

    child = AgentBuilder(FunctionModel(broken)).build()
    registry = _registry(SubagentConfig("research", child), ids=SeededIds(1))
    context = AgentContext()

    with pytest.raises(SubagentRunFailed) as caught:
        await registry.delegate("research", "x", context)

    assert isinstance(caught.value.__cause__, ModelError)
    started, failed = _lifecycle(context)
    assert started.kind == SubagentLifecycleKind.STARTED
    assert failed.kind == SubagentLifecycleKind.FAILED
    assert failed.run_id is not None
    assert failed.metadata["child_run_id"] == failed.run_id.as_str()
    assert caught.value.child_run_id == failed.run_id.as_str()
    assert "provider down" in failed.metadata["error"]
    assert failed.metadata["error_type"] == "ModelError"
    assert failed.metadata["request_count"] == 0
    assert failed.metadata["duration_seconds"] >= 0


async def test_a_subagent_cannot_delegate_again_by_default() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    inside = AgentContext().subagent_context("planner", "planner-1")

    with pytest.raises(RecursiveSubagentDelegation) as caught:
        await registry.delegate("research", "x", inside)

    assert caught.value.stack == ["planner"]
    [failed] = _lifecycle(inside)
    assert failed.metadata["error"] == "recursive_subagent_delegation"
    assert failed.metadata["stack"] == ["planner"]


async def test_nested_delegation_is_allowed_when_the_config_opts_in() -> None:
    registry = _registry(SubagentConfig("research", _child()).with_nested_delegation(True))
    inside = AgentContext().subagent_context("planner", "planner-1")

    result = await registry.delegate("research", "x", inside)

    assert result.output == "child"


async def test_nesting_is_bounded_even_when_allowed() -> None:
    registry = _registry(SubagentConfig("research", _child()).with_nested_delegation(True))
    deep = AgentContext(metadata={SUBAGENT_STACK_KEY: ["a"] * 8})

    with pytest.raises(RecursiveSubagentDelegation):
        await registry.delegate("research", "x", deep)


async def test_a_child_agent_that_tries_to_delegate_gets_a_retry_prompt_from_the_guard() -> None:
    grandchild = _child("grandchild")
    child = (
        AgentBuilder(
            TestModel.with_tool_calls([("delegate", {"name": "helper", "prompt": "y"})], "alone")
        )
        .subagent(SubagentConfig("helper", grandchild))
        .build()
    )
    registry = _registry(SubagentConfig("research", child))

    result = await registry.delegate("research", "x", AgentContext())

    assert result.output == "alone"
    retries = [
        part
        for message in result.messages
        for part in getattr(message, "parts", ())
        if isinstance(part, RetryPromptPart)
    ]
    assert len(retries) == 1
    assert "with_nested_delegation" in retries[0].content


async def test_without_a_stream_the_child_records_are_republished_as_events() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    context = AgentContext(run_id=RunId.from_string("parent-run"))
    task = SubagentTask("x").with_id(TaskId.from_string("t-1"))

    delegated = await registry.delegate_task("research", task, context)

    kinds = [e.kind for e in context.events.events()]
    assert kinds[0] == "subagent_started"
    assert kinds[-1] == "subagent_completed"
    republished = [e for e in context.events.events() if e.kind == "subagent_stream_record"]
    records = [AgentStreamRecord.from_value(e.payload) for e in republished]
    assert [r.kind for r in records] == ["run_started", "run_completed"]
    for record in records:
        assert record.source is not None
        assert record.source.agent_name == "research"
        assert record.source.task_id == TaskId.from_string("t-1")
        assert record.source.run_id == delegated.run_id
        assert record.source.parent_run_id == RunId.from_string("parent-run")
        assert record.source.source_sequence == record.sequence
    assert republished[0].metadata["subagent_name"] == "research"


def test_registries_are_immutable_and_reject_duplicate_names() -> None:
    empty = SubagentRegistry()
    one = empty.with_subagent(SubagentConfig("research", _child()))

    assert empty.names() == []
    assert one.names() == ["research"]
    assert one.is_available("research") and not one.is_available("writer")
    with pytest.raises(AgentConfigError):
        one.with_subagent(SubagentConfig("research", _child()))


def test_subagent_configs_are_immutable_builders() -> None:
    base = SubagentConfig("research", _child(), "Collects facts")
    nested = base.with_nested_delegation(True).with_description("Digs deep")

    assert (base.nested_delegation, base.description) == (False, "Collects facts")
    assert (nested.nested_delegation, nested.description) == (True, "Digs deep")
    tools = SubagentToolInheritancePolicy(["grep"], [])
    caps = SubagentCapabilityInheritancePolicy().with_hooks(True)
    assert nested.with_tool_inheritance(tools).tool_inheritance == tools
    assert base.with_capability_inheritance(caps).capability_inheritance == caps
    assert base.tool_inheritance is None
    assert base.capability_inheritance is None


def test_a_subagent_needs_a_name() -> None:
    with pytest.raises(AgentConfigError):
        SubagentConfig("", _child())


def test_delegate_sync_runs_a_delegation_from_a_script() -> None:
    registry = _registry(SubagentConfig("research", _child()))

    assert registry.delegate_sync("research", "x", AgentContext()).output == "child"


def test_delegation_mode_values_follow_the_spec() -> None:
    assert [m.value for m in SubagentDelegationMode] == [
        "disabled",
        "blocking",
        "async",
        "blocking_and_async",
    ]


# ------------------------------------------------------------------ the tool


async def test_the_delegate_tool_returns_name_task_id_output_and_usage() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    parent = AgentContext()

    result = await registry.delegate_tool().call(
        _tool_context(AgentContextHandle(parent)), {"name": "research", "prompt": "x"}
    )

    assert set(result.content) == {"name", "task_id", "output", "usage"}
    assert result.content["usage"] == {
        "requests": 1,
        "input_tokens": 10,
        "output_tokens": 1,
        "tool_calls": 0,
    }
    started = _lifecycle(parent)[0]
    assert result.content["task_id"] == started.task_id.as_str()
    assert result.metadata == {"context_mutated": True}
    assert parent.usage.requests == 1


async def test_the_delegate_tool_rejects_unknown_fields() -> None:
    registry = _registry(SubagentConfig("research", _child()))

    with pytest.raises(ToolArgumentError) as caught:
        await registry.delegate_tool().call(
            _tool_context(AgentContext()),
            {"name": "research", "prompt": "x", "agent_id": "forged"},
        )

    assert caught.value.tool == "delegate"
    assert caught.value.path == "$.agent_id"


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"name": "research"}, "$"),
        ({"name": 7, "prompt": "x"}, "$.name"),
        (["research", "x"], "$"),
        ("{not json", "$"),
    ],
)
async def test_the_delegate_tool_names_where_bad_arguments_are(arguments: Any, path: str) -> None:
    registry = _registry(SubagentConfig("research", _child()))

    with pytest.raises(ToolArgumentError) as caught:
        await registry.delegate_tool().call(_tool_context(AgentContext()), arguments)

    assert caught.value.path == path
    assert "delegate" in str(caught.value)


async def test_the_delegate_tool_accepts_json_text_arguments() -> None:
    registry = _registry(SubagentConfig("research", _child()))

    result = await registry.delegate_tool().call(
        _tool_context(AgentContext()), '{"name": "research", "prompt": "x"}'
    )

    assert result.content["output"] == "child"


@pytest.mark.parametrize(
    "arguments",
    [
        {"subagent_name": "research", "prompt": "x"},
        {"name": "research", "prompt": "x"},
        {"subagent_name": "research", "name": "research", "prompt": "x"},
    ],
)
async def test_the_delegate_tool_takes_subagent_name_with_name_as_its_alias(
    arguments: dict[str, Any],
) -> None:
    registry = _registry(SubagentConfig("research", _child()))

    result = await registry.delegate_tool().call(_tool_context(AgentContext()), arguments)

    assert result.content["name"] == "research"
    assert result.content["output"] == "child"


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"prompt": "x"}, "$.subagent_name"),
        ({"subagent_name": "research", "name": "writer", "prompt": "x"}, "$.name"),
    ],
)
async def test_the_delegate_tool_needs_the_subagent_named_once(
    arguments: dict[str, Any], path: str
) -> None:
    registry = _registry(SubagentConfig("research", _child()), SubagentConfig("writer", _child()))
    parent = AgentContext()

    with pytest.raises(ToolError) as caught:
        await registry.delegate_tool().call(_tool_context(parent), arguments)

    assert caught.value.fields["path"] == path
    assert parent.events.events() == []


async def test_the_delegate_tool_fails_clearly_without_a_parent_context() -> None:
    registry = _registry(SubagentConfig("research", _child()))

    with pytest.raises(ToolError) as caught:
        await registry.delegate_tool().call(_tool_context(), {"name": "research", "prompt": "x"})

    assert "AgentContextHandle" in str(caught.value)
    assert not isinstance(caught.value, ToolArgumentError)


async def test_the_delegate_tool_fails_clearly_for_an_unknown_subagent() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    parent = AgentContext()

    with pytest.raises(ToolError) as caught:
        await registry.delegate_tool().call(
            _tool_context(AgentContextHandle(parent)), {"name": "writer", "prompt": "x"}
        )

    assert isinstance(caught.value.__cause__, MissingSubagent)
    assert "writer" in str(caught.value)
    assert _lifecycle(parent)[0].metadata["error"] == "missing_subagent"


async def test_the_delegate_tool_prefers_the_handle_over_a_bare_context() -> None:
    registry = _registry(SubagentConfig("research", _child()))
    bare, live = AgentContext(), AgentContext()

    await registry.delegate_tool().call(
        _tool_context(bare, AgentContextHandle(live)), {"name": "research", "prompt": "x"}
    )

    assert len(bare.events) == 0
    assert live.events.events()[0].kind == "subagent_started"


def test_the_delegate_tool_schema_lists_the_registered_names_and_forbids_extras() -> None:
    registry = _registry(SubagentConfig("research", _child()), SubagentConfig("writer", _child()))

    schema = registry.delegate_tool().definition().parameters_schema

    assert schema["properties"]["subagent_name"]["enum"] == ["research", "writer"]
    assert schema["required"] == ["subagent_name", "prompt"]
    assert schema["additionalProperties"] is False


async def test_a_cancelled_delegation_publishes_failed_and_propagates() -> None:
    entered = asyncio.Event()

    async def hangs(messages: Any, params: ModelRequestParameters) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    child = AgentBuilder(FunctionModel(hangs)).build()
    registry = _registry(SubagentConfig("research", child))
    context = AgentContext()

    delegation = asyncio.ensure_future(registry.delegate("research", "x", context))
    await entered.wait()
    delegation.cancel()
    with pytest.raises(asyncio.CancelledError):
        await delegation

    started, failed = _lifecycle(context)
    assert started.kind == SubagentLifecycleKind.STARTED
    assert failed.kind == SubagentLifecycleKind.FAILED
    assert failed.metadata["error"] == "cancelled"
