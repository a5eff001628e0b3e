"""Exactly-once delivery: callback, wait and the parent's next turn race for one claim."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from actor_helpers import Collector, SupervisorFactory, wait_terminal

from actors import BackgroundResult, ChildControl, ChildOutcome, ChildRequest
from properties import Fault, FaultyStore, Gate
from storage import DeliveryClaim, ManualClock


async def delta_runner(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(
        f"out:{request.prompt}", context_delta={"history": [request.prompt]}, usage={"tokens": 3}
    )


def test_delivery_claims_are_atomic_and_each_result_reaches_the_parent_once(
    make_supervisor: SupervisorFactory,
) -> None:
    collector = Collector()
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return await delta_runner(request, control)

    supervisor = make_supervisor(runner=run, on_complete=collector)
    attempts = [supervisor.delegate_sync("research", str(i)).attempt_id for i in range(4)]
    deliveries: list[tuple[str, str, Any]] = []
    lock = threading.Lock()
    start = threading.Barrier(9)

    def waiter(attempt_id: str) -> None:
        start.wait()
        waited = supervisor.wait_sync(attempt_id, 10)
        if waited.result is not None:
            with lock:
                deliveries.append(("wait", attempt_id, waited.result))
        else:
            assert waited.owned_elsewhere and waited.delivery_status in ("claimed", "delivered")

    def turn() -> None:
        start.wait()
        for _ in range(50):
            for result in supervisor.take_pending_sync():
                with lock:
                    deliveries.append(("turn", result.attempt_id, result.context_delta))

    threads = [threading.Thread(target=waiter, args=(a,)) for a in attempts for _ in range(2)]
    threads.append(threading.Thread(target=turn))
    for thread in threads:
        thread.start()
    gate.open()
    for thread in threads:
        thread.join(20)
    for attempt_id in attempts:
        wait_terminal(supervisor, attempt_id)
    supervisor.shutdown_checked_sync(5)  # drains the callbacks
    for result in collector.results:
        deliveries.append(("callback", result.attempt_id, result.context_delta))
    for attempt_id in attempts:
        assert [d[1] for d in deliveries].count(attempt_id) == 1, deliveries
        assert supervisor.store.load_attempt(attempt_id).delivery_status == "delivered"


def test_the_callback_fires_once_with_the_context_delta(
    make_supervisor: SupervisorFactory,
) -> None:
    collector = Collector()
    supervisor = make_supervisor(runner=delta_runner, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert collector.event.wait(10)
    supervisor.shutdown_checked_sync(5)
    (result,) = collector.results
    assert isinstance(result, BackgroundResult)
    assert (result.attempt_id, result.output, result.context_delta, result.usage) == (
        attempt,
        "out:p",
        {"history": ["p"]},
        {"tokens": 3},
    )
    assert "context_delta" not in result.to_value()
    assert supervisor.take_pending_sync() == []


def test_a_raising_callback_releases_its_claim_so_the_next_turn_gets_the_result(
    make_supervisor: SupervisorFactory,
) -> None:
    calls: list[str] = []
    called = threading.Event()

    def broken(result: BackgroundResult) -> None:
        calls.append(result.attempt_id)
        called.set()
        raise RuntimeError("host bug")

    supervisor = make_supervisor(runner=delta_runner, on_complete=broken)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert called.wait(10)
    supervisor.shutdown_checked_sync(5)
    (pending,) = supervisor.take_pending_sync()
    assert (pending.attempt_id, pending.context_delta) == (attempt, {"history": ["p"]})
    assert calls == [attempt]
    assert supervisor.take_pending_sync() == []


def test_an_async_callback_runs_on_the_supervisor_loop(
    make_supervisor: SupervisorFactory,
) -> None:
    seen: list[bool] = []
    done = threading.Event()

    async def callback(result: BackgroundResult) -> None:
        seen.append(asyncio.get_running_loop() is not None)
        done.set()

    supervisor = make_supervisor(runner=delta_runner, on_complete=callback)
    supervisor.delegate_sync("research", "p")
    assert done.wait(10)
    supervisor.shutdown_checked_sync(5)
    assert seen == [True]
    assert supervisor.take_pending_sync() == []


def test_a_pending_delivery_never_steals_an_unexpired_claim(
    make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    supervisor = make_supervisor(runner=delta_runner)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert wait_terminal(supervisor, attempt) == "terminal"
    supervisor.store.claim_delivery(
        attempt, DeliveryClaim(claim_id="rpc-consumer", deadline=clock.now() + 60)
    )
    assert supervisor.take_pending_sync() == []
    waited = supervisor.wait_sync(attempt, 1)
    assert (waited.owned_elsewhere, waited.delivery_status, waited.result) == (
        True,
        "claimed",
        None,
    )
    clock.advance(61)
    (result,) = supervisor.take_pending_sync()
    assert (result.attempt_id, result.context_delta) == (attempt, {"history": ["p"]})


def test_the_result_and_delta_stay_invisible_until_the_terminal_commit_is_persisted(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    blocked = faulty.plan("commit_terminal", Fault(1, mode="block"))
    supervisor = make_supervisor(runner=delta_runner, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert blocked.entered.wait(10)
    assert supervisor.take_pending_sync() == []
    running = supervisor.wait_sync(attempt, 0)
    # The persisted status: what the child reached rides the blocked terminal commit.
    assert running.timed_out and running.status in ("accepted", "starting", "running")
    blocked.release.set()
    waited = supervisor.wait_sync(attempt, 10)
    assert (waited.status, waited.result) == ("completed", "out:p")
