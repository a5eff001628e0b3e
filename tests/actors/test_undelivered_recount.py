"""Admission's undelivered bound costs what the results do, not what the session's history does.

The supervisor keeps the ids of the results it believes undelivered. At the limit it
first drops the ones delivered since (by its own deliveries, then by the store's
word on each id) and only recounts the session's whole pending set in the store when
that still leaves it at the limit. A recount reads every retained entry of the
session, so before this a busy session paid one full scan of its history (24 h of
results by default) every ``max_undelivered_results`` attempts, even when every
result had been delivered.
"""

from __future__ import annotations

import msgspec
import pytest
from actor_helpers import FAST, SupervisorFactory, wait_terminal

from actors import (
    BackgroundSubagentError,
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    SupervisorLimits,
)
from properties import FaultyStore
from storage import DeliveryClaim

LIMIT = 3
ROUNDS = 4 * LIMIT


async def instant(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"done:{request.prompt}")


def _limits() -> SupervisorLimits:
    return msgspec.structs.replace(FAST, max_undelivered_results=LIMIT)


def _ended(supervisor: BackgroundSubagentSupervisor, prompt: str) -> str:
    """Delegate ``prompt`` and wait until the attempt ended (not delivered: nobody waited)."""
    attempt = supervisor.delegate_sync("research", prompt).attempt_id
    wait_terminal(supervisor, attempt)
    return attempt


def test_results_this_supervisor_delivered_never_force_a_recount(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=faulty, limits=_limits())
    for n in range(ROUNDS):
        attempt = _ended(supervisor, f"p{n}")  # the wait claims it afterwards
        assert supervisor.wait_sync(attempt, 10).result == f"done:p{n}"
    # One count as the supervisor started; none since, though the ids reached the
    # limit four times.
    assert faulty.calls["list_pending_attempts"] == 1


def test_results_delivered_elsewhere_are_checked_by_id_not_by_a_recount(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=faulty, limits=_limits())
    for n in range(ROUNDS):
        attempt = _ended(supervisor, f"p{n}")
        # Another consumer (a continuation run, another host) takes the result.
        claim = DeliveryClaim(claim_id=f"elsewhere-{n}", deadline=faulty.clock.now() + 60)
        faulty.inner.claim_and_acknowledge(attempt, claim)
    assert faulty.calls["list_pending_attempts"] == 1
    assert faulty.calls["load_attempt"] >= ROUNDS - LIMIT  # the ids, checked one by one


def test_the_limit_still_refuses_with_the_stores_count(
    faulty: FaultyStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = make_supervisor(runner=instant, store=faulty, limits=_limits())
    ids = [_ended(supervisor, f"p{n}") for n in range(LIMIT)]
    claim = DeliveryClaim(claim_id="elsewhere", deadline=faulty.clock.now() + 60)
    faulty.inner.claim_and_acknowledge(ids[0], claim)
    # One of the three was delivered elsewhere: the fourth is admitted, the fifth is not.
    _ended(supervisor, "fourth")
    with pytest.raises(BackgroundSubagentError.QuotaExceeded) as refused:
        supervisor.delegate_sync("research", "fifth")
    assert refused.value.fields["undelivered"] == LIMIT
    # The store's count decided: the three undelivered results, recounted once.
    assert faulty.calls["list_pending_attempts"] == 2
