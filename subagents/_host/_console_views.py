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
SEEK_SLACK = 5.0
"""An attempt's history is read from this many seconds before its acceptance."""
STEERED = "attempt.steered"
"""The event of one steering message queued for an attempt (data: attempt_id,
steering_id, text_preview)."""
STEERING_DELIVERED = "attempt.steering_delivered"
"""An event saying queued steering reached the child (data: attempt_id and
``steering_ids``, or a ``count``), appended by the attempt actor when the child drains
its queue; absent from logs written before it existed."""
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

    A host run's SDK run takes the durable run's id, so the ``parent_run_id`` of
    an attempt a host run delegated *is* that run's id and maps to itself. Any
    other parent id (an SDK parent outside the host, a store written before the
    ids were shared) falls back to time: a session runs one run at a time, so
    the delegating host run is the latest one admitted at or before the first
    attempt that names it. A parent id admitted after every run maps nowhere.
    """
    host_ids = {run.run_id for run in runs}
    found: dict[str, str] = {}
    first: dict[str, float] = {}
    for record in attempts:
        parent = record.parent_run_id
        if parent in host_ids:
            found[parent] = parent
            continue
        seen = first.get(parent)
        if seen is None or record.accepted_at < seen:
            first[parent] = record.accepted_at
    if first:
        ordered = sorted(runs, key=lambda r: (r.created_at, r.sequence_no))
        starts = [run.created_at for run in ordered]
        for parent, at in first.items():
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


def _seek(service: HostService, session_id: str, at: float) -> int:
    """The sequence after which ``session_id``'s events reach ``at``: a binary search
    over the dense sequence numbers (each probe one one-event read), assuming
    ``at`` grows with the sequence, as it does on one store clock."""
    low, high = 0, service.events.last_seq(session_id)
    while low < high:
        middle = (low + high + 1) // 2
        probe = service.events.replay(session_id, middle - 1, 1)
        if probe and probe[0].at < at:
            low = middle
        else:
            high = middle - 1
    return low


def _attempt_events(
    service: HostService, record: AttemptRecord, parent: str
) -> list[dict[str, Any]]:
    """The session's logged events that name this attempt (in their data) or that
    belong to its delegating (host) run ``parent`` or its consumer run, from
    :data:`SEEK_SLACK` seconds before its acceptance on (so the latest attempt of
    a long session finds its own events without reading the whole log) and, for
    an attempt no longer active, up to :data:`SEEK_SLACK` seconds after its
    record's last change (every ``attempt.*`` event but a steering one commits
    with a change of the record, and an attempt that is not active is not
    steered); at most :data:`EVENT_SCAN` events read."""
    session_id = record.parent_session_id
    runs = {run for run in (parent, record.continuation_run_id) if run}
    active = str(record.execution_status) in _ACTIVE
    until = float("inf") if active else record.updated_at + SEEK_SLACK
    found: list[dict[str, Any]] = []
    after, read = _seek(service, session_id, record.accepted_at - SEEK_SLACK), 0
    while read < EVENT_SCAN:
        page = service.events.replay(session_id, after, 500)
        for event in page:
            if event.at > until:
                return found
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


def _mine(events: list[dict[str, Any]], attempt_id: str) -> list[dict[str, Any]]:
    """The ``attempt.*`` events of ``attempt_id`` among ``events``."""
    return [
        e
        for e in events
        if e["kind"].startswith("attempt.") and e["data"].get("attempt_id") == attempt_id
    ]


def steering_receipts(events: list[dict[str, Any]], attempt_id: str) -> list[dict[str, Any]]:
    """One receipt per ``attempt.steered`` event of ``attempt_id``, oldest first.

    ``reached_child`` is ``True`` once an ``attempt.steering_delivered`` event
    says so (naming it in ``steering_ids``, or counting it among the next
    ``count`` queued ones: the child drains its queue in order at a turn
    start), else ``None``: not recorded (the log does not say it did not).
    """
    receipts: list[dict[str, Any]] = []
    for event in _mine(events, attempt_id):
        data = event["data"]
        if event["kind"] == STEERED:
            receipts.append(
                {
                    "steering_id": str(data.get("steering_id") or ""),
                    "at": event["at"],
                    "seq": event["seq"],
                    "text_preview": str(data.get("text_preview") or ""),
                    "reached_child": None,
                }
            )
        elif event["kind"] == STEERING_DELIVERED:
            _mark_delivered(receipts, data)
    return receipts


def _mark_delivered(receipts: list[dict[str, Any]], data: dict[str, Any]) -> None:
    named = {str(i) for i in data.get("steering_ids") or ()}
    count = data.get("count")
    left = count if isinstance(count, int) and not named else 0
    for receipt in receipts:
        if receipt["steering_id"] in named:
            receipt["reached_child"] = True
        elif left > 0 and receipt["reached_child"] is None:
            receipt["reached_child"] = True
            left -= 1


def _event_move(event: dict[str, Any], record: AttemptRecord) -> dict[str, Any] | None:
    """The lifecycle move an ``attempt.*`` event of ``record`` records (``None``:
    not a move); a terminal move without an error category takes the record's
    failure category or cancellation reason when it names the record's status."""
    data, at = event["data"], event["at"]
    kind = event["kind"].removeprefix("attempt.")
    if kind == "accepted":
        owner = data.get("owner")
        if isinstance(owner, dict):  # an owner identity rather than its instance id
            owner = owner.get("host_instance_id")
        note = f"generation {data.get('fencing_generation', '?')} · {owner or ''}"
        return {"at": at, "machine": "phase", "to": "accepted", "note": note.rstrip(" ·")}
    if kind == "started":
        note = f"generation {data.get('fencing_generation', '?')}"
        return {"at": at, "machine": "execution", "to": "running", "note": note}
    if kind == "terminal":
        status = str(data.get("status") or record.execution_status)
        note = str(data.get("error_category") or "")
        if not note and status == str(record.execution_status):
            note = record.failure_category or record.cancellation_reason or ""
        return {"at": at, "machine": "execution", "to": status, "note": note}
    if kind in {"claimed", "delivered", "released"}:
        to = {"claimed": "claimed", "delivered": "delivered", "released": "undelivered"}[kind]
        note = f"claim {data.get('claim_id')}"
        if data.get("consumer_run_id"):
            note += f" for run {data['consumer_run_id']}"
        return {"at": at, "machine": "delivery", "to": to, "note": note}
    if kind == "expired":
        return {"at": at, "machine": "retention", "to": "expired", "note": ""}
    return None


def _transitions(
    record: AttemptRecord, consumer: RunRecord | None, events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every lifecycle move, ``at`` in store time: those the attempt's ``attempt.*``
    events record, then, for each kind of move no event records (a store written
    before the events), the one the record dates (accepted, terminal, claimed,
    delivered, retention expiry; ``due`` marks an expiry still ahead)."""
    mine = _mine(events, record.attempt_id)
    logged = [m for m in (_event_move(e, record) for e in mine) if m is not None]
    kinds = {(m["machine"], m["to"]) for m in logged}
    terminal = any(m["machine"] == "execution" and m["to"] != "running" for m in logged)
    moves = logged + [
        m
        for m in _record_moves(record, consumer)
        if (m["machine"], m["to"]) not in kinds and not (terminal and m["machine"] == "execution")
    ]
    moves.sort(key=lambda move: move["at"])
    return moves


def _record_moves(record: AttemptRecord, consumer: RunRecord | None) -> list[dict[str, Any]]:
    """The lifecycle moves the record itself dates (its latest of each)."""
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


def _delegating_run(service: HostService, record: AttemptRecord) -> str:
    """The host run that delegated ``record``: its ``parent_run_id`` when that is a
    durable run (one read), else the session's run by time (:func:`delegating_runs`)."""
    store, session_id = service.store, record.parent_session_id
    try:
        return store.load_run(session_id, record.parent_run_id).run_id
    except NotFound:
        pass
    parents = delegating_runs(
        store.list_runs(session_id), store.list_attempts(service.namespace_id, session_id)
    )
    return parents.get(record.parent_run_id, record.parent_run_id)


def attempt_view(service: HostService, attempt_id: str) -> dict[str, Any]:
    """Everything the attempt page shows. Raises :class:`storage.NotFound`."""
    record = service.store.load_attempt(attempt_id)
    if record.namespace_id != service.namespace_id:
        raise NotFound("no such attempt", attempt_id=attempt_id)
    now = service.clock.now()
    lease = record.owner_lease
    consumer = _consumer(service, record)
    parents = {record.parent_run_id: _delegating_run(service, record)}
    events = _attempt_events(service, record, parents[record.parent_run_id])
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
        "transitions": _transitions(record, consumer, events),
        "steering": steering_receipts(events, record.attempt_id),
        "events": events,
        "machines": machines_view(),
        "cancellable": str(record.execution_status) in _ACTIVE,
        "now": now,
        "last_seq": service.events.last_seq(record.parent_session_id),
    }
