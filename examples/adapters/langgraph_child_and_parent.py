"""A LangGraph graph as our subagent, and our delegation tools in a LangGraph parent.
No network: LangChain's fake chat model.

Run: ``python examples/adapters/langgraph_child_and_parent.py``
(needs ``pip install '.[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from subagents import AgentBuilder, SubagentConfig, TestModel
from subagents.adapters.langgraph import LangGraphChild, delegation_tools


def child_graph() -> Any:
    model = FakeMessagesListChatModel(responses=[AIMessage(content="three facts")])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile()


def parent_graph(tools: list[Any]) -> Any:
    def decide(state: MessagesState) -> dict[str, Any]:
        outputs = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
        if not outputs:
            calls = [{"name": "delegate", "args": {"name": "research", "prompt": "go"}, "id": "d"}]
            return {"messages": [AIMessage(content="", tool_calls=calls)]}
        return {"messages": [AIMessage(content="the child said: " + outputs[0]["output"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", decide)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


async def main() -> None:
    child = LangGraphChild(child_graph(), name="graph")
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": "go"})], then="done"
            )
        )
        .subagent(SubagentConfig("research", child))
        .build()
    )
    result = await parent.run("plan")
    print("our parent:", result.output, "| requests:", result.usage.requests)

    tools = delegation_tools(
        [SubagentConfig("research", LangGraphChild(child_graph(), name="graph"))]
    )
    final = await parent_graph(tools).ainvoke({"messages": [("user", "plan")]})
    print("langgraph parent:", final["messages"][-1].content)


if __name__ == "__main__":
    asyncio.run(main())
