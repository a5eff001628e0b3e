"""The ``tool-arguments`` family: what a model may send the blocking ``delegate`` and the
background tools; each must come back as one retry prompt naming the problem."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from actors import (
    BackgroundSubagentSupervisor,
    SupervisorLimits,
)
from subagents._agent import Agent
from subagents._agent._models import (
    ModelRequest,
    RetryPromptPart,
    TestModel,
)
from subagents._builder import AgentBuilder
from subagents._delegation._config import SubagentConfig, SubagentDelegationMode

from ._common import (
    HUGE,
    MIB,
    untyped,
)
from ._host import store_snapshot


@dataclass(frozen=True)
class ToolArgsCase:
    """What a model sends one tool. ``expect`` is a fragment of the retry prompt
    the model must get back."""

    name: str
    tool: str
    arguments: dict[str, Any] | str
    expect: str


_RESERVED = (
    "owner",
    "fencing_generation",
    "attempt_id",
    "host_instance_id",
    "namespace_id",
    "session_id",
)


def _tool_cases() -> Iterator[ToolArgsCase]:
    delegate: dict[str, Any] = {"subagent_name": "research", "prompt": "x"}
    blocking: dict[str, Any] = {"name": "research", "prompt": "x"}
    for tool, good in (("delegate", blocking), ("spawn_delegate", delegate)):
        for key in _RESERVED:
            yield ToolArgsCase(f"{tool}-reserved-{key}", tool, {**good, key: "x"}, key)
        yield ToolArgsCase(f"{tool}-unknown-field", tool, {**good, "bogus": 1}, "bogus")
        yield ToolArgsCase(
            f"{tool}-metadata", tool, {**good, "metadata": {"trusted": True}}, "metadata"
        )
        yield ToolArgsCase(
            f"{tool}-parent-run-id", tool, {**good, "parent_run_id": "run-x"}, "parent_run_id"
        )
        yield ToolArgsCase(f"{tool}-prompt-number", tool, {**good, "prompt": 5}, "prompt")
        yield ToolArgsCase(f"{tool}-prompt-null", tool, {**good, "prompt": None}, "prompt")
        yield ToolArgsCase(f"{tool}-prompt-list", tool, {**good, "prompt": ["x"]}, "prompt")
        yield ToolArgsCase(
            f"{tool}-prompt-missing",
            tool,
            {k: v for k, v in good.items() if k != "prompt"},
            "prompt",
        )
        yield ToolArgsCase(f"{tool}-array", tool, "[]", "invalid arguments")
        yield ToolArgsCase(f"{tool}-number", tool, "5", "invalid arguments")
        yield ToolArgsCase(f"{tool}-null", tool, "null", "invalid arguments")
        yield ToolArgsCase(f"{tool}-not-json", tool, '{"prompt": ', "not valid JSON")
        yield ToolArgsCase(f"{tool}-raw-nul", tool, '{"prompt": "a\x00"}', "not valid JSON")
        yield ToolArgsCase(
            f"{tool}-deep-nesting", tool, "[" * 10_000 + "]" * 10_000, "nested too deeply"
        )
        yield ToolArgsCase(
            f"{tool}-huge-unknown-field", tool, {**good, "x" * MIB: "y" * MIB}, "invalid arguments"
        )
    yield ToolArgsCase(
        "delegate-agent-id",
        "delegate",
        {"name": "research", "prompt": "x", "agent_id": "a"},
        "agent_id",
    )
    yield ToolArgsCase(
        "delegate-unknown-subagent", "delegate", {"name": "ghost", "prompt": "x"}, "ghost"
    )
    yield ToolArgsCase(
        "spawn_delegate-invented-agent-id",
        "spawn_delegate",
        {"subagent_name": "research", "prompt": "x", "agent_id": "research-bg-deadbeef"},
        "unknown agent_id",
    )
    yield ToolArgsCase(
        "spawn_delegate-unknown-subagent",
        "spawn_delegate",
        {"subagent_name": "ghost", "prompt": "x"},
        "ghost",
    )
    yield ToolArgsCase(
        "spawn_delegate-name-and-alias-differ",
        "spawn_delegate",
        {"subagent_name": "research", "name": "other", "prompt": "x"},
        "alias",
    )
    yield ToolArgsCase("spawn_delegate-no-name", "spawn_delegate", {"prompt": "x"}, "subagent_name")
    yield ToolArgsCase(
        "spawn_delegate-16-mib-prompt",
        "spawn_delegate",
        {"subagent_name": "research", "prompt": "x" * HUGE},
        "too large",
    )
    controls: tuple[tuple[str, dict[str, Any]], ...] = (
        ("steer_subagent", {"attempt_id": "subattempt_x", "message": "m"}),
        ("cancel_subagent", {"attempt_id": "subattempt_x"}),
        ("wait_subagent", {"attempt_id": "subattempt_x", "timeout_seconds": 0}),
        ("subagent_info", {}),
    )
    for tool, good in controls:
        for key in ("owner", "fencing_generation", "agent_id", "bogus"):
            yield ToolArgsCase(f"{tool}-reserved-{key}", tool, {**good, key: 1}, key)
        yield ToolArgsCase(f"{tool}-array", tool, "[]", "invalid arguments")
        yield ToolArgsCase(
            f"{tool}-deep-nesting", tool, "{" + '"a":{' * 5000 + "}" * 5001, "nested too deeply"
        )
    yield ToolArgsCase(
        "steer_subagent-message-number",
        "steer_subagent",
        {"attempt_id": "a", "message": 1},
        "message",
    )
    yield ToolArgsCase(
        "steer_subagent-unknown-attempt",
        "steer_subagent",
        {"attempt_id": "a", "message": "m"},
        "attempt_id",
    )
    yield ToolArgsCase(
        "steer_subagent-16-mib-message",
        "steer_subagent",
        {"attempt_id": "subattempt_x", "message": "m" * HUGE},
        "too large",
    )
    yield ToolArgsCase(
        "cancel_subagent-reason-list",
        "cancel_subagent",
        {"attempt_id": "a", "reason": ["r"]},
        "reason",
    )
    yield ToolArgsCase(
        "cancel_subagent-huge-reason",
        "cancel_subagent",
        {"attempt_id": "subattempt_x", "reason": "r" * MIB},
        "too large",
    )
    yield ToolArgsCase(
        "wait_subagent-timeout-text",
        "wait_subagent",
        {"timeout_seconds": "soon"},
        "timeout_seconds",
    )
    yield ToolArgsCase(
        "wait_subagent-attempt-number", "wait_subagent", {"attempt_id": 3}, "attempt_id"
    )


TOOL_ARGUMENT_CASES: tuple[ToolArgsCase, ...] = tuple(_tool_cases())
"""What a model may send the blocking ``delegate`` and the background tools
(``BLOCKING_AND_ASYNC`` topology: the background delegate is ``spawn_delegate``)."""


class _ToolBench:
    """One parent agent with both delegation topologies over one supervisor."""

    def __init__(self, supervisor: BackgroundSubagentSupervisor) -> None:
        self.supervisor = supervisor
        self.child = AgentBuilder(TestModel.with_text("child")).name("research").build()

    def agent(self, call: ToolArgsCase) -> Agent:
        model = TestModel([TestModel.tool_call(call.tool, call.arguments), "done"])
        return (
            AgentBuilder(model)
            .subagent(SubagentConfig("research", self.child, "Collects facts"))
            .subagent_delegation_mode(SubagentDelegationMode.BLOCKING_AND_ASYNC)
            .background_subagent_supervisor(self.supervisor)
            .build()
        )


@contextlib.asynccontextmanager
async def tool_bench() -> AsyncIterator[_ToolBench]:
    """A supervisor (on the caller's loop, its own memory store) and agents over it."""
    supervisor = BackgroundSubagentSupervisor(
        loop=asyncio.get_running_loop(), limits=SupervisorLimits(shutdown_grace=5.0)
    )
    try:
        await supervisor.info()  # the supervisor creates its session record on first use
        yield _ToolBench(supervisor)
    finally:
        await supervisor.shutdown_checked(10.0)


async def check_tool_arguments(bench: _ToolBench, case: ToolArgsCase) -> list[str]:
    """Run a parent whose model sends ``case``: the run finishes, the model got one
    retry prompt naming the problem, and nothing reached the store."""
    where = f"tool-arguments[{case.name}]"
    before = store_snapshot(bench.supervisor.store)
    try:
        result = await bench.agent(case).run("go")
    except BaseException as exc:
        return [untyped(where, exc)]
    found = []
    retries = [
        part.content
        for message in result.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, RetryPromptPart)
    ]
    if result.output != "done":
        found.append(f"{where}: the run ended with {result.output!r}")
    if len(retries) != 1:
        found.append(f"{where}: {len(retries)} retry prompts, expected 1")
    elif case.expect not in retries[0]:
        found.append(f"{where}: retry prompt {retries[0][:160]!r} lacks {case.expect!r}")
    info = await bench.supervisor.info()
    if info.active or info.retained:
        found.append(f"{where}: an attempt was admitted")
    if store_snapshot(bench.supervisor.store) != before:
        found.append(f"{where}: the store changed")
    return found
