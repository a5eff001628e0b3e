"""Small identifier value types: :class:`TaskId`, :class:`RunId`, :class:`ConversationId`.

An id wraps one string. Ids of the same type compare and hash by value; ids of
different types never compare equal (a ``TaskId`` is not a ``RunId``), and an
id never equals a plain string. Fresh ids come from an injectable
:class:`storage.IdSource`; the no-argument constructor uses ``RandomIds()``.
"""

from __future__ import annotations

from typing import Any, Self

from storage import IdSource, RandomIds

_DEFAULT_IDS: IdSource = RandomIds()


class _Id:
    __slots__ = ("_value",)
    _prefix = ""

    _value: str

    def __init__(self, value: str | None = None) -> None:
        if value is None:
            value = self._prefix + _DEFAULT_IDS.uuid4().hex
        elif not isinstance(value, str) or not value:
            raise TypeError(f"{type(self).__name__} needs a non-empty str, got {value!r}")
        object.__setattr__(self, "_value", value)

    @classmethod
    def from_string(cls, value: str) -> Self:
        """The id whose string form is ``value`` (which must be non-empty)."""
        return cls(value)

    @classmethod
    def generate(cls, ids: IdSource) -> Self:
        """A fresh id drawn from ``ids`` (so tests can seed it)."""
        return cls(cls._prefix + ids.uuid4().hex)

    def as_str(self) -> str:
        return self._value

    def __str__(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._value!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._value == other._value
        return NotImplemented

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._value))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._value,))


class TaskId(_Id):
    """Identifies one delegated task (``SubagentTask.id``)."""

    __slots__ = ()
    _prefix = "task_"


class RunId(_Id):
    """Identifies one agent run."""

    __slots__ = ()
    _prefix = "run_"


class ConversationId(_Id):
    """Identifies one conversation (a chain of runs sharing history)."""

    __slots__ = ()
    _prefix = "conv_"


ID_TYPES: tuple[type[_Id], ...] = (TaskId, RunId, ConversationId)


def enc_hook(value: Any) -> Any:
    """msgspec encode hook: ids encode as their string."""
    if isinstance(value, _Id):
        return value.as_str()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def dec_hook(kind: type, value: Any) -> Any:
    """msgspec decode hook: strings decode into the id type the field declares."""
    if kind in ID_TYPES and isinstance(value, str):
        return kind(value)
    raise NotImplementedError(f"cannot decode {kind!r}")
