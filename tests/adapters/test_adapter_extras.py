"""Without its framework an adapter still imports; using it names the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest

from subagents import AdapterNotInstalled, AgentConfigError


@pytest.mark.parametrize(
    ("module", "blocked", "extra", "use"),
    [
        ("subagents.adapters.pydantic_ai", "pydantic_ai", "pydantic-ai", "PydanticAIChild"),
        ("subagents.adapters.openai_agents", "agents", "openai-agents", "OpenAIAgentsChild"),
        ("subagents.adapters.langgraph", "langgraph.pregel", "langgraph", "LangGraphChild"),
        (
            "subagents.adapters.opentelemetry",
            "opentelemetry.trace",
            "opentelemetry",
            "OpenTelemetryHook",
        ),
    ],
)
def test_a_missing_framework_is_a_typed_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, blocked: str, extra: str, use: str
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # makes `import blocked` fail
    adapter = importlib.import_module(module)
    with pytest.raises(AdapterNotInstalled) as missing:
        if use == "LangGraphChild":
            adapter.LangGraphChild(object(), name="g")
        else:
            getattr(adapter, use)(object())
    assert missing.value.fields["extra"] == extra
    assert f"pip install 'subagents[{extra}]'" in str(missing.value)
    assert isinstance(missing.value, AgentConfigError)


def test_an_adapter_refuses_an_object_of_the_wrong_kind() -> None:
    from subagents.adapters.pydantic_ai import PydanticAIChild

    with pytest.raises(AgentConfigError, match=r"needs a pydantic_ai\.Agent"):
        PydanticAIChild(object())


def test_config_refuses_an_object_no_adapter_runs() -> None:
    from subagents import SubagentConfig, UnsupportedAgent

    with pytest.raises(UnsupportedAgent) as refused:
        SubagentConfig("research", object())  # type: ignore[arg-type]
    assert refused.value.fields == {
        "name": "research",
        "agent_type": "builtins.object",
        "adapter": None,
    }
    assert "AgentBuilder" in str(refused.value)
