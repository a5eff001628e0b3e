"""The one protocol that runs a delegated child, for both delegation modes.

:func:`run_child` is the whole protocol: resolve the child's tool
inheritance against the parent's tools → materialize the child agent → the
mode begins the run (child context and run id) → attach the subagent's
environment → the mode publishes ``subagent_started`` → before-hooks → the
mode executes the child run → after-hooks → the end, a :class:`ChildEnd`
that the mode turns into its own result (blocking delegation returns or
raises; a background attempt returns a ``ChildOutcome``).

The hook rules, the same in both modes:

- ``before_subagent_run`` hooks run in order; the first that raises stops
  the delegation: later before-hooks and the child do not run
  (:class:`HookFailed`, ``method = "before_subagent_run"``).
- ``after_subagent_run`` hooks all run, in order, even when an earlier one
  raised, so every hook observes the outcome; the first failure is the one
  reported. After a completed child it fails the delegation
  (:class:`HookFailed`, ``method = "after_subagent_run"``); after a failed
  child it is recorded as ``hook_error`` (:class:`RunFailed`) and the
  child's own error stays the cause.
- A ``BaseException`` signal (cancellation) passes through untouched: no
  hook is awaited for it (a cancelled task must not start new waits); the
  mode's :meth:`ChildRunMode.interrupted` is told first.

Everything runs inline on the caller's event loop.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from .._agent._context import AgentContext
from .._agent._ids import RunId
from .._agent._result import AgentResult
from .._agent._run import Agent
from .._agent._tools import ToolRegistry
from .._errors import SubagentToolInheritanceError
from ._config import SubagentConfig, materialize_child
from ._hooks import SubagentExecutionHook, SubagentExecutionMetadata, SubagentExecutionOutcome

BEFORE_HOOK = "before_subagent_run"
AFTER_HOOK = "after_subagent_run"


@dataclass(frozen=True, slots=True)
class ChildRun:
    """One child run as its mode began it: the child context, its run id, the hooks' view."""

    child: AgentContext
    run_id: RunId
    metadata: SubagentExecutionMetadata


class ChildRunMode(abc.ABC):
    """What differs between blocking and background delegation; the order does not."""

    @abc.abstractmethod
    def begin(self) -> ChildRun:
        """Make the child context and its run id (the child agent is already built)."""

    @abc.abstractmethod
    def started(self, run: ChildRun) -> None:
        """Publish ``subagent_started`` (the environment is attached by now)."""

    @abc.abstractmethod
    async def execute(self, agent: Agent, run: ChildRun) -> AgentResult:
        """Run the child agent; an ``Exception`` is the child's failure."""

    def interrupted(self, run: ChildRun, signal: BaseException) -> None:  # noqa: B027
        """A signal (cancellation) ends the run; called before it propagates. Nothing by default."""


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The parent's tools cannot satisfy the child's tool policy; nothing was started."""

    error: SubagentToolInheritanceError


@dataclass(frozen=True, slots=True)
class HookFailed:
    """An execution hook raised: before the child ran, or after it completed."""

    run: ChildRun
    method: str
    hook: SubagentExecutionHook
    error: Exception

    def message(self, name: str) -> str:
        """The one text both modes report for this failure."""
        return (
            f"{self.method} hook {type(self.hook).__name__} failed for subagent "
            f"{name!r}: {self.error}"
        )


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The child run raised ``error``; ``hook_error`` is the first after-hook failure, if any."""

    run: ChildRun
    error: Exception
    hook_error: str | None


@dataclass(frozen=True, slots=True)
class Completed:
    """The child run and every hook succeeded."""

    run: ChildRun
    result: AgentResult


ChildEnd = Unavailable | HookFailed | RunFailed | Completed


def error_text(error: BaseException) -> str:
    """An error's message, or its type name when the message is empty."""
    return str(error) or type(error).__name__


async def run_child(
    config: SubagentConfig, parent_tools: ToolRegistry, mode: ChildRunMode
) -> ChildEnd:
    """Run ``config``'s child under ``mode``; see the module docstring for the order."""
    try:
        inherited = config.tool_policy().resolve(parent_tools)
    except SubagentToolInheritanceError as error:
        return Unavailable(error)
    agent = materialize_child(config, inherited)
    run = mode.begin()
    if config.environment_provider is not None:
        config.environment_provider.attach(run.child)
    mode.started(run)
    hooks = config.execution_hooks
    for hook in hooks:
        try:
            await hook.before_subagent_run(run.metadata, run.child)
        except Exception as error:
            return HookFailed(run, BEFORE_HOOK, hook, error)
    try:
        result = await mode.execute(agent, run)
    except Exception as error:
        failed = SubagentExecutionOutcome.Failed(error=error_text(error), run_id=run.run_id)
        first = await _after_hooks(hooks, run, failed)
        hook_error = None if first is None else f"{type(first[0]).__name__}: {first[1]}"
        return RunFailed(run, error, hook_error)
    except BaseException as signal:
        mode.interrupted(run, signal)
        raise
    completed = SubagentExecutionOutcome.Completed(
        output=result.output, usage=result.usage.copy(), run_id=result.run_id
    )
    first = await _after_hooks(hooks, run, completed)
    if first is not None:
        return HookFailed(run, AFTER_HOOK, first[0], first[1])
    return Completed(run, result)


async def _after_hooks(
    hooks: tuple[SubagentExecutionHook, ...], run: ChildRun, outcome: SubagentExecutionOutcome
) -> tuple[SubagentExecutionHook, Exception] | None:
    """Await every after-hook; the first that raised, with its error (the others still run)."""
    first: tuple[SubagentExecutionHook, Exception] | None = None
    for hook in hooks:
        try:
            await hook.after_subagent_run(run.metadata, run.child, outcome)
        except Exception as error:
            first = first or (hook, error)
    return first
