"""An attempt's lifecycle is one ``transitions`` machine (``actors._machines.ATTEMPT``):
the walks its actor takes for a child that completes, one that ignores cancellation
and one whose owner lease is lost."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from actor_helpers import SupervisorFactory, wait_terminal

from actors import ChildControl, ChildOutcome, ChildRequest
from actors._attempt import AttemptActor
from actors._machines import ATTEMPT, MachinePool
from properties import FaultyStore
from storage import ManualClock, RetryableStorage


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    """attempt_id -> the lifecycle states its actor moved through."""
    seen: dict[str, list[str]] = {}
    original = AttemptActor._to

    def spy(self: AttemptActor, dest: str) -> None:
        original(self, dest)
        seen.setdefault(self.attempt_id, []).append(self.model.state)

    monkeypatch.setattr(AttemptActor, "_to", spy)
    yield seen


def test_the_lifecycle_machine_has_only_its_table_s_moves() -> None:
    model, _machine = MachinePool().acquire("idle")
    assert model.state == "idle"
    assert not any(name.startswith("to_") for name in dir(model))  # no auto transitions
    for final in ATTEMPT.terminal:
        assert not [t for t in ATTEMPT.transitions if t.source == final]
    assert not ATTEMPT.allows("idle", "terminal")  # only a decided outcome is committed


def test_a_completing_child_walks_launch_end_decide_commit(
    make_supervisor: SupervisorFactory, walks: dict[str, list[str]]
) -> None:
    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        return ChildOutcome.completed("ok")

    supervisor = make_supervisor(runner=run)
    attempt = supervisor.delegate_sync("worker", "go").attempt_id
    assert supervisor.wait_sync(attempt, 10).status == "completed"
    assert walks[attempt] == ["running", "finished", "committing", "terminal"]


def test_a_child_ignoring_cancellation_is_decided_while_stopping(
    make_supervisor: SupervisorFactory, walks: dict[str, list[str]]
) -> None:
    started = threading.Event()
    release = asyncio.Event()

    async def stubborn(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await release.wait()  # ignores its cancellation until the test is over
        return ChildOutcome.completed("late")

    supervisor = make_supervisor(runner=stubborn)
    attempt = supervisor.delegate_sync("worker", "go").attempt_id
    assert started.wait(10)
    supervisor.cancel_sync(attempt, "stop")
    waited = supervisor.wait_sync(attempt, 10)
    assert waited.status == "cancelled"
    assert walks[attempt] == ["running", "stopping", "terminal"]
    loop = supervisor._runtime.loop  # type: ignore[union-attr]
    loop.call_soon_threadsafe(release.set)


def test_a_confirmed_owner_loss_ends_the_lifecycle_lost(
    faulty: FaultyStore,
    make_supervisor: SupervisorFactory,
    clock: ManualClock,
    walks: dict[str, list[str]],
) -> None:
    started = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    faulty.fail_always("heartbeat_attempt", lambda: RetryableStorage("x"))
    clock.advance(31)
    faulty.inner.take_over_attempt(attempt, "host-b", 2, clock.now() + 30)
    faulty.fail_always("heartbeat_attempt", None)
    assert wait_terminal(supervisor, attempt) == "lost"
    assert walks[attempt] == ["running", "lost"]
