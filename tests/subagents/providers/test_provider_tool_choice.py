"""``openai-chat``'s ``tool_choice``: forcing a call through configuration, then letting go.

Small local models (llama.cpp's server with a 270M model) only call a tool
when the request names it: the server then builds a grammar from that
tool's schema. A forced choice must not be sent again once the model has
called, or the run would call that tool until its request limit.
"""

from __future__ import annotations

from typing import Any

import pytest
from fake_provider_server import FakeProviderServer
from provider_cases import CASES

from subagents import AgentBuilder, AgentConfigError, FunctionTool, ToolContext, model_from_id

CHAT = CASES[0]
FORCED = {"type": "function", "function": {"name": "get_weather"}}


def _weather() -> FunctionTool:
    def get_weather(_: ToolContext, args: dict[str, Any]) -> str:
        return "sunny"

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return FunctionTool("get_weather", "Weather in a city.", schema, get_weather)


async def test_a_named_tool_is_forced_until_the_conversation_holds_its_result(
    server: FakeProviderServer,
) -> None:
    server.script(CHAT.reply("tool_call"), CHAT.reply("after_tool"))
    model = CHAT.model(server, tool_choice="get_weather")

    result = await AgentBuilder(model).tool(_weather()).build().run("weather in Paris?")

    first, second = server.bodies()
    assert first["tool_choice"] == FORCED
    assert "tool_choice" not in second
    assert result.output == CHAT.reply("after_tool").body["choices"][0]["message"]["content"]


async def test_without_reset_the_choice_goes_with_every_request(
    server: FakeProviderServer,
) -> None:
    server.script(CHAT.reply("tool_call"), CHAT.reply("after_tool"))
    model = CHAT.model(server, tool_choice="required", reset_tool_choice=False)

    await AgentBuilder(model).tool(_weather()).build().run("weather in Paris?")

    assert [body["tool_choice"] for body in server.bodies()] == ["required", "required"]


async def test_no_choice_is_sent_without_tools_or_for_a_tool_not_offered(
    server: FakeProviderServer,
) -> None:
    server.script(CHAT.reply("text"), CHAT.reply("text"))

    await AgentBuilder(CHAT.model(server, tool_choice="get_weather")).build().run("hi")
    other = CHAT.model(server, tool_choice="delegate")
    await AgentBuilder(other).tool(_weather()).build().run("hi")

    assert ["tool_choice" in body for body in server.bodies()] == [False, False]


async def test_without_the_setting_no_choice_is_sent(server: FakeProviderServer) -> None:
    server.script(CHAT.reply("text"))

    await AgentBuilder(CHAT.model(server)).tool(_weather()).build().run("hi")

    assert "tool_choice" not in server.bodies()[0]


def test_the_settings_come_from_a_profile_mapping() -> None:
    model = model_from_id(
        "openai-chat:gemma", api_key="local", tool_choice="delegate", reset_tool_choice=False
    )

    assert (model.tool_choice, model.reset_tool_choice) == ("delegate", False)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("setting", "match"),
    [({"tool_choice": ""}, "tool_choice"), ({"reset_tool_choice": "no"}, "reset_tool_choice")],
)
def test_a_bad_value_is_a_config_error(setting: dict[str, Any], match: str) -> None:
    with pytest.raises(AgentConfigError, match=match):
        model_from_id("openai-chat:gemma", api_key="local", **setting)


def test_other_protocols_refuse_the_setting() -> None:
    with pytest.raises(AgentConfigError, match="tool_choice"):
        model_from_id("anthropic:claude", api_key="local", tool_choice="auto")


def _optional_city() -> FunctionTool:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
        "required": ["city"],
    }
    return FunctionTool("get_weather", "Weather in a city.", schema, lambda ctx, args: "sunny")


async def test_required_tool_arguments_advertise_only_the_required_properties(
    server: FakeProviderServer,
) -> None:
    server.script(CHAT.reply("text"), CHAT.reply("text"))

    cut = CHAT.model(server, tool_arguments="required")
    await AgentBuilder(cut).tool(_optional_city()).build().run("hi")
    await AgentBuilder(CHAT.model(server)).tool(_optional_city()).build().run("hi")

    narrow, full = (body["tools"][0]["function"]["parameters"] for body in server.bodies())
    assert narrow == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    assert sorted(full["properties"]) == ["city", "units"]


def test_tool_arguments_is_all_or_required() -> None:
    with pytest.raises(AgentConfigError, match="tool_arguments"):
        model_from_id("openai-chat:gemma", api_key="local", tool_arguments="some")
