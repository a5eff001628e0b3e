"""Agent specs: model providers and ids, the spec registry, projection of markdown subagents."""

from __future__ import annotations

from typing import Any

import pytest

from subagents import (
    AgentConfigError,
    AgentContext,
    AgentSpec,
    AgentSpecError,
    AgentSpecRegistry,
    EnvironmentProvider,
    FunctionModel,
    MissingInheritedModel,
    Model,
    ModelPreset,
    ModelProviderRegistry,
    ModelResolutionError,
    SubagentCapabilityInheritancePolicy,
    SubagentConfig,
    SubagentSpec,
    SubagentSpecProjection,
    SubagentToolInheritancePolicy,
    TestModel,
    UnknownEnvironmentProvider,
    default_model_providers,
    make_test_model,
    parse_subagent_markdown,
    project_subagent_spec,
)


class _Recorder:
    """A provider factory that records its calls and answers with a fixed-text model."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, model_name: str, settings: dict[str, Any]) -> Model:
        self.calls.append((model_name, settings))
        return TestModel.with_text(f"from {model_name}")


# ------------------------------------------------------------------ model providers


def test_the_default_providers_include_the_builtin_test_provider() -> None:
    assert "test" in default_model_providers()
    assert AgentSpecRegistry().model_providers() is default_model_providers()


@pytest.mark.parametrize(
    ("model_id", "prompt", "answer"),
    [
        ("test:text=hello", "anything", "hello"),
        ("test:text=a: b: c", "anything", "a: b: c"),
        ("test:echo", "say this back", "say this back"),
        ("test", "anything", "test"),
        ("test:", "anything", "test"),
        ("  test:text=padded  ", "x", "padded"),
    ],
)
def test_the_test_provider_grammar(model_id: str, prompt: str, answer: str) -> None:
    model = AgentSpecRegistry().resolve_model(model_id)
    agent = AgentSpecRegistry().build_agent(
        AgentSpec(name="t", model=ModelPreset(model_id=model_id))
    )

    assert isinstance(model, Model)
    assert agent.run_sync(prompt).output == answer


def test_an_unknown_test_model_is_a_resolution_error() -> None:
    with pytest.raises(ModelResolutionError, match="test:text=<answer>") as raised:
        default_model_providers().resolve("test:gpt")

    assert raised.value.provider == "test"
    with pytest.raises(ModelResolutionError):
        make_test_model("nope", {})


@pytest.mark.parametrize("model_id", ["", "   ", "openai:gpt-5", "gpt-5", ":x"])
def test_an_unresolvable_model_id_names_the_registered_providers(model_id: str) -> None:
    providers = ModelProviderRegistry({"test": make_test_model})

    with pytest.raises(ModelResolutionError) as raised:
        providers.resolve(model_id)

    assert raised.value.known == ["test"]
    assert raised.value.model_id == model_id


def test_a_provider_receives_the_model_name_and_the_settings() -> None:
    recorder = _Recorder()
    providers = ModelProviderRegistry().with_provider("rec", recorder)

    model = providers.resolve("rec:big:v2", {"temperature": 0})

    assert recorder.calls == [("big:v2", {"temperature": 0})]
    assert isinstance(model, TestModel)


def test_a_failing_or_misbehaving_factory_is_a_resolution_error() -> None:
    def broken(model_name: str, settings: dict[str, Any]) -> Model:
        raise RuntimeError("no credentials")

    def wrong(model_name: str, settings: dict[str, Any]) -> Model:
        return "not a model"  # type: ignore[return-value]

    providers = ModelProviderRegistry({"broken": broken, "wrong": wrong})

    with pytest.raises(ModelResolutionError, match="no credentials") as raised:
        providers.resolve("broken:x")
    assert isinstance(raised.value.__cause__, RuntimeError)
    with pytest.raises(ModelResolutionError, match="returned str, not a Model"):
        providers.resolve("wrong:x")


@pytest.mark.parametrize("name", ["", "a:b", " x", "-lead", 3])
def test_a_provider_name_must_be_a_plain_word(name: Any) -> None:
    with pytest.raises(ModelResolutionError, match="invalid model provider name"):
        ModelProviderRegistry().register(name, make_test_model)


def test_registering_a_name_twice_needs_replace_and_with_provider_copies() -> None:
    providers = ModelProviderRegistry({"a": make_test_model})
    recorder = _Recorder()

    with pytest.raises(ModelResolutionError, match="already registered"):
        providers.register("a", recorder)
    with pytest.raises(ModelResolutionError, match="callable"):
        providers.register("b", "factory")  # type: ignore[arg-type]
    copy = providers.with_provider("b", recorder)
    providers.register("a", recorder, replace=True)

    assert providers.names() == ["a"]
    assert copy.names() == ["a", "b"]
    assert providers.factory("a") is recorder
    assert copy.factory("a") is make_test_model
    assert ModelProviderRegistry.split_model_id("openai-responses:gpt-5") == (
        "openai-responses",
        "gpt-5",
    )


# ------------------------------------------------------------------ the spec registry


def test_settings_merge_config_presets_then_config_then_settings_presets_then_settings() -> None:
    recorder = _Recorder()
    registry = (
        AgentSpecRegistry()
        .with_model_provider("rec", recorder)
        .with_model_config_preset("local", {"base_url": "http://x", "timeout": 5})
        .with_model_settings_preset("careful", {"temperature": 0.1, "timeout": 9})
    )
    preset = ModelPreset(
        model_id="rec:m",
        config_preset="local",
        config={"timeout": 7, "retries": 2},
        settings_preset="careful",
        settings={"temperature": 0.3},
    )

    registry.resolve_model(preset)

    assert recorder.calls == [
        ("m", {"base_url": "http://x", "timeout": 9, "retries": 2, "temperature": 0.3})
    ]


def test_an_unknown_preset_is_a_resolution_error() -> None:
    with pytest.raises(ModelResolutionError, match="unknown model settings preset 'fast'"):
        AgentSpecRegistry().resolve_model(ModelPreset(model_id="test", settings_preset="fast"))


def test_a_registry_is_immutable_and_builds_registered_specs_by_name() -> None:
    base = AgentSpecRegistry()
    spec = AgentSpec(
        name="helper",
        instructions=["Be brief.", ""],
        model=ModelPreset(model_id="test:text=hi"),
    )

    registry = base.with_agent_spec(spec)
    agent = registry.build_agent("helper")

    assert base.names() == []
    assert registry.names() == ["helper"]
    assert registry.agent_spec("helper") == spec
    assert agent.name == "helper"
    assert agent.instructions == ("Be brief.",)
    assert agent.run_sync("hello").output == "hi"
    assert base.with_agent_specs([spec, AgentSpec(name="b")]).names() == ["helper", "b"]


def test_building_an_unknown_or_modelless_spec_is_an_agent_spec_error() -> None:
    with pytest.raises(AgentSpecError, match="no agent spec named 'ghost'"):
        AgentSpecRegistry().build_agent("ghost")
    with pytest.raises(AgentSpecError, match="has no model") as raised:
        AgentSpecRegistry().build_agent(AgentSpec(name="bare"))
    assert isinstance(raised.value, AgentConfigError)


def test_an_agent_spec_round_trips_through_plain_values() -> None:
    spec = AgentSpec(
        name="a",
        description="d",
        instructions=["x"],
        model=ModelPreset(model_id="test", settings={"t": 1}, config_preset="p"),
        environment="sandbox",
        metadata={"k": [1, 2]},
    )

    assert AgentSpec.from_value(spec.to_value()) == spec


def test_environment_providers_are_registered_by_name() -> None:
    sandbox = EnvironmentProvider("sandbox")
    registry = AgentSpecRegistry().with_environment_provider("sandbox", sandbox)

    assert registry.environment_provider("sandbox") is sandbox
    assert registry.resolve_environment(AgentSpec(name="a", environment="sandbox")) is sandbox
    assert registry.resolve_environment(AgentSpec(name="a")) is None
    assert registry.resolve_environment(AgentSpec(name="a", environment=" ")) is None
    with pytest.raises(UnknownEnvironmentProvider) as raised:
        registry.resolve_environment(AgentSpec(name="a", environment="cloud"))
    assert raised.value.known == ["sandbox"]
    with pytest.raises(AgentSpecError):
        registry.with_environment_provider("x", object())  # type: ignore[arg-type]


def test_attaching_an_environment_replaces_any_provider_already_in_the_context() -> None:
    class Sandbox(EnvironmentProvider):
        pass

    context = AgentContext()
    context.dependencies.insert(EnvironmentProvider("host"))
    Sandbox("box").attach(context)

    provider = context.dependency(EnvironmentProvider)
    assert provider is not None and provider.name == "box"
    assert repr(provider) == "Sandbox('box')"


# ------------------------------------------------------------------ projection


def _spec(frontmatter: str, body: str = "Help.") -> SubagentSpec:
    return parse_subagent_markdown(f"---\nname: child\ndescription: d\n{frontmatter}---\n{body}")


@pytest.mark.parametrize(
    ("model_line", "inherited", "expected"),
    [
        ("model: test:echo\n", None, "test:echo"),
        ("model: test:echo\n", "test:text=parent", "test:echo"),
        ("", "test:text=parent", "test:text=parent"),
        ("model: inherit\n", " test:text=parent ", "test:text=parent"),
        ("model: ' Inherit '\n", "test", "test"),
        ("model: ''\n", "test", "test"),
    ],
)
def test_the_projected_model_is_the_specs_unless_it_inherits(
    model_line: str, inherited: str | None, expected: str
) -> None:
    agent_spec, _, _ = project_subagent_spec(_spec(model_line), inherited)

    assert agent_spec.model is not None
    assert agent_spec.model.model_id == expected


@pytest.mark.parametrize("inherited", [None, "", "   "])
def test_inheriting_without_a_concrete_model_id_is_missing_inherited_model(
    inherited: str | None,
) -> None:
    with pytest.raises(MissingInheritedModel, match="no inherited model id") as raised:
        project_subagent_spec(_spec("model: inherit\n"), inherited)

    assert raised.value.agent == "child"
    assert isinstance(raised.value, AgentSpecError)


def test_projection_maps_settings_instruction_environment_and_metadata() -> None:
    spec = _spec(
        "model: test\nmodel_settings: careful\nmodel_config:\n  base_url: http://x\n"
        "instruction: Use for debugging\nmetadata:\n  environment: sandbox\n  team: core\n"
    )

    projection = project_subagent_spec(spec)

    assert isinstance(projection, SubagentSpecProjection)
    agent_spec = projection.agent_spec
    assert agent_spec.model == ModelPreset(
        model_id="test", settings_preset="careful", config={"base_url": "http://x"}
    )
    assert agent_spec.environment == "sandbox"
    assert agent_spec.metadata["subagent_instruction"] == "Use for debugging"
    assert agent_spec.metadata["team"] == "core"
    assert agent_spec.metadata["subagent_capability_inheritance"] == (
        SubagentCapabilityInheritancePolicy().to_value()
    )


def test_inherit_as_a_settings_or_config_preset_means_none() -> None:
    agent_spec, _, _ = project_subagent_spec(
        _spec("model: test\nmodel_settings: inherit\nmodel_config: INHERIT\n")
    )

    assert agent_spec.model == ModelPreset(model_id="test")


def test_an_empty_body_gives_no_instructions() -> None:
    agent_spec, _, _ = project_subagent_spec(_spec("model: test\n", body=""))

    assert agent_spec.instructions == []


@pytest.mark.parametrize(
    ("frontmatter", "expected"),
    [
        ("", SubagentToolInheritancePolicy().with_inherit_all_when_empty(True)),
        ("tools: grep\n", SubagentToolInheritancePolicy(["grep"], [])),
        ("optional_tools: [view]\n", SubagentToolInheritancePolicy([], ["view"])),
        (
            "tools: grep\ndenied_tools: shell\n",
            SubagentToolInheritancePolicy(["grep"], [], denied=["shell"]),
        ),
        (
            "denied_tools: [shell]\n",
            SubagentToolInheritancePolicy(denied=["shell"], inherit_all_when_empty=True),
        ),
    ],
)
def test_the_projected_tool_policy_follows_the_tool_lists(
    frontmatter: str, expected: SubagentToolInheritancePolicy
) -> None:
    _, tool_policy, _ = project_subagent_spec(_spec(frontmatter), "test")

    assert tool_policy == expected


def test_from_agent_spec_defaults_to_the_default_registry_and_tool_policy() -> None:
    agent_spec, _, _ = project_subagent_spec(_spec("model: test:text=ok\n"))

    config = SubagentConfig.from_agent_spec(agent_spec)

    assert config.tool_inheritance == SubagentToolInheritancePolicy()
    assert config.environment_provider is None
    assert config.agent.run_sync("x").output == "ok"


def test_from_agent_spec_fails_for_an_unknown_environment_or_model() -> None:
    spec = AgentSpec(name="a", model=ModelPreset(model_id="test"), environment="cloud")

    with pytest.raises(UnknownEnvironmentProvider):
        SubagentConfig.from_agent_spec(spec)
    with pytest.raises(ModelResolutionError):
        SubagentConfig.from_agent_spec(AgentSpec(name="a", model=ModelPreset(model_id="x:y")))


def test_a_function_model_provider_can_back_a_projected_child() -> None:
    registry = AgentSpecRegistry().with_model_provider(
        "fn", lambda name, settings: FunctionModel(lambda messages, params: name.upper())
    )
    agent_spec, policy, _ = project_subagent_spec(_spec("model: inherit\n"), "fn:shout")

    config = SubagentConfig.from_agent_spec(agent_spec, policy, registry)

    assert config.agent.run_sync("x").output == "SHOUT"
