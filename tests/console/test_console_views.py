"""The console's views over a store and an event log this test fills itself.

The attempt view's steering receipts and transitions come from the ``attempt.*``
events of the session's log (appended here through the host's event log, the
shape the store's outbox writes), with the record's own dates as the fallback
for a store written before those events existed; lanes sit under the durable
run their ``parent_run_id`` names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from statemachines import ExecutionStatus, RunStatus
from storage import (
    AttemptRecord,
    ManualClock,
    MemorySessionStore,
    OwnerLease,
    RunRecord,
    SessionRecord,
)
from subagents._host import HostService, load_host_config
from subagents._host import _console_views as views
from subagents._host._console_views import attempt_view, delegating_runs, session_view
from subagents._host._eventlog import MemoryEventLog

SESSION = "views"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[HostService]:
    config = tmp_path / "host.toml"
    config.write_text('[profiles.default]\nmodel_id = "test:echo"\n')
    store = MemorySessionStore(clock=ManualClock(1_800_000_000.0))
    svc = HostService(
        load_host_config(config), store=store, events=MemoryEventLog(), fencing_generation=7
    )
    now = store.clock.now()
    store.create_session(
        SessionRecord(session_id=SESSION, namespace_id="default", created_at=now, updated_at=now)
    )
    try:
        yield svc
    finally:
        store.close()


def _clock(service: HostService) -> ManualClock:
    clock = service.store.clock
    assert isinstance(clock, ManualClock)
    return clock


def _run(service: HostService, run_id: str) -> RunRecord:
    now = service.clock.now()
    run = RunRecord(session_id=SESSION, run_id=run_id, created_at=now, updated_at=now)
    admitted = service.store.admit_run(run).run
    service.store.transition_run(SESSION, run_id, RunStatus.RUNNING)
    return admitted


def _attempt(service: HostService, attempt_id: str, parent_run_id: str) -> AttemptRecord:
    at = service.clock.now()
    return service.store.accept_attempt(
        AttemptRecord(
            attempt_id=attempt_id,
            agent_id=f"agent-{attempt_id}",
            subagent_name="researcher",
            namespace_id="default",
            parent_session_id=SESSION,
            parent_run_id=parent_run_id,
            owner_lease=OwnerLease(
                host_instance_id="views-host",
                fencing_generation=7,
                heartbeat_at=at,
                lease_expires_at=at + 1e6,
            ),
            accepted_at=at,
            updated_at=at,
        )
    )


def _event(service: HostService, kind: str, run_id: str | None, **data: Any) -> None:
    _clock(service).advance(0.5)
    service.events.append(SESSION, kind, service.clock.now(), run_id, data)


def _steer(service: HostService, attempt_id: str, steering_id: str, text: str) -> None:
    data = {"attempt_id": attempt_id, "steering_id": steering_id, "text_preview": text}
    _event(service, "attempt.steered", "run-1", **data)


def test_the_attempt_view_lists_its_steering_receipts_in_order(service: HostService) -> None:
    _run(service, "run-1")
    _attempt(service, "att-a", "run-1")
    _attempt(service, "att-b", "run-1")
    hostile = '<img src=x onerror="alert(1)"> focus </td><script>x()</script>'
    _steer(service, "att-a", "steer-1", "Focus on the lease code path")
    _steer(service, "att-b", "steer-other", "not for a")
    _event(service, "run.steered", "run-1", steering_id="steer-run")  # the run's, not a's
    _steer(service, "att-a", "steer-2", hostile)
    receipts = attempt_view(service, "att-a")["steering"]
    assert [(r["steering_id"], r["text_preview"]) for r in receipts] == [
        ("steer-1", "Focus on the lease code path"),
        ("steer-2", hostile),  # as text, verbatim: the page puts it in a text node
    ]
    assert receipts[0]["at"] < receipts[1]["at"] and receipts[0]["seq"] < receipts[1]["seq"]
    assert [r["reached_child"] for r in receipts] == [None, None]  # not recorded
    assert [r["steering_id"] for r in attempt_view(service, "att-b")["steering"]] == ["steer-other"]


def test_a_steering_delivered_event_marks_the_receipts_that_reached_the_child(
    service: HostService,
) -> None:
    _run(service, "run-1")
    _attempt(service, "att-a", "run-1")
    for number in range(4):
        _steer(service, "att-a", f"steer-{number}", f"message {number}")
    _event(service, "attempt.steering_delivered", "run-1", attempt_id="att-a", count=2)
    _event(service, "attempt.steering_delivered", "run-1", attempt_id="att-b", count=9)
    _event(
        service, "attempt.steering_delivered", "run-1", attempt_id="att-a", steering_ids=["steer-3"]
    )
    reached = [r["reached_child"] for r in attempt_view(service, "att-a")["steering"]]
    assert reached == [True, True, None, True]


def test_transitions_come_from_the_attempt_events_when_the_log_has_them(
    service: HostService,
) -> None:
    _run(service, "run-1")
    record = _attempt(service, "att-a", "run-1")  # the store commits attempt.accepted
    _event(service, "attempt.started", "run-1", attempt_id="att-a", fencing_generation=7)
    _event(service, "attempt.terminal", "run-1", attempt_id="att-a", status="completed")
    claim = {"attempt_id": "att-a", "claim_id": "claim-1", "consumer_run_id": "run-2"}
    _event(service, "attempt.claimed", "run-1", **claim)
    _event(service, "attempt.released", "run-1", attempt_id="att-a", claim_id="claim-1")
    _event(service, "attempt.claimed", "run-1", **{**claim, "claim_id": "claim-2"})
    _event(service, "attempt.delivered", "run-1", **{**claim, "claim_id": "claim-2"})
    _event(service, "attempt.terminal", "run-1", attempt_id="att-b", status="failed")
    moves = attempt_view(service, "att-a")["transitions"]
    owner = {"host_instance_id": "views-host", "fencing_generation": 7}
    _event(service, "attempt.accepted", "run-1", attempt_id="att-c", owner=owner)
    _attempt(service, "att-c", "run-1")
    assert attempt_view(service, "att-c")["transitions"][0]["note"] == "generation ? · views-host"
    assert [(m["machine"], m["to"]) for m in moves] == [
        ("phase", "accepted"),
        ("execution", "running"),
        ("execution", "completed"),
        ("delivery", "claimed"),
        ("delivery", "undelivered"),
        ("delivery", "claimed"),
        ("delivery", "delivered"),
    ]
    assert moves[0]["at"] == record.accepted_at
    assert moves[1]["at"] > record.accepted_at  # the event's time, not the record's
    assert moves[0]["note"] == "generation 7 · views-host"
    assert moves[3]["note"] == "claim claim-1 for run run-2"
    assert [m["at"] for m in moves] == sorted(m["at"] for m in moves)


def test_without_attempt_events_the_record_dates_the_transitions(
    service: HostService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A log written before the store committed attempt events: replay hides them.
    replay = service.events.replay

    def old_log(session_id: str, after_seq: int = 0, limit: int = 1000) -> list[Any]:
        events = replay(session_id, after_seq, limit)
        return [e for e in events if not e.kind.startswith("attempt.")]

    monkeypatch.setattr(service.events, "replay", old_log)
    _run(service, "run-1")
    record = _attempt(service, "att-a", "run-1")
    _event(service, "run.steered", "run-1", steering_id="s")  # events, none of the attempt's
    _event(service, "session.updated", None)  # the session's, no run's: not listed
    view = attempt_view(service, "att-a")
    assert view["transitions"] == [
        {"at": record.accepted_at, "machine": "phase", "to": "accepted", "note": "accepted"}
    ]
    assert view["steering"] == []
    kinds = [e["kind"] for e in view["events"]]  # its run's events (the store's run events too)
    assert kinds == ["run.admitted", "run.started", "run.steered"]


def test_the_latest_attempt_of_a_long_log_finds_its_own_events(
    service: HostService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "EVENT_SCAN", 100)
    _run(service, "run-1")
    for number in range(300):  # a long history before the attempt
        _event(service, "attempt.started", "run-1", attempt_id=f"old-{number}")
    _clock(service).advance(views.SEEK_SLACK * 2)
    _attempt(service, "att-late", "run-1")
    _steer(service, "att-late", "steer-late", "late guidance")
    assert [r["steering_id"] for r in attempt_view(service, "att-late")["steering"]] == [
        "steer-late"
    ]


def test_lanes_sit_under_the_durable_run_their_parent_run_id_names(
    service: HostService,
) -> None:
    first = _run(service, "run-1")
    _attempt(service, "att-1", "run-1")
    service.store.transition_run(SESSION, "run-1", RunStatus.COMPLETED)
    _clock(service).advance(1)
    second = _run(service, "run-2")
    _clock(service).advance(1)
    _attempt(service, "att-late", "run-1")  # run-1 delegated it, though run-2 is newer
    _attempt(service, "att-sdk", "sdk-run-xyz")  # an SDK parent: matched by time
    rows = session_view(service, SESSION)["rows"]
    layout = [(r["kind"], r.get("run_id") or r["attempt_id"], r["parent_run_id"]) for r in rows]
    assert layout == [
        ("run", "run-1", None),
        ("attempt", "att-1", "run-1"),
        ("attempt", "att-late", "run-1"),
        ("run", "run-2", None),
        ("attempt", "att-sdk", "run-2"),
    ]
    attempts = service.store.list_attempts("default", SESSION)
    runs = service.store.list_runs(SESSION)
    assert delegating_runs(runs, attempts) == {
        "run-1": first.run_id,
        "sdk-run-xyz": second.run_id,
    }
    assert attempt_view(service, "att-late")["attempt"]["parent_run_id"] == "run-1"
    assert attempt_view(service, "att-sdk")["attempt"]["parent_run_id"] == "run-2"


def test_an_ended_attempt_reads_its_history_only_to_its_last_change(
    service: HostService, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(service, "run-1")
    accepted = _attempt(service, "att-a", "run-1")
    _event(service, "attempt.terminal", "run-1", attempt_id="att-a", status="completed")
    ended = msgspec.structs.replace(
        accepted,
        execution_status=ExecutionStatus.COMPLETED,
        terminal_at=service.clock.now(),
        updated_at=service.clock.now(),
    )
    _clock(service).advance(views.SEEK_SLACK * 2)
    for _ in range(2000):  # the session goes on: its run, other attempts
        _event(service, "attempt.started", "run-1", attempt_id="att-other")
    reads: list[int] = []
    replay = service.events.replay

    def counted(session_id: str, after_seq: int = 0, limit: int = 1000) -> list[Any]:
        page = replay(session_id, after_seq, limit)
        reads.append(len(page))
        return page

    monkeypatch.setattr(service.events, "replay", counted)
    events = views._attempt_events(service, ended, "run-1")
    kinds = [e["kind"] for e in events]  # the store's own events of the run and attempt too
    assert kinds == ["run.admitted", "run.started", "attempt.accepted", "attempt.terminal"]
    assert sum(reads) < 600  # the probes and one page, not the 2,000 later events
    reads.clear()
    still = views._attempt_events(service, accepted, "run-1")  # active: read to the end
    assert len(still) == 2004 and sum(reads) > 2000  # its 4 events and the 2,000 later ones
