"""Tool and capability inheritance: the resolve order, main-agent-only tools, delegation.

The end-to-end tests delegate, inside a parent run, to children projected
from the markdown files in ``examples/agents`` (``model: inherit``) and look
at the tool set the child's model is actually offered.
"""

from __future__ import annotations

import runpy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from subagents import (
    AgentBuilder,
    AgentConfigError,
    AgentContext,
    AgentSpecRegistry,
    DeniedRequiredTool,
    FunctionModel,
    FunctionTool,
    MissingRequiredTool,
    Model,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    PayloadError,
    RetryPromptPart,
    SubagentCapabilityInheritancePolicy,
    SubagentConfig,
    SubagentError,
    SubagentLifecycleEvent,
    SubagentRegistry,
    SubagentToolInheritanceError,
    SubagentToolInheritancePolicy,
    TestModel,
    ToolRegistry,
    ToolReturnPart,
    is_main_agent_only_tool,
    load_subagent_file,
    project_subagent_spec,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"


def _tool(name: str, **metadata: Any) -> FunctionTool:
    return FunctionTool(
        name, f"The {name} tool", {"type": "object"}, lambda ctx, args: {"tool": name}
    ).with_metadata(metadata)


def _parent(*names: str, auto: Sequence[str] = ()) -> ToolRegistry:
    return ToolRegistry(
        _tool(name, auto_inherit=True) if name in auto else _tool(name) for name in names
    )


# ------------------------------------------------------------------ resolve order


def test_step_one_inherits_everything_only_when_enabled_and_both_lists_are_empty() -> None:
    parent = _parent("grep", "view", "todo", auto=["todo"])
    all_tools = SubagentToolInheritancePolicy().with_inherit_all_when_empty(True)

    assert all_tools.resolve(parent).names() == ["grep", "view", "todo"]
    assert SubagentToolInheritancePolicy([], ["view"]).with_inherit_all_when_empty(True).resolve(
        parent
    ).names() == ["todo", "view"]


def test_step_one_without_auto_inherit_starts_from_nothing() -> None:
    parent = _parent("grep", "todo", auto=["todo"])

    assert SubagentToolInheritancePolicy().without_auto_inherit().resolve(parent).names() == []


def test_only_a_literal_true_auto_inherit_counts() -> None:
    parent = ToolRegistry([_tool("a", auto_inherit="true"), _tool("b", auto_inherit=1), _tool("c")])

    assert SubagentToolInheritancePolicy().resolve(parent).names() == []


def test_optional_tools_missing_from_the_parent_are_skipped_silently() -> None:
    assert SubagentToolInheritancePolicy([], ["nope", "grep"]).resolve(_parent("grep")).names() == [
        "grep"
    ]


def test_a_required_tool_that_is_denied_raises_denied_even_when_the_parent_lacks_it() -> None:
    policy = SubagentToolInheritancePolicy(["shell"], [], denied=["shell"])

    with pytest.raises(DeniedRequiredTool) as raised:
        policy.resolve(_parent())

    assert raised.value.tool_name == "shell"
    assert raised.value.error_kind == "denied_required_tool"
    assert raised.value.name is None


@pytest.mark.parametrize(
    "name",
    [
        "delegate",
        "subagent_info",
        "steer_subagent",
        "cancel_subagent",
        "wait_subagent",
        "__delegate_backend",
        "ask_user_question",
    ],
)
def test_requiring_a_main_agent_only_tool_is_denied_whether_or_not_the_parent_has_it(
    name: str,
) -> None:
    policy = SubagentToolInheritancePolicy([name], [])

    for parent in (_parent(), _parent(name)):
        with pytest.raises(DeniedRequiredTool) as raised:
            policy.resolve(parent)
        assert raised.value.tool_name == name
        assert "main-agent-only" in raised.value.message


def test_a_missing_required_tool_names_itself_and_the_parents_tools() -> None:
    with pytest.raises(MissingRequiredTool) as raised:
        SubagentToolInheritancePolicy(["edit"], []).resolve(_parent("grep", "view"))

    error = raised.value
    assert isinstance(error, SubagentToolInheritanceError)
    assert isinstance(error, SubagentError)
    assert (error.tool_name, error.error_kind) == ("edit", "missing_required_tool")
    assert "grep, view" in error.message
    assert error.diagnostic() == {
        "error": "missing_required_tool",
        "error_kind": "missing_required_tool",
        "tool_name": "edit",
        "message": error.message,
    }


def test_denied_tools_win_over_auto_inherit_and_optional() -> None:
    parent = _parent("grep", "shell", auto=["shell"])
    policy = SubagentToolInheritancePolicy([], ["shell", "grep"], denied=["shell"])

    assert policy.resolve(parent).names() == ["grep"]


def test_a_tool_is_inherited_once_in_first_seen_order() -> None:
    parent = _parent("grep", "view", "todo", auto=["todo"])
    policy = SubagentToolInheritancePolicy(["view", "todo"], ["todo", "grep"])

    assert policy.resolve(parent).names() == ["todo", "grep", "view"]


def test_resolution_leaves_the_parent_registry_unchanged() -> None:
    parent = _parent("grep", "delegate")

    SubagentToolInheritancePolicy().with_inherit_all_when_empty(True).resolve(parent)

    assert parent.names() == ["grep", "delegate"]


def test_main_agent_only_detection_covers_names_backends_and_delegation_metadata() -> None:
    assert is_main_agent_only_tool("delegate")
    assert is_main_agent_only_tool("__delegate_backend_v2")
    assert is_main_agent_only_tool(_tool("my_spawner", kind="delegation"))
    assert is_main_agent_only_tool(_tool("approve", main_agent_only=True))
    assert not is_main_agent_only_tool(_tool("grep"))
    assert not is_main_agent_only_tool("grep")


# ------------------------------------------------------------------ policy values


def test_tool_policies_are_immutable_values_that_round_trip() -> None:
    policy = SubagentToolInheritancePolicy(["grep"], ["view"], denied=["shell"])

    with pytest.raises(AttributeError):
        policy.auto_inherit = False
    assert SubagentToolInheritancePolicy.from_value(policy.to_value()) == policy
    assert policy.with_denied_tools([]).denied_tools == ()
    assert policy.denied_tools == ("shell",)
    assert hash(policy) == hash(SubagentToolInheritancePolicy(["grep"], ["view"], denied=["shell"]))
    assert "grep" in repr(policy)


def test_capability_policies_are_immutable_values_that_round_trip() -> None:
    policy = SubagentCapabilityInheritancePolicy().with_hooks(True).with_denied_capabilities(["x"])

    with pytest.raises(AttributeError):
        policy.hooks = False
    assert SubagentCapabilityInheritancePolicy.from_value(policy.to_value()) == policy
    assert policy.to_value() == {
        "hooks": True,
        "capability_bundles": False,
        "denied_capabilities": ["x"],
    }


@pytest.mark.parametrize(
    "value", [[], {"required_tools": "grep"}, {"auto_inherit": "yes"}, {"unknown": 1}]
)
def test_a_malformed_tool_policy_value_is_a_payload_error(value: Any) -> None:
    if value == {"unknown": 1}:  # unknown fields are ignored, like other records
        assert SubagentToolInheritancePolicy.from_value(value) == SubagentToolInheritancePolicy()
        return
    with pytest.raises(PayloadError) as raised:
        SubagentToolInheritancePolicy.from_value(value)
    assert raised.value.type == "SubagentToolInheritancePolicy"


def test_tool_lists_must_be_lists_of_names() -> None:
    with pytest.raises(AgentConfigError):
        SubagentToolInheritancePolicy("grep", [])
    with pytest.raises(AgentConfigError):
        SubagentToolInheritancePolicy([1], [])  # type: ignore[list-item]


def test_a_config_rejects_something_that_is_not_a_policy() -> None:
    config = SubagentConfig("c", AgentBuilder(TestModel.with_text("x")).build())

    with pytest.raises(AgentConfigError):
        config.with_tool_inheritance("all")  # type: ignore[arg-type]
    with pytest.raises(AgentConfigError):
        config.with_capability_inheritance(True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({}, SubagentCapabilityInheritancePolicy()),
        (
            {"inherit_hooks": "yes", "inherit_capabilities": 1},
            SubagentCapabilityInheritancePolicy(),
        ),
        (
            {"inherit_hooks": True, "denied_capabilities": "a, b"},
            SubagentCapabilityInheritancePolicy(hooks=True, denied_capabilities=["a", "b"]),
        ),
        (
            {
                "subagent_capability_inheritance": {"capability_bundles": True},
                "inherit_hooks": True,
            },
            SubagentCapabilityInheritancePolicy(capability_bundles=True),
        ),
        (
            {"subagent_capability_inheritance": "garbage", "inherit_hooks": True},
            SubagentCapabilityInheritancePolicy(hooks=True),
        ),
    ],
)
def test_capability_policy_from_metadata_inherits_only_what_is_explicitly_enabled(
    metadata: dict[str, Any], expected: SubagentCapabilityInheritancePolicy
) -> None:
    assert SubagentCapabilityInheritancePolicy.from_metadata(metadata) == expected


# ------------------------------------------------------------------ delegation, end to end


class _Spy:
    """A model provider whose models record the tool names each request offers."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    def factory(self, model_name: str, settings: dict[str, Any]) -> Model:
        def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
            self.offered.append([tool.name for tool in params.tools])
            return f"{model_name} answered"

        return FunctionModel(answer, name=f"spy:{model_name}")


def _tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart | RetryPromptPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    ]


def _child_from_example(file: str, spy: _Spy) -> SubagentConfig:
    spec = load_subagent_file(EXAMPLES / file)
    assert spec.model == "inherit"
    agent_spec, tool_policy, _ = project_subagent_spec(spec, inherited_model_id="spy:child")
    registry = AgentSpecRegistry().with_model_provider("spy", spy.factory)
    return SubagentConfig.from_agent_spec(agent_spec, tool_policy, registry)


async def test_a_child_projected_from_markdown_inherits_its_tools_inside_a_parent_run() -> None:
    spy = _Spy()
    researcher = _child_from_example("researcher.md", spy)
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "researcher", "prompt": "find the bug"})], then="done"
            )
        )
        .tools(
            [
                _tool("grep"),
                _tool("view"),
                _tool("web_search"),
                _tool("shell", auto_inherit=True),
                _tool("edit"),
                _tool("todo", auto_inherit=True),
                _tool("ask_user_question", auto_inherit=True),
            ]
        )
        .subagent(researcher)
        .build()
    )

    result = await parent.run("investigate")

    assert result.output == "done"
    assert {"delegate", "shell", "ask_user_question"} <= set(parent.tools().names())
    # auto_inherit (todo; shell is denied, ask_user_question main-agent-only), then
    # the optional tool the parent has (web_search; fetch_url is absent), then required.
    assert spy.offered == [["todo", "web_search", "grep", "view"]]
    (returned,) = _tool_returns(result.messages)
    assert isinstance(returned, ToolReturnPart)
    assert returned.content["output"] == "child answered"


async def test_a_markdown_child_without_tool_lists_inherits_all_but_denied_and_main_only() -> None:
    spy = _Spy()
    reviewer = _child_from_example("reviewer.md", spy)
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "reviewer", "prompt": "review the diff"})], then="done"
            )
        )
        .tools([_tool(name) for name in ("grep", "view", "edit", "shell", "ask_user_question")])
        .tool(SubagentRegistry().subagent_info_tool())
        .subagent(reviewer)
        .build()
    )

    await parent.run("review")

    assert parent.tools().names() == [
        "grep",
        "view",
        "edit",
        "shell",
        "ask_user_question",
        "subagent_info",
        "delegate",
    ]
    assert spy.offered == [["grep", "view"]]


async def test_a_delegate_call_whose_child_lacks_a_required_tool_becomes_a_retry_prompt() -> None:
    spy = _Spy()
    debugger = _child_from_example("debugger.md", spy)  # requires grep and view
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "debugger", "prompt": "why?"})], then="gave up"
            )
        )
        .tool(_tool("grep"))
        .subagent(debugger)
        .build()
    )
    context = AgentContext()

    result = await parent.run("debug", context)

    assert result.output == "gave up"
    assert spy.offered == []
    (retry,) = _tool_returns(result.messages)
    assert isinstance(retry, RetryPromptPart)
    assert "'view'" in retry.content
    (failed,) = [
        SubagentLifecycleEvent.from_value(event.payload)
        for event in context.events.events()
        if event.kind == "subagent_failed"
    ]
    assert failed.metadata["error_kind"] == "missing_required_tool"
    assert failed.metadata["tool_name"] == "view"


async def test_a_delegation_error_for_a_missing_tool_names_the_subagent_and_task() -> None:
    child = AgentBuilder(TestModel.with_text("x")).build()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("worker", child).with_tool_inheritance(
            SubagentToolInheritancePolicy(["grep"], [])
        )
    )

    with pytest.raises(MissingRequiredTool) as raised:
        await registry.delegate("worker", "go", AgentContext())

    assert raised.value.name == "worker"
    assert raised.value.task_id
    assert raised.value.tool_name == "grep"
    assert "worker" in raised.value.message


async def test_an_inherited_tool_never_replaces_the_childs_own_tool_of_that_name() -> None:
    own = FunctionTool("grep", "child grep", {"type": "object"}, lambda ctx, args: "own")
    child = AgentBuilder(TestModel.with_tool_calls([("grep", {})], then="ok")).tool(own).build()
    registry = SubagentRegistry().with_subagent(
        SubagentConfig("c", child).with_tool_inheritance(
            SubagentToolInheritancePolicy(["grep"], [])
        )
    )
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls([("delegate", {"name": "c", "prompt": "go"})], then="done")
        )
        .tool(_tool("grep"))
        .subagent_registry(registry)
        .build()
    )
    context = AgentContext()

    await parent.run("x", context)

    records = [
        event.payload for event in context.events.events() if event.kind == "subagent_stream_record"
    ]
    returns = [r["payload"]["content"] for r in records if r["kind"] == "tool_return"]
    assert returns == ["own"]


def test_the_markdown_subagents_example_script_runs_offline() -> None:
    script = runpy.run_path(str(EXAMPLES.parent / "markdown_subagents.py"))

    report = script["main"]("test:echo")

    assert report["researcher_output"] == "Where is the config loaded?"
    by_name = {entry["name"]: entry for entry in report["subagents"]}
    assert by_name["researcher"]["inherited_tools"] == ["todo", "grep", "view"]
    assert by_name["reviewer"]["inherited_tools"] == ["grep", "view", "todo"]
    assert all(entry["available"] for entry in report["subagents"])


# ------------------------------------------------------------------ ask_user_question


async def test_a_delegated_child_is_never_offered_ask_user_question_not_even_its_own() -> None:
    offered: list[list[str]] = []

    def answer(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        offered.append([tool.name for tool in params.tools])
        return "child answered"

    child = (
        AgentBuilder(FunctionModel(answer))
        .tools([_tool("ask_user_question"), _tool("grep")])
        .build()
    )
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"subagent_name": "helper", "prompt": "go"})], then="done"
            )
        )
        .subagent(SubagentConfig("helper", child))
        .build()
    )

    result = await parent.run("plan")

    assert result.output == "done"
    assert offered == [["grep"]]
    # The child agent itself, run directly, keeps its own tool.
    assert "ask_user_question" in child.tools().names()
