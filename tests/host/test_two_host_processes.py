"""Two real host processes on one data directory, each with its own owner identity.

Host A (``serve --stdio --shared``, owner ``host-a``) runs a parent that delegates in the
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

import functools
import os
import signal
from pathlib import Path

import pytest
from host_processes import HostProc, Unanswered, continuations, observe, poll_until

from properties.reliability._scripted import planner_config
from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord, LmdbSessionStore

pytestmark = pytest.mark.timeout(90)

LEASE_TTL = 2.0  # heartbeats every LEASE_TTL / 3
TICK = "0.1"  # both hosts' maintenance tick, seconds
DEADLINE = 30.0  # any single wait; generous for a loaded 2-core machine
CONFIG = planner_config("gated:x", lease_ttl=LEASE_TTL)
SESSION = "s1"
poll = functools.partial(poll_until, timeout=DEADLINE)


def test_second_host_process_takes_over_only_after_the_lease_expires(
    tmp_path: Path, hosts: list[HostProc]
) -> None:
    config = tmp_path / "host.toml"
    config.write_text(CONFIG)
    data = tmp_path / "data"
    release = tmp_path / "release"
    env = {"SUBAGENTS_TEST_RELEASE": str(release)}
    common = ("--config", str(config), "--data-dir", str(data), "--tick", TICK)

    # Host A serves the data directory (a shared hold on host.lock) as owner host-a.
    a = HostProc("A", *common, "--shared", "--owner", "host-a", env=env, deadline=DEADLINE)
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
        b = HostProc("B", *common, "--shared", "--owner", "host-b", env=env, deadline=DEADLINE)
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
        assert continuations(store, SESSION, attempt_id) == []

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
        [continuation] = continuations(store, SESSION, attempt_id)
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
        observe(unchanged, 2 * LEASE_TTL)
        assert a.shutdown() == 0, a.tail()
        unchanged()
        assert b.shutdown() == 0, b.tail()

        final = store.load_attempt(attempt_id)
        assert final.terminal_fingerprint == lost.terminal_fingerprint
        assert final.terminal_at == lost.terminal_at
        assert final.owner_lease == lost.owner_lease
        assert [r.attempt_id for r in store.list_attempts("default")] == [attempt_id]
        assert [r.run_id for r in continuations(store, SESSION, attempt_id)] == [admitted["run_id"]]
        runs = store.list_runs(SESSION)
        assert [r.trigger_type for r in runs] == ["rpc", ASYNC_SUBAGENT_RESULT]
        assert all(str(r.status) == "completed" for r in runs)
    finally:
        store.close()
    assert os.path.exists(data / "host.lock")
