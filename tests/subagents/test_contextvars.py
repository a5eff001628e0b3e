"""A contextvar the caller sets is visible inside delegated children, blocking and background.

An embedder's context (a trace context, a request id) must cross into the
children it causes: a background child runs on the supervisor's own loop
thread, so it sees the caller's context only because the delegation copies it.
Both kinds of child run in a copy: what a child sets does not leak into its parent
(a blocking child used to share the parent's context when it was the turn's only
tool call).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    BackgroundSubagentSupervisor,
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    OwnerIdentity,
    SubagentConfig,
    SubagentDelegationMode,
    SupervisorLimits,
    TestModel,
)

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


@pytest.fixture
async def supervisor() -> AsyncIterator[BackgroundSubagentSupervisor]:
    """A supervisor on its own loop thread, as embedders run it."""
    made = BackgroundSubagentSupervisor(
        owner=OwnerIdentity(host_instance_id="host-contextvars"),
        limits=SupervisorLimits(shutdown_grace=5.0),
    )
    yield made
    await made.shutdown_checked(5.0)


def _observing_child(seen: list[tuple[str | None, str]]) -> FunctionModel:
    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        seen.append((REQUEST_ID.get(), threading.current_thread().name))
        REQUEST_ID.set("set-by-the-child")  # must not leak back into the caller
        return "child"

    return FunctionModel(answer, name="child")


async def test_a_background_child_sees_the_callers_contextvars(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    seen: list[tuple[str | None, str]] = []
    child = AgentBuilder(_observing_child(seen)).build()
    script = [
        TestModel.tool_call("delegate", {"subagent_name": "research", "prompt": "go"}, "c1"),
        TestModel.tool_call("wait_subagent", {"timeout_seconds": 30}, "c2"),
    ]

    def parent(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        return ModelResponse(parts=(script.pop(0),)) if script else "done"

    model = FunctionModel(parent, name="parent")
    agent = (
        AgentBuilder(model)
        .subagent(SubagentConfig("research", child))
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )

    token = REQUEST_ID.set("req-42")
    try:
        result = await agent.run("delegate it")
        after = REQUEST_ID.get()
    finally:
        REQUEST_ID.reset(token)

    assert result.output == "done"
    [(value, thread)] = seen
    assert value == "req-42"
    assert thread != threading.current_thread().name  # it did run on the supervisor's thread
    assert after == "req-42"


async def test_a_blocking_child_sees_the_callers_contextvars() -> None:
    seen: list[tuple[str | None, str]] = []
    child = AgentBuilder(_observing_child(seen)).build()
    model = TestModel.with_tool_calls(
        [("delegate", {"subagent_name": "research", "prompt": "go"})], "done"
    )
    agent = AgentBuilder(model).subagent(SubagentConfig("research", child)).build()

    token = REQUEST_ID.set("req-7")
    try:
        await agent.run("delegate it")
        after = REQUEST_ID.get()
    finally:
        REQUEST_ID.reset(token)

    assert [value for value, _ in seen] == ["req-7"]
    assert after == "req-7"
