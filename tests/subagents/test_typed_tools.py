"""Typed tools: ``FunctionTool.from_function`` and ``@tool`` build the schema from type hints
and docstrings, and call the function with validated, converted arguments."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypedDict

import msgspec
import pytest

from subagents import (
    AgentBuilder,
    AgentConfigError,
    ConversationId,
    FunctionTool,
    RunId,
    TestModel,
    ToolArgumentError,
    ToolContext,
    ToolResult,
    struct_schema,
    tool,
)


class Filter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    field: str
    value: int


@dataclasses.dataclass
class Page:
    number: int
    size: int = 10


class Sort(TypedDict):
    key: str
    descending: bool


def _context() -> ToolContext:
    return ToolContext(RunId("r"), ConversationId("c"), 1)


def search(
    query: str,
    *,
    filters: list[Filter],
    mode: Literal["fast", "deep"] = "fast",
    limit: int | None = None,
    page: Page | None = None,
    sort: Sort | None = None,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Search the catalogue.

    Longer text that is not the description.

    Args:
        query: What to look for.
        filters: Field filters, all of which must hold.
        mode: How hard to look.
    """
    return {
        "query": query,
        "filters": filters,
        "mode": mode,
        "limit": limit,
        # asdict: msgspec leaves a converted dataclass's defaults on the class, so
        # to_builtins (which reads the instance) would drop them.
        "page": None if page is None else dataclasses.asdict(page),
        "sort": sort,
        "weights": weights,
    }


def test_the_schema_comes_from_the_type_hints_and_the_docstring() -> None:
    made = FunctionTool.from_function(search)
    schema = made.definition().parameters_schema

    assert made.name == "search"
    assert made.description == "Search the catalogue."
    assert schema["type"] == "object"
    assert schema["required"] == ["query", "filters"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert list(properties) == ["query", "filters", "mode", "limit", "page", "sort", "weights"]
    assert properties["query"] == {"type": "string", "description": "What to look for."}
    assert properties["filters"]["description"] == "Field filters, all of which must hold."
    assert sorted(properties["mode"]["enum"]) == ["deep", "fast"]
    assert properties["mode"]["default"] == "fast"
    assert properties["mode"]["description"] == "How hard to look."
    assert set(schema["$defs"]) == {"Filter", "Page", "Sort"}


async def test_arguments_are_validated_converted_and_passed_by_keyword() -> None:
    made = FunctionTool.from_function(search)

    result = await made.call(
        _context(),
        '{"query": "cats", "filters": [{"field": "age", "value": 3}], "page": {"number": 2},'
        ' "sort": {"key": "name", "descending": true}, "weights": {"a": 1}}',
    )

    assert result == ToolResult(
        {
            "query": "cats",
            "filters": [{"field": "age", "value": 3}],
            "mode": "fast",
            "limit": None,
            "page": {"number": 2, "size": 10},
            "sort": {"key": "name", "descending": True},
            "weights": {"a": 1.0},
        }
    )


async def test_the_function_receives_typed_values() -> None:
    seen: list[Any] = []

    def record(filters: list[Filter], page: Page) -> str:
        seen.extend([filters, page])
        return "ok"

    await FunctionTool.from_function(record).call(
        _context(), {"filters": [{"field": "a", "value": 1}], "page": {"number": 1}}
    )

    assert seen == [[Filter(field="a", value=1)], Page(number=1)]


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"filters": []}, "$"),
        ({"query": 3, "filters": []}, "$.query"),
        ({"query": "q", "filters": [{"field": "a", "value": "1"}]}, "$.filters[0].value"),
        ({"query": "q", "filters": [{"field": "a", "value": 1, "x": 0}]}, "$.filters[0].x"),
        ({"query": "q", "filters": [], "mode": "slow"}, "$.mode"),
        ({"query": "q", "filters": [], "invented": 1}, "$.invented"),
        ({"query": "q", "filters": [], "sort": {"key": "k"}}, "$.sort"),
    ],
)
async def test_bad_arguments_are_refused_naming_the_path(arguments: Any, path: str) -> None:
    made = FunctionTool.from_function(search)

    with pytest.raises(ToolArgumentError) as caught:
        await made.call(_context(), arguments)

    assert (caught.value.tool, caught.value.path) == ("search", path)


async def test_async_functions_and_the_context_injected_by_annotation() -> None:
    @tool
    async def where(ctx_whatever_name: ToolContext, label: str) -> str:
        """Say where the call runs."""
        return f"{label}@{ctx_whatever_name.run_id.as_str()}:{ctx_whatever_name.step}"

    @tool(name="shout", description="Upper-case a word.", metadata={"k": 1})
    def loud(word: str, context: ToolContext) -> ToolResult:
        return ToolResult(word.upper(), {"step": context.step})

    assert isinstance(where, FunctionTool)
    assert where.definition().parameters_schema["properties"] == {"label": {"type": "string"}}
    assert await where.call(_context(), {"label": "here"}) == ToolResult("here@r:1")
    assert (loud.name, loud.description, loud.metadata) == ("shout", "Upper-case a word.", {"k": 1})
    assert await loud.call(_context(), {"word": "hi"}) == ToolResult("HI", {"step": 1})


def test_numpy_and_rest_docstrings_describe_the_arguments() -> None:
    def numpy_style(count: int) -> int:
        """Count things.

        Parameters
        ----------
        count : int
            How many.
        """
        return count

    def rest_style(count: int) -> int:
        """Count things.

        :param count: How many.
        """
        return count

    for function in (numpy_style, rest_style):
        schema = FunctionTool.from_function(function).parameters_schema
        assert schema["properties"]["count"]["description"] == "How many."


def test_signatures_that_cannot_be_a_tool_are_refused() -> None:
    def star(*items: int) -> None: ...

    def positional(a: int, /) -> None: ...

    class Opaque:
        pass

    def opaque(thing: Opaque) -> None: ...

    for function in (star, positional, opaque):
        with pytest.raises(AgentConfigError):
            FunctionTool.from_function(function)


async def test_a_typed_tool_runs_in_an_agent_and_a_bad_call_is_a_retry_prompt() -> None:
    calls: list[int] = []

    @tool
    def add(a: int, b: int = 1) -> int:
        """Add two numbers."""
        calls.append(a + b)
        return a + b

    model = TestModel.with_tool_calls([("add", {"a": "two"}), ("add", {"a": 2, "b": 3})], "5")
    agent = AgentBuilder(model).tool(add).build()

    result = await agent.run("add")

    assert result.output == "5"
    assert calls == [5]
    retry = [m for m in result.messages if "is not of type 'integer'" in repr(m)]
    assert retry


class Node(msgspec.Struct, kw_only=True):
    name: str
    children: list[Node] = []


async def test_a_recursive_struct_keeps_its_definition() -> None:
    schema = struct_schema(Node)

    assert schema["$defs"]["Node"]["properties"]["name"] == {"type": "string"}

    def count(tree: Node) -> int:
        return 1 + sum(count(child) for child in tree.children)

    made = FunctionTool.from_function(count)
    tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    assert await made.call(_context(), {"tree": tree}) == ToolResult(3)
    with pytest.raises(ToolArgumentError) as caught:
        await made.call(_context(), {"tree": {"name": "a", "children": [{"name": 1}]}})
    assert caught.value.path == "$.tree.children[0].name"
