"""Markdown subagents end to end: load, project, inspect, delegate. No network needed.

Run: ``python examples/markdown_subagents.py [model-id]`` (default ``test:echo``,
a built-in model that answers the prompt back). The markdown files in
``examples/agents`` say ``model: inherit``, so every child runs on the model
id given here; with a real provider installed, pass e.g. ``anthropic:<model>``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentSpecRegistry,
    FunctionTool,
    SubagentConfig,
    SubagentParentTools,
    load_subagent_dir,
    project_subagent_spec,
)

AGENTS = Path(__file__).resolve().parent / "agents"


def _tool(name: str, **metadata: Any) -> FunctionTool:
    return FunctionTool(
        name, f"The host's {name} tool", {"type": "object"}, lambda ctx, args: {"tool": name}
    ).with_metadata(metadata)


def main(model_id: str = "test:echo") -> dict[str, Any]:
    """Load ``examples/agents``, build a parent that owns them, report and delegate once."""
    loaded = load_subagent_dir(AGENTS)
    for diagnostic in loaded.diagnostics:
        print(f"skipped: {diagnostic.message}", file=sys.stderr)
    registry = AgentSpecRegistry()
    host_tools = [_tool("grep"), _tool("view"), _tool("edit"), _tool("shell")]
    host_tools.append(_tool("todo", auto_inherit=True))
    builder = AgentBuilder(registry.resolve_model(model_id)).tools(host_tools)
    for spec in loaded.specs:
        agent_spec, tool_policy, _ = project_subagent_spec(spec, inherited_model_id=model_id)
        builder.subagent(SubagentConfig.from_agent_spec(agent_spec, tool_policy, registry))
    parent = builder.build()

    info = parent.subagents().info(parent.tools())
    context = AgentContext()
    context.dependencies.insert(SubagentParentTools(parent.tools()))
    answer = parent.subagents().delegate_sync("researcher", "Where is the config loaded?", context)
    return {"subagents": info, "researcher_output": answer.output}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:2]), indent=2))
