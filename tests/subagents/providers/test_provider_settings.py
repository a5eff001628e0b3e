"""Model ids, settings and what each provider puts on the wire for them."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from fake_provider_server import FakeProviderServer
from provider_cases import API_KEY, CASES, ProviderCase

from subagents import (
    AgentBuilder,
    AgentConfigError,
    AnthropicModel,
    FunctionTool,
    ModelSettings,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ProviderServerError,
    RetryPolicy,
    ToolContext,
    ToolError,
    model_from_id,
    register_providers,
)

CHAT, RESPONSES, ANTHROPIC = CASES


def _only(provider: str) -> ProviderCase:
    return next(case for case in CASES if case.provider == provider)


def test_a_model_id_selects_the_provider_and_keeps_the_model_name() -> None:
    chat = model_from_id("openai-chat:gpt-4o-mini", api_key=API_KEY)
    responses = model_from_id("openai-responses:gpt-5-mini", api_key=API_KEY)
    claude = model_from_id("anthropic:claude-sonnet-4", api_key=API_KEY)

    assert isinstance(chat, OpenAIChatModel)
    assert isinstance(responses, OpenAIResponsesModel)
    assert isinstance(claude, AnthropicModel)
    assert (chat.name, responses.name, claude.name) == (
        "openai-chat:gpt-4o-mini",
        "openai-responses:gpt-5-mini",
        "anthropic:claude-sonnet-4",
    )


def test_a_model_name_may_itself_contain_colons() -> None:
    model = model_from_id("openai-chat:llama3.1:8b", api_key=API_KEY)

    assert model.name == "openai-chat:llama3.1:8b"


@pytest.mark.parametrize("model_id", ["gpt-4o", "openai-chat:", ":gpt-4o", "mystery:model"])
def test_a_malformed_id_or_unknown_provider_is_a_config_error(model_id: str) -> None:
    with pytest.raises(AgentConfigError):
        model_from_id(model_id)


def test_an_unknown_or_mistyped_setting_is_a_config_error() -> None:
    with pytest.raises(AgentConfigError, match="temprature"):
        model_from_id("openai-chat:gpt-4o-mini", temprature=0.2)
    with pytest.raises(AgentConfigError, match="temperature"):
        model_from_id("openai-chat:gpt-4o-mini", temperature="warm")


@pytest.mark.parametrize(
    ("model_id", "setting"),
    [
        ("openai-chat:m", {"top_k": 5}),
        ("openai-responses:m", {"stop": ["END"]}),
        ("openai-responses:m", {"seed": 1}),
        ("anthropic:m", {"presence_penalty": 0.5}),
    ],
)
def test_a_setting_the_protocol_cannot_send_is_refused_not_dropped(
    model_id: str, setting: dict[str, Any]
) -> None:
    with pytest.raises(AgentConfigError, match=next(iter(setting))):
        model_from_id(model_id, **setting)


def test_register_providers_offers_a_factory_per_provider() -> None:
    registered: dict[str, Any] = {}
    register_providers(registered.__setitem__)

    model = registered["anthropic"]("claude-sonnet-4", {"api_key": API_KEY, "max_tokens": 64})

    assert sorted(registered) == ["anthropic", "openai-chat", "openai-responses"]
    assert isinstance(model, AnthropicModel)
    assert model.settings.max_tokens == 64


def test_retry_settings_come_from_the_same_flat_mapping() -> None:
    model = model_from_id("anthropic:m", api_key=API_KEY, max_retries=1, max_delay=2.0)

    assert model.retry == RetryPolicy(max_retries=1, max_delay=2.0)  # type: ignore[attr-defined]


async def test_chat_sends_sampling_settings_and_extra_body(server: FakeProviderServer) -> None:
    server.script(CHAT.reply("text"))
    settings = ModelSettings(
        temperature=0.2,
        max_tokens=64,
        top_p=0.9,
        stop=("END",),
        seed=7,
        extra_body={"repetition_penalty": 1.1},
    )

    await AgentBuilder(CHAT.model(server, settings=settings)).build().run("hi")

    body = server.bodies()[0]
    assert {k: body[k] for k in ("temperature", "max_tokens", "top_p", "stop", "seed")} == {
        "temperature": 0.2,
        "max_tokens": 64,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
    }
    assert body["repetition_penalty"] == 1.1
    assert body["messages"][0] == {"role": "user", "content": "hi"}


async def test_chat_can_send_max_tokens_as_max_completion_tokens(
    server: FakeProviderServer,
) -> None:
    server.script(CHAT.reply("text"))
    settings = ModelSettings(max_tokens=64)
    model = CHAT.model(server, settings=settings, max_tokens_param="max_completion_tokens")

    await AgentBuilder(model).build().run("hi")

    assert server.bodies()[0]["max_completion_tokens"] == 64
    assert "max_tokens" not in server.bodies()[0]


async def test_responses_sends_max_tokens_as_max_output_tokens(
    server: FakeProviderServer,
) -> None:
    server.script(RESPONSES.reply("text"))
    model = RESPONSES.model(server, settings=ModelSettings(max_tokens=64), store=False)

    await AgentBuilder(model).instructions("Be brief.").build().run("hi")

    body = server.bodies()[0]
    assert body["max_output_tokens"] == 64
    assert body["store"] is False
    assert body["input"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


async def test_anthropic_sends_system_apart_a_default_max_tokens_and_stop_sequences(
    server: FakeProviderServer,
) -> None:
    server.script(ANTHROPIC.reply("text"))
    model = ANTHROPIC.model(server, settings=ModelSettings(stop=("END",), top_k=5))

    await AgentBuilder(model).instructions("Be brief.").build().run("hi")

    body = server.bodies()[0]
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 4096
    assert body["stop_sequences"] == ["END"]
    assert body["top_k"] == 5
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


async def test_anthropic_turns_off_parallel_calls_through_tool_choice(
    server: FakeProviderServer,
) -> None:
    server.script(ANTHROPIC.reply("text"))
    model = ANTHROPIC.model(server, settings=ModelSettings(parallel_tool_calls=False))
    tool = FunctionTool("noop", None, {"type": "object"}, lambda ctx, args: None)

    await AgentBuilder(model).tool(tool).build().run("hi")

    assert server.bodies()[0]["tool_choice"] == {
        "type": "auto",
        "disable_parallel_tool_use": True,
    }


async def test_the_base_url_comes_from_the_environment_when_not_given(
    case: ProviderCase, server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = "ANTHROPIC_BASE_URL" if case.provider == "anthropic" else "OPENAI_BASE_URL"
    monkeypatch.setenv(env, case.base_url(server))
    monkeypatch.setenv(case.env_var, API_KEY)
    server.script(case.reply("text"))

    result = await AgentBuilder(model_from_id(f"{case.provider}:test-model")).build().run("hi")

    assert result.output == "Paris is the capital of France."
    assert server.requests[0].path == case.path


async def test_custom_headers_are_sent(case: ProviderCase, server: FakeProviderServer) -> None:
    server.script(case.reply("text"))

    await AgentBuilder(case.model(server, headers={"X-Team": "kernel"})).build().run("hi")

    assert server.requests[0].headers["x-team"] == "kernel"


async def test_the_sdks_own_retries_are_off(case: ProviderCase, server: FakeProviderServer) -> None:
    server.script(case.reply("error_500"), case.reply("text"))
    model = case.model(server, retry=RetryPolicy(max_retries=0))

    with pytest.raises(ProviderServerError):
        await AgentBuilder(model).build().run("hi")

    assert len(server.requests) == 1


async def test_a_failing_tool_is_reported_back_as_an_error_tool_result(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    def get_weather(_: ToolContext, args: dict[str, Any]) -> str:
        raise ToolError("the weather service is down", tool="get_weather")

    tool = FunctionTool("get_weather", None, {"type": "object"}, get_weather)
    server.script(case.reply("tool_call"), case.reply("after_tool"))

    await AgentBuilder(case.model(server)).tool(tool).retries(1).build().run("Weather?")

    [(_, content)] = case.tool_results(server.bodies()[1])
    assert "the weather service is down" in content
    if case.provider == "anthropic":
        [block] = [
            b
            for m in server.bodies()[1]["messages"]
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
        assert block["is_error"] is True


async def test_requests_after_the_first_do_not_reload_the_ca_bundle(
    case: ProviderCase, server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script(*[case.reply("text")] * 4)
    agent = AgentBuilder(case.model(server)).build()
    await agent.run("warm up")
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)

    for _ in range(3):
        await agent.run("again")

    assert loads == []
