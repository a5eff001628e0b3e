"""OpenAI Agents SDK agents as delegated children, and our delegation tools for an
OpenAI Agents parent (``pip install 'subagents[openai-agents]'``).

- :class:`OpenAIAgentsChild` wraps an ``agents.Agent``: a delegation runs it
  with ``Runner.run``, its model wrapped so that every model request is seen
  by our hooks, counted in the child's usage and reported in the parent's
  stream (text, tool calls and their outputs, attributed to the subagent);
  a background child's steering is appended to its next model request's
  input as a user message. The SDK's own tracing is off unless a
  ``run_config`` turns it on (it would export to the network).
- :func:`delegation_tools` gives an OpenAI Agents parent our delegation tools
  as ``FunctionTool``\\ s, backed by our registry, supervisor and store.
"""

from ._openai_agents import OpenAIAgentsChild, delegation_tools

__all__ = [
    "OpenAIAgentsChild",
    "delegation_tools",
]
