"""Events the actors runtime appends to the store's log (beside the store's own).

The store commits every attempt lifecycle event with its change (``attempt.accepted``,
``attempt.started``, ``attempt.terminal``, ...). Steering changes no record, so the
attempt actor appends its ``attempt.steered`` event itself, once per new steering
message, so an RPC client watching the parent session sees the steering receipt.
"""

from __future__ import annotations

import logging

from storage import AttemptRecord, SessionStore, StoreError

log = logging.getLogger("subagents.actors")

STEERED = "attempt.steered"
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
