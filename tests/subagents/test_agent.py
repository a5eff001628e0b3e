"""AgentBuilder, Agent and AgentApp: the run loop, limits, retries, streaming, sync twins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage import SeededIds
from subagents import (
    AgentBuilder,
    AgentConfigError,
    AgentContext,
    AgentError,
    FunctionModel,
    FunctionTool,
    ModelError,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    ModelResponse,
    RetryPromptPart,
    RunId,
    SubagentConfig,
    SubagentDelegationMode,
    SystemPromptPart,
    TestModel,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolRetriesExceeded,
    ToolReturnPart,
    UsageLimitExceeded,
    UserPromptPart,
)

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def _add_tool() -> FunctionTool:
    async def add(ctx: ToolContext, args: dict[str, int]) -> int:
        return args["a"] + args["b"]

    return FunctionTool("add", "Add two integers", ADD_SCHEMA, add)


def _parts(messages: tuple[ModelMessage, ...], kind: type) -> list[Any]:
    return [p for m in messages for p in m.parts if isinstance(p, kind)]


async def test_a_run_returns_output_usage_run_id_and_messages() -> None:
    agent = AgentBuilder(TestModel.with_text("hello")).instructions("Be brief.").build()

    result = await agent.run("hi")

    assert result.output == "hello"
    assert result.usage.requests == 1
    assert isinstance(result.run_id, RunId)
    first, answer = result.messages
    assert isinstance(first, ModelRequest)
    assert first.parts == (SystemPromptPart(content="Be brief."), UserPromptPart(content="hi"))
    assert isinstance(answer, ModelResponse)
    assert answer.text() == "hello"


async def test_the_run_loop_calls_tools_until_the_model_answers_with_text() -> None:
    agent = (
        AgentBuilder(TestModel.with_tool_calls([("add", {"a": 2, "b": 3})], "five"))
        .tool(_add_tool())
        .build()
    )

    result = await agent.run("sum")

    assert result.output == "five"
    assert [p.content for p in _parts(result.messages, ToolReturnPart)] == [5]
    assert result.usage.tool_calls == 1
    assert result.usage.requests == 2


async def test_bad_tool_arguments_go_back_to_the_model_as_a_retry_prompt() -> None:
    model = TestModel(
        [
            TestModel.tool_call("add", {"a": 2, "b": "three"}),
            TestModel.tool_call("add", {"a": 2, "b": 3}),
        ],
        text="five",
    )
    agent = AgentBuilder(model).tool(_add_tool()).build()

    result = await agent.run("sum")

    [retry] = _parts(result.messages, RetryPromptPart)
    assert retry.tool_name == "add"
    assert "$.b" in retry.content
    assert [p.content for p in _parts(result.messages, ToolReturnPart)] == [5]
    assert result.output == "five"


async def test_a_tool_that_keeps_failing_exhausts_the_retry_limit() -> None:
    model = TestModel([TestModel.tool_call("add", {"a": 1})] * 3, text="never")
    agent = AgentBuilder(model).tool(_add_tool()).retries(2).build()

    with pytest.raises(ToolRetriesExceeded) as caught:
        await agent.run("sum")

    assert caught.value.tool == "add"
    assert caught.value.retries == 2
    assert isinstance(caught.value.__cause__, ToolArgumentError)


async def test_a_tool_error_raised_by_the_tool_becomes_a_retry_prompt() -> None:
    def flaky(ctx: ToolContext, args: Any) -> str:
        raise ToolError("try again later", tool="flaky")

    tool = FunctionTool("flaky", None, {"type": "object"}, flaky)
    agent = AgentBuilder(TestModel.with_tool_calls([("flaky", {})], "gave up")).tool(tool).build()

    result = await agent.run("go")

    assert result.output == "gave up"
    assert "try again later" in _parts(result.messages, RetryPromptPart)[0].content


async def test_an_unknown_tool_name_is_answered_with_a_retry_prompt() -> None:
    agent = AgentBuilder(TestModel.with_tool_calls([("nope", {})], "ok")).build()

    result = await agent.run("go")

    assert "unknown tool 'nope'" in _parts(result.messages, RetryPromptPart)[0].content


async def test_other_tool_exceptions_fail_the_run_unchanged() -> None:
    def crash(ctx: ToolContext, args: Any) -> str:
        raise KeyError("bug")

    tool = FunctionTool("crash", None, {"type": "object"}, crash)
    agent = AgentBuilder(TestModel.with_tool_calls([("crash", {})], "ok")).tool(tool).build()

    with pytest.raises(KeyError):
        await agent.run("go")


async def test_the_request_limit_raises_a_typed_error() -> None:
    def loop(messages: Any, params: ModelRequestParameters) -> ModelResponse:
        return ModelResponse(parts=(TestModel.tool_call("add", {"a": 1, "b": 1}, "c"),))

    agent = AgentBuilder(FunctionModel(loop)).tool(_add_tool()).request_limit(3).build()

    with pytest.raises(UsageLimitExceeded) as caught:
        await agent.run("go")

    assert caught.value.limit == 3
    assert caught.value.requests == 3


async def test_a_model_failure_is_wrapped_in_model_error() -> None:
    def broken(messages: Any, params: ModelRequestParameters) -> str:
        raise TimeoutError("slow")

    agent = AgentBuilder(FunctionModel(broken, name="remote")).build()

    with pytest.raises(ModelError) as caught:
        await agent.run("go")

    assert caught.value.model == "remote"
    assert isinstance(caught.value.__cause__, TimeoutError)


async def test_a_script_that_runs_out_raises_model_error() -> None:
    agent = (
        AgentBuilder(TestModel([TestModel.tool_call("add", {"a": 1, "b": 2})]))
        .tool(_add_tool())
        .build()
    )

    with pytest.raises(ModelError, match="exhausted"):
        await agent.run("go")


async def test_a_given_context_is_mutated_in_place_and_each_result_counts_its_own_run() -> None:
    agent = AgentBuilder(TestModel.with_text("ok")).ids(SeededIds(7)).build()
    context = AgentContext()

    first = await agent.run("a", context)
    second = await agent.run("b", context)

    assert context.run_id == second.run_id != first.run_id
    assert context.usage.requests == 2
    assert first.usage.requests == second.usage.requests == 1
    again = AgentBuilder(TestModel.with_text("ok")).ids(SeededIds(7)).build()
    assert (await again.run("a")).run_id == first.run_id


async def test_message_history_continues_a_conversation() -> None:
    def echo_count(messages: Any, params: ModelRequestParameters) -> str:
        return f"{len(messages)} messages"

    agent = AgentBuilder(FunctionModel(echo_count)).instructions("sys").build()
    first = await agent.run("one")

    second = await agent.run("two", message_history=first.messages)

    assert second.output == "3 messages"
    assert len(_parts(second.messages, SystemPromptPart)) == 1


async def test_the_model_sees_tool_definitions_built_once() -> None:
    seen: list[ModelRequestParameters] = []

    def record(messages: Any, params: ModelRequestParameters) -> str:
        seen.append(params)
        return "ok"

    agent = AgentBuilder(FunctionModel(record)).tool(_add_tool()).build()
    await agent.run("a")
    await agent.run("b")

    assert seen[0] is seen[1]
    [definition] = seen[0].tools
    assert (definition.name, definition.description) == ("add", "Add two integers")
    assert definition.parameters_schema == ADD_SCHEMA


def test_blocking_mode_installs_the_delegate_tool_only_when_there_are_subagents() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()

    with_subagent = (
        AgentBuilder(TestModel.with_text("p")).subagent(SubagentConfig("research", child)).build()
    )
    without = AgentBuilder(TestModel.with_text("p")).build()

    assert with_subagent.tools().names() == ["delegate"]
    assert with_subagent.delegation_mode is SubagentDelegationMode.BLOCKING
    assert without.tools().names() == []


def test_disabled_mode_installs_no_delegation_tools_but_keeps_the_registry() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    supervisor = object()

    agent = (
        AgentBuilder(TestModel.with_text("p"))
        .subagent(SubagentConfig("research", child))
        .subagent_delegation_mode(SubagentDelegationMode.DISABLED)
        .background_subagent_supervisor(supervisor)
        .build()
    )

    assert agent.tools().names() == []
    assert agent.subagents().names() == ["research"]
    assert agent.supervisor is supervisor


@pytest.mark.parametrize(
    "mode", [SubagentDelegationMode.ASYNC, SubagentDelegationMode.BLOCKING_AND_ASYNC]
)
def test_async_modes_are_refused_without_a_supervisor(
    mode: SubagentDelegationMode,
) -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    builder = (
        AgentBuilder(TestModel.with_text("p"))
        .subagent(SubagentConfig("research", child))
        .subagent_delegation_mode(mode)
    )

    with pytest.raises(AgentConfigError) as caught:
        builder.build()

    assert caught.value.fields["mode"] == mode.value


def test_a_user_tool_named_delegate_collides_with_the_delegation_tool() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    clash = FunctionTool("delegate", None, {"type": "object"}, lambda ctx, args: None)

    with pytest.raises(AgentConfigError, match="duplicate tool name 'delegate'"):
        AgentBuilder(TestModel.with_text("p")).tool(clash).subagent(
            SubagentConfig("research", child)
        ).build()


@pytest.mark.parametrize(
    ("configure", "message"),
    [
        (lambda b: b.request_limit(0), "request_limit"),
        (lambda b: b.retries(-1), "retries"),
        (lambda b: b.tool("not a tool"), "not a Tool"),
    ],
)
def test_bad_builder_settings_raise_config_errors(configure: Any, message: str) -> None:
    with pytest.raises(AgentConfigError, match=message):
        configure(AgentBuilder(TestModel.with_text("p"))).build()


def test_the_builder_needs_a_model() -> None:
    with pytest.raises(AgentConfigError, match="needs a Model"):
        AgentBuilder("gpt")  # type: ignore[arg-type]


def test_run_sync_runs_from_a_script() -> None:
    app = AgentBuilder(TestModel.with_text("parent")).build_app()

    assert app.run_sync("plan").output == "parent"


async def test_run_sync_is_refused_inside_a_running_loop() -> None:
    agent = AgentBuilder(TestModel.with_text("x")).build()

    with pytest.raises(AgentError, match="running event loop"):
        agent.run_sync("plan")


async def test_a_stream_yields_sequenced_records_and_then_the_result() -> None:
    agent = (
        AgentBuilder(TestModel.with_tool_calls([("add", {"a": 1, "b": 2})], "three"))
        .tool(_add_tool())
        .build()
    )

    stream = agent.run_stream("sum")
    with pytest.raises(RuntimeError):
        _ = stream.result
    records = [r async for r in stream]

    assert [r.kind for r in records] == [
        "run_started",
        "tool_call",
        "tool_return",
        "text_delta",
        "run_completed",
    ]
    assert [r.sequence for r in records] == [0, 1, 2, 3, 4]
    assert records[2].payload["content"] == 3
    assert records[3].payload == {"content": "three"}
    assert stream.result.output == "three"
    assert [r async for r in stream] == []


async def test_a_stream_raises_the_runs_error_after_its_records() -> None:
    def broken(messages: Any, params: ModelRequestParameters) -> str:
        raise TimeoutError("slow")

    stream = AgentBuilder(FunctionModel(broken)).build().run_stream("go")
    kinds = []

    with pytest.raises(ModelError):
        async for record in stream:
            kinds.append(record.kind)

    assert kinds == ["run_started"]


async def test_closing_a_stream_cancels_the_unfinished_run() -> None:
    release = asyncio.Event()
    cancelled: list[bool] = []

    async def waits(messages: Any, params: ModelRequestParameters) -> str:
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    stream = AgentBuilder(FunctionModel(waits)).build().run_stream("go")
    async with stream:
        first = await stream.__anext__()
        assert first.kind == "run_started"

    assert cancelled == [True]


async def test_the_app_exposes_the_agents_registry_and_stream() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    app = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(SubagentConfig("research", child))
        .build_app()
    )

    records = [r async for r in app.run_stream("plan")]

    assert app.subagents() is app.agent.subagents()
    assert app.tools().names() == ["delegate"]
    assert records[-1].payload["output"] == "parent"


async def test_a_response_without_parts_is_a_model_error() -> None:
    def empty(messages: Any, params: ModelRequestParameters) -> ModelResponse:
        return ModelResponse(parts=())

    with pytest.raises(ModelError, match="no parts"):
        await AgentBuilder(FunctionModel(empty)).build().run("go")


async def test_several_tool_calls_in_one_response_run_concurrently_and_return_in_order() -> None:
    both_started = asyncio.Event()
    started: list[str] = []

    async def rendezvous(ctx: ToolContext, args: dict[str, str]) -> str:
        started.append(args["who"])
        if len(started) == 2:
            both_started.set()
        # Run one after the other, the first call would wait here forever.
        await asyncio.wait_for(both_started.wait(), timeout=5)
        return args["who"]

    schema = {"type": "object", "properties": {"who": {"type": "string"}}}
    tool = FunctionTool("meet", None, schema, rendezvous)
    model = TestModel.with_tool_calls([("meet", {"who": "a"}), ("meet", {"who": "b"})], "met")

    result = await AgentBuilder(model).tool(tool).build().run("go")

    assert [p.content for p in _parts(result.messages, ToolReturnPart)] == ["a", "b"]
    assert result.output == "met"


async def test_a_failing_concurrent_call_cancels_its_siblings() -> None:
    cancelled: list[bool] = []
    never = asyncio.Event()

    async def waits(ctx: ToolContext, args: Any) -> str:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    def crash(ctx: ToolContext, args: Any) -> str:
        raise KeyError("bug")

    model = TestModel.with_tool_calls([("waits", {}), ("crash", {})], "never")
    agent = (
        AgentBuilder(model)
        .tool(FunctionTool("waits", None, {}, waits))
        .tool(FunctionTool("crash", None, {}, crash))
        .build()
    )

    with pytest.raises(KeyError):
        await agent.run("go")

    assert cancelled == [True]
