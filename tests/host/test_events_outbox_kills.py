"""Every committed run's terminal event is in ``events.replay`` (issue 15).

Real host processes (``events_host.py serve --stdio --store postgresql://...``)
on one scratch PostgreSQL database, driven over JSON-RPC:

1. host lives each SIGKILLed right after their nth store commit (``n`` = 1, 2,
   ...: every commit of a run's life is the last one of some life, the run's
   terminal commit included);
2. one life serving runs while the test terminates the host's database
   backends over and over (``pg_terminate_backend``), then SIGKILLed while a
   run is waiting on its model;
3. a last life that reconciles what the dead ones left (their runs fail
   ``host_process_lost``).

Then every run whose store record is terminal has its terminal event
(``run.completed`` / ``run.failed`` / ``run.cancelled``) in ``events.replay``,
and every session's seqs are dense. Before the outbox the host appended events
in a transaction of its own after the store's: a kill between the two lost the
event of a run the store had completed.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from host_processes import HostProc, poll_until
from postgres_db import admin_sql, scratch_database

from storage import PostgresSessionStore

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).with_name("events_host.py")
LEASE_TTL = 1.0
DEADLINE = 60.0
FAULT_LIVES = 14  # more commits than a life makes up to its run's terminal commit
TERMINAL = {"completed": "run.completed", "failed": "run.failed", "cancelled": "run.cancelled"}
CONFIG = f"""
[host]
lease_ttl = {LEASE_TTL}

[profiles.default]
model_id = "test:text=done"

[profiles.slow]
model_id = "gated:x"
"""
poll = functools.partial(poll_until, timeout=DEADLINE)


@pytest.fixture
def database() -> Iterator[str]:
    with scratch_database("outbox_events") as url:
        yield url


class Lives:
    """Host lives on one database, each with its own owner id."""

    def __init__(self, tmp_path: Path, url: str, hosts: list[HostProc]) -> None:
        self.config = tmp_path / "host.toml"
        self.config.write_text(CONFIG)
        self.release = tmp_path / "release"  # never created: a slow run waits
        self.url = url
        self.hosts = hosts
        self.count = 0

    def start(self, faults: str = "", tick: str = "3600") -> HostProc:
        self.count += 1
        host = HostProc(
            f"L{self.count}",
            *("--config", str(self.config), "--store", self.url, "--tick", tick),
            *("--owner", f"host-{self.count}"),
            env={"SUBAGENTS_FAULTS": faults, "SUBAGENTS_TEST_RELEASE": str(self.release)},
            deadline=DEADLINE,
            script=SCRIPT,
        )
        self.hosts.append(host)
        return host


def _call(host: HostProc, method: str, params: dict[str, Any]) -> Any:
    """The result, or ``None`` when the host died first (a fault point killed it)."""
    if host.proc.poll() is not None:
        return None
    try:
        return host.reply(host.send(method, params))
    except (AssertionError, OSError):  # its stdout ended: killed
        return None


def _status(host: HostProc, session: str, run_id: str) -> str | None:
    """The run's status, or ``None`` once the host is dead."""
    info = _call(host, "run.status", {"session_id": session, "run_id": run_id})
    return None if info is None else str(info["status"])


def _life_killed_at_a_commit(lives: Lives, nth: int) -> None:
    host = lives.start(f"store.after_commit=sigkill@{nth}")
    session = f"fault-{nth}"
    if _call(host, "session.create", {"session_id": session}) is None:
        return
    started = _call(host, "run.start", {"session_id": session, "input": f"run {nth}"})
    if started is None:
        return
    poll(  # until the run ended or the fault point killed the host
        f"life {nth}",
        lambda: _status(host, session, started["run_id"]) in (*TERMINAL, None),
    )
    host.stop()


@contextlib.contextmanager
def _terminating_backends(url: str) -> Iterator[list[int]]:
    """Terminate every host connection to the database, again and again, meanwhile."""
    name = url.rsplit("/", 1)[1]
    stop = threading.Event()
    rounds: list[int] = []

    def loop() -> None:
        while not stop.wait(0.05):  # a kill every 50 ms, not a synchronization
            admin_sql(
                url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                f" WHERE datname = '{name}' AND application_name = 'subagents'"
                " AND pid <> pg_backend_pid()",
            )
            rounds.append(1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield rounds
    finally:
        stop.set()
        thread.join(timeout=10.0)


def _life_under_backend_kills(lives: Lives) -> None:
    host = lives.start()
    with _terminating_backends(lives.url) as rounds:
        for index in range(8):
            session = f"kills-{index}"
            if _call(host, "session.create", {"session_id": session}) is None:
                continue  # refused while its connection died: the store error is the reply
            _call(host, "run.start", {"session_id": session, "input": f"run {index}"})
        poll("a few backend kills", lambda: len(rounds) >= 10)
    _call(host, "session.create", {"session_id": "slow"})
    slow = _call(host, "run.start", {"session_id": "slow", "input": "wait", "profile": "slow"})
    assert slow is not None, host.tail()
    poll("the slow run running", lambda: _status(host, "slow", slow["run_id"]) == "running")
    host.kill()  # SIGKILL mid-run
    host.stop()


def _terminal_runs(url: str) -> dict[str, list[tuple[str, str]]]:
    store = PostgresSessionStore(url, pool_size=1)
    try:
        out: dict[str, list[tuple[str, str]]] = {}
        for session in store.list_sessions("default"):
            out[session.session_id] = [
                (run.run_id, str(run.status)) for run in store.list_runs(session.session_id)
            ]
        return out
    finally:
        store.close()


def test_every_committed_runs_terminal_event_survives_kills(
    tmp_path: Path, database: str, hosts: list[HostProc]
) -> None:
    lives = Lives(tmp_path, database, hosts)
    for nth in range(1, FAULT_LIVES + 1):
        _life_killed_at_a_commit(lives, nth)
    _life_under_backend_kills(lives)

    last = lives.start(tick="0.1")  # reconciles the runs the dead lives left
    poll(
        "every run terminal",
        lambda: all(
            status in TERMINAL for runs in _terminal_runs(database).values() for _, status in runs
        ),
    )
    runs = _terminal_runs(database)
    assert sum(len(r) for r in runs.values()) >= 10, runs
    statuses = {status for rs in runs.values() for _, status in rs}
    assert {"completed", "failed"} <= statuses, runs  # both outcomes were exercised
    missing = []
    for session, session_runs in runs.items():
        events = last.result("events.replay", {"session_id": session, "limit": 10_000})["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
        logged = {(e["run_id"], e["kind"]) for e in events}
        missing += [
            (session, run_id, status)
            for run_id, status in session_runs
            if (run_id, TERMINAL[status]) not in logged
        ]
    assert missing == [], f"terminal runs without their terminal event: {missing}"
    assert last.shutdown() == 0
