"""Fixtures: every supervisor a test makes is shut down, and no actor thread leaks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actor_helpers import FAST, SupervisorFactory, our_actors, our_threads

from actors import BackgroundSubagentSupervisor, OwnerIdentity
from properties import FaultyStore
from storage import LmdbSessionStore, ManualClock, MemorySessionStore, SeededIds, SessionStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "lmdb"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(store_kind: str, clock: ManualClock, tmp_path: Path) -> Iterator[SessionStore]:
    inner: SessionStore
    if store_kind == "memory":
        inner = MemorySessionStore(clock=clock)
    else:
        inner = LmdbSessionStore(tmp_path / "store", clock=clock, sync=False)
    yield inner
    inner.close()


@pytest.fixture
def faulty(store: SessionStore) -> FaultyStore:
    return FaultyStore(store)


@pytest.fixture
def make_supervisor(clock: ManualClock) -> Iterator[SupervisorFactory]:
    made: list[BackgroundSubagentSupervisor] = []

    def make(**kwargs: Any) -> BackgroundSubagentSupervisor:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("ids", SeededIds(len(made) + 7))
        kwargs.setdefault("limits", FAST)
        if "store" in kwargs:
            kwargs.setdefault(
                "owner", OwnerIdentity(host_instance_id="host-a", fencing_generation=1)
            )
        supervisor = BackgroundSubagentSupervisor(**kwargs)
        made.append(supervisor)
        return supervisor

    yield make
    errors = []
    for supervisor in made:
        try:
            supervisor.shutdown_checked_sync(5.0)
        except Exception as exc:  # keep shutting the others down, then fail
            errors.append(exc)
            supervisor.shutdown(1.0)
    assert not errors, errors
    assert our_actors() == []
    assert our_threads() == []
