"""Events the actors runtime appends to the store's log (beside the store's own).

The store commits every attempt lifecycle event with its change (``attempt.accepted``,
``attempt.started``, ``attempt.terminal``, ...). Steering changes no record, so the
attempt actor appends its ``attempt.steered`` event itself, once per new steering
message, so an RPC client watching the parent session sees the steering receipt, and
``attempt.steering_delivered`` when the child takes queued messages (their ids).
"""

from __future__ import annotations

import logging

from storage import AttemptRecord, SessionStore, StoreError

log = logging.getLogger("subagents.actors")

STEERED = "attempt.steered"
STEERING_DELIVERED = "attempt.steering_delivered"
PREVIEW_CHARS = 200
"""Longest ``text_preview`` of a steering event."""


def record_steering(
    store: SessionStore, record: AttemptRecord, steering_id: str, text: str
) -> None:
    """Append ``attempt.steered`` (``attempt_id``, ``steering_id``, ``text_preview``:
    the message's first :data:`PREVIEW_CHARS` characters) to the attempt's parent
    session, under its parent run. Runs on the caller's thread (one store write). A
    store failure, or a store that keeps no log, is logged and never raised: the
    steering is queued either way."""
    data = {
        "attempt_id": record.attempt_id,
        "steering_id": steering_id,
        "text_preview": text[:PREVIEW_CHARS],
    }
    try:
        store.append_event(record.parent_session_id, STEERED, record.parent_run_id, data)
    except StoreError as exc:
        log.info("steering %s of %s not recorded: %s", steering_id, record.attempt_id, exc)


def record_steering_taken(
    store: SessionStore, record: AttemptRecord, steering_ids: tuple[str, ...]
) -> None:
    """Append ``attempt.steering_delivered`` (``attempt_id``, ``steering_ids``: the
    messages the child just drained, oldest first). Runs on the attempt actor's thread
    (one store write); a store failure is logged and never raised: the child has the
    messages either way."""
    data = {"attempt_id": record.attempt_id, "steering_ids": list(steering_ids)}
    try:
        store.append_event(record.parent_session_id, STEERING_DELIVERED, record.parent_run_id, data)
    except StoreError as exc:
        log.info("steering taken by %s not recorded: %s", record.attempt_id, exc)
