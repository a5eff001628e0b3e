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

from .._agent._ids import RunId, TaskId
from .._agent._records import Record

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
