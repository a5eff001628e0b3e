"""Load: many concurrent sessions of background attempts through one host, killed midway.

:func:`run_load` starts one host life (:mod:`._crash_host`), creates
``sessions`` sessions, gives each a parent run and then asks every session at
once for ``attempts_per_session`` background attempts (accepted straight
through the session's supervisor; each result comes back as one continuation
run). With ``kill_midway`` the host is SIGKILLed once half of all attempts
were accepted and a new host is started on the same data directory; it is
asked only for what the store does not hold yet. When everything settled, the
store must hold every attempt the parent saw accepted, each terminal once,
each result delivered exactly once (one continuation run whose input carries
it), and no attempt with a second continuation run.
"""

from __future__ import annotations

import queue
import random
import shutil
import time
from pathlib import Path
from typing import Any

import msgspec

from storage import ASYNC_SUBAGENT_RESULT, LmdbSessionStore

from ._lives import HostLife, Zygote
from ._oracle import Ledger, Life, OracleLog, check_snapshot, consumer_of, take_snapshot

NAMESPACE = "default"
SETTLE_SECONDS_PER_ATTEMPT = 0.05
SETTLE_MIN_SECONDS = 60.0


class LoadReport(msgspec.Struct, frozen=True, kw_only=True):
    """The figures of one load run; green when ``violations`` is empty."""

    sessions: int
    attempts: int
    completed: int
    delivered: int
    duplicates: int
    lost: int
    kills: int
    violations: tuple[str, ...]
    seconds: float
    invariants_checked: int = 0
    attempts_per_second: float = 0.0
    interrupted: int = 0
    """Attempts the kill caught in flight (reconciled as ``host_process_lost``, then delivered)."""


class _Load:
    def __init__(self, workdir: Path, seed: int, sessions: int, per_session: int) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.sessions = [f"load{index}" for index in range(sessions)]
        self.per_session = per_session
        self.log = OracleLog(workdir / "oracle.log")
        self.ledger = Ledger()
        self.parents: dict[str, str] = {}
        self.ready: set[str] = set()
        self.delegated: dict[str, int] = dict.fromkeys(self.sessions, 0)
        self.done: set[str] = set()
        self.status: dict[str, Any] = {}
        self.violations: list[str] = []
        self.last_generation = 0

    def handle(self, life: HostLife, message: dict[str, Any]) -> None:
        ev = message.get("ev")
        if ev == "hello":
            life.generation = int(message["gen"])
            if life.generation <= self.last_generation:
                self.violations.append(f"generation {life.generation} is not increasing")
            self.last_generation = life.generation
            self.ledger.lives[life.generation] = Life(
                generation=life.generation, pid=life.pid, started=life.started
            )
        elif ev == "session":
            self.ready.add(message["sid"])
        elif ev == "run":
            sid = message["key"].removeprefix("parent-")
            self.parents[sid] = message["run_id"]
            self.ledger.admitted_runs[message["run_id"]] = sid
        elif ev == "delegated":
            self.delegated[message["sid"]] += 1
            self.ledger.committed_attempts.add(message["attempt"])
        elif ev == "delegate-done":
            self.done.add(message["sid"])
        elif ev == "status":
            self.status = message
        elif ev == "error":
            self.violations.append(f"the host refused {message}")

    def pump(self, life: HostLife, until: float, stop: Any) -> bool:
        """Handle messages until ``stop()`` (True), EOF or the deadline (False)."""
        while not stop():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            try:
                message = life.next(min(remaining, 0.2))
            except queue.Empty:
                continue
            if message is None:
                return False
            self.handle(life, message)
        return True


def run_load(
    *,
    sessions: int,
    attempts_per_session: int,
    seed: int,
    workdir: Path,
    kill_midway: bool = True,
) -> LoadReport:
    """Run the load in ``workdir`` (a fresh ``data`` directory inside) and report."""
    start = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "data", ignore_errors=True)
    for name in ("oracle.log", "host.err", "zygote.err"):
        (workdir / name).unlink(missing_ok=True)
    load = _Load(workdir, seed, sessions, attempts_per_session)
    total = sessions * attempts_per_session
    deadline = start + max(SETTLE_MIN_SECONDS, total * SETTLE_SECONDS_PER_ATTEMPT)
    args = {
        "data_dir": str(workdir / "data"),
        "seed": seed,
        "child_seconds": (0.1, 0.5),
        "lease_ttl": 2.0,
        "tap": False,
    }
    kills = 0
    zygote = Zygote(workdir)
    try:
        life = zygote.spawn({**args, "seed": load.rng.randrange(1 << 30)}, {}, load.log)
        _open_sessions(load, life, deadline)
        _ask(load, life)
        if kill_midway:
            load.pump(life, deadline, lambda: sum(load.delegated.values()) >= total // 2)
            life.kill()
            for message in life.drain():
                load.handle(life, message)
            _died(load, life)
            kills += 1
            load.log.note("killed", pid=life.pid, delegated=sum(load.delegated.values()))
            load.log.sync()
            counts = _stored_counts(workdir)
            for sid in load.sessions:
                load.delegated[sid] = counts.get(sid, 0)
            load.done.clear()
            life = zygote.spawn({**args, "seed": load.rng.randrange(1 << 30)}, {}, load.log)
            _open_sessions(load, life, deadline)
            _ask(load, life)
        settled = _settle(load, life, deadline)
        if not settled:
            load.violations.append(f"the load did not settle in time (last status {load.status})")
        status = life.close(30.0)
        _died(load, life)
        if status != 0:
            load.violations.append(f"the host exited with status {status}")
    finally:
        zygote.close()
        load.log.close()
    return _report(load, workdir, total, kills, time.monotonic() - start)


def _died(load: _Load, life: HostLife) -> None:
    known = load.ledger.lives.get(life.generation)
    if known is not None:
        known.died = life.died


def _open_sessions(load: _Load, life: HostLife, deadline: float) -> None:
    load.ready.clear()
    load.pump(life, deadline, lambda: life.generation != 0 and life.inbox.qsize() == 0)
    for sid in load.sessions:
        life.send(op="session", sid=sid)
    load.pump(life, deadline, lambda: load.ready >= set(load.sessions))
    for sid in load.sessions:
        if sid not in load.parents:
            life.send(op="run", sid=sid, key=f"parent-{sid}", k=0)
    load.log.sync()
    load.pump(life, deadline, lambda: set(load.parents) >= set(load.sessions))


def _ask(load: _Load, life: HostLife) -> None:
    for sid in load.sessions:
        missing = load.per_session - load.delegated[sid]
        if missing > 0:
            life.send(
                op="delegate",
                sid=sid,
                parent=load.parents[sid],
                n=missing,
                base=load.delegated[sid],
            )
        else:
            load.done.add(sid)
    load.log.sync()


def _settle(load: _Load, life: HostLife, deadline: float) -> bool:
    def settled() -> bool:
        status = load.status
        return (
            load.done >= set(load.sessions)
            and status.get("active") == 0
            and status.get("undelivered") == 0
            and status.get("live") == 0
            and status.get("local") == 0
        )

    # A status asked before the last delegation was accepted is stale (the host answers
    # commands concurrently): wait for every session's delegate-done, then ask.
    load.pump(life, deadline, lambda: load.done >= set(load.sessions))
    while time.monotonic() < deadline:
        load.status = {}
        life.send(op="status")
        if load.pump(life, min(deadline, time.monotonic() + 0.25), settled):
            return True
        if life.eof:
            return False
    return False


def _stored_counts(workdir: Path) -> dict[str, int]:
    store = LmdbSessionStore(workdir / "data" / "lmdb")
    try:
        counts: dict[str, int] = {}
        for record in store.list_attempts(NAMESPACE):
            counts[record.parent_session_id] = counts.get(record.parent_session_id, 0) + 1
        return counts
    finally:
        store.close()


def _report(load: _Load, workdir: Path, total: int, kills: int, seconds: float) -> LoadReport:
    violations = list(load.violations)
    store = LmdbSessionStore(workdir / "data" / "lmdb")
    try:
        snapshot = take_snapshot(store, NAMESPACE)
    finally:
        store.close()
    result = check_snapshot(snapshot, load.ledger, final=True)
    violations.extend(result.violations)
    # Completed continuation runs per attempt: a continuation that died with its host
    # releases the result to one replacement, so only completed ones may not repeat.
    continuations: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    for run in snapshot.runs:
        if run.trigger_type == ASYNC_SUBAGENT_RESULT and str(run.status) == "completed":
            attempt_id = run.metadata.get("async_subagent.attempt_id", "")
            continuations.setdefault(attempt_id, []).append(run.run_id)
            texts[run.run_id] = "".join(part.text for part in run.input)
    attempts = {record.attempt_id: record for record in snapshot.attempts}
    completed = delivered = duplicates = lost = interrupted = 0
    for attempt_id in load.ledger.committed_attempts - set(attempts):
        lost += 1
        violations.append(f"attempt {attempt_id} was accepted but is not in the store")
    for record in snapshot.attempts:
        runs = continuations.get(record.attempt_id, [])
        if len(runs) > 1:
            duplicates += 1
        terminal = str(record.execution_status) in {"completed", "failed", "cancelled"}
        if str(record.execution_status) == "completed":
            completed += 1
        elif record.failure_category == "host_process_lost":
            interrupted += 1
        # Delivered with no completed continuation: a parent turn took it (the oracle's
        # consumer invariant checks that its consumer run completed).
        in_turn = not runs
        ok = (
            terminal
            and str(record.delivery_status) == "delivered"
            and (in_turn or (len(runs) == 1 and consumer_of(record) == runs[0]))
        )
        if ok and runs and str(record.execution_status) == "completed":
            content = record.result_ref.content if record.result_ref else None
            ok = content is None or content in texts[runs[0]]
        if ok:
            delivered += 1
        else:
            lost += 1
    if len(attempts) != total:
        violations.append(f"{len(attempts)} attempts in the store, {total} asked for")
    if duplicates:
        violations.append(f"{duplicates} attempts have more than one completed continuation run")
    if lost:
        violations.append(f"{lost} attempts lost (not terminal and delivered exactly once)")
    return LoadReport(
        sessions=len(load.sessions),
        attempts=len(attempts),
        completed=completed,
        delivered=delivered,
        duplicates=duplicates,
        lost=lost,
        kills=kills,
        violations=tuple(violations),
        seconds=round(seconds, 3),
        invariants_checked=result.checks,
        attempts_per_second=round(len(attempts) / seconds, 1) if seconds else 0.0,
        interrupted=interrupted,
    )
