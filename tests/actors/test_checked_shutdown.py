"""Checked shutdown: admission closes, children stop, work is persisted, no thread survives."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from actor_helpers import Collector, SupervisorFactory, our_actors, our_threads

from actors import (
    BackgroundSubagentError,
    ChildControl,
    ChildOutcome,
    ChildRequest,
)
from properties import FaultyStore, Gate
from storage import RetryableStorage


async def cooperative(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    await control.wait_cancelled()
    return ChildOutcome.completed("stopped early")


def test_shutdown_cancels_children_cooperatively_and_leaves_no_thread(
    make_supervisor: SupervisorFactory,
) -> None:
    collector = Collector()
    supervisor = make_supervisor(runner=cooperative, on_complete=collector)
    attempts = [supervisor.delegate_sync("research", str(i)).attempt_id for i in range(3)]
    assert our_threads() != []
    supervisor.shutdown_checked_sync(5)
    assert our_actors() == [] and our_threads() == []
    for attempt in attempts:
        record = supervisor.store.load_attempt(attempt)
        assert (record.execution_status, record.cancellation_reason) == (
            "cancelled",
            "supervisor shutdown",
        )
    assert sorted(r.attempt_id for r in collector.results) == sorted(attempts)


def test_admission_is_closed_during_and_after_shutdown(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=cooperative)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    supervisor.shutdown_checked_sync(5)
    for call in (
        lambda: supervisor.delegate_sync("research", "again"),
        lambda: supervisor.steer_sync(attempt, "x"),
        lambda: supervisor.cancel_sync(attempt),
        lambda: supervisor.wait_sync(attempt, 0),
    ):
        with pytest.raises(BackgroundSubagentError.Closing):
            call()
    assert [r.attempt_id for r in supervisor.take_pending_sync()] == [attempt]
    supervisor.shutdown_checked_sync(5)  # idempotent


def test_the_child_launches_without_an_execution_write_and_shutdown_cancels_it(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    started = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        return await cooperative(request, control)

    # The durable acceptance is the launch's fence: no execution write comes first
    # (``starting`` goes with the terminal commit, docs/durability.md).
    faulty.fail_always("update_attempt_execution", lambda: RetryableStorage("down"))
    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    supervisor.shutdown_checked_sync(5)
    record = faulty.load_attempt(attempt)
    assert (record.execution_status, record.cancellation_reason) == (
        "cancelled",
        "supervisor shutdown",
    )
    assert faulty.calls["update_attempt_execution"] == 0


def test_a_short_deadline_raises_at_once_keeps_the_attempt_owned_and_a_retry_finishes_it(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    started = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        return await cooperative(request, control)

    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    faulty.fail_always("commit_terminal", lambda: RetryableStorage("disk busy"))

    began = time.monotonic()
    with pytest.raises(BackgroundSubagentError.ShutdownDeadline) as deadline:
        supervisor.shutdown_checked_sync(0.05)
    assert time.monotonic() - began < 0.25
    assert deadline.value.unfinished == [attempt]
    record = faulty.load_attempt(attempt)
    # Not terminal: still ours to finish (a renewal may have carried ``starting``).
    assert record.execution_status in ("accepted", "starting")
    assert record.owner_lease.host_instance_id == "host-a"
    assert our_actors() != []
    with pytest.raises(BackgroundSubagentError.Closing):
        supervisor.delegate_sync("research", "more")

    faulty.fail_always("commit_terminal", None)
    supervisor.shutdown_checked_sync(5)
    assert faulty.load_attempt(attempt).execution_status == "cancelled"
    assert our_actors() == [] and our_threads() == []


def test_concurrent_shutdowns_serialize_and_all_succeed(
    make_supervisor: SupervisorFactory,
) -> None:
    collector = Collector()
    supervisor = make_supervisor(runner=cooperative, on_complete=collector)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def shut() -> None:
        barrier.wait()
        try:
            supervisor.shutdown_checked_sync(5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=shut) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert [r.attempt_id for r in collector.results] == [attempt]
    assert our_actors() == [] and our_threads() == []


async def test_a_cancelled_shutdown_call_loses_nothing(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed("finished after all")

    collector = Collector()
    faulty.fail_always("commit_terminal", lambda: RetryableStorage("busy"))
    supervisor = make_supervisor(runner=run, store=faulty, on_complete=collector)
    attempt = (await supervisor.delegate("research", "p")).attempt_id
    gate.open()
    # The outcome is decided (its commit keeps failing) before shutdown begins.
    assert await asyncio.to_thread(faulty.when_failed("commit_terminal", 1).wait, 10)
    task = asyncio.create_task(supervisor.shutdown_checked(5))
    assert await asyncio.to_thread(faulty.when_failed("commit_terminal", 3).wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    faulty.fail_always("commit_terminal", None)
    await supervisor.shutdown_checked(5)
    assert faulty.load_attempt(attempt).execution_status == "completed"
    assert [r.attempt_id for r in collector.results] == [attempt]
    assert our_actors() == [] and our_threads() == []


def test_best_effort_shutdown_stops_every_thread_even_past_its_deadline(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    started = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        started.set()
        return await cooperative(request, control)

    supervisor = make_supervisor(runner=run, store=faulty)
    attempt = supervisor.delegate_sync("research", "p").attempt_id
    assert started.wait(10)
    faulty.fail_always("commit_terminal", lambda: RetryableStorage("down"))
    supervisor.shutdown(0.05)
    assert our_actors() == [] and our_threads() == []
    # Not terminal: the lease expires and reconciliation records the lost host.
    assert faulty.load_attempt(attempt).execution_status in ("accepted", "starting")
    faulty.fail_always("commit_terminal", None)


def test_a_supervisor_that_never_ran_shuts_down_at_once(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor()
    supervisor.shutdown_checked_sync(0)
    with pytest.raises(BackgroundSubagentError.Closing):
        supervisor.delegate_sync("research", "p")
