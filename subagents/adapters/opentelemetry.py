"""OpenTelemetry spans for runs, model requests, tool calls and delegations, following
the GenAI semantic conventions (``pip install 'subagents[opentelemetry]'``).

Add :class:`OpenTelemetryHook` to an agent (``AgentBuilder(...).hook(hook)``; a
child inherits it with ``SubagentCapabilityInheritancePolicy(hooks=True)``, a
foreign child through its adapter the same way). Spans:

- ``invoke_agent {agent}`` per run (``gen_ai.operation.name = invoke_agent``,
  ``gen_ai.agent.name``, ``gen_ai.conversation.id``);
- ``chat {model}`` per model request, with ``gen_ai.usage.input_tokens`` and
  ``gen_ai.usage.output_tokens``;
- ``execute_tool {tool}`` per tool call (``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``); a delegation tool's span is the delegation's span
  (``subagents.delegation.subagent``, ``subagents.delegation.background``,
  ``subagents.attempt_id``).

Errors are recorded on the span that failed (``record_exception``, status
``ERROR``). A delegated child's spans nest under the delegating span: the
child runs in a copy of the delegating call's :mod:`contextvars`, background
children included. Across a restart or a host, the link goes through the
store: wrap the supervisor's store in :func:`trace_context_store` and every
accepted attempt persists the W3C ``traceparent`` of its delegating span in
``AttemptRecord.trace_context``. Given that store (``store=``), the hook
links to it from the background child's run span (add the hook to the
subagent too: ``config.with_execution_hook(hook)``) and from the span of the
``wait_subagent`` that delivers the attempt's result, on any host, later.
"""

from ._opentelemetry import OpenTelemetryHook, trace_context_store

__all__ = [
    "OpenTelemetryHook",
    "trace_context_store",
]
