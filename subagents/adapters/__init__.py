"""Adapters: other frameworks' agents as delegated children, our delegation tools for
their parents, and OpenTelemetry tracing.

Each adapter is a submodule importing its framework only when used, so
``import subagents`` works without any of them; a missing framework raises
:class:`~subagents.AdapterNotInstalled` naming the extra to install:

- :mod:`subagents.adapters.pydantic_ai` (``pip install 'subagents[pydantic-ai]'``)
- :mod:`subagents.adapters.openai_agents` (``pip install 'subagents[openai-agents]'``)
- :mod:`subagents.adapters.langgraph` (``pip install 'subagents[langgraph]'``)
- :mod:`subagents.adapters.opentelemetry` (``pip install 'subagents[opentelemetry]'``)
"""

__all__: list[str] = []
