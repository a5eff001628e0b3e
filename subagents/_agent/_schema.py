"""A small JSON-schema subset, compiled once per tool into a validator closure.

Supported keywords: ``type`` (one or a list), ``properties``, ``required``,
``additionalProperties`` (bool or schema), ``items``, ``enum``, ``const``,
``minLength``/``maxLength``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum``, ``minItems``/``maxItems``,
``anyOf``, ``allOf``. Annotations (``title``, ``description``, ``default``,
``examples``, ``format``, ...) are accepted and not enforced. Anything else
(``$ref``, ``oneOf``, ``pattern``, ...) is refused at compile time with
:class:`ToolSchemaError`, so a schema is never silently half-enforced.

A compiled validator raises :class:`ToolArgumentError` whose ``path`` is the
JSON path of the first offending value (``$.items[2].name``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import ToolArgumentError, ToolSchemaError

Validator = Callable[[Any, str], None]

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "format",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_SUPPORTED = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "anyOf",
    "allOf",
}


def _is_integer(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list | tuple),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def compile_schema(schema: Any, tool: str) -> Callable[[Any], None]:
    """Compile ``schema`` for ``tool``; the result raises ``ToolArgumentError`` on bad input."""
    check = _compile(schema, tool, "#")

    def validate(value: Any) -> None:
        check(value, "$")

    return validate


def _fail(tool: str, path: str, message: str) -> ToolArgumentError:
    return ToolArgumentError(
        f"invalid arguments for tool {tool!r} at {path}: {message}", tool=tool, path=path
    )


def _compile(schema: Any, tool: str, where: str) -> Validator:
    if schema is True or schema == {}:
        return lambda value, path: None
    if not isinstance(schema, dict):
        raise ToolSchemaError(
            f"schema for tool {tool!r} at {where} must be an object", tool=tool, path=where
        )
    unsupported = sorted(set(schema) - _SUPPORTED)
    if unsupported:
        raise ToolSchemaError(
            f"schema for tool {tool!r} at {where} uses unsupported keywords {unsupported}",
            tool=tool,
            path=where,
        )
    checks = [
        *_compile_type(schema, tool, where),
        *_compile_values(schema, tool),
        *_compile_bounds(schema, tool),
    ]
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        checks.append(_compile_object(schema, tool, where))
    checks.extend(_compile_subschemas(schema, tool, where))
    if len(checks) == 1:
        return checks[0]

    def check_all(value: Any, path: str) -> None:
        for check in checks:
            check(value, path)

    return check_all


def _compile_type(schema: dict[str, Any], tool: str, where: str) -> list[Validator]:
    if "type" not in schema:
        return []
    types = schema["type"]
    names = [types] if isinstance(types, str) else list(types)
    unknown = [n for n in names if n not in _TYPE_CHECKS]
    if unknown:
        raise ToolSchemaError(
            f"schema for tool {tool!r} at {where} has unknown type {unknown}",
            tool=tool,
            path=where,
        )
    predicates = [_TYPE_CHECKS[n] for n in names]
    expected = " or ".join(names)

    def check_type(value: Any, path: str) -> None:
        for predicate in predicates:
            if predicate(value):
                return
        raise _fail(tool, path, f"expected {expected}, got {type(value).__name__}")

    return [check_type]


def _compile_values(schema: dict[str, Any], tool: str) -> list[Validator]:
    """``enum`` and ``const``."""
    checks: list[Validator] = []
    if "enum" in schema:
        options = list(schema["enum"])

        def check_enum(value: Any, path: str) -> None:
            if value not in options:
                raise _fail(tool, path, f"{value!r} is not one of {options!r}")

        checks.append(check_enum)
    if "const" in schema:
        constant = schema["const"]

        def check_const(value: Any, path: str) -> None:
            if value != constant:
                raise _fail(tool, path, f"expected {constant!r}, got {value!r}")

        checks.append(check_const)
    return checks


def _compile_subschemas(schema: dict[str, Any], tool: str, where: str) -> list[Validator]:
    """``items``, ``anyOf`` and ``allOf``."""
    checks: list[Validator] = []
    if "items" in schema:
        item_check = _compile(schema["items"], tool, f"{where}/items")

        def check_items(value: Any, path: str) -> None:
            if isinstance(value, list | tuple):
                for index, item in enumerate(value):
                    item_check(item, f"{path}[{index}]")

        checks.append(check_items)
    if "anyOf" in schema:
        alternatives = [
            _compile(s, tool, f"{where}/anyOf/{i}") for i, s in enumerate(schema["anyOf"])
        ]

        def check_any(value: Any, path: str) -> None:
            for alternative in alternatives:
                try:
                    alternative(value, path)
                except ToolArgumentError:
                    continue
                return
            raise _fail(tool, path, "matches none of the anyOf alternatives")

        checks.append(check_any)
    if "allOf" in schema:
        checks.extend(
            _compile(s, tool, f"{where}/allOf/{i}") for i, s in enumerate(schema["allOf"])
        )
    return checks


def _compile_bounds(schema: dict[str, Any], tool: str) -> list[Validator]:
    checks: list[Validator] = []
    length_bounds = (schema.get("minLength"), schema.get("maxLength"))
    if length_bounds != (None, None):
        low, high = length_bounds

        def check_length(value: Any, path: str) -> None:
            if isinstance(value, str):
                if low is not None and len(value) < low:
                    raise _fail(tool, path, f"shorter than {low} characters")
                if high is not None and len(value) > high:
                    raise _fail(tool, path, f"longer than {high} characters")

        checks.append(check_length)
    item_bounds = (schema.get("minItems"), schema.get("maxItems"))
    if item_bounds != (None, None):
        low_items, high_items = item_bounds

        def check_count(value: Any, path: str) -> None:
            if isinstance(value, list | tuple):
                if low_items is not None and len(value) < low_items:
                    raise _fail(tool, path, f"fewer than {low_items} items")
                if high_items is not None and len(value) > high_items:
                    raise _fail(tool, path, f"more than {high_items} items")

        checks.append(check_count)
    numeric = [
        (key, schema[key])
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        if key in schema
    ]
    if numeric:

        def check_number(value: Any, path: str) -> None:
            if not isinstance(value, int | float) or isinstance(value, bool):
                return
            for key, bound in numeric:
                if (
                    (key == "minimum" and value < bound)
                    or (key == "maximum" and value > bound)
                    or (key == "exclusiveMinimum" and value <= bound)
                    or (key == "exclusiveMaximum" and value >= bound)
                ):
                    raise _fail(tool, path, f"{value!r} violates {key} {bound!r}")

        checks.append(check_number)
    return checks


def _compile_object(schema: dict[str, Any], tool: str, where: str) -> Validator:
    properties = {
        name: _compile(sub, tool, f"{where}/properties/{name}")
        for name, sub in dict(schema.get("properties", {})).items()
    }
    required = tuple(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    extra_check: Validator | None = None
    if isinstance(extra, dict):
        extra_check = _compile(extra, tool, f"{where}/additionalProperties")
    forbid_extra = extra is False

    def check_object(value: Any, path: str) -> None:
        if not isinstance(value, dict):
            return
        for name in required:
            if name not in value:
                raise _fail(tool, path, f"missing required field {name!r}")
        for name, item in value.items():
            check = properties.get(name)
            if check is not None:
                check(item, f"{path}.{name}")
            elif forbid_extra:
                raise _fail(tool, f"{path}.{name}", f"unknown field {name!r}")
            elif extra_check is not None:
                extra_check(item, f"{path}.{name}")

    return check_object
