"""Two real host processes on one data directory, each with its own owner identity.

Host A (``serve --stdio``, owner ``host-a``) runs a parent that delegates in the
background to a gated child (it runs until the test's release file appears).
Host B (another process, ``--shared``, owner ``host-b``) leaves A's live
attempt alone for as long as A heartbeats, across many of its maintenance
ticks. Once A is frozen (SIGSTOP) its lease lapses at store time; only then
does B record the attempt as failed / ``host_process_lost`` and admit exactly
one continuation run for it. Resumed (SIGCONT) and released, A can never
revive the attempt: no second terminal outcome, no renewed heartbeat, no
second continuation, even through its own shutdown reconciliation.

The test reads the store itself through ``storage.LmdbSessionStore`` (opened
once, before any host is frozen, and closed at the end) and drives both hosts
over JSON-RPC with a deadline on every wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from host_helpers import REPO, SCRIPTED, cli_env

from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord, LmdbSessionStore, RunRecord
from subagents._reliability._scripted import planner_config

pytestmark = pytest.mark.timeout(90)

LEASE_TTL = 2.0  # heartbeats every LEASE_TTL / 3
TICK = "0.1"  # both hosts' maintenance tick, seconds
DEADLINE = 30.0  # any single wait; generous for a loaded 2-core machine
PROBE = 0.05  # poll interval of a bounded store poll (not a synchronization)
CONFIG = planner_config("gated:x", lease_ttl=LEASE_TTL)
SESSION = "s1"


class Unanswered(Exception):
    """No reply within the deadline."""


class HostProc:
    """One scripted ``serve --stdio`` host subprocess; replies by id, events collected."""

    def __init__(self, name: str, *args: str, env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPTED), "serve", "--stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**cli_env(), **env},
            cwd=REPO,
        )
        self.frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.next_id = 0
        self.threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.frames.put(json.loads(line))
        self.frames.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def tail(self) -> str:
        return "".join(self.stderr[-20:])

    def _pump(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Unanswered
        try:
            frame = self.frames.get(timeout=left)
        except queue.Empty:
            raise Unanswered from None
        assert frame is not None, f"host {self.name} exited: {self.tail()}"
        if frame.get("id") is not None:
            self.replies[int(frame["id"])] = frame
        elif frame.get("method") == "events.event":
            self.events.append(frame["params"]["event"])

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def reply(self, request_id: int, timeout: float = DEADLINE) -> Any:
        deadline = time.monotonic() + timeout
        while request_id not in self.replies:
            self._pump(deadline)
        frame = self.replies.pop(request_id)
        assert "result" in frame, (frame, self.tail())
        return frame["result"]

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.reply(self.send(method, params))

    def wait_event(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE
        seen = 0
        while True:
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            try:
                self._pump(deadline)
            except Unanswered:
                raise AssertionError(f"host {self.name}: no such event; {self.tail()}") from None

    def drain(self) -> None:
        """Take every frame already received (events that arrived meanwhile)."""
        with contextlib.suppress(Unanswered):
            while not self.frames.empty():
                self._pump(time.monotonic() + 1.0)

    def stop(self) -> int:
        """Resume if frozen, SIGTERM, wait; SIGKILL on timeout. Idempotent."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=DEADLINE)
        for thread in self.threads:
            thread.join(timeout=5.0)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return code

    def shutdown(self) -> int:
        """``shutdown``, then end of input: the host's own clean exit."""
        self.result("shutdown")
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=DEADLINE)
        finally:
            self.stop()


@pytest.fixture
def hosts() -> Iterator[list[HostProc]]:
    started: list[HostProc] = []
    try:
        yield started
    finally:
        for host in started:
            host.stop()


def poll(what: str, probe: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    """``probe()`` until it returns something truthy, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(PROBE)  # the probe interval of a bounded poll


def continuations(store: LmdbSessionStore, attempt_id: str) -> list[RunRecord]:
    return [
        run
        for run in store.list_runs(SESSION)
        if run.trigger_type == ASYNC_SUBAGENT_RESULT
        and run.metadata.get("async_subagent.attempt_id") == attempt_id
    ]


def test_second_host_process_takes_over_only_after_the_lease_expires(
    tmp_path: Path, hosts: list[HostProc]
) -> None:
    config = tmp_path / "host.toml"
    config.write_text(CONFIG)
    data = tmp_path / "data"
    release = tmp_path / "release"
    env = {"SUBAGENTS_TEST_RELEASE": str(release)}
    common = ("--config", str(config), "--data-dir", str(data), "--tick", TICK)

    # Host A owns the data directory (it holds host.lock) as owner host-a.
    a = HostProc("A", *common, "--owner", "host-a", env=env)
    hosts.append(a)
    info_a = a.result("diagnostics.get")
    assert info_a["host_instance_id"] == "host-a"
    a.result("session.create", {"session_id": SESSION})
    a.result("events.subscribe", {"session_id": SESSION})
    parent = a.result("run.start", {"session_id": SESSION, "input": "plan the release"})
    done = a.wait_event(lambda e: e["kind"] == "run.completed" and e["run_id"] == parent["run_id"])
    assert done["data"] == {"output": "delegated; carrying on"}

    store = LmdbSessionStore(data / "lmdb")  # read only from here; opened before any freeze
    try:

        def running_under_a() -> AttemptRecord | None:
            found = store.list_attempts("default")
            if len(found) == 1 and str(found[0].execution_status) == "running":
                return found[0]
            return None

        record: AttemptRecord = poll("the attempt running under host A", running_under_a)
        attempt_id = record.attempt_id
        assert record.owner_lease.host_instance_id == "host-a"
        assert record.parent_session_id == SESSION

        # Host B: a second process, another owner, sharing the live host's directory.
        b = HostProc("B", *common, "--shared", "--owner", "host-b", env=env)
        hosts.append(b)
        info_b = b.result("diagnostics.get")
        assert info_b["host_instance_id"] == "host-b"
        assert info_b["fencing_generation"] > info_a["fencing_generation"]
        b.result("events.subscribe", {"session_id": SESSION})
        seen_by_b = store.load_attempt(attempt_id).owner_lease

        # B leaves the live foreign attempt alone while A heartbeats: wait until a
        # lease that was live when B came up has been expired for longer than many
        # of B's ticks, had A not renewed it; every observation is still A's.
        def renewed_past_old_lease() -> bool:
            now = store.load_attempt(attempt_id)
            assert str(now.execution_status) == "running", now
            assert now.owner_lease.host_instance_id == "host-a"
            assert now.owner_lease.fencing_generation == info_a["fencing_generation"]
            assert now.continuation_run_id is None
            return now.owner_lease.heartbeat_at > seen_by_b.lease_expires_at + 1.0

        poll("host A to heartbeat past the lease B first saw", renewed_past_old_lease)
        assert b.result("diagnostics.get")["uptime_seconds"] > 1.0  # >= 10 ticks of B
        b.drain()
        assert not [e for e in b.events if e["kind"] in {"run.admitted", "run.failed"}]
        assert continuations(store, attempt_id) == []

        # Freeze A: its heartbeats stop. If A froze inside a write transaction B
        # could not write (one LMDB writer): a write through B proves it did not;
        # otherwise thaw A and freeze it again.
        for round_no in range(5):
            a.proc.send_signal(signal.SIGSTOP)
            probe = b.send("session.create", {"session_id": f"probe-{round_no}"})
            try:
                b.reply(probe, timeout=5.0)
                break
            except Unanswered:
                a.proc.send_signal(signal.SIGCONT)
                b.reply(probe)
        else:
            pytest.fail("host A never froze outside a write transaction")
        frozen = store.load_attempt(attempt_id)  # A's last word: final while it is stopped
        lease = frozen.owner_lease
        assert lease.host_instance_id == "host-a"

        def reconciled() -> AttemptRecord | None:
            now = store.load_attempt(attempt_id)
            if str(now.execution_status) == "running":
                # Left alone as long as the lease is live at store time.
                assert now.owner_lease == lease
                return None
            return now

        lost: AttemptRecord = poll("host B to reconcile the lapsed attempt", reconciled)
        assert str(lost.execution_status) == "failed"
        assert lost.failure_category == "host_process_lost"
        assert lost.terminal_at is not None
        assert lost.terminal_at >= lease.lease_expires_at  # only after the lease expired
        assert lost.terminal_fingerprint is not None
        admitted = b.wait_event(
            lambda e: (
                e["kind"] == "run.admitted"
                and e["data"].get("trigger_type") == ASYNC_SUBAGENT_RESULT
            )
        )
        assert admitted["data"]["attempt_id"] == attempt_id
        finished = b.wait_event(
            lambda e: e["kind"] == "run.completed" and e["run_id"] == admitted["run_id"]
        )
        assert finished["data"]["output"].startswith("continued: ")
        lost = store.load_attempt(attempt_id)
        assert lost.continuation_run_id == admitted["run_id"]
        [continuation] = continuations(store, attempt_id)
        assert continuation.run_id == admitted["run_id"]
        assert "host process lost" in continuation.input[0].text

        # Thaw A and let its child finish: its heartbeat and terminal commit are
        # fenced off; then A shuts down (its own reconciliation included).
        a.proc.send_signal(signal.SIGCONT)
        assert a.result("diagnostics.get")["host_instance_id"] == "host-a"
        release.touch()
        # A's first heartbeat after the thaw finds the attempt terminalized by B.
        poll("host A to find its lease lost", lambda: "owner lease lost" in "".join(a.stderr))

        def unchanged() -> None:
            now = store.load_attempt(attempt_id)
            assert now.terminal_fingerprint == lost.terminal_fingerprint
            assert now.failure_category == "host_process_lost"
            assert now.owner_lease == lost.owner_lease  # no revived heartbeat
            assert now.result_ref == lost.result_ref

        # Observe for a few of A's heartbeat intervals: B's record never moves.
        window = time.monotonic() + 2 * LEASE_TTL
        while time.monotonic() < window:
            unchanged()
            time.sleep(PROBE)  # the probe interval of an observation window
        assert a.shutdown() == 0, a.tail()
        unchanged()
        assert b.shutdown() == 0, b.tail()

        final = store.load_attempt(attempt_id)
        assert final.terminal_fingerprint == lost.terminal_fingerprint
        assert final.terminal_at == lost.terminal_at
        assert final.owner_lease == lost.owner_lease
        assert [r.attempt_id for r in store.list_attempts("default")] == [attempt_id]
        assert [r.run_id for r in continuations(store, attempt_id)] == [admitted["run_id"]]
        runs = store.list_runs(SESSION)
        assert [r.trigger_type for r in runs] == ["rpc", ASYNC_SUBAGENT_RESULT]
        assert all(str(r.status) == "completed" for r in runs)
    finally:
        store.close()
    assert os.path.exists(data / "host.lock")
