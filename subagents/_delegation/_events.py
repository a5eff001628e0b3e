"""The typed subagent lifecycle payloads delegation publishes on a parent's event bus.

Delegation publishes ``subagent_started``, ``subagent_completed`` and
``subagent_failed`` :class:`AgentEvent` records on the *parent* context's bus;
their ``payload`` is ``SubagentLifecycleEvent.to_value()``, so
``SubagentLifecycleEvent.from_value(event.payload)`` gives back the typed event.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from .._agent._events import AgentEvent
from .._agent._ids import RunId, TaskId
from .._agent._records import Record
from .._agent._stream import AgentStreamRecord, AgentStreamSource

SUBAGENT_STARTED = "subagent_started"
SUBAGENT_COMPLETED = "subagent_completed"
SUBAGENT_FAILED = "subagent_failed"
SUBAGENT_STREAM_RECORD = "subagent_stream_record"


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


_EVENT_KINDS = {
    SubagentLifecycleKind.STARTED: SUBAGENT_STARTED,
    SubagentLifecycleKind.COMPLETED: SUBAGENT_COMPLETED,
    SubagentLifecycleKind.FAILED: SUBAGENT_FAILED,
}


def lifecycle_event(
    kind: SubagentLifecycleKind,
    name: str,
    task_id: TaskId,
    metadata: dict[str, Any],
    run_id: RunId | None = None,
) -> AgentEvent:
    """The bus record of one lifecycle step, in both delegation modes."""
    payload = SubagentLifecycleEvent(
        kind=kind, name=name, task_id=task_id, run_id=run_id, metadata=metadata
    )
    return AgentEvent(kind=_EVENT_KINDS[kind], payload=payload.to_value())


def child_source(
    record: AgentStreamRecord,
    *,
    agent_id: str,
    agent_name: str,
    task_id: TaskId,
    run_id: RunId | None,
    parent_run_id: RunId | None,
) -> AgentStreamSource:
    """Where a child's stream ``record`` came from.

    A record that already carries a source came from a grandchild: its
    attribution is the more precise one, so it is kept.
    """
    return record.source or AgentStreamSource(
        agent_id=agent_id,
        agent_name=agent_name,
        task_id=task_id,
        run_id=run_id,
        parent_run_id=parent_run_id,
        source_sequence=record.sequence,
    )


def stream_record_event(
    record: AgentStreamRecord, source: AgentStreamSource, metadata: dict[str, Any]
) -> AgentEvent:
    """A child's stream ``record``, attributed to ``source``, as a ``subagent_stream_record``."""
    attributed = AgentStreamRecord(
        sequence=record.sequence, kind=record.kind, payload=record.payload, source=source
    )
    return AgentEvent(kind=SUBAGENT_STREAM_RECORD, payload=attributed.to_value(), metadata=metadata)
