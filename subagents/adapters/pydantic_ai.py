"""pydantic-ai agents as delegated children, and durable delegation tools for a
pydantic-ai parent (``pip install 'subagents[pydantic-ai]'``).

- :class:`PydanticAIChild` wraps a ``pydantic_ai.Agent`` so that
  ``SubagentConfig(name, PydanticAIChild(agent))`` delegates to it, blocking or
  in the background. Its usage is added to the parent's; its text and tool
  calls reach the parent's stream with subagent attribution; a background
  child's steering is appended to its next model request as a user prompt.
- :func:`delegation_toolset` gives a pydantic-ai parent our delegation tools
  (``delegate``, ``steer_subagent``, ``cancel_subagent``, ``wait_subagent``,
  ``subagent_info`` with a supervisor; the blocking ``delegate`` without),
  backed by our registry, supervisor and store.
"""

from ._pydantic_ai import PydanticAIChild, delegation_toolset

__all__ = [
    "PydanticAIChild",
    "delegation_toolset",
]
