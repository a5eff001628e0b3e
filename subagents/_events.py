"""The context event bus and the typed subagent lifecycle payloads published on it.

Delegation publishes ``subagent_started``, ``subagent_completed`` and
``subagent_failed`` :class:`AgentEvent` records on the *parent* context's bus;
their ``payload`` is ``SubagentLifecycleEvent.to_value()``, so
``SubagentLifecycleEvent.from_value(event.payload)`` gives back the typed event.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from ._ids import RunId, TaskId
from ._records import Record

PREVIEW_CHARS = 240

SUBAGENT_STARTED = "subagent_started"
SUBAGENT_COMPLETED = "subagent_completed"
SUBAGENT_FAILED = "subagent_failed"
SUBAGENT_STREAM_RECORD = "subagent_stream_record"


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


class SubagentLifecycleKind(enum.Enum):
    """Which lifecycle step a :class:`SubagentLifecycleEvent` reports."""

    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"


class SubagentLifecycleEvent(Record, frozen=True, kw_only=True):
    """The payload of ``subagent_started`` / ``subagent_completed`` / ``subagent_failed``.

    ``metadata`` holds the task metadata plus, by kind: started — ``agent_id``
    and ``prompt_preview``; completed — also ``duration_seconds``,
    ``request_count`` and ``result_preview``; failed — ``error`` (for example
    ``missing_subagent``, ``recursive_subagent_delegation`` or the error text
    with ``hook`` naming a failing hook), and ``duration_seconds``,
    ``request_count`` and ``child_run_id`` when the child had started.
    ``run_id`` is the child run id when known. Previews collapse whitespace and
    are capped at 240 characters.
    """

    kind: SubagentLifecycleKind
    name: str
    task_id: TaskId
    run_id: RunId | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


def compact_preview(text: str, max_chars: int = PREVIEW_CHARS) -> str:
    """``text`` with runs of whitespace collapsed to one space, cut to ``max_chars``.

    A cut preview ends with ``…`` and is exactly ``max_chars`` characters long.
    """
    compact = " ".join(text.split())
    if len(compact) <= max_chars:
        return compact
    return compact[: max_chars - 1] + "…"
