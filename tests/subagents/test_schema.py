"""The JSON-schema subset used to validate model-supplied tool arguments."""

from __future__ import annotations

from typing import Any

import pytest

from subagents import ToolArgumentError, ToolSchemaError
from subagents._agent._schema import compile_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Search",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 5},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "mode": {"enum": ["fast", "deep"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "strict": {"type": "boolean"},
        "version": {"const": 2},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
        "both": {"allOf": [{"type": "integer"}, {"minimum": 3}]},
    },
    "required": ["query"],
    "additionalProperties": False,
}

validate = compile_schema(SCHEMA, "search")


def test_valid_arguments_pass() -> None:
    validate(
        {
            "query": "cats",
            "limit": 10,
            "ratio": 0.5,
            "mode": "deep",
            "tags": ["a"],
            "strict": False,
            "version": 2,
            "note": None,
            "extra": {"k": 1},
            "both": 3,
        }
    )
    validate({"query": "x", "limit": 2.0})


@pytest.mark.parametrize(
    ("arguments", "path", "fragment"),
    [
        ("cats", "$", "expected object"),
        ({}, "$", "missing required field 'query'"),
        ({"query": "x", "unknown": 1}, "$.unknown", "unknown field"),
        ({"query": 5}, "$.query", "expected string"),
        ({"query": ""}, "$.query", "shorter than 1"),
        ({"query": "toolong"}, "$.query", "longer than 5"),
        ({"query": "x", "limit": 0}, "$.limit", "minimum"),
        ({"query": "x", "limit": 11}, "$.limit", "maximum"),
        ({"query": "x", "limit": True}, "$.limit", "expected integer"),
        ({"query": "x", "limit": 1.5}, "$.limit", "expected integer"),
        ({"query": "x", "ratio": 1}, "$.ratio", "exclusiveMaximum"),
        ({"query": "x", "ratio": 0}, "$.ratio", "exclusiveMinimum"),
        ({"query": "x", "mode": "slow"}, "$.mode", "not one of"),
        ({"query": "x", "tags": []}, "$.tags", "fewer than 1"),
        ({"query": "x", "tags": ["a", "b", "c"]}, "$.tags", "more than 2"),
        ({"query": "x", "tags": ["a", 2]}, "$.tags[1]", "expected string"),
        ({"query": "x", "strict": "yes"}, "$.strict", "expected boolean"),
        ({"query": "x", "version": 3}, "$.version", "expected 2"),
        ({"query": "x", "note": 4}, "$.note", "anyOf"),
        ({"query": "x", "extra": {"k": "v"}}, "$.extra.k", "expected integer"),
        ({"query": "x", "both": 2}, "$.both", "minimum"),
    ],
)
def test_bad_arguments_name_the_tool_and_the_path(arguments: Any, path: str, fragment: str) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        validate(arguments)

    assert caught.value.tool == "search"
    assert caught.value.path == path
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"$ref": "#/$defs/x"}, "#"),
        ({"type": "object", "properties": {"a": {"pattern": "^x"}}}, "#/properties/a"),
        ({"oneOf": [{"type": "string"}]}, "#"),
        ({"type": "decimal"}, "#"),
        ("string", "#"),
    ],
)
def test_unsupported_schemas_are_refused_when_compiled(schema: Any, where: str) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        compile_schema(schema, "t")

    assert caught.value.path == where


def test_an_empty_schema_accepts_anything() -> None:
    compile_schema({}, "t")({"anything": [1, None]})
    compile_schema(True, "t")(7)
