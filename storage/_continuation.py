"""What a consumer sees of a terminal attempt, and the continuation run that consumes it.

The store derives the continuation's input itself (:func:`continuation_input`)
and requires the submitted run's input to be byte-equal to it; the actors and
the host build the same input with these functions, so both sides agree by
construction. Pure functions of the record: no clock (``now`` is passed in).
"""

from __future__ import annotations

import msgspec

from statemachines import RetentionStatus

from ._digest import input_digest
from ._records import AttemptRecord, ContinuationCause, InputPart


def retained_view(record: AttemptRecord, now: float) -> AttemptRecord:
    """``record`` as a consumer may see it at ``now``.

    Content whose retention deadline has passed is treated as expired even
    before the batched expiry removed it, so it is never delivered: the
    continuation carries the expiry summary instead.
    """
    deadline = record.retention_expires_at
    if record.retention_status == "expired" or deadline is None or deadline > now:
        return record
    return msgspec.structs.replace(record, retention_status=RetentionStatus.EXPIRED)


def continuation_outcome(record: AttemptRecord, artifact_content: str | None) -> str:
    """The model-visible outcome of a terminal attempt.

    Expired retention yields an expiry summary naming digest and size; an
    artifact yields its complete content; otherwise the inline content or error,
    else a status line.
    """
    ref = record.result_ref
    if record.retention_status == "expired":
        digest = (ref.digest if ref else None) or "unknown"
        size = ref.size_bytes if ref else 0
        return (
            "Retained background result content expired "
            f"(digest: {digest}, logical_size_bytes: {size})."
        )
    if artifact_content is not None:
        return artifact_content
    if ref is not None:
        if ref.content is not None:
            return ref.content
        if ref.error is not None:
            return ref.error
    return f"Background subagent finished with status {record.execution_status}."


def continuation_input(
    record: AttemptRecord, artifact_content: str | None
) -> tuple[InputPart, ...]:
    """The exact canonical input of the continuation run consuming ``record``.

    The store derives this itself (with the full artifact content, or the expiry
    summary) and requires the submitted run's input to be byte-equal to it.
    """
    text = (
        f"Background subagent result (subagent: {record.subagent_name}, "
        f"agent_id: {record.agent_id}, attempt_id: {record.attempt_id}, "
        f"child_run_id: {record.child_run_id or 'unknown'}):\n\n"
        f"{continuation_outcome(record, artifact_content)}"
    )
    return (InputPart(text=text),)


def continuation_cause(
    record: AttemptRecord, parts: tuple[InputPart, ...] | list[InputPart]
) -> ContinuationCause:
    """The canonical cause for ``record`` and an already-derived input."""
    ref = record.result_ref
    return ContinuationCause(
        attempt_id=record.attempt_id,
        agent_id=record.agent_id,
        parent_session_id=record.parent_session_id,
        parent_run_id=record.parent_run_id,
        child_run_id=record.child_run_id,
        result_digest=ref.digest if ref else None,
        result_size_bytes=ref.size_bytes if ref else 0,
        trace_context=dict(record.trace_context or {}),
        input_digest=input_digest(parts),
    )
