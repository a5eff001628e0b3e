"""JSON Schema 2020-12 validation of model-supplied tool arguments."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import pydantic
import pytest

from subagents import ToolArgumentError, ToolSchemaError
from subagents._agent._schema import (
    MAX_ARGUMENT_BYTES,
    MAX_ARGUMENT_DEPTH,
    check_argument_limits,
    compile_schema,
)

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
        ("cats", "$", "is not of type 'object'"),
        ({}, "$", "'query' is a required property"),
        ({"query": "x", "unknown": 1}, "$.unknown", "'unknown' was unexpected"),
        ({"query": 5}, "$.query", "is not of type 'string'"),
        ({"query": ""}, "$.query", "should be non-empty"),
        ({"query": "toolong"}, "$.query", "is too long"),
        ({"query": "x", "limit": 0}, "$.limit", "less than the minimum of 1"),
        ({"query": "x", "limit": 11}, "$.limit", "greater than the maximum of 10"),
        ({"query": "x", "limit": True}, "$.limit", "is not of type 'integer'"),
        ({"query": "x", "limit": 1.5}, "$.limit", "is not of type 'integer'"),
        ({"query": "x", "ratio": 1}, "$.ratio", "greater than or equal to the maximum of 1"),
        ({"query": "x", "ratio": 0}, "$.ratio", "less than or equal to the minimum of 0"),
        ({"query": "x", "mode": "slow"}, "$.mode", "not one of"),
        ({"query": "x", "tags": []}, "$.tags", "should be non-empty"),
        ({"query": "x", "tags": ["a", "b", "c"]}, "$.tags", "is too long"),
        ({"query": "x", "tags": ["a", 2]}, "$.tags[1]", "is not of type 'string'"),
        ({"query": "x", "strict": "yes"}, "$.strict", "is not of type 'boolean'"),
        ({"query": "x", "version": 3}, "$.version", "2 was expected"),
        ({"query": "x", "note": 4}, "$.note", "not valid under any of the given schemas"),
        ({"query": "x", "extra": {"k": "v"}}, "$.extra.k", "is not of type 'integer'"),
        ({"query": "x", "both": 2}, "$.both", "less than the minimum of 3"),
    ],
)
def test_bad_arguments_name_the_tool_and_the_path(arguments: Any, path: str, fragment: str) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        validate(arguments)

    assert caught.value.tool == "search"
    assert caught.value.path == path
    assert fragment in str(caught.value)


def test_an_empty_schema_accepts_anything() -> None:
    compile_schema({}, "t")({"anything": [1, None]})
    compile_schema(True, "t")(7)


# -- schemas as libraries generate them ---------------------------------------------------------


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(pattern=r"^\d{5}$")


class Customer(pydantic.BaseModel):
    name: str = pydantic.Field(min_length=1)
    age: int = pydantic.Field(ge=0, le=150)
    email: str | None = None
    addresses: list[Address]
    tier: Literal["free", "pro"] = "free"


def test_a_pydantic_models_schema_is_accepted_and_enforced() -> None:
    schema = Customer.model_json_schema()
    assert "$defs" in schema  # the nested model is a local reference
    check = compile_schema(schema, "customer")

    check({"name": "Ada", "age": 36, "addresses": [{"street": "Main", "zip_code": "12345"}]})
    for arguments, path in [
        (
            {"name": "Ada", "age": 36, "addresses": [{"street": "x", "zip_code": "12a"}]},
            "$.addresses[0].zip_code",
        ),
        ({"name": "Ada", "age": -1, "addresses": []}, "$.age"),
        ({"name": "Ada", "age": 3, "addresses": [], "tier": "gold"}, "$.tier"),
        (
            {"name": "Ada", "age": 3, "addresses": [{"street": 1, "zip_code": "12345"}]},
            "$.addresses[0].street",
        ),
    ]:
        with pytest.raises(ToolArgumentError) as caught:
            check(arguments)
        assert caught.value.path == path


class Point(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    x: int
    y: int = 0


class Shape(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    label: Annotated[str, msgspec.Meta(pattern="^[a-z]+$")]
    points: list[Point]
    scale: Annotated[float, msgspec.Meta(gt=0)] = 1.0


def test_a_msgspec_structs_schema_is_accepted_and_enforced() -> None:
    schema = msgspec.json.schema(Shape)
    assert schema["$ref"].startswith("#/$defs/")
    check = compile_schema(schema, "shape")

    check({"label": "tri", "points": [{"x": 1}, {"x": 2, "y": 3}]})
    for arguments, path in [
        ({"label": "Tri", "points": []}, "$.label"),
        ({"label": "tri", "points": [{"x": "1"}]}, "$.points[0].x"),
        ({"label": "tri", "points": [{"x": 1, "z": 0}]}, "$.points[0].z"),
        ({"label": "tri", "points": [], "scale": 0}, "$.scale"),
    ]:
        with pytest.raises(ToolArgumentError) as caught:
            check(arguments)
        assert caught.value.path == path


HAND: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"},
        "by_id": {
            "type": "object",
            "properties": {"id": {"$ref": "#/$defs/id"}},
            "required": ["id"],
            "additionalProperties": False,
        },
        "by_email": {
            "type": "object",
            "properties": {"email": {"type": "string", "format": "email"}},
            "required": ["email"],
            "additionalProperties": False,
        },
    },
    "type": "object",
    "properties": {
        "who": {"oneOf": [{"$ref": "#/$defs/by_id"}, {"$ref": "#/$defs/by_email"}]},
        "when": {"type": "string", "format": "date"},
        "count": {"type": "integer", "multipleOf": 5, "maximum": 100},
    },
    "required": ["who"],
}


def test_a_hand_schema_with_defs_one_of_pattern_and_formats_is_enforced() -> None:
    check = compile_schema(HAND, "lookup")

    check({"who": {"id": "AB-12"}, "when": "2026-12-01", "count": 15})
    check({"who": {"email": "ada@example.com"}})
    for arguments, path, fragment in [
        # best_match reports the failure inside the alternative that came closest.
        ({"who": {"id": "ab-12"}}, "$.who.id", "does not match"),
        ({"who": {"email": "not an address"}}, "$.who.email", "is not a 'email'"),
        ({"who": {"id": "AB-1", "email": "a@b.c"}}, "$.who", "not valid under any"),
        ({"who": {"id": "AB-1"}, "when": "yesterday"}, "$.when", "is not a 'date'"),
        ({"who": {"id": "AB-1"}, "count": 7}, "$.count", "multiple of 5"),
        ({"who": {"id": "AB-1"}, "count": 105}, "$.count", "maximum of 100"),
    ]:
        with pytest.raises(ToolArgumentError) as caught:
            check(arguments)
        assert (caught.value.tool, caught.value.path) == ("lookup", path)
        assert fragment in caught.value.message


@pytest.mark.parametrize(
    ("schema", "where", "fragment"),
    [
        ("string", "#", "must be an object or a boolean"),
        ({"type": "decimal"}, "#/type", "is invalid"),
        ({"properties": {"a": {"minLength": -1}}}, "#/properties/a/minLength", "is invalid"),
        ({"properties": {"a": {"pattern": 3}}}, "#/properties/a/pattern", "is invalid"),
        ({"$ref": "#/$defs/missing"}, "#/$ref", "does not exist"),
        ({"$ref": "https://example.com/schema.json"}, "#/$ref", "never fetched"),
        ({"properties": {"a": {"$ref": "file:///etc/passwd"}}}, "#/properties/a/$ref", "local"),
        ({"$defs": {"x": {"$ref": "other.json#/x"}}}, "#/$defs/x/$ref", "local"),
        # A property named like a data keyword is still a schema.
        ({"properties": {"default": {"$ref": "http://h/s"}}}, "#/properties/default/$ref", "local"),
    ],
)
def test_an_unusable_schema_is_refused_when_compiled_naming_the_schema_path(
    schema: Any, where: str, fragment: str
) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        compile_schema(schema, "t")

    assert (caught.value.tool, caught.value.path) == ("t", where)
    assert fragment in caught.value.message


def test_a_false_schema_refuses_everything() -> None:
    with pytest.raises(ToolArgumentError):
        compile_schema(False, "t")({})


def test_arguments_past_the_depth_or_size_limit_are_refused_naming_the_path() -> None:
    deep: Any = 1
    for _ in range(MAX_ARGUMENT_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ToolArgumentError, match="nested too deeply") as caught:
        check_argument_limits({"a": deep}, "t")
    assert caught.value.path.startswith("$.a[0][0]")

    with pytest.raises(ToolArgumentError, match="too large") as too_big:
        check_argument_limits({"text": "x" * MAX_ARGUMENT_BYTES}, "t")
    assert too_big.value.path == "$.text"

    check_argument_limits({"a": [[1]], "text": "x" * 1000}, "t")


def test_references_resolve_against_a_root_id_and_data_that_looks_like_a_ref_is_data() -> None:
    rooted = compile_schema(
        {
            "$id": "https://example.com/tool.json",
            "$defs": {"n": {"type": "integer"}},
            "properties": {"a": {"$ref": "#/$defs/n"}},
        },
        "t",
    )
    rooted({"a": 1})
    with pytest.raises(ToolArgumentError) as caught:
        rooted({"a": "x"})
    assert caught.value.path == "$.a"

    compile_schema({"enum": [{"$ref": "https://example.com/x"}]}, "t")(
        {"$ref": "https://example.com/x"}
    )


def test_a_reference_under_a_nested_id_that_does_not_resolve_is_a_schema_error() -> None:
    check = compile_schema(
        {"properties": {"a": {"$id": "https://example.com/a.json", "$ref": "#/missing"}}}, "t"
    )

    with pytest.raises(ToolSchemaError):
        check({"a": "x"})
