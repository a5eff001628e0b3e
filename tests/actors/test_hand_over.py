"""A wait with no durable run is handed the result by the terminal commit itself.

A wait on an attempt this supervisor runs offers to take the result
(``RecordView.offer``); the attempt's actor takes the offer as it builds its
terminal commit (``TerminalCommit.deliver_claim_id``), so the result is
committed terminal and delivered to that wait in one transaction: one durable
commit instead of two (``docs/durability.md``). These scenarios pin the edges:
a wait that gives up before the offer is taken withdraws it and the result
stays for the next consumer; one that gives up after must wait for the commit;
one offer per attempt; no hand-over for a result kept in an artifact; a store
that ignores the field leaves the wait to claim as before (under its offer, so a
delivery it did not see is claimed again as an exact repeat); and the coroutine
twin, whose cancellation withdraws the offer.

Every scenario gates the child (``Gate``) and learns that the wait offered (or
withdrew) from events set by the view's own methods, never from a sleep.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
from actor_helpers import SupervisorFactory, wait_terminal

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
    WaitResult,
)
from actors._record_view import RecordView
from properties import FaultyStore, Gate
from statemachines import DeliveryStatus
from storage import AttemptRecord, SessionStore, StoreCounters, TerminalCommit

WAIT = 10.0


class ViewEvents:
    """Events set as waits offer, and as offers are withdrawn or kept (the view's
    own methods, wrapped for the test)."""

    def __init__(self) -> None:
        self.offered = threading.Event()
        self.withdrawn = threading.Event()
        self.kept = threading.Event()
        """A withdrawal refused: the terminal commit had taken the offer."""
        self.offers: list[bool] = []


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> ViewEvents:
    seen = ViewEvents()
    offer, withdraw = RecordView.offer, RecordView.withdraw

    def noted_offer(view: RecordView, claim_id: str) -> bool:
        made = offer(view, claim_id)
        seen.offers.append(made)
        seen.offered.set()
        return made

    def noted_withdraw(view: RecordView, claim_id: str) -> bool:
        done = withdraw(view, claim_id)
        (seen.withdrawn if done else seen.kept).set()
        return done

    monkeypatch.setattr(RecordView, "offer", noted_offer)
    monkeypatch.setattr(RecordView, "withdraw", noted_withdraw)
    return seen


def gated(gate: Gate, output: str = "out") -> Callable[..., Any]:
    async def child(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed(f"{output}:{request.prompt}")

    return child


def in_thread(call: Callable[[], WaitResult]) -> concurrent.futures.Future[WaitResult]:
    """``call()`` on a thread of its own; its answer (or error) in the future."""
    future: concurrent.futures.Future[WaitResult] = concurrent.futures.Future()

    def main() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # reported to the test through the future
            future.set_exception(exc)

    threading.Thread(target=main, name="test-waiter").start()
    return future


def writes(store: SessionStore, step: Callable[[], object]) -> int:
    """Store writes asked for while ``step`` ran."""
    before: StoreCounters = store.counters()
    step()
    return (store.counters() - before).writes


def launched(
    make_supervisor: SupervisorFactory, store: SessionStore, gate: Gate, **kwargs: Any
) -> tuple[BackgroundSubagentSupervisor, str]:
    supervisor = make_supervisor(runner=gated(gate), store=store, **kwargs)
    return supervisor, supervisor.delegate_sync("research", "q").attempt_id


def waiting(
    store: SessionStore,
    make_supervisor: SupervisorFactory,
    events: ViewEvents,
    *,
    timeout: float = WAIT,
    loop: asyncio.AbstractEventLoop | None = None,
    **kwargs: Any,
) -> tuple[Gate, BackgroundSubagentSupervisor, str, concurrent.futures.Future[WaitResult]]:
    """A gated attempt and a wait on it (on a thread of its own, or a coroutine on
    ``loop``), returned once the wait offered to take the result."""
    gate = Gate()
    supervisor, attempt_id = launched(make_supervisor, store, gate, **kwargs)
    if loop is None:
        future = in_thread(lambda: supervisor.wait_sync(attempt_id, timeout))
    else:
        future = asyncio.run_coroutine_threadsafe(supervisor.wait(attempt_id, timeout), loop)
    assert events.offered.wait(WAIT)
    return gate, supervisor, attempt_id, future


def test_a_wait_that_came_first_is_handed_the_result_in_the_terminal_commit(
    store: SessionStore, make_supervisor: SupervisorFactory, events: ViewEvents
) -> None:
    gate, supervisor, attempt_id, waited_for = waiting(store, make_supervisor, events)
    assert events.offers == [True]

    def finish() -> None:
        gate.open()
        waited = waited_for.result(WAIT)
        assert (waited.status, waited.result) == ("completed", "out:q")
        assert (waited.delivery_status, waited.owned_elsewhere) == ("delivered", False)

    assert writes(store, finish) == 1  # the terminal commit alone: no claim of its own
    record = store.load_attempt(attempt_id)
    assert record.delivery_status == "delivered"
    assert (record.delivered_claim_id or "").startswith("wait_")
    # Delivered once: a later wait is told another consumer has it.
    again = supervisor.wait_sync(attempt_id, WAIT)
    assert (again.owned_elsewhere, again.delivery_status, again.result) == (True, "delivered", None)


def test_a_wait_that_gives_up_first_withdraws_and_the_result_waits_for_the_next(
    store: SessionStore, make_supervisor: SupervisorFactory, events: ViewEvents
) -> None:
    gate = Gate()
    supervisor, attempt_id = launched(make_supervisor, store, gate)
    timed_out = supervisor.wait_sync(attempt_id, 0.01)
    assert timed_out.timed_out and events.withdrawn.is_set() and not events.kept.is_set()
    gate.open()
    assert wait_terminal(supervisor, attempt_id) == "terminal"
    assert store.load_attempt(attempt_id).delivery_status == "undelivered"
    waited = supervisor.wait_sync(attempt_id, WAIT)
    assert (waited.result, waited.delivery_status) == ("out:q", "delivered")


class HeldTerminal(FaultyStore):
    """Holds ``commit_terminal`` until released; notes what it was asked to commit."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.commits: list[TerminalCommit] = []

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        self.commits.append(commit)
        self.entered.set()
        assert self.release.wait(WAIT)
        stored: AttemptRecord = super().commit_terminal(commit)
        return stored


def test_a_wait_whose_offer_the_commit_took_waits_for_that_commit_past_its_timeout(
    store: SessionStore, make_supervisor: SupervisorFactory, events: ViewEvents
) -> None:
    held = HeldTerminal(store)
    gate, _, _, waited_for = waiting(held, make_supervisor, events, timeout=0.05)
    gate.open()
    assert held.entered.wait(WAIT)
    assert (held.commits[0].deliver_claim_id or "").startswith("wait_")
    # Its time is up, but the commit under way may hand it the result: it stays.
    assert events.kept.wait(WAIT) and not events.withdrawn.is_set()
    held.release.set()
    waited = waited_for.result(WAIT)
    assert (waited.timed_out, waited.result, waited.delivery_status) == (
        False,
        "out:q",
        "delivered",
    )


def test_one_offer_per_attempt_and_the_other_wait_is_told_who_has_it(
    store: SessionStore, make_supervisor: SupervisorFactory, events: ViewEvents
) -> None:
    gate, supervisor, attempt_id, first = waiting(store, make_supervisor, events)
    events.offered.clear()
    second = in_thread(lambda: supervisor.wait_sync(attempt_id, WAIT))
    assert events.offered.wait(WAIT) and events.offers == [True, False]
    gate.open()
    answers = [first.result(WAIT), second.result(WAIT)]
    assert [a.result for a in answers] == ["out:q", None]
    assert [a.owned_elsewhere for a in answers] == [False, True]
    assert store.load_attempt(attempt_id).delivery_status == "delivered"


def test_a_result_kept_in_an_artifact_is_claimed_by_the_wait_itself(
    store: SessionStore, make_supervisor: SupervisorFactory, events: ViewEvents
) -> None:
    small = SupervisorLimits(heartbeat_interval=5.0, inline_preview_bytes=4)
    gate, _, attempt_id, waited_for = waiting(store, make_supervisor, events, limits=small)

    def finish() -> None:
        gate.open()
        assert waited_for.result(WAIT).result == "out:q"  # the artifact's full content

    assert writes(store, finish) == 2  # the terminal commit, then the wait's own claim
    record = store.load_attempt(attempt_id)
    assert (record.retention_status, record.delivery_status) == ("artifact", "delivered")


class IgnoresHandOver(FaultyStore):
    """A store written before ``deliver_claim_id``: it commits the terminal alone."""

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        stored: AttemptRecord = super().commit_terminal(
            msgspec.structs.replace(commit, deliver_claim_id=None)
        )
        return stored


class HidesHandOver(FaultyStore):
    """Delivers as asked, but answers with the record as it was before the delivery
    (as after a lost response whose replay this process never saw)."""

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        stored: AttemptRecord = super().commit_terminal(commit)
        assert stored.delivered_claim_id == commit.deliver_claim_id is not None
        return msgspec.structs.replace(
            stored, delivery_status=DeliveryStatus.UNDELIVERED, delivered_claim_id=None
        )


@pytest.mark.parametrize("kind", [IgnoresHandOver, HidesHandOver])
def test_a_wait_that_does_not_see_the_hand_over_claims_the_result_under_its_offer(
    store: SessionStore,
    make_supervisor: SupervisorFactory,
    events: ViewEvents,
    kind: type[FaultyStore],
) -> None:
    """A store that ignores the field: the wait claims the result itself. One that
    delivered but whose answer was lost: the wait's claim, under its offer, is an
    exact repeat of that delivery, so the wait has the result all the same."""
    gate, _, _, waited_for = waiting(kind(store), make_supervisor, events)
    gate.open()
    waited = waited_for.result(WAIT)
    assert (waited.result, waited.delivery_status, waited.owned_elsewhere) == (
        "out:q",
        "delivered",
        False,
    )


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop of the test's own, on a thread of its own (the caller's loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-caller-loop")
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(WAIT)
    loop.close()


def test_the_coroutine_wait_is_handed_the_result_too(
    store: SessionStore,
    make_supervisor: SupervisorFactory,
    events: ViewEvents,
    loop: asyncio.AbstractEventLoop,
) -> None:
    gate, _, _, waited_for = waiting(store, make_supervisor, events, loop=loop)

    def finish() -> None:
        gate.open()
        assert waited_for.result(WAIT).result == "out:q"

    assert writes(store, finish) == 1


def test_a_cancelled_coroutine_wait_withdraws_its_offer(
    store: SessionStore,
    make_supervisor: SupervisorFactory,
    events: ViewEvents,
    loop: asyncio.AbstractEventLoop,
) -> None:
    gate, supervisor, attempt_id, waited_for = waiting(store, make_supervisor, events, loop=loop)
    waited_for.cancel()
    assert events.withdrawn.wait(WAIT) and not events.kept.is_set()
    gate.open()
    assert wait_terminal(supervisor, attempt_id) == "terminal"
    assert store.load_attempt(attempt_id).delivery_status == "undelivered"
    assert supervisor.wait_sync(attempt_id, WAIT).result == "out:q"
