"""One child-run protocol for both delegation modes: the same hook rules, the same texts.

Each test runs the same subagent once through blocking delegation and once as
a background attempt, and asserts the same outcome: what failed, with which
message, which hooks ran and what they observed.

The rules (``subagents._delegation._child_run``): the first raising
before-hook stops the delegation (later before-hooks and the child do not
run); every after-hook runs, even after an earlier one raised; after a
completed child the first after-hook failure fails the delegation, after a
failed child it is recorded as ``hook_error`` and the child's error stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentContextHandle,
    BackgroundSubagentSupervisor,
    ConversationId,
    Dependencies,
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
    RunId,
    SubagentConfig,
    SubagentDelegationMode,
    SubagentError,
    SubagentExecutionHook,
    SubagentExecutionMetadata,
    SubagentExecutionOutcome,
    SubagentParentTools,
    SupervisorLimits,
    TestModel,
    ToolContext,
)

MODES = ("blocking", "background")


class Hook(SubagentExecutionHook):
    """Records what it saw; raises in ``before`` or ``after`` when told to."""

    def __init__(self, log: list[str], label: str, *, fail: str | None = None) -> None:
        self.log = log
        self.label = label
        self.fail = fail

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        self.log.append(f"{self.label}.before")
        if self.fail == "before":
            raise RuntimeError(f"{self.label} refuses")

    async def after_subagent_run(
        self,
        metadata: SubagentExecutionMetadata,
        child_context: AgentContext,
        outcome: SubagentExecutionOutcome,
    ) -> None:
        self.log.append(f"{self.label}.after.{type(outcome).__name__}")
        if self.fail == "after":
            raise RuntimeError(f"{self.label} is down")


@dataclass
class Ended:
    """How one delegation ended, the same shape for both modes."""

    ok: bool
    message: str
    failed_metadata: dict[str, Any] | None


def _child(log: list[str], *, fails: bool) -> Any:
    async def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        log.append("child ran")
        if fails:
            raise ValueError("the child broke")
        return "child output"

    return AgentBuilder(FunctionModel(answer, name="child")).build()


def _failed_metadata(context: AgentContext) -> dict[str, Any] | None:
    failed = context.events.of_kind("subagent_failed")
    return None if not failed else dict(failed[-1].payload["metadata"])


async def _blocking(config: SubagentConfig) -> Ended:
    parent = AgentBuilder(TestModel.with_text("parent")).subagent(config).build()
    context = AgentContext()
    try:
        result = await parent.subagents().delegate("research", "go", context)
    except SubagentError as error:
        return Ended(False, error.message, _failed_metadata(context))
    return Ended(True, result.output, None)


def _tool_context(parent: AgentContext, tools: Any) -> ToolContext:
    parent.run_id = RunId.from_string("run-parent")
    dependencies = Dependencies()
    dependencies.insert(parent)
    dependencies.insert(AgentContextHandle(parent))
    dependencies.insert(SubagentParentTools(tools))
    return ToolContext(
        RunId.from_string("run-parent"),
        ConversationId.from_string("conv"),
        1,
        dependencies=dependencies,
    )


async def _background(config: SubagentConfig, supervisor: BackgroundSubagentSupervisor) -> Ended:
    parent = (
        AgentBuilder(TestModel.with_text("parent"))
        .subagent(config)
        .subagent_delegation_mode(SubagentDelegationMode.ASYNC)
        .background_subagent_supervisor(supervisor)
        .build()
    )
    context = AgentContext()
    ctx = _tool_context(context, parent.tools())
    delegate, wait = parent.tools().lookup("delegate"), parent.tools().lookup("wait_subagent")
    assert delegate is not None and wait is not None
    accepted = (await delegate.call(ctx, {"subagent_name": "research", "prompt": "go"})).content
    waited = (await wait.call(ctx, {"attempt_id": accepted["attempt_id"]})).content
    if waited["status"] == "completed":
        return Ended(True, waited["result"], None)
    return Ended(False, waited["error"], _failed_metadata(context))


@pytest.fixture
async def delegate_once() -> AsyncIterator[Callable[[str, SubagentConfig], Any]]:
    """``await delegate_once(mode, config)``: one delegation in ``mode``; supervisors shut down."""
    made: list[BackgroundSubagentSupervisor] = []

    async def run(mode: str, config: SubagentConfig) -> Ended:
        if mode == "blocking":
            return await _blocking(config)
        supervisor = BackgroundSubagentSupervisor(
            loop=asyncio.get_running_loop(),
            limits=SupervisorLimits(cancellation_grace=2.0, shutdown_grace=5.0),
        )
        made.append(supervisor)
        return await _background(config, supervisor)

    yield run
    for supervisor in made:
        await supervisor.shutdown_checked(5.0)


@pytest.mark.parametrize("mode", MODES)
async def test_an_after_hook_failing_after_a_completed_child_fails_the_delegation_in_both_modes(
    mode: str, delegate_once: Callable[[str, SubagentConfig], Any]
) -> None:
    log: list[str] = []
    config = (
        SubagentConfig("research", _child(log, fails=False))
        .with_execution_hook(Hook(log, "audit", fail="after"))
        .with_execution_hook(Hook(log, "metrics"))
    )

    ended = await delegate_once(mode, config)

    assert not ended.ok
    assert ended.message == (
        "after_subagent_run hook Hook failed for subagent 'research': audit is down"
    )
    assert ended.failed_metadata is not None
    assert ended.failed_metadata["hook"] == "after_subagent_run"
    # Every after-hook observed the outcome, the one after the failing hook too.
    assert log == [
        "audit.before",
        "metrics.before",
        "child ran",
        "audit.after.Completed",
        "metrics.after.Completed",
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_an_after_hook_failing_after_a_failed_child_is_recorded_and_the_child_error_stays(
    mode: str, delegate_once: Callable[[str, SubagentConfig], Any]
) -> None:
    log: list[str] = []
    config = (
        SubagentConfig("research", _child(log, fails=True))
        .with_execution_hook(Hook(log, "audit", fail="after"))
        .with_execution_hook(Hook(log, "metrics"))
    )

    ended = await delegate_once(mode, config)

    assert not ended.ok
    assert "the child broke" in ended.message
    assert "audit is down" not in ended.message
    assert ended.failed_metadata is not None
    assert ended.failed_metadata["hook_error"] == "Hook: audit is down"
    assert ended.failed_metadata["error_type"] == "ModelError"
    assert log[-2:] == ["audit.after.Failed", "metrics.after.Failed"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_first_failing_before_hook_stops_later_hooks_and_the_child_in_both_modes(
    mode: str, delegate_once: Callable[[str, SubagentConfig], Any]
) -> None:
    log: list[str] = []
    config = (
        SubagentConfig("research", _child(log, fails=False))
        .with_execution_hook(Hook(log, "policy", fail="before"))
        .with_execution_hook(Hook(log, "metrics"))
    )

    ended = await delegate_once(mode, config)

    assert not ended.ok
    assert ended.message == (
        "before_subagent_run hook Hook failed for subagent 'research': policy refuses"
    )
    assert ended.failed_metadata is not None
    assert ended.failed_metadata["hook"] == "before_subagent_run"
    assert log == ["policy.before"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_completed_child_passes_every_hook_the_same_way_in_both_modes(
    mode: str, delegate_once: Callable[[str, SubagentConfig], Any]
) -> None:
    log: list[str] = []
    config = (
        SubagentConfig("research", _child(log, fails=False))
        .with_execution_hook(Hook(log, "audit"))
        .with_execution_hook(Hook(log, "metrics"))
    )

    ended = await delegate_once(mode, config)

    assert ended == Ended(True, "child output", None)
    assert log == [
        "audit.before",
        "metrics.before",
        "child ran",
        "audit.after.Completed",
        "metrics.after.Completed",
    ]
