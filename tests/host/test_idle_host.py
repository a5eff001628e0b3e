"""A host with many sessions that delegated and went idle: its threads are the
configured pools' (not a few per session), a pool bound is a typed config key,
and closing meets the shutdown deadline at that session count."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest
from host_helpers import CONFIG, memory_service

from actors._messages import WatchRequest
from statemachines import RunStatus
from storage import AdmissionLease, RunRecord, SessionRecord
from subagents import HostConfigError
from subagents._delegation._background import _shared_state
from subagents._host import open_host, parse_host_config
from subagents._host._service import FULL_SCAN_TICKS, SWEEP_SHARE, SWEEP_TICKS, _transition

SESSIONS = 300
POOLS = """
actor_threads = 3
heartbeat_threads = 1
delivery_threads = 1
"""
POOL_THREADS = 3 + 1 + 1 + 1  # the pools and the children's loop
EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""asyncio's default executor (the coroutine twins' blocking steps run there)."""


def pooled_config() -> str:
    return CONFIG.replace("lease_ttl = 5.0", "lease_ttl = 5.0" + POOLS)


async def test_idle_sessions_cost_the_pools_not_threads_per_session() -> None:
    service = memory_service(pooled_config())
    await service.start()
    before_python = threading.active_count()
    before_os = len(os.listdir("/proc/self/task"))
    try:
        for n in range(SESSIONS):
            supervisor = service.supervisor(f"session-{n}")
            accepted = await supervisor.delegate("research", f"task {n}")
            waited = await supervisor.wait(accepted.attempt_id, 10)
            assert waited.status == "completed", waited
        grown_python = threading.active_count() - before_python
        grown_os = len(os.listdir("/proc/self/task")) - before_os
        # Before shared pools: about 6 threads per session (1,800 here).
        assert grown_python <= POOL_THREADS + EXECUTOR_THREADS
        assert grown_os <= POOL_THREADS + EXECUTOR_THREADS
        named = [t for t in threading.enumerate() if t.name.startswith("subagents-")]
        assert len(named) <= POOL_THREADS, [t.name for t in named]
        assert service.pools.live_attempts == 0
    finally:
        started = time.monotonic()
        await service.close()
        closed_in = time.monotonic() - started
    assert closed_in < service.shutdown_timeout
    assert not any(t.is_alive() for t in service.pools.threads())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("actor_threads", 0),
        ("heartbeat_threads", 65),
        ("delivery_threads", 0),
        ("max_live_attempts", 0),
        ("max_child_histories", -1),
    ],
)
def test_a_pool_bound_out_of_range_is_refused_naming_its_key(key: str, value: int) -> None:
    text = CONFIG.replace("lease_ttl = 5.0", f"lease_ttl = 5.0\n{key} = {value}")
    with pytest.raises(HostConfigError) as refused:
        parse_host_config(text)
    assert refused.value.fields["key"] == f"host.{key}"


def test_the_pool_bounds_reach_the_shared_pools() -> None:
    text = CONFIG.replace("lease_ttl = 5.0", "lease_ttl = 5.0\nmax_live_attempts = 7" + POOLS)
    service = memory_service(text)
    limits = service.pools.limits
    assert (limits.actor_threads, limits.heartbeat_threads, limits.delivery_threads) == (3, 1, 1)
    assert limits.max_live_attempts == 7


def test_the_child_history_budget_is_the_hosts_and_every_session_shares_it() -> None:
    from subagents._delegation._background import child_histories

    text = CONFIG.replace("lease_ttl = 5.0", "lease_ttl = 5.0\nmax_child_histories = 3")
    service = memory_service(text)
    budgets = {id(child_histories(service.supervisor(f"s{n}"))) for n in range(4)}
    assert budgets == {id(service.pools.extension)}
    assert child_histories(service.supervisor("s0")).limit == 3
    assert memory_service(CONFIG).pools.extension.limit == 1024  # type: ignore[attr-defined]


def test_a_full_scan_reads_one_session_at_a_time_and_keeps_only_unfinished_runs() -> None:
    # The scan for runs a dead host left once held every run of every session at
    # once: the heap's high-water mark grew with the history (issue 16).
    service = memory_service(CONFIG)
    store, now = service.store, service.clock.now()
    for n in range(3):
        sid = f"s{n}"
        store.create_session(
            SessionRecord(session_id=sid, namespace_id="default", created_at=now, updated_at=now)
        )
        for name in ("done", "live"):  # one live run per session at a time
            lease = AdmissionLease(
                admission_id=f"adm-{sid}-{name}",
                host_instance_id="another-host",
                fencing_generation=1,
                lease_expires_at=now + 500.0,
            )
            store.admit_run(
                RunRecord(
                    session_id=sid,
                    run_id=f"{sid}-{name}",
                    created_at=now,
                    updated_at=now,
                    admission_lease=lease,
                )
            )
            if name == "done":
                _transition(
                    store,
                    sid,
                    f"{sid}-done",
                    RunStatus.FAILED,
                    admission_id=lease.admission_id,
                    event_data={},
                )
    read: list[str] = []
    list_runs = store.list_runs

    def counted(session_id: str) -> list[RunRecord]:
        read.append(session_id)
        return list_runs(session_id)

    store.list_runs = counted  # type: ignore[method-assign]
    scan = service._candidate_runs(full=True)
    first = next(scan)
    assert (first.run_id, read) == ("s0-live", ["s0"])
    assert [run.run_id for run in scan] == ["s1-live", "s2-live"]


async def test_an_idle_host_sweeps_every_few_ticks_and_at_once_after_an_end() -> None:
    service = memory_service(CONFIG)  # not started: the ticks are driven here
    try:
        await service.maintain()  # a direct call always sweeps
        assert [service._sweep_due() for _ in range(SWEEP_TICKS - 1)] == [False] * 9
        assert service._sweep_due()  # the backstop for what other hosts did
        await service.maintain(sweep=True)
        assert not service._sweep_due()
        supervisor = service.supervisor("session-1")
        accepted = await supervisor.delegate("research", "task")
        assert (await supervisor.wait(accepted.attempt_id, 10)).status == "completed"
        # An attempt ended here: the next tick sweeps the sessions active here.
        assert service._sweep_due() is None
    finally:
        await service.close()


async def test_a_whole_sweep_that_takes_long_comes_less_often() -> None:
    """A whole sweep reads every retained result of the namespace (24 h of them by
    default). Before: one every SWEEP_TICKS ticks however long it took, so an idle
    host's CPU grew with the namespace's history. Now whole sweeps take at most
    SWEEP_SHARE of the ticks' time: a sweep as long as 100 x SWEEP_SHARE ticks makes
    the next one due 100 ticks later."""
    service = memory_service(CONFIG)  # not started: the ticks are driven here
    try:
        elapsed = [0.0]
        service._sweep_timer = lambda: elapsed[0]
        listed = service.store.list_pending_attempts
        cost = 100 * service.tick_seconds * SWEEP_SHARE

        def slow(namespace_id: str, session_id: str | None = None) -> list[Any]:
            if session_id is None:
                elapsed[0] += cost  # the whole namespace's scan
            return listed(namespace_id, session_id)

        service.store.list_pending_attempts = slow  # type: ignore[method-assign]
        await service.maintain()
        assert not any(service._sweep_due() for _ in range(99))
        assert service._sweep_due()
        service.store.list_pending_attempts = listed  # type: ignore[method-assign]
        await service.maintain(sweep=True)  # a quick one: back to every SWEEP_TICKS
        assert [service._sweep_due() for _ in range(SWEEP_TICKS)][-1]
    finally:
        await service.close()


async def test_a_full_run_scan_that_takes_long_comes_less_often() -> None:
    """The scan for runs a dead host left reads every run of the namespace. Before: one
    every FULL_SCAN_TICKS passes however long it took, so an idle host's CPU grew with
    the run history. Now it is paced like a whole sweep: one as long as 100 x SWEEP_SHARE
    ticks makes the next one due 100 passes later; a quick one goes back to every
    FULL_SCAN_TICKS passes."""
    service = memory_service(CONFIG)  # not started: the passes are driven here
    elapsed = [0.0]
    service._sweep_timer = lambda: elapsed[0]
    scans: list[float] = []
    listed = service.store.list_sessions
    cost = [100 * service.tick_seconds * SWEEP_SHARE]

    def slow(namespace_id: str) -> list[Any]:
        scans.append(elapsed[0])
        elapsed[0] += cost[0]
        return listed(namespace_id)

    service.store.list_sessions = slow  # type: ignore[method-assign]

    def passes_until_a_scan() -> int:
        before = len(scans)
        for n in range(1, 1000):
            service._reconcile_runs()
            if len(scans) > before:
                return n
        raise AssertionError("no full scan in 1,000 passes")

    try:
        assert passes_until_a_scan() == 1  # the first pass scans everything
        assert passes_until_a_scan() == 100
        cost[0] = 0.0
        assert passes_until_a_scan() == 100  # paced by the long one before it
        assert passes_until_a_scan() == FULL_SCAN_TICKS
    finally:
        await service.close()


@pytest.mark.parametrize("tick", [0.0, -1.0, float("nan"), float("inf")])
def test_a_tick_that_is_not_a_positive_number_of_seconds_is_refused(tick: float) -> None:
    """The sweeps' pace divides by the tick: a tick of 0 would fail every tick later."""
    with pytest.raises(ValueError, match="tick_seconds must be a positive number"):
        open_host(memory=True, tick_seconds=tick)


async def test_a_sweep_after_an_end_reads_only_the_sessions_active_here() -> None:
    """Before: every tick after an end (and every run's end) listed the pending
    results of the whole namespace, a scan of every session that ever delegated."""
    service = memory_service(CONFIG)  # not started: the ticks are driven here
    try:
        for n in range(5):  # sessions that delegated earlier and went idle
            supervisor = service.supervisor(f"idle-{n}")
            accepted = await supervisor.delegate("research", "task")
            await supervisor.wait(accepted.attempt_id, 10)
        await service.maintain()  # a whole sweep
        await service.maintain(sweep=None)  # the last to read the sessions touched before
        supervisor = service.supervisor("busy")
        await supervisor.info()  # started (its start counts its own pending results)
        asked: list[str | None] = []
        listed = service.store.list_pending_attempts

        def spy(namespace_id: str, session_id: str | None = None) -> list[Any]:
            asked.append(session_id)
            return listed(namespace_id, session_id)

        service.store.list_pending_attempts = spy  # type: ignore[method-assign]
        accepted = await supervisor.delegate("research", "task")
        await supervisor.wait(accepted.attempt_id, 10)
        sweep = service._sweep_due()
        assert sweep is None
        await service.maintain(sweep=sweep)
        assert asked == ["busy"]
    finally:
        await service.close()


async def test_an_idle_supervisor_hibernates_and_serves_its_session_again() -> None:
    """Issue 16: an idle session keeps its supervisor but not its actor."""
    service = memory_service(CONFIG)
    try:
        supervisor = service.supervisor("session-1")
        accepted = await supervisor.delegate("research", "task")
        assert (await supervisor.wait(accepted.attempt_id, 10)).status == "completed"
        assert supervisor.awake
        assert await service.hibernate_idle() == 1
        assert not supervisor.awake
        assert service.supervisor("session-1") is supervisor  # kept for the lifetime
        again = await supervisor.delegate("research", "more", agent_id=accepted.agent_id)
        assert again.status == "continued"
        assert (await supervisor.wait(again.attempt_id, 10)).status == "completed"
    finally:
        await service.close()


async def test_hibernation_forgets_launches_delivered_elsewhere() -> None:
    """Issue 16. Before: an idle session kept the ids (and their set) of the attempts
    its parent's background tools launched after another consumer (a continuation
    run, a ``wait``) delivered them, until a next parent turn that may never come.
    A result still pending stays launched (the next turn delivers it)."""
    service = memory_service(CONFIG)
    try:
        supervisor = service.supervisor("session-1")
        state = _shared_state(supervisor)
        delivered = await supervisor.delegate("research", "one")
        state.launch(delivered.attempt_id)
        assert (await supervisor.wait(delivered.attempt_id, 10)).status == "completed"
        pending = await supervisor.delegate("research", "two")
        state.launch(pending.attempt_id)
        watched = supervisor._ask(WatchRequest(attempt_id=pending.attempt_id)).result(10)
        assert await asyncio.wrap_future(watched[2]) == "terminal"

        assert await service.hibernate_idle() == 1

        assert state.launched_ids() == {pending.attempt_id}
        assert (await supervisor.wait(pending.attempt_id, 10)).status == "completed"
        assert await service.hibernate_idle() == 1
        assert state.launched is None  # no set left behind
    finally:
        await service.close()
