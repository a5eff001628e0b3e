"""LangGraph graphs as delegated children, and our delegation tools for a LangGraph
parent (``pip install 'subagents[langgraph]'``).

- :class:`LangGraphChild` wraps a compiled graph whose state holds
  ``messages`` (``MessagesState`` and the prebuilt agents): a delegation
  streams it with ``astream(stream_mode="updates")``; each chat-model call
  (seen through a LangChain callback) is a model request for our hooks, with
  its usage counted in the child's; its text, tool calls and tool messages
  reach the parent's stream attributed to the subagent. The output is the
  text of the final state's last message. Steering is not delivered into a
  graph (it has no turn boundary we can reach); a steered graph ignores it.
- :func:`delegation_tools` gives a LangGraph parent our delegation tools as
  LangChain ``StructuredTool``\\ s (for a ``ToolNode``), backed by our
  registry, supervisor and store.
"""

from ._langgraph import LangGraphChild, delegation_tools

__all__ = [
    "LangGraphChild",
    "delegation_tools",
]
