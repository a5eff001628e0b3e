"""One ``SupervisorPools`` shared by many supervisors: an idle session holds no thread,
the host-wide live-attempt bound refuses with ``HostBusy``, and shutdown meets its
deadline at any session count."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator

import pytest
from actor_helpers import FAST, our_actors, our_threads

from actors import (
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    OwnerIdentity,
    PoolLimits,
    SupervisorPools,
)
from actors._supervisor import SupervisorActor
from storage import ManualClock, MemorySessionStore, SeededIds

SESSIONS = 300
LIMITS = PoolLimits(actor_threads=3, heartbeat_threads=2, delivery_threads=2)
POOL_THREADS = 3 + 2 + 2 + 1  # the three pools and the children's loop
OWNER = OwnerIdentity(host_instance_id="host-shared")


async def completes(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"done {request.attempt_id}")


def os_threads() -> int:
    """The process's OS threads, as the kernel counts them."""
    return len(os.listdir("/proc/self/task"))


class Host:
    """Supervisors of one store over one set of pools; stops everything at the end."""

    def __init__(self, pools: SupervisorPools) -> None:
        self.pools = pools
        self.clock = ManualClock()
        self.store = MemorySessionStore(clock=self.clock)
        self.supervisors: list[BackgroundSubagentSupervisor] = []

    def supervisor(self, session_id: str, **kwargs: object) -> BackgroundSubagentSupervisor:
        supervisor = BackgroundSubagentSupervisor(
            store=self.store,
            owner=OWNER,
            session_id=session_id,
            limits=FAST,
            clock=self.clock,
            ids=SeededIds(len(self.supervisors) + 1),
            pools=self.pools,
            **kwargs,  # type: ignore[arg-type]
        )
        self.supervisors.append(supervisor)
        return supervisor

    def close(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for supervisor in self.supervisors:
            supervisor.shutdown_checked_sync(max(0.0, deadline - time.monotonic()))
        assert self.pools.stop(max(0.0, deadline - time.monotonic()))


@pytest.fixture
def host() -> Iterator[Host]:
    made = Host(SupervisorPools(LIMITS))
    yield made
    for supervisor in made.supervisors:
        supervisor.shutdown(1.0)
    made.pools.stop(5.0)
    made.store.close()
    assert our_actors() == []
    assert our_threads() == []


def test_sessions_that_delegated_and_went_idle_hold_no_threads(host: Host) -> None:
    before_python, before_os = threading.active_count(), os_threads()
    called = threading.Semaphore(0)
    for n in range(SESSIONS):
        # Every other session has a completion callback (the delivery pool's work).
        callback = (lambda result: called.release()) if n % 2 else None
        supervisor = host.supervisor(f"session-{n}", runner=completes, on_complete=callback)
        accepted = supervisor.delegate_sync("child", f"task {n}")
        if callback is None:
            assert supervisor.wait_sync(accepted.attempt_id, 10).status == "completed"
    for _ in range(SESSIONS // 2):
        assert called.acquire(timeout=10)
    # The spec's rule holds: one supervisor per session, kept, but as a record only.
    supervisors = [a for a in our_actors() if a.actor_class is SupervisorActor]
    assert len(supervisors) == SESSIONS
    assert threading.active_count() - before_python <= POOL_THREADS
    assert os_threads() - before_os <= POOL_THREADS
    assert len(host.pools.threads()) <= POOL_THREADS
    assert host.pools.live_attempts == 0

    started = time.monotonic()
    host.close(timeout=5.0)
    assert time.monotonic() - started < 5.0
    assert not any(t.is_alive() for t in host.pools.threads())
    assert threading.active_count() <= before_python


def test_a_full_host_refuses_with_host_busy_and_a_retry_hint() -> None:
    pools = SupervisorPools(PoolLimits(max_live_attempts=2, retry_after_seconds=0.5))
    made = Host(pools)
    release = asyncio.Event()
    running = threading.Semaphore(0)

    async def gated(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        running.release()
        await release.wait()
        return ChildOutcome.completed("released")

    try:
        first, second, third = (made.supervisor(s, runner=gated) for s in ("a", "b", "c"))
        held = first.delegate_sync("child", "one")
        second.delegate_sync("child", "two")
        with pytest.raises(BackgroundSubagentError.HostBusy) as refused:
            third.delegate_sync("child", "three")
        assert refused.value.fields == {
            "bound": "max_live_attempts",
            "limit": 2,
            "retry_after_seconds": 0.5,
        }
        # Nothing was accepted for the refused session.
        assert made.store.list_attempts("default", "c") == []
        assert running.acquire(timeout=10) and running.acquire(timeout=10)
        pools.loop.call_soon_threadsafe(release.set)
        assert first.wait_sync(held.attempt_id, 10).status == "completed"
        # A slot is free again: the retry is admitted.
        retried = third.delegate_sync("child", "three")
        assert third.wait_sync(retried.attempt_id, 10).status == "completed"
        made.close(timeout=5.0)
    finally:
        for supervisor in made.supervisors:
            supervisor.shutdown(1.0)
        pools.stop(5.0)


def test_one_session_shutting_down_leaves_the_shared_pools_serving(host: Host) -> None:
    leaving, staying = host.supervisor("leaving", runner=completes), host.supervisor("staying")
    accepted = leaving.delegate_sync("child", "go")
    assert leaving.wait_sync(accepted.attempt_id, 10).status == "completed"
    leaving.shutdown_checked_sync(5.0)
    with pytest.raises(BackgroundSubagentError.Closing):
        leaving.delegate_sync("child", "again")
    later = staying.delegate_sync("child", "go", runner=completes)
    assert staying.wait_sync(later.attempt_id, 10).status == "completed"


def test_pools_are_passed_whole_not_beside_a_loop() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="SupervisorPools"):
            BackgroundSubagentSupervisor(pools=SupervisorPools(), loop=loop)
    finally:
        loop.close()


@pytest.mark.parametrize(
    "field", ["actor_threads", "heartbeat_threads", "delivery_threads", "max_live_attempts"]
)
def test_pool_limits_are_positive_integers(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PoolLimits(**{field: 0})
