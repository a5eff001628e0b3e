"""An attempt actor's plumbing: pykka's fields, its closable inbox, requests racing its stop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pykka
import pytest
from actor_helpers import SupervisorFactory
from pykka._envelope import Envelope

from actors import BackgroundSubagentError, ChildControl, ChildOutcome, ChildRequest
from actors._attempt import AttemptActor
from actors._messages import Cancel, Describe, Steer
from actors._runtime import ClosableInbox


async def instant(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed("ok")


def test_an_attempt_actor_has_pykka_s_actor_fields(make_supervisor: SupervisorFactory) -> None:
    class Plain(pykka.ThreadingActor):
        pass

    pykka_fields = set(vars(Plain()))  # never started: no thread
    seen: list[AttemptActor] = []
    original = AttemptActor.on_start

    def spy(self: AttemptActor) -> None:
        seen.append(self)
        original(self)

    AttemptActor.on_start = spy  # type: ignore[method-assign]
    try:
        supervisor = make_supervisor(runner=instant)
        attempt = supervisor.delegate_sync("worker", "go")
        assert supervisor.wait_sync(attempt.attempt_id, 10).status == "completed"
    finally:
        AttemptActor.on_start = original  # type: ignore[method-assign]
    assert len(seen) == 1
    assert pykka_fields <= set(vars(seen[0]))
    assert seen[0].actor_ref.actor_urn == seen[0].actor_urn


def test_a_closed_inbox_hands_queued_and_later_messages_to_its_fallback() -> None:
    inbox = ClosableInbox()
    inbox.put("first")
    assert not inbox.empty()
    assert inbox.get() == "first"
    inbox.put("queued")
    handed: list[Any] = []
    inbox.close(handed.append)
    inbox.put("later")
    assert handed == ["queued", "later"]
    assert inbox.empty()


def _stopped_attempt(make_supervisor: SupervisorFactory) -> tuple[Any, str, pykka.ActorRef[Any]]:
    refs: list[pykka.ActorRef[Any]] = []
    original = AttemptActor.on_start

    def spy(self: AttemptActor) -> None:
        refs.append(self.actor_ref)
        original(self)

    AttemptActor.on_start = spy  # type: ignore[method-assign]
    try:
        supervisor = make_supervisor(runner=instant)
        attempt_id = supervisor.delegate_sync("worker", "go").attempt_id
        assert supervisor.wait_sync(attempt_id, 10).status == "completed"
    finally:
        AttemptActor.on_start = original  # type: ignore[method-assign]
    (ref,) = refs
    ref.actor_stopped.wait(10)
    assert not ref.is_alive()
    return supervisor, attempt_id, ref


def test_requests_that_reach_a_stopped_attempt_are_answered_by_the_supervisor(
    make_supervisor: SupervisorFactory,
) -> None:
    _, attempt_id, ref = _stopped_attempt(make_supervisor)
    # A sender that checked the actor was alive just before it stopped still queues:
    # the closed inbox hands the request to the supervisor, which answers it.
    steer: concurrent.futures.Future[Any] = concurrent.futures.Future()
    ref.actor_inbox.put(Envelope(Steer(message="late", steering_id=None, reply=steer)))
    with pytest.raises(BackgroundSubagentError.Terminal):
        steer.result(10)
    cancel: concurrent.futures.Future[Any] = concurrent.futures.Future()
    ref.actor_inbox.put(Envelope(Cancel(reason="late", cancellation_id="c-1", reply=cancel)))
    assert cancel.result(10).status == "completed"
    describe: concurrent.futures.Future[Any] = concurrent.futures.Future()
    ref.actor_inbox.put(Envelope(Describe(reply=describe)))
    assert describe.result(10).attempt_id == attempt_id
    asked: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
    ref.actor_inbox.put(Envelope(object(), reply_to=asked))
    with pytest.raises(pykka.ActorDeadError):
        asked.get(timeout=10)
    assert ref.stop(block=True, timeout=10) is False  # already stopped


def test_steering_an_ended_attempt_is_terminal_even_with_a_used_steering_id(
    make_supervisor: SupervisorFactory,
) -> None:
    gate: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def held(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await asyncio.wrap_future(gate)
        return ChildOutcome.completed("ok")

    supervisor = make_supervisor(runner=held)
    attempt_id = supervisor.delegate_sync("worker", "go").attempt_id
    receipt = supervisor.steer_sync(attempt_id, "hello", steering_id="s-1")
    assert supervisor.steer_sync(attempt_id, "hello", steering_id="s-1") == receipt
    gate.set_result(None)
    assert supervisor.wait_sync(attempt_id, 10).status == "completed"
    with pytest.raises(BackgroundSubagentError.Terminal):
        supervisor.steer_sync(attempt_id, "hello", steering_id="s-1")


def test_an_aborted_child_hands_over_what_it_consumed_with_its_cancelled_result(
    make_supervisor: SupervisorFactory,
) -> None:
    running = threading.Event()

    async def stubborn(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        running.set()
        try:
            await asyncio.Event().wait()  # ignores cooperative cancellation
        except asyncio.CancelledError:
            control.hand_over(
                ChildOutcome.failed("aborted", usage={"requests": 2}, context_delta={"used": 2})
            )
            raise
        raise AssertionError("unreachable")

    supervisor = make_supervisor(runner=stubborn)
    attempt_id = supervisor.delegate_sync("worker", "go").attempt_id
    assert running.wait(10)
    supervisor.cancel_sync(attempt_id, "enough")
    waited = supervisor.wait_sync(attempt_id, 10)
    assert waited.status == "cancelled"
    assert waited.cancellation_reason == "enough"
    assert waited.context_delta == {"used": 2}
