"""The spec's markdown and inheritance examples (spec/subagents.md), in Python under DESIGN §2.

Sections: Markdown Configuration, Tool Inheritance, Capability Inheritance.
The three code examples run as written (Rust names, Python calls); every
other claim of those sections is a test below its example.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    AgentContext,
    AgentHook,
    AgentSpecRegistry,
    DeniedRequiredTool,
    EnvironmentProvider,
    FunctionModel,
    FunctionTool,
    MissingInheritedModel,
    MissingRequiredTool,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    RecursiveSubagentDelegation,
    StaticCapabilityBundle,
    SubagentCapabilityInheritancePolicy,
    SubagentConfig,
    SubagentExecutionHook,
    SubagentExecutionMetadata,
    SubagentLifecycleEvent,
    SubagentLifecycleKind,
    SubagentParentTools,
    SubagentRegistry,
    SubagentSpec,
    SubagentToolInheritancePolicy,
    TestModel,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolReturnPart,
    parse_subagent_markdown,
    project_subagent_spec,
)

# ------------------------------------------------------------------ helpers


def _tool(name: str, **metadata: Any) -> FunctionTool:
    return FunctionTool(
        name, f"The {name} tool", {"type": "object"}, lambda ctx, args: args
    ).with_metadata(metadata)


def _failed_events(context: AgentContext) -> list[SubagentLifecycleEvent]:
    return [
        SubagentLifecycleEvent.from_value(event.payload)
        for event in context.events.events()
        if event.kind == "subagent_failed"
    ]


# ------------------------------------------------------------------ Markdown Configuration


def test_a_markdown_subagent_parses_into_a_serializable_spec() -> None:
    spec = parse_subagent_markdown(r"""
---
name: debugger
description: Debug code issues
tools:
  - grep
  - view
optional_tools: edit, shell
model: anthropic:claude-sonnet-4
---
You are a debugging expert.
""")

    assert spec.name == "debugger"
    assert spec.tools == ["grep", "view"]
    assert spec.optional_tools == ["edit", "shell"]
    assert spec.system_prompt == "You are a debugging expert."


def test_a_spec_crosses_a_service_boundary_as_plain_json_without_a_runtime_agent() -> None:
    spec = parse_subagent_markdown(
        "---\nname: debugger\ndescription: Debug code issues\ntools: [grep]\n---\nDebug."
    )

    value = spec.to_value()

    assert isinstance(value, dict)
    assert "agent" not in value
    assert SubagentSpec.from_value(value) == spec


def test_projection_returns_the_child_agent_spec_and_both_policies() -> None:
    spec = parse_subagent_markdown(
        "---\nname: debugger\ndescription: Debug code issues\ntools: grep, view\n"
        "optional_tools: edit\nmodel: test:text=found it\n---\nYou are a debugging expert."
    )

    agent_spec, tool_policy, capability_policy = project_subagent_spec(spec)

    assert agent_spec.name == "debugger"
    assert agent_spec.description == "Debug code issues"
    assert agent_spec.instructions == ["You are a debugging expert."]
    assert agent_spec.model is not None and agent_spec.model.model_id == "test:text=found it"
    assert tool_policy == SubagentToolInheritancePolicy(["grep", "view"], ["edit"])
    assert capability_policy == SubagentCapabilityInheritancePolicy()


async def test_from_agent_spec_builds_an_executable_child_without_a_nested_builder() -> None:
    spec = parse_subagent_markdown(
        "---\nname: debugger\ndescription: Debug code issues\nmodel: test:text=found it\n"
        "---\nYou are a debugging expert."
    )
    agent_spec, tool_policy, _ = project_subagent_spec(spec)

    config = SubagentConfig.from_agent_spec(agent_spec, tool_policy, AgentSpecRegistry())
    registry = SubagentRegistry().with_subagent(config)
    result = await registry.delegate("debugger", "why does it crash?", AgentContext())

    assert config.name == "debugger"
    assert config.description == "Debug code issues"
    assert result.output == "found it"
    assert config.agent.instructions == ("You are a debugging expert.",)


def test_the_capability_policy_rides_in_projected_metadata_and_from_agent_spec_applies_it() -> None:
    spec = parse_subagent_markdown(
        "---\nname: child\ndescription: d\nmodel: test\ninherit_hooks: true\n"
        "denied_capabilities: telemetry\n---\n"
    )
    agent_spec, tool_policy, capability_policy = project_subagent_spec(spec)

    config = SubagentConfig.from_agent_spec(agent_spec, tool_policy, AgentSpecRegistry())

    assert (
        SubagentCapabilityInheritancePolicy.from_value(
            agent_spec.metadata["subagent_capability_inheritance"]
        )
        == capability_policy
    )
    assert config.capability_inheritance == capability_policy
    assert capability_policy.hooks is True
    assert capability_policy.capability_bundles is False
    assert capability_policy.denied_capabilities == ("telemetry",)


class _EnvironmentProbe(SubagentExecutionHook):
    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def before_subagent_run(
        self, metadata: SubagentExecutionMetadata, child_context: AgentContext
    ) -> None:
        provider = child_context.dependency(EnvironmentProvider)
        self.seen.append(None if provider is None else provider.name)


async def test_a_child_whose_spec_resolves_an_environment_provider_uses_it() -> None:
    registry = AgentSpecRegistry().with_environment_provider(
        "sandbox", EnvironmentProvider("sandbox")
    )
    spec = parse_subagent_markdown(
        "---\nname: child\ndescription: d\nmodel: test\nmetadata:\n  environment: sandbox\n---\n"
    )
    agent_spec, tool_policy, _ = project_subagent_spec(spec)
    probe = _EnvironmentProbe()
    config = SubagentConfig.from_agent_spec(agent_spec, tool_policy, registry).with_execution_hook(
        probe
    )
    parent = AgentContext()
    parent.dependencies.insert(EnvironmentProvider("host"))

    await SubagentRegistry().with_subagent(config).delegate("child", "go", parent)

    assert agent_spec.environment == "sandbox"
    assert probe.seen == ["sandbox"]
    host = parent.dependency(EnvironmentProvider)
    assert host is not None and host.name == "host"


async def test_a_child_without_an_environment_provider_inherits_the_parents() -> None:
    spec = parse_subagent_markdown("---\nname: child\ndescription: d\nmodel: test\n---\n")
    agent_spec, tool_policy, _ = project_subagent_spec(spec)
    probe = _EnvironmentProbe()
    config = SubagentConfig.from_agent_spec(
        agent_spec, tool_policy, AgentSpecRegistry()
    ).with_execution_hook(probe)
    parent = AgentContext()
    parent.dependencies.insert(EnvironmentProvider("host"))

    await SubagentRegistry().with_subagent(config).delegate("child", "go", parent)

    assert probe.seen == ["host"]


@pytest.mark.parametrize("model_line", ["", "model: inherit\n", "model: INHERIT\n", "model: ''\n"])
def test_an_inherited_model_needs_a_concrete_model_id_from_the_host(model_line: str) -> None:
    spec = parse_subagent_markdown(f"---\nname: child\ndescription: d\n{model_line}---\n")

    with pytest.raises(MissingInheritedModel) as raised:
        project_subagent_spec(spec)
    agent_spec, _, _ = project_subagent_spec(spec, "test:text=inherited")

    assert raised.value.agent == "child"
    assert agent_spec.model is not None and agent_spec.model.model_id == "test:text=inherited"


def test_tools_and_optional_tools_become_parent_tool_policy_not_child_toolsets() -> None:
    spec = parse_subagent_markdown(
        "---\nname: child\ndescription: d\nmodel: test\ntools: grep\noptional_tools: view\n---\n"
    )
    agent_spec, tool_policy, _ = project_subagent_spec(spec)

    child = SubagentConfig.from_agent_spec(agent_spec, tool_policy, AgentSpecRegistry()).agent

    assert child.tools().names() == []
    assert tool_policy.required_tools == ("grep",)
    assert tool_policy.optional_tools == ("view",)


def test_with_no_tool_lists_the_projected_policy_inherits_all_but_denied_and_main_agent_only() -> (
    None
):
    spec = parse_subagent_markdown(
        "---\nname: child\ndescription: d\nmodel: test\ndenied_tools: shell\n---\n"
    )
    _, tool_policy, _ = project_subagent_spec(spec)
    parent = ToolRegistry(
        [
            _tool("grep"),
            _tool("shell"),
            _tool("view"),
            _tool("delegate"),
            _tool("ask_user_question"),
        ]
    )

    assert tool_policy.resolve(parent).names() == ["grep", "view"]


# ------------------------------------------------------------------ Tool Inheritance


def test_a_tool_marked_auto_inherit_is_inherited_by_a_policy_that_requires_it() -> None:
    metadata: dict[str, Any] = {}
    metadata["auto_inherit"] = True

    async def task_list_fn(_ctx: ToolContext, args: Any) -> ToolResult:
        return ToolResult(args)

    task_list = FunctionTool(
        "task_list",
        "List tasks",
        {"type": "object"},
        task_list_fn,
    ).with_metadata(metadata)
    parent = ToolRegistry().with_tool(task_list)
    policy = SubagentToolInheritancePolicy(["task_list"], [])
    inherited = policy.resolve(parent)

    assert inherited.names() == ["task_list"]


def test_required_tools_gate_optional_attach_denied_are_removed_and_auto_inherit_is_default() -> (
    None
):
    parent = ToolRegistry(
        [_tool("grep"), _tool("view"), _tool("todo", auto_inherit=True), _tool("shell")]
    )

    assert SubagentToolInheritancePolicy().resolve(parent).names() == ["todo"]
    assert SubagentToolInheritancePolicy(["grep"], ["view", "absent"]).resolve(parent).names() == [
        "todo",
        "view",
        "grep",
    ]
    assert SubagentToolInheritancePolicy([], ["view"], denied=["todo"]).resolve(parent).names() == [
        "view"
    ]
    with pytest.raises(MissingRequiredTool):
        SubagentToolInheritancePolicy(["edit"], []).resolve(parent)


def test_main_agent_only_tools_are_filtered_centrally_regardless_of_policy() -> None:
    parent = ToolRegistry(
        [
            _tool("delegate", auto_inherit=True),
            _tool("subagent_info"),
            _tool("steer_subagent"),
            _tool("cancel_subagent"),
            _tool("wait_subagent"),
            _tool("__delegate_backend"),
            _tool("grep"),
        ]
    )
    everything = SubagentToolInheritancePolicy().with_inherit_all_when_empty(True)
    optional = SubagentToolInheritancePolicy([], parent.names())

    assert everything.resolve(parent).names() == ["grep"]
    assert optional.resolve(parent).names() == ["grep"]


def test_ask_user_question_is_never_inherited_by_auto_inherit_inherit_all_or_optional() -> None:
    parent = ToolRegistry([_tool("ask_user_question", auto_inherit=True), _tool("grep")])

    assert SubagentToolInheritancePolicy().resolve(parent).names() == []
    assert SubagentToolInheritancePolicy().with_inherit_all_when_empty(True).resolve(
        parent
    ).names() == ["grep"]
    assert SubagentToolInheritancePolicy([], ["ask_user_question"]).resolve(parent).names() == []


async def test_requiring_ask_user_question_makes_a_subagent_unavailable_as_denied() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("asker", child).with_tool_inheritance(
            SubagentToolInheritancePolicy(["ask_user_question"], [])
        )
    )
    parent_tools = ToolRegistry([_tool("ask_user_question")])

    (info,) = registry.info(parent_tools)

    assert info["available"] is False
    assert info["diagnostics"][0]["error_kind"] == "denied_required_tool"
    assert info["diagnostics"][0]["tool_name"] == "ask_user_question"


def test_with_tool_inheritance_attaches_the_policy_to_one_child() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    policy = SubagentToolInheritancePolicy(["grep"], [])

    one = SubagentConfig("one", child).with_tool_inheritance(policy)
    other = SubagentConfig("other", child)

    assert one.tool_inheritance == policy
    assert other.tool_inheritance is None


async def test_nested_delegation_is_guarded_by_default_and_opt_in_with_nested_delegation() -> None:
    grandchild = AgentBuilder(TestModel.with_text("grandchild")).build()
    inner = SubagentRegistry().with_subagent(SubagentConfig("leaf", grandchild))
    inner_open = SubagentRegistry().with_subagent(
        SubagentConfig("leaf", grandchild).with_nested_delegation(True)
    )
    inside = AgentContext().subagent_context("outer", "outer-1")

    with pytest.raises(RecursiveSubagentDelegation):
        await inner.delegate("leaf", "go", inside)
    result = await inner_open.delegate("leaf", "go", inside)

    assert result.output == "grandchild"


async def test_subagent_info_in_a_run_uses_the_same_parent_tools_delegation_would_use() -> None:
    ready = AgentBuilder(TestModel.with_text("ready")).build()
    blocked = AgentBuilder(TestModel.with_text("blocked")).build()
    registry = (
        SubagentRegistry()
        .with_subagent(
            SubagentConfig("reader", ready, "Reads").with_tool_inheritance(
                SubagentToolInheritancePolicy(["view"], ["grep"])
            )
        )
        .with_subagent(
            SubagentConfig("editor", blocked, "Edits").with_tool_inheritance(
                SubagentToolInheritancePolicy(["edit"], [])
            )
        )
    )
    parent = (
        AgentBuilder(TestModel.with_tool_calls([("subagent_info", {})], then="done"))
        .tool(_tool("view"))
        .tool(registry.subagent_info_tool())
        .subagent_registry(registry)
        .build()
    )

    result = await parent.run("who can help?")

    (returned,) = [
        part.content
        for message in result.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "subagent_info"
    ]
    reader, editor = returned["subagents"]
    assert reader == {
        "name": "reader",
        "description": "Reads",
        "available": True,
        "inherited_tools": ["view"],
        "diagnostics": [],
    }
    assert editor["available"] is False
    assert editor["inherited_tools"] == []
    assert editor["diagnostics"][0]["error_kind"] == "missing_required_tool"
    assert editor["diagnostics"][0]["tool_name"] == "edit"


@pytest.mark.parametrize(
    ("policy", "parent_tools", "kind", "tool_name", "error"),
    [
        (
            SubagentToolInheritancePolicy(["edit"], []),
            ["grep"],
            "missing_required_tool",
            "edit",
            MissingRequiredTool,
        ),
        (
            SubagentToolInheritancePolicy(["shell"], [], denied=["shell"]),
            ["shell"],
            "denied_required_tool",
            "shell",
            DeniedRequiredTool,
        ),
    ],
)
async def test_a_delegation_missing_a_required_tool_publishes_subagent_failed_with_the_reason(
    policy: SubagentToolInheritancePolicy,
    parent_tools: list[str],
    kind: str,
    tool_name: str,
    error: type[Exception],
) -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("worker", child).with_tool_inheritance(policy)
    )
    context = AgentContext()
    context.dependencies.insert(SubagentParentTools(ToolRegistry(map(_tool, parent_tools))))

    with pytest.raises(error):
        await registry.delegate("worker", "go", context)

    (failed,) = _failed_events(context)
    assert failed.kind == SubagentLifecycleKind.FAILED
    assert failed.metadata["error_kind"] == kind
    assert failed.metadata["tool_name"] == tool_name
    assert tool_name in failed.metadata["message"]
    assert [event.kind for event in context.events.events()] == ["subagent_failed"]


def test_markdown_denied_tools_are_stored_in_spec_metadata() -> None:
    spec = parse_subagent_markdown(
        "---\nname: child\ndescription: d\ndenied_tools: shell, edit\n---\n"
    )

    assert spec.metadata["denied_tools"] == ["shell", "edit"]
    assert project_subagent_spec(spec, "test").tool_inheritance.denied_tools == ("shell", "edit")


# ------------------------------------------------------------------ Capability Inheritance


def test_a_child_can_inherit_the_parents_capability_bundles() -> None:
    child = AgentBuilder(TestModel.with_text("child")).build()
    bundle = StaticCapabilityBundle("parent-bundle")

    agent = (
        AgentBuilder(TestModel.with_text("parent"))
        .capability_bundle(bundle)
        .subagent(
            SubagentConfig("child", child).with_capability_inheritance(
                SubagentCapabilityInheritancePolicy().with_capability_bundles(True)
            )
        )
        .build()
    )
    _ = agent

    config = agent.subagents().subagent("child")
    assert config is not None and config.inherited_bundles == (bundle,)


class _Marker(AgentHook):
    def __init__(self, capability_id: str, log: list[str]) -> None:
        self.capability_id = capability_id
        self.log = log

    async def before_run(self, context: AgentContext, prompt: str) -> None:
        self.log.append(f"{self.capability_id}:{context.agent_name}")


async def _run_child_with(
    policy: SubagentCapabilityInheritancePolicy | None,
    hooks: Sequence[AgentHook],
    bundles: Sequence[StaticCapabilityBundle],
) -> list[list[str]]:
    """Delegate once to a child built under ``policy``; the tool names its model was offered."""
    seen: list[list[str]] = []

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        seen.append([tool.name for tool in params.tools])
        return "ok"

    config = SubagentConfig("child", AgentBuilder(FunctionModel(answer)).build())
    if policy is not None:
        config = config.with_capability_inheritance(policy)
    builder = AgentBuilder(TestModel.with_text("parent")).subagent(config).hooks(hooks)
    for bundle in bundles:
        builder.capability_bundle(bundle)
    await builder.build_app().subagents().delegate("child", "go", AgentContext())
    return seen


async def test_nothing_is_inherited_unless_hooks_or_bundles_are_enabled() -> None:
    log: list[str] = []
    hooks = [_Marker("audit", log)]
    bundles = [
        StaticCapabilityBundle("files", tools=[_tool("view")], hooks=[_Marker("files", log)])
    ]

    seen_default = await _run_child_with(None, hooks, bundles)
    seen_empty = await _run_child_with(SubagentCapabilityInheritancePolicy(), hooks, bundles)

    assert log == []
    assert seen_default == [[]]
    assert seen_empty == [[]]


async def test_enabled_hooks_and_bundles_reach_the_child_run() -> None:
    log: list[str] = []
    hooks = [_Marker("audit", log)]
    bundles = [
        StaticCapabilityBundle("files", tools=[_tool("view")], hooks=[_Marker("files", log)])
    ]
    policy = SubagentCapabilityInheritancePolicy().with_hooks(True).with_capability_bundles(True)

    seen = await _run_child_with(policy, hooks, bundles)

    assert log == ["audit:child", "files:child"]
    assert seen == [["view"]]


@pytest.mark.parametrize("denied", ["audit", "files-id", "files"])
async def test_denied_capabilities_filter_by_hook_id_bundle_id_or_bundle_name(denied: str) -> None:
    log: list[str] = []
    hooks = [_Marker("audit", log)]
    bundles = [
        StaticCapabilityBundle(
            "files", tools=[_tool("view")], hooks=[_Marker("files", log)], capability_id="files-id"
        )
    ]
    policy = (
        SubagentCapabilityInheritancePolicy()
        .with_hooks(True)
        .with_capability_bundles(True)
        .with_denied_capabilities([denied])
    )

    seen = await _run_child_with(policy, hooks, bundles)

    if denied == "audit":
        assert (log, seen) == (["files:child"], [["view"]])
    else:
        assert (log, seen) == (["audit:child"], [[]])


async def test_markdown_capability_keys_flow_through_projection_into_the_child_run() -> None:
    log: list[str] = []
    spec = parse_subagent_markdown(
        "---\nname: child\ndescription: d\nmodel: inherit\ninherit_hooks: true\n"
        "inherit_capabilities: true\ndenied_capabilities: [files]\n---\nHelp."
    )
    agent_spec, tool_policy, _ = project_subagent_spec(spec, "test:text=ok")
    config = SubagentConfig.from_agent_spec(agent_spec, tool_policy, AgentSpecRegistry())
    app = (
        AgentBuilder(TestModel.with_text("parent"))
        .hook(_Marker("audit", log))
        .capability_bundle(StaticCapabilityBundle("files", hooks=[_Marker("files", log)]))
        .capability_bundle(StaticCapabilityBundle("notes", hooks=[_Marker("notes", log)]))
        .subagent(config)
        .build_app()
    )

    result = await app.subagents().delegate("child", "go", AgentContext())

    assert result.output == "ok"
    assert log == ["audit:child", "notes:child"]
