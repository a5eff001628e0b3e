"""The delegation tools' arguments: one msgspec Struct per tool, its schema and its validation.

Each Struct is the single source of its tool: the advertised
``parameters_schema`` is :func:`~subagents.struct_schema` of it (for the
``delegate`` tools, plus the roster as an ``enum`` of ``subagent_name``:
:func:`_delegate_schema`) and the model's arguments are converted into it
(:func:`~subagents.convert_arguments`: unknown fields are refused, the error
names the JSON path), so schema and validation cannot drift apart. Both
``delegate`` tools also accept ``name`` as an alias of ``subagent_name``
(not advertised: :func:`_delegate_args`).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from .._agent._tools import convert_arguments, struct_schema
from .._errors import ToolArgumentError, ToolError

_SubagentName = Annotated[
    str, msgspec.Meta(description="Name of the registered subagent to delegate to.")
]
_Prompt = Annotated[str, msgspec.Meta(description="The task for the subagent.")]


class _DelegateArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The blocking ``delegate``: ``{subagent_name (alias name), prompt}``."""

    subagent_name: _SubagentName
    prompt: _Prompt


class _AsyncDelegateArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The background ``delegate``."""

    subagent_name: _SubagentName
    prompt: _Prompt
    agent_id: Annotated[
        str | None,
        msgspec.Meta(
            description="Continue this background agent (an agent_id delegate returned "
            "earlier). Omit to start a new agent."
        ),
    ] = None
    linked_task_id: Annotated[
        str | None, msgspec.Meta(description="Optional id of the task this work belongs to.")
    ] = None


class _SteerArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: Annotated[str, msgspec.Meta(description="The attempt to steer.")]
    message: Annotated[str, msgspec.Meta(description="The guidance.")]
    steering_id: Annotated[str | None, msgspec.Meta(description="Optional idempotency id.")] = None


class _CancelArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: Annotated[str, msgspec.Meta(description="The attempt to cancel.")]
    reason: Annotated[str | None, msgspec.Meta(description="Why (kept: the first reason).")] = None
    cancellation_id: Annotated[str | None, msgspec.Meta(description="Optional idempotency id.")] = (
        None
    )


class _WaitArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: Annotated[str | None, msgspec.Meta(description="The attempt to wait for.")] = None
    timeout_seconds: Annotated[
        float | None, msgspec.Meta(description="Longest wait in seconds (0 to 300, default 30).")
    ] = 30.0


class _NoArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


_A = TypeVar("_A", bound=msgspec.Struct)
_D = TypeVar("_D", _DelegateArgs, _AsyncDelegateArgs)


def _convert(tool: str, arguments: Any, kind: type[_A]) -> _A:
    """Validate tool ``arguments`` into ``kind``; :class:`ToolArgumentError` naming the path."""
    return convert_arguments(tool, arguments, kind)


def _delegate_args(tool: str, arguments: Any, kind: type[_D]) -> _D:
    """``arguments`` of a ``delegate`` tool, validated, the subagent named exactly once.

    ``name`` is an alias of ``subagent_name``: giving neither raises
    :class:`ToolArgumentError` at ``$.subagent_name``; giving both with
    different values raises :class:`ToolError` (``path = "$.name"``); an error
    about the aliased value names ``$.name``, where the model put it.
    """
    aliased = isinstance(arguments, dict) and "name" in arguments
    if not aliased:
        if isinstance(arguments, dict) and "subagent_name" not in arguments:
            raise ToolArgumentError(
                f"invalid arguments for tool {tool!r} at $.subagent_name: "
                "the subagent to delegate to is required",
                tool=tool,
                path="$.subagent_name",
            )
        return _convert(tool, arguments, kind)
    name = arguments["name"]
    given = arguments.get("subagent_name")
    if given is not None and given != name:
        raise ToolError(
            f"tool {tool!r}: name is an alias of subagent_name; give one",
            tool=tool,
            path="$.name",
        )
    renamed = {key: value for key, value in arguments.items() if key != "name"}
    renamed["subagent_name"] = name
    try:
        return _convert(tool, renamed, kind)
    except ToolArgumentError as error:
        if error.path != "$.subagent_name":
            raise
        message = error.message.replace("$.subagent_name", "$.name", 1)
        raise ToolArgumentError(message, tool=tool, path="$.name") from error.__cause__


def _delegate_schema(
    kind: type[_DelegateArgs | _AsyncDelegateArgs], roster: list[str]
) -> dict[str, Any]:
    """A ``delegate`` tool's schema: ``kind``'s, with ``subagent_name`` an enum of ``roster``."""
    schema = struct_schema(kind)
    if roster:
        schema["properties"]["subagent_name"]["enum"] = list(roster)
    return schema
