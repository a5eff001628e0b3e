"""Tool-argument validation: JSON Schema 2020-12, compiled once per tool.

:func:`compile_schema` checks a tool's schema against the 2020-12 meta-schema
and builds a ``jsonschema`` :class:`~jsonschema.Draft202012Validator` for it
once, when the tool is constructed. Everything 2020-12 defines is enforced:
local ``$ref``/``$defs``, ``oneOf``/``anyOf``/``allOf``, ``pattern``, numeric
and length bounds, and ``format`` (through the validator's format checker;
formats it does not know are annotations, as the specification says). A
``$schema`` naming another draft does not change the dialect.

Refused when compiled, with :class:`ToolSchemaError` naming the tool and the
schema path (a JSON pointer such as ``#/properties/a``): a schema that is not
an object or a boolean, one the meta-schema rejects, a ``$ref`` that is not
local (``http:``, ``file:``, a relative file name: never fetched) and a local
``$ref`` that points nowhere.

A compiled validator raises :class:`ToolArgumentError` whose ``path`` is the
JSON path of the offending value (``$.items[2].name``; an unknown field of an
object with ``additionalProperties: false`` is named itself, ``$.unknown``).
Of several errors, the most relevant one (``jsonschema``'s ``best_match``) is
reported.

:func:`check_argument_limits` is what a validator does not enforce: every
tool's arguments are refused past :data:`MAX_ARGUMENT_DEPTH` levels of
nesting or :data:`MAX_ARGUMENT_BYTES` of JSON text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from .._errors import ToolArgumentError, ToolSchemaError

#: Deepest nesting of arrays and objects accepted in a tool's arguments.
MAX_ARGUMENT_DEPTH = 64
#: Largest accepted arguments, in bytes of JSON text (approximated for decoded values).
MAX_ARGUMENT_BYTES = 1024 * 1024

_REF_KEYS = ("$ref", "$dynamicRef")
_INSTANCE_DATA = frozenset({"enum", "const", "default", "examples"})
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def compile_schema(schema: Any, tool: str) -> Callable[[Any], None]:
    """Check ``schema`` for ``tool`` and compile it.

    The result raises :class:`ToolArgumentError` on arguments the schema
    rejects; this call raises :class:`ToolSchemaError` on a schema that
    cannot be used (see the module docstring). Compiling is the expensive
    part; the validator is reused for every call.
    """
    if not isinstance(schema, dict | bool):
        raise ToolSchemaError(
            f"schema for tool {tool!r} at # must be an object or a boolean", tool=tool, path="#"
        )
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = _pointer(error.absolute_path)
        raise ToolSchemaError(
            f"schema for tool {tool!r} at {where} is invalid: {error.message}",
            tool=tool,
            path=where,
        ) from error
    registry = _check_references(schema, tool)
    validator = Draft202012Validator(
        schema, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
    )

    def validate(value: Any) -> None:
        try:
            error = best_match(validator.iter_errors(value))
        except referencing.exceptions.Unresolvable as unresolvable:
            # Only a reference under a nested $id can get here (the others were resolved
            # when compiling); it is never fetched.
            raise ToolSchemaError(
                f"schema for tool {tool!r} has a reference that cannot be resolved "
                f"locally: {unresolvable}",
                tool=tool,
                path="#",
            ) from unresolvable
        if error is not None:
            path = _value_path(error)
            raise ToolArgumentError(
                f"invalid arguments for tool {tool!r} at {path}: {error.message}",
                tool=tool,
                path=path,
            )

    return validate


def _check_references(schema: dict[str, Any] | bool, tool: str) -> referencing.Registry[Any]:
    """Refuse every non-local ``$ref`` and every local one that does not resolve."""
    resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
    # A registry without a retriever: any reference outside the schema is unresolvable,
    # never fetched (the non-local ones are refused below before validation can try).
    registry: referencing.Registry[Any] = referencing.Registry().with_resource("", resource)
    resolver = registry.resolver(base_uri="")
    for where, ref, scoped in _references(schema, "#", scoped=False):
        if not ref.startswith("#"):
            raise ToolSchemaError(
                f"schema for tool {tool!r} at {where} references {ref!r}: only local "
                "references ('#...') are allowed, remote schemas are never fetched",
                tool=tool,
                path=where,
            )
        if scoped:
            continue  # relative to a nested $id: resolved (lazily) against that resource
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as error:
            raise ToolSchemaError(
                f"schema for tool {tool!r} at {where} references {ref!r}, which does not exist",
                tool=tool,
                path=where,
            ) from error
    return registry


def _references(node: Any, where: str, *, scoped: bool) -> Iterator[tuple[str, str, bool]]:
    """Every ``$ref``/``$dynamicRef`` under ``node``: (schema path, reference, under an $id).

    Instance data (``enum``, ``const``, ``default``, ``examples``) is not
    searched; the members of ``properties``, ``$defs`` and the like are
    schemas whatever they are named.
    """
    if isinstance(node, list):
        for index, child in enumerate(node):
            yield from _references(child, f"{where}/{index}", scoped=scoped)
        return
    if not isinstance(node, dict):
        return
    scoped = scoped or (where != "#" and isinstance(node.get("$id"), str))
    for key in _REF_KEYS:
        ref = node.get(key)
        if isinstance(ref, str):
            yield f"{where}/{_escape(key)}", ref, scoped
    for key, child in node.items():
        path = f"{where}/{_escape(str(key))}"
        if key in _REF_KEYS or key in _INSTANCE_DATA:
            continue
        if key in _SCHEMA_MAPS and isinstance(child, dict):
            for name, member in child.items():
                yield from _references(member, f"{path}/{_escape(str(name))}", scoped=scoped)
        else:
            yield from _references(child, path, scoped=scoped)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pointer(parts: Any) -> str:
    return "#" + "".join(f"/{_escape(str(part))}" for part in parts)


def _value_path(error: jsonschema.ValidationError) -> str:
    """The JSON path of the offending value; an unknown field names itself."""
    path: str = error.json_path
    schema = error.schema
    if (
        error.validator == "additionalProperties"
        and isinstance(error.instance, dict)
        and isinstance(schema, dict)
        and not schema.get("patternProperties")
    ):
        declared = schema.get("properties", {})
        unknown = [key for key in error.instance if key not in declared]
        if len(unknown) == 1:
            return _child_path(path, str(unknown[0]))
    return path


def _child_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def check_argument_limits(value: Any, tool: str) -> None:
    """Refuse arguments nested deeper than :data:`MAX_ARGUMENT_DEPTH` or larger than
    :data:`MAX_ARGUMENT_BYTES` (strings by length, other scalars by a few bytes each).

    Raises :class:`ToolArgumentError` naming the JSON path where the limit was
    passed. Iterative, so hostile nesting cannot exhaust the stack.
    """
    size = 0
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            raise ToolArgumentError(
                f"invalid arguments for tool {tool!r} at {path}: nested too deeply "
                f"(over {MAX_ARGUMENT_DEPTH} levels)",
                tool=tool,
                path=path,
            )
        if isinstance(node, dict):
            size += 2
            for key, child in node.items():
                size += len(str(key)) + 3
                stack.append((child, _child_path(path, str(key)), depth + 1))
        elif isinstance(node, list | tuple):
            size += 2
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(node))
        else:
            size += len(node) + 2 if isinstance(node, str | bytes) else 8
        if size > MAX_ARGUMENT_BYTES:
            raise ToolArgumentError(
                f"invalid arguments for tool {tool!r} at {path}: too large "
                f"(over {MAX_ARGUMENT_BYTES} bytes)",
                tool=tool,
                path=path,
            )
