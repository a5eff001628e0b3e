"""Agent run hooks and capability bundles.

The hook protocol (:class:`AgentHook`) observes a run at every step: the run
(``before_run``, ``after_run``, ``on_run_error``, ``on_run_interrupted``),
each model request (``before_model_request``, ``after_model_request``, with a
:class:`ModelRequestInfo`) and each tool call. It is what a tracing extra
builds on: every method gets the run's :class:`AgentContext` (or the call's
:class:`ToolContext`), and every method is called in the task running the
agent, so it sees the run's :mod:`contextvars`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._context import AgentContext
from ._ids import ConversationId, RunId
from ._models import ModelMessage, ModelRequestParameters, ModelResponse, ToolCallPart
from ._tools import Tool, ToolContext, ToolResult


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequestInfo:
    """One model request, as the model-request hooks see it.

    ``request_number`` counts the run's requests from 1; ``messages`` are the
    messages sent (steering and delivered background results included) and
    ``parameters`` the tool definitions; ``streamed`` says whether the
    response is streamed (``run_stream`` with a live sink).
    """

    run_id: RunId
    conversation_id: ConversationId
    agent_name: str
    model_name: str
    request_number: int
    messages: tuple[ModelMessage, ...]
    parameters: ModelRequestParameters
    streamed: bool


class AgentHook:
    """Observes an agent's runs. Subclass and override what you need.

    Every ``async`` method is awaited inline, in the task running the agent
    (on its event loop), in registration order. Which exception wins when a
    hook raises:

    - ``before_run``, ``before_model_request``, ``before_tool_call``,
      ``after_tool_call``, ``after_run``: the first hook that raises stops
      the step (later hooks of that method are not awaited) and fails the
      run with its exception (it is not converted into a tool retry).
    - ``after_model_request``: every hook is awaited even when an earlier
      one raised. After a successful request the first hook exception fails
      the run; after a failed request the request's error is raised and the
      hooks' exceptions are attached to it as notes (``__notes__``).
    - ``on_run_error``: every hook is awaited; the run's own error is raised
      and the hooks' exceptions are attached to it as notes.

    A run that fails with an ``Exception`` (anything raised after the run
    started: a hook, the model, a tool, a limit) awaits ``on_run_error``. A
    ``BaseException`` signal (cancellation, lease loss) awaits nothing (a
    cancelled task must not start new waits): ``on_run_interrupted`` is
    called, synchronously, instead. Either is called on every hook, also on
    one whose ``before_run`` was not reached because an earlier one raised.
    """

    capability_id: str = "hook"

    async def before_run(self, context: AgentContext, prompt: str) -> None:
        return None

    async def before_model_request(self, context: AgentContext, request: ModelRequestInfo) -> None:
        """Before each model request; raising fails the run without making the request."""

    async def after_model_request(
        self,
        context: AgentContext,
        request: ModelRequestInfo,
        response: ModelResponse | None,
        error: Exception | None,
    ) -> None:
        """After each model request: exactly one of ``response`` (with its usage) and
        ``error`` (a :class:`ModelError` whose ``__cause__`` is the provider's exception,
        or the :class:`SubagentsError` the model raised) is set."""

    async def before_tool_call(self, context: ToolContext, call: ToolCallPart) -> None:
        return None

    async def after_tool_call(
        self, context: ToolContext, call: ToolCallPart, result: ToolResult
    ) -> None:
        return None

    async def after_run(self, context: AgentContext, output: str) -> None:
        return None

    async def on_run_error(self, context: AgentContext, error: Exception) -> None:
        """The run failed with ``error``, which is raised to the caller after every hook."""

    def on_run_interrupted(self, context: AgentContext, signal: BaseException) -> None:
        """The run is ending with a ``BaseException`` signal (e.g. ``asyncio.CancelledError``).

        Called synchronously, in the task running the agent, before the signal
        propagates; an exception raised here is attached to the signal as a
        note and does not replace it.
        """


class CapabilityBundle:
    """A named group of hooks and tools added to an agent with ``.capability_bundle(...)``."""

    name: str
    capability_id: str

    def hooks(self) -> Sequence[AgentHook]:
        return ()

    def tools(self) -> Sequence[Tool]:
        return ()


class StaticCapabilityBundle(CapabilityBundle):
    """A bundle with a fixed name, hooks and tools."""

    def __init__(
        self,
        name: str,
        *,
        hooks: Sequence[AgentHook] = (),
        tools: Sequence[Tool] = (),
        capability_id: str | None = None,
    ) -> None:
        self.name = name
        self.capability_id = capability_id or name
        self._hooks = tuple(hooks)
        self._tools = tuple(tools)

    def hooks(self) -> Sequence[AgentHook]:
        return self._hooks

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def __repr__(self) -> str:
        return f"StaticCapabilityBundle({self.name!r})"
