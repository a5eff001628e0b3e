"""What the demo reads back from its data directory, and the story's invariants.

The demo reads the store straight from disk (a shared LMDB open beside the
serving host), so what it prints and checks is what was committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord, RunRecord, StoreError

from ..._host._datadir import open_store
from ..._host._methods import HostEvent
from ._common import SESSION, STEP_TIMEOUT, TERMINAL, DemoError
from ._process import HostProcess


@dataclass
class Snapshot:
    attempts: list[AttemptRecord]
    runs: list[RunRecord]
    events: list[HostEvent] = field(default_factory=list)


def snapshot(data_dir: Path, *, events: bool = False) -> Snapshot:
    """Attempts and runs of the demo session, read straight from the store."""
    opened = open_store(data_dir, lock=False)
    try:
        assert opened.store is not None
        attempts = sorted(opened.store.list_attempts("default"), key=lambda r: r.accepted_at)
        try:
            runs = sorted(opened.store.list_runs(SESSION), key=lambda r: r.sequence_no)
        except StoreError:  # no session yet
            runs = []
        log = opened.events.replay(SESSION, 0, 100_000) if events else []
        return Snapshot(attempts, runs, log)
    finally:
        opened.close()


def wait_store(
    data_dir: Path, what: str, predicate: Callable[[Snapshot], bool], timeout: float = STEP_TIMEOUT
) -> Snapshot:
    """Probe the store until ``predicate`` holds (leases lapse in real time)."""
    deadline = time.monotonic() + timeout
    while True:
        found = snapshot(data_dir)
        if predicate(found):
            return found
        if time.monotonic() > deadline:
            raise DemoError(f"timed out waiting for {what}")
        time.sleep(0.05)  # probe interval of a poll on the store, not a synchronization


def wait_file(path: Path, what: str, host: HostProcess) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not path.exists():
        if host.proc.poll() is not None:
            raise DemoError(f"host {host.owner} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise DemoError(f"timed out waiting for {what}")
        time.sleep(0.02)  # probe interval of a file written by the host's child


def continuation_runs(snap: Snapshot) -> dict[str, list[RunRecord]]:
    found: dict[str, list[RunRecord]] = {}
    for run in snap.runs:
        if run.trigger_type == ASYNC_SUBAGENT_RESULT:
            found.setdefault(run.metadata.get("async_subagent.attempt_id", "?"), []).append(run)
    return found


def settled(snap: Snapshot, names: set[str]) -> bool:
    """Every attempt of ``names`` terminal and delivered, and no run live."""
    mine = [a for a in snap.attempts if a.subagent_name in names]
    return (
        bool(mine)
        and all(
            str(a.execution_status) in TERMINAL and str(a.delivery_status) == "delivered"
            for a in mine
        )
        and all(str(r.status) in TERMINAL for r in snap.runs)
    )


def check(snap: Snapshot) -> list[str]:
    """The story's invariants; an empty list when they all hold."""
    problems: list[str] = []
    conts = continuation_runs(snap)
    for record in snap.attempts:
        name = f"{record.subagent_name} {record.attempt_id}"
        if str(record.execution_status) not in TERMINAL or record.terminal_fingerprint is None:
            problems.append(f"{name} has no terminal record")
        linked = [r.run_id for r in conts.get(record.attempt_id, [])]
        if str(record.delivery_status) == "delivered" and record.continuation_run_id is not None:
            if linked != [record.continuation_run_id]:
                problems.append(f"{name}: continuation runs {linked}")
        elif len(linked) > 1:
            problems.append(f"{name}: {len(linked)} continuation runs")
    if {r.subagent_name for r in snap.attempts} != {"researcher", "reviewer", "debugger"}:
        problems.append("the store does not hold the three attempts of the story")
    return problems
