"""A supervisor with requests waiting hands acceptances to a pool thread.

While one acceptance commits, the supervisor actor admits the next requests:
each one queued behind a busy supervisor is accepted on a heartbeat thread (so
concurrent acceptances share the store's durable commits), and the supervisor
starts its attempt when the store answered. Admission, refusals, shutdown and
hibernation see an acceptance in flight as an active attempt.

Every scenario holds the first acceptance in the store (a ``block`` fault), so
the requests sent meanwhile are in the supervisor's mailbox when it goes on.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import pytest
from actor_helpers import SupervisorFactory

from actors import BackgroundSubagentError, ChildControl, ChildOutcome, ChildRequest
from actors._messages import DelegateRequest, WatchRequest
from properties import FaultyStore, Gate
from storage import AttemptRecord, RetryableStorage, SessionStore

WAIT = 10.0


class NotingStore(FaultyStore):
    """A :class:`FaultyStore` that notes the thread each acceptance ran on, and holds
    or refuses the acceptance of a chosen request (by its ``linked_task_id``)."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.accepted_on: dict[str, str] = {}
        self.held: dict[str, tuple[threading.Event, threading.Event]] = {}
        self.refused: set[str] = set()

    def hold(self, task: str) -> tuple[threading.Event, threading.Event]:
        """Hold the acceptance of request ``task``: (entered, release)."""
        events = self.held[task] = (threading.Event(), threading.Event())
        return events

    def accept_attempt(self, record: AttemptRecord) -> AttemptRecord:
        task = record.linked_task_id or ""
        self.accepted_on[record.attempt_id] = threading.current_thread().name
        if task in self.held:
            entered, release = self.held[task]
            entered.set()
            assert release.wait(WAIT)
        if task in self.refused:
            raise RetryableStorage("disk gone")
        stored: AttemptRecord = super().accept_attempt(record)
        return stored


@pytest.fixture
def noting(store: SessionStore) -> NotingStore:
    return NotingStore(store)


async def instant(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"out:{request.prompt}")


def request(prompt: str, agent_id: str | None = None) -> DelegateRequest:
    return DelegateRequest(
        subagent_name="research",
        prompt=prompt,
        agent_id=agent_id,
        linked_task_id=prompt,
        runner=None,
        parent_run_id="parent",
        metadata={},
    )


def refused_id(store: NotingStore) -> str:
    """The attempt id of the last acceptance the store saw."""
    return list(store.accepted_on)[-1]


def behind_a_held_acceptance(
    store: NotingStore, supervisor: Any, *requests: DelegateRequest
) -> tuple[threading.Event, concurrent.futures.Future[Any], list[concurrent.futures.Future[Any]]]:
    """Hold the first acceptance (made inline: the mailbox is empty), then send
    ``requests``: they wait in the supervisor's mailbox, and each one but the last
    has another behind it, so every one of them is accepted aside. Returns the
    held acceptance's release, the first reply and theirs."""
    entered, release = store.hold("first")
    first = supervisor._ask(request("first"))
    assert entered.wait(WAIT)
    return release, first, [supervisor._ask(r) for r in requests]


def test_requests_queued_behind_an_acceptance_are_accepted_on_a_heartbeat_thread(
    noting: NotingStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=noting)
    release, first, rest = behind_a_held_acceptance(
        noting, supervisor, request("a"), request("b"), request("c")
    )
    release.set()
    answers = [first.result(WAIT), *(reply.result(WAIT) for reply in rest)]

    assert [a.status for a in answers] == ["accepted"] * 4
    assert len({a.attempt_id for a in answers}) == 4
    threads = noting.accepted_on
    assert threads[answers[0].attempt_id].startswith("subagents-actor")  # inline: idle mailbox
    for answer in answers[1:]:
        assert threads[answer.attempt_id].startswith("subagents-heartbeat")
    for answer, prompt in zip(answers, ["first", "a", "b", "c"], strict=True):
        result = supervisor.wait_sync(answer.attempt_id, WAIT)
        assert (result.status, result.result) == ("completed", f"out:{prompt}")


def test_a_refused_acceptance_made_aside_answers_its_caller_with_our_error(
    noting: NotingStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=noting)
    noting.refused.add("refused")
    release, first, (refused, accepted) = behind_a_held_acceptance(
        noting, supervisor, request("refused"), request("accepted")
    )
    release.set()

    assert first.result(WAIT).status == "accepted"
    with pytest.raises(BackgroundSubagentError.Durability) as caught:
        refused.result(WAIT)
    assert isinstance(caught.value.__cause__, RetryableStorage)
    later = accepted.result(WAIT)
    assert noting.accepted_on[later.attempt_id].startswith("subagents-heartbeat")
    assert supervisor.wait_sync(later.attempt_id, WAIT).result == "out:accepted"
    # The refusal gave its slot back: the host counts the two live attempts only.
    assert supervisor.wait_sync(first.result(WAIT).attempt_id, WAIT).status == "completed"


def test_an_agent_whose_acceptance_is_in_flight_is_busy_and_counts_toward_the_quota(
    noting: NotingStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=noting)
    known = supervisor.delegate_sync("research", "known")
    supervisor.wait_sync(known.attempt_id, WAIT)
    # The continuation's acceptance is held too: in flight on a heartbeat thread.
    entered, in_flight = noting.hold("again")
    release, first, (continued, filler) = behind_a_held_acceptance(
        noting, supervisor, request("again", agent_id=known.agent_id), request("filler")
    )
    release.set()
    assert entered.wait(WAIT)
    assert filler.result(WAIT).status == "accepted"

    busy = supervisor._ask(request("once more", agent_id=known.agent_id))
    with pytest.raises(BackgroundSubagentError.ActiveConversation) as caught:
        busy.result(WAIT)
    assert caught.value.fields["agent_id"] == known.agent_id
    assert supervisor.hibernate() is False  # an acceptance in flight is work
    in_flight.set()
    assert continued.result(WAIT).status == "continued"
    assert first.result(WAIT).status == "accepted"


def test_a_shutdown_waits_for_an_acceptance_in_flight_then_stops_that_attempt(
    noting: NotingStore, make_supervisor: SupervisorFactory
) -> None:
    gate = Gate()

    async def held_child(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await gate.wait()
        return ChildOutcome.completed("finished anyway")

    supervisor = make_supervisor(runner=held_child, store=noting)
    entered, in_flight = noting.hold("late")
    release, first, (late, filler) = behind_a_held_acceptance(
        noting, supervisor, request("late"), request("filler")
    )
    release.set()
    assert entered.wait(WAIT)
    first_id = first.result(WAIT).attempt_id
    assert filler.result(WAIT).status == "accepted"

    stopping = concurrent.futures.ThreadPoolExecutor(1).submit(
        supervisor.shutdown_checked_sync, WAIT
    )
    # The shutdown stops the first attempt but cannot settle: the late one is in flight.
    assert supervisor.wait_sync(first_id, WAIT).status == "cancelled"
    assert not stopping.done()
    in_flight.set()
    late_id = late.result(WAIT).attempt_id  # accepted: it was admitted before the shutdown
    stopping.result(WAIT)
    assert noting.load_attempt(late_id).execution_status == "cancelled"
    assert noting.accepted_on[late_id].startswith("subagents-heartbeat")


def test_a_summary_wait_behind_the_only_acceptance_in_flight_ends_when_it_is_refused(
    noting: NotingStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=noting)
    noting.refused.update({"first", "refused"})
    entered, release = noting.hold("first")
    first = supervisor._ask(request("first"))
    assert entered.wait(WAIT)
    # Behind the held (inline) acceptance: a delegate, then a summary wait behind it, so
    # the delegate is accepted aside and the wait finds it in flight with nothing active.
    refused = supervisor._ask(request("refused"))
    watch = supervisor._ask(WatchRequest(attempt_id=None))
    release.set()

    with pytest.raises(BackgroundSubagentError.Durability):
        first.result(WAIT)
    kind, _, done = watch.result(WAIT)
    assert kind == "summary"
    with pytest.raises(BackgroundSubagentError.Durability):
        refused.result(WAIT)
    assert noting.accepted_on[refused_id(noting)].startswith("subagents-heartbeat")
    assert done.result(WAIT) == "any"  # nothing is left to wait for
