"""Plain result shapes of the supervisor's operations (they back the model tools).

Every shape is a frozen msgspec Struct with ``to_value()`` (plain dict for a
tool result) and ``from_value()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import msgspec

if TYPE_CHECKING:
    from storage import AttemptRecord

_DELEGATE_MESSAGE = (
    "The subagent is working in the background. Do not poll: continue with other work. "
    "Its result is delivered to you automatically; call wait_subagent once, only when you "
    "are blocked on this result."
)


class _Value(msgspec.Struct, frozen=True, kw_only=True):
    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = msgspec.to_builtins(self)
        return value

    @classmethod
    def from_value(cls, value: Any) -> Self:
        return msgspec.convert(value, cls)


class DelegateResult(_Value, frozen=True, kw_only=True):
    """``delegate``: ``status`` is ``accepted`` (new agent) or ``continued`` (known agent_id)."""

    status: str
    subagent_name: str
    attempt_id: str
    agent_id: str
    linked_task_id: str | None = None
    message: str = _DELEGATE_MESSAGE


class SteerReceipt(_Value, frozen=True, kw_only=True):
    """``steer_subagent``: the message is queued for the child's next turn boundary."""

    status: str
    attempt_id: str
    steering_id: str


class CancelResult(_Value, frozen=True, kw_only=True):
    """``cancel_subagent``: ``cancellation_requested`` or the terminal status it already had.

    ``reason`` is the first reason recorded for the attempt.
    """

    status: str
    attempt_id: str
    agent_id: str
    cancellation_id: str | None = None
    reason: str | None = None


class AttemptSummary(_Value, frozen=True, kw_only=True):
    """One attempt as ``subagent_info`` and a summary wait list it."""

    attempt_id: str
    agent_id: str
    subagent_name: str
    linked_task_id: str | None = None
    execution_status: str
    delivery_status: str
    retention_status: str
    phase: str


class WaitResult(_Value, frozen=True, kw_only=True):
    """``wait_subagent``.

    Shapes: ``status == "not_found"`` (with ``known_attempt_ids``); an active
    status with ``timed_out=True``; a terminal status with delivery and
    retention status, failure category, cancellation reason and ``result`` or
    ``error`` (``delivery_status == "delivered"`` by this wait); the same
    without result when another consumer owns it (``owned_elsewhere=True``,
    ``delivery_status`` ``claimed`` or ``delivered``); and ``status ==
    "summary"`` with ``attempts`` when no attempt_id was given.

    ``context_delta`` is the child's delta when this wait delivered the result
    in the process that ran it (apply it once); it is not part of ``to_value()``,
    so the tool result's shape does not change.
    """

    status: str
    attempt_id: str | None = None
    agent_id: str | None = None
    subagent_name: str | None = None
    linked_task_id: str | None = None
    timed_out: bool = False
    owned_elsewhere: bool = False
    delivery_status: str | None = None
    retention_status: str | None = None
    failure_category: str | None = None
    cancellation_reason: str | None = None
    result: str | None = None
    error: str | None = None
    known_attempt_ids: list[str] | None = None
    attempts: list[AttemptSummary] | None = None
    message: str | None = None
    context_delta: Any = None

    def to_value(self) -> dict[str, Any]:
        # The delta is an arbitrary in-process object: it never goes to the model.
        value: dict[str, Any] = msgspec.to_builtins(
            msgspec.structs.replace(self, context_delta=None)
        )
        value.pop("context_delta", None)
        return value

    @classmethod
    def still_running(cls, record: AttemptRecord, message: str) -> Self:
        """A bounded wait that ran out while ``record`` is still active."""
        return cls(
            status=str(record.execution_status),
            attempt_id=record.attempt_id,
            agent_id=record.agent_id,
            subagent_name=record.subagent_name,
            linked_task_id=record.linked_task_id,
            timed_out=True,
            delivery_status=str(record.delivery_status),
            retention_status=str(record.retention_status),
            message=message,
        )


class InfoResult(_Value, frozen=True, kw_only=True):
    """``subagent_info``'s ``background`` section."""

    active: list[AttemptSummary]
    retained: list[AttemptSummary]


class BackgroundResult(_Value, frozen=True, kw_only=True):
    """A terminal result handed to the parent exactly once (callback, wait or next turn).

    ``output`` is the complete output (artifact content included); after
    retention expired it is the expiry summary. ``context_delta`` is the
    child's delta as the runner returned it (not part of ``to_value()``); it
    is present only in the one delivery that claimed the result in this
    process.
    """

    attempt_id: str
    agent_id: str
    subagent_name: str
    linked_task_id: str | None = None
    status: str
    output: str | None = None
    error: str | None = None
    failure_category: str | None = None
    cancellation_reason: str | None = None
    child_run_id: str | None = None
    digest: str | None = None
    size_bytes: int = 0
    retention_status: str = "inline"
    usage: dict[str, Any] = msgspec.field(default_factory=dict)
    context_delta: Any = None

    def to_value(self) -> dict[str, Any]:
        # The delta is an arbitrary in-process object: it never goes to the model.
        value: dict[str, Any] = msgspec.to_builtins(
            msgspec.structs.replace(self, context_delta=None)
        )
        value.pop("context_delta", None)
        return value
