"""The root of every error this project raises.

The full tree is drawn in :mod:`subagents._errors`; this module only holds the
two roots (they live in the lowest layer so every layer can extend them) and
the one error the pure lifecycle tables raise.
"""

from __future__ import annotations

from typing import Any


class SubagentsError(Exception):
    """Root of every recoverable error raised by ``subagents``.

    Structured context travels as keyword fields (``attempt_id``, ``owner``,
    ``fencing_generation``, ...), readable as attributes and as ``fields``.
    """

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = dict(fields)
        for key, value in fields.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        if not self.fields:
            return self.message
        detail = ", ".join(f"{k}={v!r}" for k, v in sorted(self.fields.items()))
        return f"{self.message} ({detail})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields))


def _rebuild(cls: type[SubagentsError], message: str, fields: dict[str, Any]) -> SubagentsError:
    return cls(message, **fields)


class SubagentsSignal(BaseException):
    """Root of control-flow signals that must not be swallowed by ``except Exception``.

    Lease loss and cancellation derive from it: code that catches
    ``Exception`` to turn a crash into failed evidence must still let these
    through.
    """

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = dict(fields)
        for key, value in fields.items():
            setattr(self, key, value)


class InvalidTransition(SubagentsError):
    """A lifecycle transition that the transition tables do not allow.

    Fields: ``machine``, ``source``, ``dest`` and, when known, ``trigger``
    and ``attempt_id``.
    """
