"""A type-keyed dependency container shared by agent, tool and child contexts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class Dependencies:
    """Values keyed by their type: ``insert(value)`` then ``get(type(value))``.

    ``get`` prefers the exact type and falls back to the first inserted value
    that is an instance of the requested type (so a subclass satisfies a
    lookup of its base). ``copy()`` is shallow: the copy holds the same value
    objects, which is how dependencies are shared with child contexts while
    insertions stay local. Not thread-safe: use from the loop running the agent.
    """

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[type, Any] = {}

    def insert(self, value: Any) -> None:
        """Store ``value`` under ``type(value)``, replacing any previous one."""
        self._values[type(value)] = value

    def get(self, key: type[T]) -> T | None:
        """The value stored for ``key`` (or a subclass of it), else ``None``."""
        value = self._values.get(key)
        if value is not None:
            return value  # type: ignore[no-any-return]
        for candidate in self._values.values():
            if isinstance(candidate, key):
                return candidate
        return None

    def remove(self, key: type) -> None:
        self._values.pop(key, None)

    def copy(self) -> Dependencies:
        clone = Dependencies()
        clone._values = self._values.copy()
        return clone

    def __contains__(self, key: type) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values.values())

    def __repr__(self) -> str:
        return f"Dependencies({', '.join(t.__name__ for t in self._values)})"
