"""Wall-clock steps inside one process leave leases, heartbeats and reconciliation alone.

The embedded stores (memory, LMDB) read the wall clock once, when opened, and
advance with a monotonic source after that (:class:`storage.AnchoredClock`).
A step of ``time.time`` of either sign while a background child attempt is live
must not make the host reconcile its own attempt as lost: the child runs to
completion on its owner and its result becomes one continuation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from host_helpers import Client, next_event, planner

from properties.reliability._scripted import planner_config
from storage import AnchoredClock, LmdbSessionStore, MemorySessionStore
from subagents import FunctionModel, ModelMessage, ModelRequestParameters, default_model_providers
from subagents._host import HostService, parse_host_config
from subagents._host._datadir import open_store

TIMEOUT = 30.0
LEASE_TTL = 2.0

pytestmark = pytest.mark.timeout(120)


class Stepper:
    """A wall source: the real wall clock plus an offset the test steps."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.real = time.time

    def __call__(self) -> float:
        return self.real() + self.offset


class ThreadGate:
    """A child model that blocks (off the host loop) until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    async def __call__(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> str:
        self.entered.set()
        released = await asyncio.to_thread(self.release.wait, TIMEOUT)
        assert released, "the test never released the child"
        return "child finished"


def test_anchored_clock_ignores_steps_of_its_wall_source() -> None:
    wall = Stepper()
    mono = [100.0]
    clock = AnchoredClock(wall=wall, monotonic=lambda: mono[0])
    start = clock.now()
    assert start == pytest.approx(clock.anchor)
    for step in (600.0, -1200.0, 3600.0):
        wall.offset += step
        assert clock.now() == start  # no monotonic time passed: no store time passed
    mono[0] += 2.5
    assert clock.now() == start + 2.5
    assert clock.monotonic() == 102.5


@pytest.mark.parametrize("make", ["memory", "lmdb"])
def test_the_embedded_stores_default_clock_is_anchored(
    make: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemorySessionStore() if make == "memory" else LmdbSessionStore(tmp_path / "lmdb")
    try:
        before = store.clock.now()
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 600.0)
        after = store.clock.now()
        assert before <= after < before + 60.0  # a +600 s step did not move store time
        monkeypatch.setattr(time, "time", lambda: real() - 600.0)
        assert store.clock.now() >= after  # nor did a -600 s one, and time never went back
    finally:
        store.close()


@pytest.mark.parametrize("step", [600.0, -600.0])
async def test_a_wall_clock_step_leaves_a_live_attempt_running_on_its_owner(
    step: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = ThreadGate()
    providers = default_model_providers().copy()
    providers.register("planner", lambda name, settings: FunctionModel(planner))
    providers.register("gate", lambda name, settings: FunctionModel(gate))
    config = parse_host_config(planner_config("gate:x", lease_ttl=LEASE_TTL), providers=providers)
    opened = open_store(None)  # the store exactly as ``serve --memory`` opens it
    service = HostService(
        config,
        store=opened.store,
        events=opened.events,
        clock=opened.store.clock,
        providers=providers,
        tick_seconds=0.05,
        closers=opened.closers,
    )
    await service.start()
    try:
        client = Client(service.dispatcher())
        await client.result("session.create", {"session_id": "s1"})
        parent = await client.result("run.start", {"session_id": "s1", "input": "plan"})
        assert await asyncio.to_thread(gate.entered.wait, TIMEOUT)
        # The parent ends first: a result that ended before the parent's next turn
        # would be consumed by that turn (in-band), not by a continuation run.
        await next_event(service, "s1", "run.completed", parent["run_id"])
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + step)  # the system clock steps
        for _ in range(3):  # reconciliation passes see the stepped wall clock
            await service.maintain()
        gate.release.set()
        admitted = await next_event(service, "s1", "run.admitted")
        while admitted.run_id == parent["run_id"]:
            admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
        assert admitted.data["trigger_type"] == "async_subagent_result"
        await next_event(service, "s1", "run.completed", admitted.run_id)
        attempt = service.store.load_attempt(admitted.data["attempt_id"])
        assert str(attempt.execution_status) == "completed", attempt
        assert attempt.failure_category is None
        assert attempt.owner_lease.host_instance_id == service.host_instance_id
        run = service.store.load_run("s1", admitted.run_id or "")
        assert "child finished" in "".join(part.text for part in run.input)
    finally:
        gate.release.set()
        await service.close()
