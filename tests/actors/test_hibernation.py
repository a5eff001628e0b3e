"""An idle supervisor hibernates: its actor stops (no actor, no attempt table) and the
next call starts a fresh one from the store, so the supervisor stays one logical object
(issue 16: what an idle session costs)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from actor_helpers import FAST, our_actors

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
from actors._delivery import Deliverer
from actors._messages import WatchRequest
from storage import ManualClock, MemorySessionStore, SeededIds

OWNER = OwnerIdentity(host_instance_id="host-hibernate")


async def completes(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"done {request.prompt}")


async def holds(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    await control.wait_cancelled()
    raise asyncio.CancelledError


@pytest.fixture
def pools() -> Iterator[SupervisorPools]:
    made = SupervisorPools(PoolLimits(actor_threads=2, heartbeat_threads=1, delivery_threads=1))
    yield made
    made.stop(5.0)


def make_supervisor(
    pools: SupervisorPools,
    session_id: str,
    *,
    runner: Any = completes,
    store: MemorySessionStore | None = None,
) -> BackgroundSubagentSupervisor:
    return BackgroundSubagentSupervisor(
        runner=runner,
        store=store or MemorySessionStore(clock=ManualClock()),
        owner=OWNER,
        session_id=session_id,
        limits=FAST,
        ids=SeededIds(7),
        pools=pools,
    )


@pytest.fixture
def supervisor(pools: SupervisorPools) -> Iterator[BackgroundSubagentSupervisor]:
    made = make_supervisor(pools, "session-hibernate")
    yield made
    made.shutdown(2.0)


def test_an_idle_supervisor_stops_its_actor_and_the_next_call_starts_a_fresh_one(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    accepted = supervisor.delegate_sync("research", "one")
    first = supervisor.wait_sync(accepted.attempt_id, 10)
    assert first.status == "completed"
    actors_awake = len(our_actors())
    assert supervisor.awake

    assert supervisor.hibernate()

    assert not supervisor.awake
    assert len(our_actors()) == actors_awake - 1
    # The ended attempt is rebuilt from the store; its result was delivered already.
    again = supervisor.wait_sync(accepted.attempt_id, 1)
    assert again.attempt_id == accepted.attempt_id
    assert again.status == "completed"
    assert supervisor.awake
    # The agent is known again (reloaded from the store): it can be continued.
    continued = supervisor.delegate_sync("research", "two", agent_id=accepted.agent_id)
    assert continued.status == "continued"
    assert supervisor.wait_sync(continued.attempt_id, 10).result == "done two"


def test_a_supervisor_with_an_active_attempt_does_not_hibernate(
    pools: SupervisorPools,
) -> None:
    supervisor = make_supervisor(pools, "session-busy", runner=holds)
    try:
        accepted = supervisor.delegate_sync("research", "held")
        assert not supervisor.hibernate()
        assert supervisor.awake
        supervisor.cancel_sync(accepted.attempt_id, "done with it")
        assert supervisor.wait_sync(accepted.attempt_id, 10).status == "cancelled"
        assert supervisor.hibernate()
    finally:
        supervisor.shutdown(2.0)


def test_a_supervisor_never_started_or_shut_down_has_nothing_to_hibernate(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    assert not supervisor.awake
    assert not supervisor.hibernate()
    supervisor.delegate_sync("research", "one")
    supervisor.shutdown_checked_sync(5.0)
    assert not supervisor.hibernate()
    with pytest.raises(BackgroundSubagentError.Closing):
        supervisor.delegate_sync("research", "after")


def test_a_hibernated_supervisor_shuts_down_at_once(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    accepted = supervisor.delegate_sync("research", "one")
    supervisor.wait_sync(accepted.attempt_id, 10)
    assert supervisor.hibernate()
    supervisor.shutdown_checked_sync(1.0)
    with pytest.raises(BackgroundSubagentError.Closing):
        supervisor.info_sync()


def test_hibernation_forgets_the_deltas_of_results_another_engine_delivered(
    supervisor: BackgroundSubagentSupervisor,
) -> None:
    """Before: a result a host's own deliverer handed to a continuation run left its
    context delta in the supervisor's box for good (one per attempt of an idle session)."""
    accepted = supervisor.delegate_sync("research", "one")
    watched = supervisor._ask(WatchRequest(attempt_id=accepted.attempt_id)).result(10)
    assert watched[2].result(10) == "terminal"
    assert accepted.attempt_id in supervisor.deltas
    other = Deliverer(store=supervisor.store, ids=SeededIds(9), namespace_id="default")
    taken = other.take_pending(supervisor.session_id, None)
    assert [r.attempt_id for r in taken] == [accepted.attempt_id]

    assert supervisor.hibernate()

    assert len(supervisor.deltas) == 0
    assert supervisor.deltas._items is None  # no dict left behind (issue 16)


class CountingStore(MemorySessionStore):
    """Counts the calls that read a session's whole attempt history, and agent lookups."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())
        self.history_reads = 0
        self.agent_lookups = 0

    def list_attempts(self, namespace_id: str, session_id: str | None = None) -> list[Any]:
        self.history_reads += 1
        return super().list_attempts(namespace_id, session_id)

    def find_agent(self, namespace_id: str, session_id: str, agent_id: str) -> str | None:
        self.agent_lookups += 1
        return super().find_agent(namespace_id, session_id, agent_id)


def test_waking_reads_no_attempt_history_and_a_continued_agent_is_looked_up_once(
    pools: SupervisorPools,
) -> None:
    # Each wake (and each new session's first call) used to list the store's whole
    # attempt history to preload the agents: a host's cost per session grew with
    # every session it ever served (the soak slowed 4x from 1,000 to 10,000).
    store = CountingStore()
    supervisor = make_supervisor(pools, "session-history", store=store)
    try:
        accepted = supervisor.delegate_sync("research", "one")
        assert supervisor.wait_sync(accepted.attempt_id, 10).status == "completed"
        assert supervisor.hibernate()
        fresh = supervisor.delegate_sync("research", "two")
        assert supervisor.wait_sync(fresh.attempt_id, 10).status == "completed"
        assert store.history_reads == 0
        # A forgotten agent is still found, by one lookup of that agent (not of the
        # session's history) when it is continued.
        continued = supervisor.delegate_sync("research", "three", agent_id=accepted.agent_id)
        assert continued.status == "continued"
        assert (store.agent_lookups, store.history_reads) == (1, 0)
    finally:
        supervisor.shutdown(2.0)


def test_a_hibernated_supervisor_actor_is_freed_without_the_cyclic_collector() -> None:
    """Issue 16. Before: the stopped actor's inbox kept its bound burst method (actor ->
    inbox -> burst -> actor), so every hibernation left the actor, its runtime and
    attempt table as cyclic garbage, growing the heap until a full collection."""
    pools = SupervisorPools(PoolLimits(actor_threads=1, heartbeat_threads=1, delivery_threads=1))
    supervisor = make_supervisor(pools, "session-freed")
    gc.disable()
    try:
        accepted = supervisor.delegate_sync("research", "one")
        assert supervisor.wait_sync(accepted.attempt_id, 10).status == "completed"
        ref = supervisor._ref
        assert ref is not None
        actor = ref._actor_weakref
        assert actor() is not None
        del ref
        assert supervisor.hibernate()
        # The pool's one thread runs jobs in order: once this one ran, the stopped
        # actor's last burst has returned.
        pools.actors.submit(lambda: None).result(10)
        assert actor() is None
    finally:
        gc.enable()
        supervisor.shutdown(2.0)
        pools.stop(5.0)
