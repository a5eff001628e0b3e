"""What the web console shows, read from the store and the event log (JSON-ready dicts).

Read-only: every function here only loads records. :func:`sessions_view` is the
sessions table, :func:`session_view` one page of a session's timeline (its runs
in order, each followed by the background attempts it delegated, as lanes),
:func:`attempt_view` everything about one attempt, and :func:`machines_view`
the lifecycle tables of :mod:`statemachines` (the ones ``subagents diagram``
draws) for the attempt's diagram.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

from statemachines import DELIVERY, EXECUTION, PHASE, RETENTION, MachineSpec, derive_phase
from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord, NotFound, RunRecord

from ._service import HostService

PAGE_ROWS = 200
"""Timeline rows (runs and attempt lanes) per page of the session view."""
PREVIEW_BYTES = 2048
"""How much of a result the attempt view shows inline (the rest is behind the link)."""
EVENT_SCAN = 20_000
"""At most this many of a session's events are read for one attempt's history."""
_ACTIVE = {"accepted", "starting", "running", "waiting"}
ATTEMPT_MACHINES: tuple[MachineSpec, ...] = (PHASE, EXECUTION, DELIVERY, RETENTION)


def _phase(record: AttemptRecord) -> str:
    return str(
        derive_phase(
            str(record.execution_status),
            str(record.delivery_status),
            str(record.retention_status),
        )
    )


def machines_view() -> list[dict[str, Any]]:
    """The attempt's lifecycles: states, initial, entries, terminal states, transitions."""
    return [
        {
            "name": spec.name,
            "description": spec.description,
            "states": list(spec.states),
            "initial": spec.initial,
            "entries": list(spec.entries),
            "terminal": sorted(spec.terminal),
            "transitions": [
                {"trigger": t.trigger, "source": t.source, "dest": t.dest} for t in spec.transitions
            ],
        }
        for spec in ATTEMPT_MACHINES
    ]


def sessions_view(service: HostService) -> dict[str, Any]:
    """Every session of the namespace with its run and attempt counts."""
    store = service.store
    rows: list[dict[str, Any]] = []
    for session in store.list_sessions(service.namespace_id):
        runs = store.list_runs(session.session_id)
        attempts = store.list_attempts(service.namespace_id, session.session_id)
        rows.append(
            {
                "session_id": session.session_id,
                "status": str(session.status),
                "profile": session.profile,
                "created_at": session.created_at,
                "updated_at": session.updated_at,
                "runs": len(runs),
                "continuation_runs": sum(r.trigger_type == ASYNC_SUBAGENT_RESULT for r in runs),
                "attempts": len(attempts),
                "active_attempts": sum(str(a.execution_status) in _ACTIVE for a in attempts),
            }
        )
    rows.sort(key=lambda row: (-float(row["updated_at"]), str(row["session_id"])))
    return {"namespace_id": service.namespace_id, "sessions": rows, "now": service.clock.now()}


def _run_row(
    run: RunRecord, cause: str | None, lanes: int, parents: dict[str, str]
) -> dict[str, Any]:
    text = "".join(part.text for part in run.input)
    return {
        "kind": "run",
        "run_id": run.run_id,
        "sequence_no": run.sequence_no,
        "status": str(run.status),
        "trigger_type": run.trigger_type,
        "parent_run_id": parents.get(run.parent_run_id, run.parent_run_id)
        if run.parent_run_id
        else None,
        "cause_attempt_id": cause,
        "profile": run.profile,
        "input": text[:160],
        "output": (run.output_preview or "")[:160],
        "start": run.created_at,
        "end": run.updated_at if str(run.status) in {"completed", "failed", "cancelled"} else None,
        "lanes": lanes,
    }


def delegating_runs(runs: list[RunRecord], attempts: list[AttemptRecord]) -> dict[str, str]:
    """The host run behind each ``parent_run_id`` of ``attempts``.

    An attempt's ``parent_run_id`` is the parent *agent's* run id, which is not
    the host's run id; a session runs one run at a time, so the delegating host
    run is the latest one admitted at or before the first attempt that names it.
    A parent id that is a host run id maps to itself.
    """
    host_ids = {run.run_id for run in runs}
    ordered = sorted(runs, key=lambda r: (r.created_at, r.sequence_no))
    starts = [run.created_at for run in ordered]
    first: dict[str, float] = {}
    for record in attempts:
        seen = first.get(record.parent_run_id)
        if seen is None or record.accepted_at < seen:
            first[record.parent_run_id] = record.accepted_at
    found: dict[str, str] = {}
    for parent, at in first.items():
        if parent in host_ids:
            found[parent] = parent
            continue
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0:
            found[parent] = ordered[index].run_id
    return found


def _attempt_row(record: AttemptRecord, parents: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "attempt",
        "attempt_id": record.attempt_id,
        "subagent_name": record.subagent_name,
        "phase": _phase(record),
        "execution_status": str(record.execution_status),
        "delivery_status": str(record.delivery_status),
        "retention_status": str(record.retention_status),
        "failure_category": record.failure_category,
        "parent_run_id": parents.get(record.parent_run_id, record.parent_run_id),
        "agent_run_id": record.parent_run_id,
        "continuation_run_id": record.continuation_run_id,
        "owner": record.owner_lease.host_instance_id,
        "generation": record.owner_lease.fencing_generation,
        "start": record.accepted_at,
        "end": record.terminal_at,
    }


def _timeline_rows(
    runs: list[RunRecord], attempts: list[AttemptRecord]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Runs in order, each followed by its attempts' lanes; and each run's row index."""
    parents = delegating_runs(runs, attempts)
    by_parent: dict[str, list[AttemptRecord]] = defaultdict(list)
    cause: dict[str, str] = {}
    for record in attempts:
        by_parent[parents.get(record.parent_run_id, record.parent_run_id)].append(record)
        if record.continuation_run_id:
            cause[record.continuation_run_id] = record.attempt_id
    rows: list[dict[str, Any]] = []
    where: dict[str, int] = {}
    for run in sorted(runs, key=lambda r: (r.sequence_no, r.created_at, r.run_id)):
        lanes = by_parent.pop(run.run_id, [])
        where[run.run_id] = len(rows)
        rows.append(_run_row(run, cause.get(run.run_id), len(lanes), parents))
        rows.extend(_attempt_row(record, parents) for record in lanes)
    for orphans in by_parent.values():  # a parent run that is gone (or not yet visible)
        rows.extend(_attempt_row(record, parents) for record in orphans)
    return rows, where


def session_view(
    service: HostService,
    session_id: str,
    page: int = 0,
    run_id: str | None = None,
    per_page: int = PAGE_ROWS,
) -> dict[str, Any]:
    """One page of ``session_id``'s timeline; ``run_id`` picks the page that shows it.

    Raises :class:`storage.NotFound` for an unknown session.
    """
    store = service.store
    session = store.load_session(session_id)
    runs = store.list_runs(session_id)
    attempts = store.list_attempts(service.namespace_id, session_id)
    rows, where = _timeline_rows(runs, attempts)
    pages = max(1, -(-len(rows) // per_page))
    if run_id is not None and run_id in where:
        page = where[run_id] // per_page
    page = min(max(page, 0), pages - 1)
    now = service.clock.now()
    starts = [row["start"] for row in rows] or [now]
    ends = [row["end"] or now for row in rows] or [now]
    phases: dict[str, int] = defaultdict(int)
    for record in attempts:
        phases[_phase(record)] += 1
    return {
        "session": {
            "session_id": session.session_id,
            "status": str(session.status),
            "profile": session.profile,
            "created_at": session.created_at,
        },
        "summary": {"runs": len(runs), "attempts": len(attempts), "phases": dict(phases)},
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "total_rows": len(rows),
        "rows": rows[page * per_page : (page + 1) * per_page],
        "axis": {"start": min(starts), "end": max([*ends, now])},
        "now": now,
        "last_seq": service.events.last_seq(session_id),
    }


def _attempt_events(
    service: HostService, record: AttemptRecord, parent: str
) -> list[dict[str, Any]]:
    """The session's logged events that name this attempt (in their data) or that
    belong to its delegating (host) run ``parent`` or its consumer run."""
    runs = {parent, record.continuation_run_id}
    found: list[dict[str, Any]] = []
    after, read = 0, 0
    while read < EVENT_SCAN:
        page = service.events.replay(record.parent_session_id, after, 500)
        for event in page:
            after = event.seq
            data = event.data or {}
            if data.get("attempt_id") == record.attempt_id or event.run_id in runs:
                found.append(
                    {
                        "seq": event.seq,
                        "at": event.at,
                        "kind": event.kind,
                        "run_id": event.run_id,
                        "data": data,
                    }
                )
        read += len(page)
        if len(page) < 500:
            break
    return found


def _transitions(record: AttemptRecord, consumer: RunRecord | None) -> list[dict[str, Any]]:
    """The lifecycle moves the record dates: accepted, terminal, claimed, delivered,
    retention expiry (``at`` in store time; ``due`` marks a time still ahead)."""
    moves: list[dict[str, Any]] = [
        {"at": record.accepted_at, "machine": "phase", "to": "accepted", "note": "accepted"}
    ]
    if record.terminal_at is not None:
        moves.append(
            {
                "at": record.terminal_at,
                "machine": "execution",
                "to": str(record.execution_status),
                "note": record.failure_category or record.cancellation_reason or "",
            }
        )
    if record.delivery_claim is not None:
        moves.append(
            {
                "at": record.updated_at,
                "machine": "delivery",
                "to": "claimed",
                "note": f"claim {record.delivery_claim.claim_id}",
            }
        )
    if str(record.delivery_status) == "delivered":
        at = consumer.created_at if consumer is not None else record.updated_at
        note = f"consumed by run {record.continuation_run_id}" if consumer else ""
        moves.append({"at": at, "machine": "delivery", "to": "delivered", "note": note})
    if record.retention_expires_at is not None:
        expired = str(record.retention_status) == "expired"
        moves.append(
            {
                "at": record.retention_expires_at,
                "machine": "retention",
                "to": "expired",
                "note": "" if expired else "due",
            }
        )
    moves.sort(key=lambda move: move["at"])
    return moves


def _result(record: AttemptRecord) -> dict[str, Any] | None:
    ref = record.result_ref
    if ref is None:
        return None
    text = ref.content if ref.content is not None else (ref.error or "")
    data = text.encode("utf-8")
    return {
        "digest": ref.digest,
        "size_bytes": ref.size_bytes,
        "is_error": ref.content is None and ref.error is not None,
        "preview": data[:PREVIEW_BYTES].decode("utf-8", errors="ignore"),
        "truncated": len(data) > PREVIEW_BYTES,
        "artifact_ref": ref.artifact_ref,
    }


def _consumer(service: HostService, record: AttemptRecord) -> RunRecord | None:
    if not record.continuation_run_id:
        return None
    try:
        return service.store.load_run(record.parent_session_id, record.continuation_run_id)
    except NotFound:
        return None


def attempt_view(service: HostService, attempt_id: str) -> dict[str, Any]:
    """Everything the attempt page shows. Raises :class:`storage.NotFound`."""
    record = service.store.load_attempt(attempt_id)
    if record.namespace_id != service.namespace_id:
        raise NotFound("no such attempt", attempt_id=attempt_id)
    now = service.clock.now()
    lease = record.owner_lease
    consumer = _consumer(service, record)
    session_runs = service.store.list_runs(record.parent_session_id)
    parents = delegating_runs(
        session_runs, service.store.list_attempts(service.namespace_id, record.parent_session_id)
    )
    events = _attempt_events(
        service, record, parents.get(record.parent_run_id, record.parent_run_id)
    )
    claim = record.delivery_claim
    return {
        "attempt": _attempt_row(record, parents),
        "session_id": record.parent_session_id,
        "agent_id": record.agent_id,
        "profile": record.profile,
        "child_run_id": record.child_run_id,
        "failure_category": record.failure_category,
        "cancellation_reason": record.cancellation_reason,
        "current": {
            "phase": _phase(record),
            "execution": str(record.execution_status),
            "delivery": str(record.delivery_status),
            "retention": str(record.retention_status),
        },
        "lease": {
            "holder": lease.host_instance_id,
            "generation": lease.fencing_generation,
            "heartbeat_at": lease.heartbeat_at,
            "expires_at": lease.lease_expires_at,
            "live": str(record.execution_status) in _ACTIVE and lease.lease_expires_at > now,
        },
        "claim": None
        if claim is None
        else {
            "claim_id": claim.claim_id,
            "deadline": claim.deadline,
            "continuation_run_id": claim.continuation_run_id,
        },
        "delivered_claim_id": record.delivered_claim_id,
        "consumer_run": None
        if consumer is None
        else {
            "run_id": consumer.run_id,
            "status": str(consumer.status),
            "created_at": consumer.created_at,
            "trigger_type": consumer.trigger_type,
        },
        "retention": {
            "status": str(record.retention_status),
            "expires_at": record.retention_expires_at,
        },
        "result": _result(record),
        "transitions": _transitions(record, consumer),
        "steering": [e for e in events if "steer" in e["kind"]],
        "events": events,
        "machines": machines_view(),
        "cancellable": str(record.execution_status) in _ACTIVE,
        "now": now,
        "last_seq": service.events.last_seq(record.parent_session_id),
    }
