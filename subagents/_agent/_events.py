"""The context event bus: :class:`AgentEvent` records, and the preview helper."""

from __future__ import annotations

from typing import Any

import msgspec

from ._records import Record

PREVIEW_CHARS = 240


class AgentEvent(Record, frozen=True, kw_only=True):
    """One record on a context's event bus: a ``kind``, a JSON ``payload``, ``metadata``."""

    kind: str
    payload: Any = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class EventBus:
    """An append-only, in-order log of :class:`AgentEvent` records for one context.

    ``publish`` never blocks and never drops. Not thread-safe: publish from
    the loop running the agent.
    """

    __slots__ = ("_events",)

    def __init__(self, events: list[AgentEvent] | None = None) -> None:
        self._events: list[AgentEvent] = [] if events is None else events

    def publish(self, event: AgentEvent) -> None:
        self._events.append(event)

    def events(self) -> list[AgentEvent]:
        """A snapshot list of every event published so far, oldest first."""
        return list(self._events)

    def of_kind(self, kind: str) -> list[AgentEvent]:
        return [e for e in self._events if e.kind == kind]

    def copy(self) -> EventBus:
        return EventBus(list(self._events))

    def __len__(self) -> int:
        return len(self._events)


def compact_preview(text: str, max_chars: int = PREVIEW_CHARS) -> str:
    """``text`` with runs of whitespace collapsed to one space, cut to ``max_chars``.

    A cut preview ends with ``…`` and is exactly ``max_chars`` characters long.
    """
    compact = " ".join(text.split())
    if len(compact) <= max_chars:
        return compact
    return compact[: max_chars - 1] + "…"
