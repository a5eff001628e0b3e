"""Provider model ids work where hosts name models: the provider registry, agent specs, markdown."""

from __future__ import annotations

from fake_provider_server import FakeProviderServer, ServerFactory
from provider_cases import API_KEY, CASES, ProviderCase

from subagents import (
    AgentBuilder,
    AgentSpec,
    AgentSpecRegistry,
    ModelPreset,
    SubagentConfig,
    default_model_providers,
    parse_subagent_markdown,
    project_subagent_spec,
)
from subagents._providers import ProviderModel

CHAT, _, ANTHROPIC = CASES


def test_the_default_provider_registry_knows_every_provider() -> None:
    names = default_model_providers().names()

    assert {"openai-chat", "openai-responses", "anthropic"} <= set(names)


def test_the_registry_builds_a_provider_model_from_id_and_settings(case: ProviderCase) -> None:
    model = default_model_providers().resolve(
        f"{case.provider}:some-model", {"api_key": API_KEY, "temperature": 0.3}
    )

    assert isinstance(model, case.model_class)
    assert model.name == f"{case.provider}:some-model"
    assert isinstance(model, ProviderModel)
    assert model.settings.temperature == 0.3


async def test_an_agent_spec_with_a_config_preset_runs_against_a_local_server(
    case: ProviderCase, server: FakeProviderServer
) -> None:
    registry = AgentSpecRegistry().with_model_config_preset(
        "local", {"base_url": case.base_url(server), "api_key": API_KEY}
    )
    spec = AgentSpec(
        name="assistant",
        instructions=["Be brief."],
        model=ModelPreset(
            model_id=f"{case.provider}:test-model",
            config_preset="local",
            settings={"temperature": 0.0},
        ),
    )
    server.script(case.reply("text"))

    result = await registry.build_agent(spec).run("Capital of France?")

    assert result.output == "Paris is the capital of France."
    assert server.bodies()[0]["temperature"] == 0.0


async def test_a_markdown_subagent_on_anthropic_serves_a_parent_on_openai_chat(
    new_server: ServerFactory,
) -> None:
    parent_server, child_server = new_server(), new_server()
    spec = parse_subagent_markdown(
        "---\n"
        "name: research\n"
        "description: Collect bounded evidence\n"
        "model: anthropic:test-model\n"
        "model_config: local-claude\n"
        "---\n"
        "You research facts.\n"
    )
    agent_spec, tools, _ = project_subagent_spec(spec)
    registry = AgentSpecRegistry().with_model_config_preset(
        "local-claude", {"base_url": ANTHROPIC.base_url(child_server), "api_key": API_KEY}
    )
    child = SubagentConfig.from_agent_spec(agent_spec, tools, registry)
    parent_server.script(CHAT.reply("delegate"), CHAT.reply("after_delegate"))
    child_server.script(ANTHROPIC.reply("child_text"))
    app = AgentBuilder(CHAT.model(parent_server)).subagent(child).build_app()

    result = await app.run("Ask the researcher.")

    assert result.output == "The researcher says: Paris."
    assert child_server.bodies()[0]["system"] == "You research facts."
    assert result.usage.requests == 3
