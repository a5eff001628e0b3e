"""The README's ``mcpServers`` snippet and ``examples/mcp/`` stay usable."""

from __future__ import annotations

import json
import re
from pathlib import Path

from subagents._cli._main import build_parser
from subagents._host import load_host_config

REPO = Path(__file__).resolve().parents[2]


def _serve_args(entry: dict[str, object]) -> list[str]:
    assert entry["command"] == "subagents"
    args = entry["args"]
    assert isinstance(args, list)
    return [str(a) for a in args]


def test_the_readme_mcp_servers_snippet_is_json_the_cli_accepts() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Durable subagents for MCP clients", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```json\n(.*?)```", section, re.S)
    args = _serve_args(json.loads(block)["mcpServers"]["subagents"])
    parsed = build_parser().parse_args(args)
    assert parsed.mcp and parsed.session == "my-ide"


def test_the_example_config_and_client_entry_are_valid() -> None:
    config = load_host_config(REPO / "examples" / "mcp" / "host.toml")
    assert config.profiles["default"].subagents == ["research", "summarize"]
    entry = json.loads((REPO / "examples" / "mcp" / "mcp_servers.json").read_text())
    parsed = build_parser().parse_args(_serve_args(entry["mcpServers"]["subagents"]))
    assert parsed.mcp and parsed.config == "examples/mcp/host.toml"
