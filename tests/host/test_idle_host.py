"""A host with many sessions that delegated and went idle: its threads are the
configured pools' (not a few per session), a pool bound is a typed config key,
and closing meets the shutdown deadline at that session count."""

from __future__ import annotations

import os
import threading
import time

import pytest
from host_helpers import CONFIG, memory_service

from statemachines import RunStatus
from storage import AdmissionLease, RunRecord, SessionRecord
from subagents import HostConfigError
from subagents._host import parse_host_config
from subagents._host._service import _transition

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
    scan = service._candidate_runs()  # the first pass: a full scan
    first = next(scan)
    assert (first.run_id, read) == ("s0-live", ["s0"])
    assert [run.run_id for run in scan] == ["s1-live", "s2-live"]
