"""Tools: the callable units a model can invoke, their registry and call context.

A tool validates the model's raw arguments (a JSON object or its text) against
a validator compiled once, when the tool is constructed, then runs. Bad
arguments raise :class:`ToolArgumentError` naming the tool and the JSON path;
inside a run, the loop turns any :class:`ToolError` into a retry prompt for the
model, bounded by the agent's retry limit.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

import docstring_parser
import msgspec

from .._errors import AgentConfigError, ToolArgumentError
from ._deps import Dependencies
from ._ids import ConversationId, RunId
from ._models import ToolDefinition
from ._schema import MAX_ARGUMENT_BYTES, check_argument_limits, compile_schema
from ._sync import run_blocking

T = TypeVar("T")
_S = TypeVar("_S", bound=msgspec.Struct)

_AT_PATH = re.compile(r" - at `([^`]*)`$")
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]*)`")


def convert_arguments(tool: str, arguments: Any, kind: type[_S]) -> _S:
    """Convert validated JSON ``arguments`` into ``kind`` (``msgspec.convert``).

    Raises :class:`ToolArgumentError` naming the tool and the JSON path of the
    offending value (an unknown field is named itself, ``$.field``).
    """
    try:
        return msgspec.convert(arguments, kind)
    except msgspec.ValidationError as error:
        message = str(error)
        at = _AT_PATH.search(message)
        unknown = _UNKNOWN_FIELD.search(message)
        path = at.group(1) if at else (f"$.{unknown.group(1)}" if unknown else "$")
        raise ToolArgumentError(
            f"invalid arguments for tool {tool!r} at {path}: {message}", tool=tool, path=path
        ) from error


def struct_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a Struct's fields as a tool's ``parameters_schema``.

    ``msgspec.json.schema`` puts the Struct itself under ``$defs`` and refers
    to it; a tool's parameters must be an object at the top, so the Struct's
    own definition is inlined (without its ``title``) and any other
    definitions it uses stay under ``$defs``. Each call returns a new dict
    (the caller may change it); the schema is generated once per Struct (the
    host builds every run's tools anew, and generating it costs far more
    than copying it).
    """
    schema: dict[str, Any] = msgspec.json.decode(_struct_schema_json(kind))
    return schema


@functools.lru_cache(maxsize=256)
def _struct_schema_json(kind: type[msgspec.Struct]) -> bytes:
    return msgspec.json.encode(_generate_struct_schema(kind))


def _generate_struct_schema(kind: type[msgspec.Struct]) -> dict[str, Any]:
    generated = msgspec.json.schema(kind)
    definitions = dict(generated.get("$defs", {}))
    ref = generated.get("$ref")
    if not isinstance(ref, str):
        return generated
    name = ref.removeprefix("#/$defs/")
    top = dict(definitions.pop(name))
    top.pop("title", None)
    if ref in msgspec.json.encode([top, definitions]).decode():
        definitions[name] = generated["$defs"][name]  # a recursive Struct refers to itself
    if definitions:
        top["$defs"] = definitions
    return top


class ToolResult:
    """What a tool returns: JSON ``content`` for the model, plus ``metadata`` for the host."""

    __slots__ = ("content", "metadata")

    def __init__(self, content: Any, metadata: Mapping[str, Any] | None = None) -> None:
        self.content = content
        self.metadata: dict[str, Any] = dict(metadata) if metadata else {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolResult):
            return NotImplemented
        return self.content == other.content and self.metadata == other.metadata

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ToolResult({self.content!r}, {self.metadata!r})"


class ToolContext:
    """Per-call context handed to a tool: run and conversation ids, step, dependencies.

    During a run, ``dependencies`` hold the run's :class:`AgentContext`, its
    :class:`AgentContextHandle` and, when streaming, the
    :class:`AgentStreamSink`, on top of the context's own dependencies.
    """

    __slots__ = ("conversation_id", "dependencies", "run_id", "step", "tool_call_id")

    def __init__(
        self,
        run_id: RunId,
        conversation_id: ConversationId,
        step: int,
        *,
        dependencies: Dependencies | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.step = step
        self.dependencies = Dependencies() if dependencies is None else dependencies
        self.tool_call_id = tool_call_id

    def with_dependencies(self, dependencies: Dependencies) -> ToolContext:
        """A copy of this context carrying ``dependencies``."""
        return ToolContext(
            self.run_id,
            self.conversation_id,
            self.step,
            dependencies=dependencies,
            tool_call_id=self.tool_call_id,
        )

    def dependency(self, key: type[T]) -> T | None:
        return self.dependencies.get(key)


class Tool:
    """Base class of every tool.

    Subclasses set ``name``, ``description``, ``parameters_schema`` and
    implement :meth:`validate` and :meth:`invoke`. :meth:`call` validates then
    invokes; it is awaited on the loop running the agent.
    """

    name: str
    description: str | None
    parameters_schema: dict[str, Any]
    metadata: dict[str, Any]

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, parameters_schema=self.parameters_schema
        )

    def decode_arguments(self, arguments: Any) -> Any:
        """Parse JSON text into a value (other values pass through) and check its limits.

        Arguments past :data:`MAX_ARGUMENT_BYTES` of text or
        :data:`MAX_ARGUMENT_DEPTH` levels of nesting raise
        :class:`ToolArgumentError`, whatever the tool's schema says.
        """
        if isinstance(arguments, str | bytes) and len(arguments) > MAX_ARGUMENT_BYTES:
            raise ToolArgumentError(
                f"invalid arguments for tool {self.name!r} at $: too large "
                f"(over {MAX_ARGUMENT_BYTES} bytes of JSON text)",
                tool=self.name,
                path="$",
            )
        value = self._decode_text(arguments)
        check_argument_limits(value, self.name)
        return value

    def _decode_text(self, arguments: Any) -> Any:
        if isinstance(arguments, str | bytes):
            try:
                return msgspec.json.decode(arguments) if arguments else {}
            except msgspec.DecodeError as error:
                raise ToolArgumentError(
                    f"arguments for tool {self.name!r} are not valid JSON: {error}",
                    tool=self.name,
                    path="$",
                ) from error
            except RecursionError:
                # msgspec gives up on very deep nesting with RecursionError, not DecodeError.
                raise ToolArgumentError(
                    f"arguments for tool {self.name!r} are nested too deeply",
                    tool=self.name,
                    path="$",
                ) from None
        return arguments

    def validate(self, arguments: Any) -> Any:
        """Return the validated arguments or raise :class:`ToolArgumentError`."""
        raise NotImplementedError

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        """Run the tool on already-validated arguments."""
        raise NotImplementedError

    async def call(self, context: ToolContext, arguments: Any) -> ToolResult:
        """Validate ``arguments`` (a dict or JSON text) and run the tool."""
        return await self.invoke(context, self.validate(self.decode_arguments(arguments)))

    def call_sync(self, context: ToolContext, arguments: Any) -> ToolResult:
        """``call`` on a fresh event loop, for scripts. Refused inside a running loop."""
        return run_blocking(self.call(context, arguments))


ToolFunction = Callable[[ToolContext, Any], Any]


class FunctionTool(Tool):
    """A tool from a function ``fn(context, args)``, sync or async.

    ``args`` is the validated JSON object. ``fn`` may return a
    :class:`ToolResult` or any JSON value (wrapped into one). It runs on the
    event loop running the agent (a sync ``fn`` blocks that loop while it
    runs: keep it short or make it async). Raise :class:`ToolError` to have
    the model retry; any other exception fails the run. The schema is
    compiled once here; an unusable schema raises :class:`ToolSchemaError`
    now rather than being half-enforced later.

    :meth:`from_function` (and the :func:`tool` decorator) build a typed tool
    from an annotated function instead: the schema comes from its type hints
    and docstring, and it is called with converted keyword arguments.
    """

    def __init__(
        self,
        name: str,
        description: str | None,
        parameters_schema: dict[str, Any],
        fn: ToolFunction,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if not name:
            raise AgentConfigError("a tool needs a non-empty name")
        self.name = name
        self.description = description
        self.parameters_schema = parameters_schema
        self.metadata = dict(metadata) if metadata else {}
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)
        self._validate = compile_schema(parameters_schema, name)
        self._arguments: type[msgspec.Struct] | None = None

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> FunctionTool:
        """A typed tool from an annotated function, sync or async.

        Every parameter is a tool argument, typed by its annotation (anything
        ``msgspec`` can decode: Structs, dataclasses, TypedDicts, ``Literal``,
        optionals, lists, dicts, ...) and optional when it has a default;
        except a parameter annotated :class:`ToolContext`, which receives the
        call's context (found by annotation, whatever its name). The
        docstring's summary is the description (unless ``description`` is
        given) and its ``Args:``/``Parameters`` section (Google, NumPy or
        reST) describes each argument. ``name`` defaults to ``fn.__name__``.

        The model's arguments are validated against the schema, converted
        (``msgspec.convert``: a Struct-typed argument arrives as that Struct)
        and passed by keyword. The return value, unless a
        :class:`ToolResult`, is converted to JSON values
        (``msgspec.to_builtins``). Raises :class:`AgentConfigError` for a
        function whose signature cannot be a tool (``*args``, ``**kwargs``,
        positional-only parameters, a type ``msgspec`` cannot describe).
        """
        tool_name = name if name else str(getattr(fn, "__name__", ""))
        spec = _FunctionSpec.inspect(fn, tool_name)
        made = cls(
            tool_name,
            spec.description if description is None else description,
            spec.schema,
            spec.call,
            metadata=metadata,
        )
        made._arguments = spec.arguments
        return made

    def with_metadata(self, metadata: Mapping[str, Any]) -> FunctionTool:
        """A copy of this tool with ``metadata`` merged in (e.g. ``auto_inherit``)."""
        clone = FunctionTool.__new__(FunctionTool)
        clone.__dict__.update(self.__dict__)
        clone.metadata = {**self.metadata, **metadata}
        return clone

    def validate(self, arguments: Any) -> Any:
        self._validate(arguments)
        if self._arguments is not None:
            return convert_arguments(self.name, arguments, self._arguments)
        return arguments

    async def invoke(self, context: ToolContext, arguments: Any) -> ToolResult:
        result = self._fn(context, arguments)
        if self._is_async or inspect.isawaitable(result):
            result = await result
        if isinstance(result, ToolResult):
            return result
        return ToolResult(result if self._arguments is None else msgspec.to_builtins(result))

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"


class _FunctionSpec:
    """What :meth:`FunctionTool.from_function` reads off a function."""

    __slots__ = ("arguments", "call", "description", "schema")

    def __init__(
        self,
        arguments: type[msgspec.Struct],
        schema: dict[str, Any],
        description: str | None,
        call: ToolFunction,
    ) -> None:
        self.arguments = arguments
        self.schema = schema
        self.description = description
        self.call = call

    @classmethod
    def inspect(cls, fn: Callable[..., Any], tool: str) -> _FunctionSpec:
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
            signature = inspect.signature(fn)
        except (NameError, TypeError, ValueError) as error:
            raise AgentConfigError(
                f"tool {tool!r}: cannot read the signature of {fn!r}: {error}", tool=tool
            ) from error
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        context_names: list[str] = []
        for parameter in signature.parameters.values():
            hint = hints.get(parameter.name, Any)
            if isinstance(hint, type) and issubclass(hint, ToolContext):
                context_names.append(parameter.name)
                continue
            if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                raise AgentConfigError(
                    f"tool {tool!r}: parameter {parameter.name!r} is {parameter.kind.description}; "
                    "a tool's arguments are passed by keyword",
                    tool=tool,
                )
            if parameter.default is parameter.empty:
                fields.append((parameter.name, hint))
            else:
                fields.append((parameter.name, hint, parameter.default))
        docs = docstring_parser.parse(inspect.getdoc(fn) or "")
        arguments, schema = _arguments_type(tool, fields, docs)
        return cls(arguments, schema, docs.short_description, _caller(fn, context_names))


def _arguments_type(
    tool: str,
    fields: list[tuple[str, Any] | tuple[str, Any, Any]],
    docs: docstring_parser.Docstring,
) -> tuple[type[msgspec.Struct], dict[str, Any]]:
    """The arguments Struct of a typed tool and its schema, with the docstring's descriptions."""
    try:
        arguments = msgspec.defstruct(
            f"{tool}_arguments", fields, kw_only=True, forbid_unknown_fields=True
        )
        schema = struct_schema(arguments)
    except (TypeError, ValueError) as error:
        raise AgentConfigError(
            f"tool {tool!r}: cannot build an argument schema: {error}", tool=tool
        ) from error
    properties = schema.get("properties", {})
    for param in docs.params:
        described = properties.get(param.arg_name)
        if described is not None and param.description and "description" not in described:
            described["description"] = param.description
    return arguments, schema


def _caller(fn: Callable[..., Any], context_names: list[str]) -> ToolFunction:
    """``fn`` as a :data:`ToolFunction`: the Struct's fields as keywords, the context injected."""

    def call(context: ToolContext, arguments: Any) -> Any:
        keywords = {field: getattr(arguments, field) for field in arguments.__struct_fields__}
        for name in context_names:
            keywords[name] = context
        return fn(**keywords)

    return call


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Decorator: the function becomes a typed :class:`FunctionTool`
    (:meth:`FunctionTool.from_function`). Use bare (``@tool``) or with
    options (``@tool(name="search")``)."""

    def make(function: Callable[..., Any]) -> FunctionTool:
        return FunctionTool.from_function(
            function, name=name, description=description, metadata=metadata
        )

    return make if fn is None else make(fn)


class ToolRegistry:
    """An ordered set of tools with unique names.

    ``with_tool`` returns a new registry (the original is unchanged), so one
    registry can seed several agents. Adding a second tool with a name already
    present raises :class:`AgentConfigError`.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self._add(tool)

    def _add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise AgentConfigError(f"duplicate tool name {tool.name!r}", tool=tool.name)
        self._tools[tool.name] = tool

    def with_tool(self, tool: Tool) -> ToolRegistry:
        clone = ToolRegistry()
        clone._tools = self._tools.copy()
        clone._add(tool)
        return clone

    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def lookup(self, name: str) -> Tool | None:
        return self._tools.get(name)

    get = lookup

    def definitions(self) -> tuple[ToolDefinition, ...]:
        return tuple(tool.definition() for tool in self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"
