"""Three real host processes on one PostgreSQL database; one is killed, one goes stale.

Hosts A, B and C (``serve --stdio --store postgresql://...``, owners
``host-a``/``host-b``/``host-c``) each run a parent in a session of their own
that delegates in the background to a gated child (it runs until that host's
release file appears); B's child is released once B's parent run has completed
(released earlier, its result may reach the parent's own next turn in-band, and
no continuation follows). Each host owns its own session's attempt. Then:

1. A is SIGKILLed mid-attempt. Once its lease lapses at database time, a
   surviving host records the attempt as failed / ``host_process_lost`` and
   admits exactly one continuation run for it, which completes.
2. C is frozen (SIGSTOP) mid-attempt: the same happens to its attempt. Thawed
   and released, C is a process with a stale fencing generation: its child's
   result and heartbeats are refused, nothing it does shows in the store or in
   the session's event log.
3. A restarts with the same instance id: it takes a newer fencing generation
   than every earlier process and changes nothing that was already decided.

The test reads the database through its own ``PostgresSessionStore`` and
``PostgresEventLog`` and waits on stdout/stderr lines and bounded store polls,
never on sleeps.
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_helpers import REPO, cli_env
from host_processes import HostProc, continuations, observe, poll_until
from postgres_db import admin_sql, scratch_database

from properties.reliability._scripted import planner_config
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AttemptRecord,
    PostgresSessionStore,
    RunRecord,
    StaleFence,
)
from subagents._host._eventlog import PostgresEventLog

pytestmark = pytest.mark.timeout(180)

# Heartbeats every LEASE_TTL / 3; long enough that a loaded machine keeps a live lease.
LEASE_TTL = 3.0
TICK = "0.1"  # every host's maintenance tick, seconds
DEADLINE = 40.0  # any single wait; generous for a loaded 2-core machine
CONFIG = planner_config("gated:x", lease_ttl=LEASE_TTL)
CHILD_OUTPUT = "three facts from the child"
poll = functools.partial(poll_until, timeout=DEADLINE)


@pytest.fixture
def database() -> Iterator[str]:
    with scratch_database("subagents_multihost") as url:
        yield url


def attempt_of(store: PostgresSessionStore, session_id: str) -> AttemptRecord | None:
    found = [r for r in store.list_attempts("default") if r.parent_session_id == session_id]
    assert len(found) <= 1, found
    return found[0] if found else None


def delivered_once(store: PostgresSessionStore, session_id: str) -> RunRecord | None:
    """The one completed continuation of the session's attempt, once it exists."""
    record = attempt_of(store, session_id)
    if record is None or record.continuation_run_id is None:
        return None
    runs = continuations(store, session_id, record.attempt_id)
    assert len(runs) == 1, runs  # never a second continuation, at any moment
    assert runs[0].run_id == record.continuation_run_id
    return runs[0] if str(runs[0].status) == "completed" else None


def lost_and_delivered(
    store: PostgresSessionStore, session_id: str, owner: str, generation: int
) -> tuple[AttemptRecord, RunRecord]:
    """Wait until the session's attempt is failed/host_process_lost and delivered once."""

    def reconciled() -> AttemptRecord | None:
        record = attempt_of(store, session_id)
        assert record is not None
        if str(record.execution_status) == "running":
            assert record.owner_lease.host_instance_id == owner
            assert record.owner_lease.fencing_generation == generation
            return None
        return record

    lost: AttemptRecord = poll(f"the {owner} attempt to be reconciled", reconciled)
    assert str(lost.execution_status) == "failed"
    assert lost.failure_category == "host_process_lost"
    assert lost.terminal_at is not None
    assert lost.terminal_at >= lost.owner_lease.lease_expires_at  # only once it lapsed
    assert lost.terminal_fingerprint is not None
    run: RunRecord = poll(
        f"the {owner} attempt's continuation",
        lambda: delivered_once(store, session_id),
        explain=lambda: attempt_of(store, session_id),
    )
    assert "host process lost" in run.input[0].text
    assert (run.output_preview or "").startswith("continued: ")
    return store.load_attempt(lost.attempt_id), run


def test_hosts_on_one_database_survive_a_killed_host_and_fence_out_a_stale_one(
    tmp_path: Path, database: str, hosts: list[HostProc]
) -> None:
    url = database
    # A frozen host must not hold row locks forever: the server ends a
    # transaction left idle this long (the README recommends it for hosts).
    admin_sql(
        url,
        f"ALTER DATABASE {url.rsplit('/', 1)[1]} SET idle_in_transaction_session_timeout = '3s'",
    )
    migrate = subprocess.run(
        [sys.executable, "-m", "subagents._cli", "db", "migrate", "--store", url],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stderr
    assert "applied migrations: 1, 2" in migrate.stdout

    config = tmp_path / "host.toml"
    config.write_text(CONFIG)
    release = {name: tmp_path / f"release-{name}" for name in "abc"}
    common = ("--config", str(config), "--store", url, "--tick", TICK)

    def start(name: str) -> HostProc:
        host = HostProc(
            name.upper(),
            *common,
            "--owner",
            f"host-{name}",
            env={"SUBAGENTS_TEST_RELEASE": str(release[name])},
            deadline=DEADLINE,
        )
        hosts.append(host)
        return host

    a, b, c = start("a"), start("b"), start("c")
    info = {
        name: host.result("diagnostics.get") for name, host in zip("abc", (a, b, c), strict=True)
    }
    generations = {name: i["fencing_generation"] for name, i in info.items()}
    assert {i["store"] for i in info.values()} == {"postgresql"}
    assert [info[n]["host_instance_id"] for n in "abc"] == ["host-a", "host-b", "host-c"]
    assert len(set(generations.values())) == 3  # one durable counter, a new value per start

    for name, host in zip("abc", (a, b, c), strict=True):
        host.result("session.create", {"session_id": f"s-{name}"})
        parent = host.result("run.start", {"session_id": f"s-{name}", "input": "plan the release"})
        assert parent["status"] == "admitted"

    store = PostgresSessionStore(url, pool_size=2)
    events = PostgresEventLog(url)
    try:
        # Each host owns its own session's attempt; every parent run completed.
        for name in "abc":

            def parent_done(session_id: str = f"s-{name}") -> bool:
                runs = [r for r in store.list_runs(session_id) if r.trigger_type == "rpc"]
                return len(runs) == 1 and str(runs[0].status) == "completed"

            poll(f"host {name}'s parent run", parent_done)
        # B's child ends only now, after its parent run: the undisturbed path, a
        # continuation. Released before, the child could finish while the parent still
        # ran, and the parent's next turn takes the result in-band (no continuation).
        release["b"].touch()
        for name in "ac":

            def running(session_id: str = f"s-{name}") -> AttemptRecord | None:
                record = attempt_of(store, session_id)
                return record if record and str(record.execution_status) == "running" else None

            record: AttemptRecord = poll(f"host {name}'s attempt running", running)
            assert record.owner_lease.host_instance_id == f"host-{name}"
            assert record.owner_lease.fencing_generation == generations[name]
        b_run: RunRecord = poll(
            "host B's own delivery",
            lambda: delivered_once(store, "s-b"),
            explain=lambda: attempt_of(store, "s-b"),
        )
        assert CHILD_OUTPUT in b_run.input[0].text
        b_attempt = store.load_attempt(b_run.metadata["async_subagent.attempt_id"])
        assert str(b_attempt.execution_status) == "completed"
        assert b_attempt.owner_lease.host_instance_id == "host-b"

        # 1. SIGKILL A mid-attempt: a survivor reconciles it and delivers once.
        a.kill()
        a_lost, a_run = lost_and_delivered(store, "s-a", "host-a", generations["a"])
        assert a.proc.returncode == -signal.SIGKILL

        # The dead host's identity can no longer write its attempt.
        with pytest.raises(StaleFence):
            store.heartbeat_attempt(
                a_lost.attempt_id, "host-a", generations["a"], store.clock.now() + 60
            )

        # 2. Freeze C mid-attempt: B (the one live host) reconciles it and delivers once.
        c.proc.send_signal(signal.SIGSTOP)
        c_lost, c_run = lost_and_delivered(store, "s-c", "host-c", generations["c"])

        def completion_logged() -> int:
            logged = events.replay("s-c", 0, 10_000)
            done = any(e.kind == "run.completed" and e.run_id == c_run.run_id for e in logged)
            return logged[-1].seq if done else 0

        seen_events = poll("B's completion event in the shared log", completion_logged)

        # Thaw C and let its child finish: C still runs with its old generation.
        c.proc.send_signal(signal.SIGCONT)
        release["c"].touch()
        poll("host C to find its lease lost", lambda: "owner lease lost" in "".join(c.stderr))
        assert c.result("diagnostics.get")["fencing_generation"] == generations["c"]

        def unchanged() -> None:
            now = store.load_attempt(c_lost.attempt_id)
            assert now.terminal_fingerprint == c_lost.terminal_fingerprint
            assert now.failure_category == "host_process_lost"
            assert now.owner_lease == c_lost.owner_lease  # no revived heartbeat
            assert now.result_ref == c_lost.result_ref  # the child's late result refused
            assert now.continuation_run_id == c_run.run_id
            assert [r.run_id for r in continuations(store, "s-c", c_lost.attempt_id)] == [
                c_run.run_id
            ]
            assert events.last_seq("s-c") == seen_events  # nothing from C in the log

        # Observe for a few of C's heartbeat intervals: the record never moves.
        observe(unchanged, 2 * LEASE_TTL)
        assert c.shutdown() == 0, c.tail()
        unchanged()

        # 3. A comes back with the same instance id: a newer generation than any
        # earlier process, and nothing already decided changes.
        a2 = start("a")
        again = a2.result("diagnostics.get")
        assert again["host_instance_id"] == "host-a"
        assert again["fencing_generation"] > max(generations.values())
        a2.result("session.get", {"session_id": "s-a"})  # served from the shared database
        assert a2.shutdown() == 0, a2.tail()
        assert b.shutdown() == 0, b.tail()

        final = store.load_attempt(a_lost.attempt_id)
        assert final.terminal_fingerprint == a_lost.terminal_fingerprint
        assert final.owner_lease == a_lost.owner_lease
        assert [r.run_id for r in continuations(store, "s-a", a_lost.attempt_id)] == [a_run.run_id]
        records = store.list_attempts("default")
        assert len(records) == 3
        for record in records:
            assert str(record.delivery_status) == "delivered"
            [run] = continuations(store, record.parent_session_id, record.attempt_id)
            assert run.run_id == record.continuation_run_id
        for session_id in ("s-a", "s-b", "s-c"):
            runs = store.list_runs(session_id)
            assert [r.trigger_type for r in runs] == ["rpc", ASYNC_SUBAGENT_RESULT]
            assert all(str(r.status) == "completed" for r in runs), runs
    finally:
        events.close()
        store.close()
