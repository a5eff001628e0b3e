"""The delegation tools' arguments: typed structs and the one validation path.

Every delegation tool validates its arguments with :func:`_convert` (unknown
fields are rejected, the error names the JSON path). Both ``delegate`` tools
take the subagent as ``subagent_name`` with ``name`` accepted as an alias
(:func:`_subagent_name`).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from .._errors import ToolArgumentError, ToolError

_AT_PATH = re.compile(r" - at `([^`]*)`$")
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]*)`")
_A = TypeVar("_A", bound=msgspec.Struct)


def _convert(tool: str, arguments: Any, kind: type[_A]) -> _A:
    """Validate tool ``arguments`` into ``kind``; :class:`ToolArgumentError` naming the path."""
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


class _DelegateArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The blocking ``delegate``: ``{subagent_name (alias name), prompt}``."""

    subagent_name: str | None = None
    name: str | None = None  # alias of subagent_name
    prompt: str


class _AsyncDelegateArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    subagent_name: str | None = None
    name: str | None = None  # alias of subagent_name
    prompt: str
    agent_id: str | None = None
    linked_task_id: str | None = None


class _SteerArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: str
    message: str
    steering_id: str | None = None


class _CancelArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: str
    reason: str | None = None
    cancellation_id: str | None = None


class _WaitArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    attempt_id: str | None = None
    timeout_seconds: float | None = 30.0


class _NoArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


def _subagent_name(tool: str, args: _DelegateArgs | _AsyncDelegateArgs) -> str:
    """The subagent a ``delegate`` call names: ``subagent_name``, else its alias ``name``.

    Raises :class:`ToolError` when neither is given, or both are and differ.
    """
    if args.subagent_name is None and args.name is None:
        raise ToolError(f"tool {tool!r} needs subagent_name", tool=tool, path="$.subagent_name")
    if args.subagent_name is not None and args.name not in (None, args.subagent_name):
        raise ToolError(
            f"tool {tool!r}: name is an alias of subagent_name; give one",
            tool=tool,
            path="$.name",
        )
    name = args.subagent_name if args.subagent_name is not None else args.name
    assert name is not None
    return name


_D = TypeVar("_D", _DelegateArgs, _AsyncDelegateArgs)


def _delegate_args(tool: str, arguments: Any, kind: type[_D]) -> _D:
    """``arguments`` of a ``delegate`` tool, validated, the subagent named exactly once."""
    args = _convert(tool, arguments, kind)
    _subagent_name(tool, args)
    return args


def _subagent_name_schema(roster: list[str]) -> dict[str, Any]:
    """The ``subagent_name`` property of a ``delegate`` schema (an enum of ``roster``)."""
    schema: dict[str, Any] = {
        "type": "string",
        "description": "Name of the registered subagent to delegate to.",
    }
    if roster:
        schema["enum"] = roster
    return schema
