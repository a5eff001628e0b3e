"""LangGraph graphs as our children, and our delegation tools in a LangGraph parent: the
real LangGraph with LangChain's fake chat model (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _adapter_parents import Factory, background_parent, blocking_parent, child_records
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool as langchain_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from subagents import AgentContext, AgentStreamSourceKind, SubagentConfig, UnsupportedAgent
from subagents.adapters.langgraph import LangGraphChild, delegation_tools


def _usage(tokens_in: int, tokens_out: int) -> dict[str, int]:
    return {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out,
    }


def _graph(answer: str = "graph says hi") -> Any:
    @langchain_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[{"name": "lookup", "args": {"q": "a"}, "id": "c-look"}],
                usage_metadata=_usage(5, 2),
            ),
            AIMessage(content=answer, usage_metadata=_usage(8, 3)),
        ]
    )

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


async def test_a_langgraph_child_completes_a_blocking_delegation() -> None:
    parent = blocking_parent(LangGraphChild(_graph(), name="graph", model_name="fake"))
    stream = parent.run_stream("plan")
    records = [record async for record in stream]
    result = stream.result

    assert result.output == "parent done"
    child = [r for r in records if r.source is not None]
    assert {r.source.kind for r in child} == {AgentStreamSourceKind.SUBAGENT}
    assert [r.kind for r in child] == [
        "run_started",
        "tool_call",
        "tool_return",
        "text_delta",
        "run_completed",
    ]
    assert child[1].payload["args"] == {"q": "a"}
    assert child[2].payload["content"] == "found a"
    assert child[3].payload == {"content": "graph says hi"}
    assert result.usage.requests == 4
    assert result.usage.input_tokens == 10 + 10 + 5 + 8


async def test_a_langgraph_child_completes_a_background_delegation(
    make_supervisor: Factory,
) -> None:
    parent = background_parent(
        LangGraphChild(_graph("graph in the background"), name="graph"), make_supervisor()
    )
    context = AgentContext()
    result = await parent.run("plan", context)

    assert result.output == "parent got: graph in the background"
    assert [r["kind"] for r in child_records(context)] == [
        "run_started",
        "tool_call",
        "tool_return",
        "text_delta",
        "run_completed",
    ]
    assert context.usage.requests == 3 + 2


async def test_a_langgraph_parent_delegates_in_the_background_and_waits(
    make_supervisor: Factory,
) -> None:
    context = AgentContext()
    tools = delegation_tools(
        [SubagentConfig("research", LangGraphChild(_graph("from the graph"), name="graph"))],
        supervisor=make_supervisor(),
        context=context,
    )

    def decide(state: MessagesState) -> dict[str, Any]:
        """The parent's scripted model: delegate, wait for the result, answer."""
        outputs = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
        if not outputs:
            calls = [
                {
                    "name": "delegate",
                    "args": {"subagent_name": "research", "prompt": "go"},
                    "id": "d",
                }
            ]
            return {"messages": [AIMessage(content="", tool_calls=calls)]}
        if len(outputs) == 1:
            args = {"attempt_id": outputs[0]["attempt_id"], "timeout_seconds": 30}
            return {
                "messages": [
                    AIMessage(
                        content="", tool_calls=[{"name": "wait_subagent", "args": args, "id": "w"}]
                    )
                ]
            }
        return {"messages": [AIMessage(content="parent got: " + outputs[1]["result"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", decide)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    final = await builder.compile().ainvoke({"messages": [("user", "plan")]})

    assert final["messages"][-1].content == "parent got: from the graph"
    delegate = next(t for t in tools if t.name == "delegate")
    assert "Call wait_subagent" in delegate.description
    assert context.usage.requests == 2  # the child graph's, delivered with the result


def test_config_refuses_a_bare_graph_naming_the_adapter() -> None:
    with pytest.raises(UnsupportedAgent) as refused:
        SubagentConfig("research", _graph())
    assert refused.value.fields["adapter"] == "subagents.adapters.langgraph.LangGraphChild"
