"""What every family of the hostile corpus shares: sizes, expected reply codes, and how an
unexpected exception becomes a violation."""

from __future__ import annotations

from subagents._host._jsonrpc import ErrorCode

KIB = 1024
MIB = 1024 * KIB
HUGE = 16 * MIB
"""The oversized input every surface gets once."""

PARSE = int(ErrorCode.PARSE_ERROR)
INVALID = int(ErrorCode.INVALID_REQUEST)
UNKNOWN = int(ErrorCode.METHOD_NOT_FOUND)
PARAMS = int(ErrorCode.INVALID_PARAMS)
TOO_LARGE = int(ErrorCode.REQUEST_TOO_LARGE)
UNAVAILABLE = int(ErrorCode.STORAGE_UNAVAILABLE)
RESULT = 0
"""An expected reply code meaning: a successful result, not an error."""

TIMEOUT = 30.0


def untyped(where: str, exc: BaseException) -> str:
    return f"{where}: untyped {type(exc).__name__}: {str(exc)[:200]}"
