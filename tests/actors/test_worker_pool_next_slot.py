"""``WorkerPool``'s next slot: work an item queues with ``run_next`` runs on the same
worker once that item returns (no other worker is woken for it), is handed on
before its worker does anything else that could take long, and never lets a
chain of such work keep a worker from the shared queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from actors._runtime import NEXT_CHAIN, PooledActor, WorkerPool

WAIT = 10.0


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    made = WorkerPool("test-next", size=2)
    yield made
    assert made.stop(WAIT)


def test_work_queued_by_an_item_runs_on_its_worker_after_it_returns(pool: WorkerPool) -> None:
    order: list[tuple[str, str]] = []
    done = threading.Event()

    def second() -> None:
        order.append(("second", threading.current_thread().name))
        done.set()

    def first() -> None:
        pool.run_next(second)
        order.append(("first returns", threading.current_thread().name))

    pool.run(first)
    assert done.wait(WAIT)
    (step1, worker1), (step2, worker2) = order
    assert (step1, step2) == ("first returns", "second")
    assert worker1 == worker2
    assert len(pool.threads) == 1  # nobody else was started (or woken) for it


def test_off_the_workers_run_next_is_run() -> None:
    pool = WorkerPool("test-next-off", size=1)
    ran = threading.Event()
    pool.run_next(ran.set)
    assert ran.wait(WAIT)
    assert pool.stop(WAIT)
    with pytest.raises(RuntimeError):
        pool.run_next(ran.set)


def test_released_work_runs_on_another_worker_while_its_item_goes_on(pool: WorkerPool) -> None:
    freed = threading.Event()

    def first() -> None:
        pool.run_next(freed.set)
        pool.release_next()
        # Without the release this would wait forever: ``freed.set`` sits in this
        # worker's slot until ``first`` returns.
        assert freed.wait(WAIT)

    outcome = pool.submit(first)
    outcome.result(WAIT)
    assert len(pool.threads) == 2


def test_a_chain_of_next_work_leaves_the_worker_to_the_shared_queue() -> None:
    pool = WorkerPool("test-next-chain", size=1)
    other_ran = threading.Event()
    links: list[int] = []

    def link() -> None:
        links.append(1)
        if not other_ran.is_set():
            pool.run_next(link)

    def start() -> None:
        pool.run(other_ran.set)  # queued behind the chain, on the shared queue
        pool.run_next(link)

    pool.run(start)
    assert other_ran.wait(WAIT)
    assert pool.stop(WAIT)
    # The one worker ran at most a chain's length of links before the queued item.
    assert 1 <= len(links) <= NEXT_CHAIN + 1


class _Recorder(PooledActor):
    def __init__(self, pool: WorkerPool, handle: Any) -> None:
        super().__init__()
        self.pool = pool
        self.handle = handle

    def on_receive(self, message: Any) -> Any:
        return self.handle(message)


def test_an_actor_woken_by_a_message_is_not_kept_behind_the_next_message() -> None:
    """A tells B while handling its first message, then blocks in its second message
    until B has run: B must not wait in A's worker slot behind that second message."""
    pool = WorkerPool("test-next-actors", size=2)
    b_ran = threading.Event()
    b = _Recorder.start(pool, lambda message: b_ran.set() if message == "run" else None)
    a_waited: list[bool] = []

    def a_handles(message: str) -> None:
        if message == "tell b":
            b.tell("run")
        elif message == "wait for b":
            a_waited.append(b_ran.wait(WAIT))

    a = _Recorder.start(pool, a_handles)
    a.ask("ping", timeout=WAIT)
    b.ask("ping", timeout=WAIT)
    # Both workers busy while both messages reach A: its burst takes them together.
    gate = threading.Event()
    blockers = [pool.submit(gate.wait, WAIT) for _ in range(2)]
    a.tell("tell b")
    a.tell("wait for b")
    gate.set()
    for blocker in blockers:
        assert blocker.result(WAIT)
    a.ask("ping", timeout=2 * WAIT)
    a.stop()
    b.stop()
    assert a_waited == [True]
    assert pool.stop(WAIT)


def test_work_in_the_slot_when_the_pool_stops_still_runs() -> None:
    """Accepted before the stop, handed on after it: it runs (here), not stranded
    behind the workers' last item."""
    pool = WorkerPool("test-next-stop", size=1)
    deferred, gate, ran = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        pool.run_next(ran.set)
        deferred.set()
        assert gate.wait(WAIT)
        pool.release_next()

    pool.run(first)
    assert deferred.wait(WAIT)
    assert not pool.stop(0)  # stopping now; its one worker is still in ``first``
    gate.set()
    assert ran.wait(WAIT)
    assert pool.stop(WAIT)
