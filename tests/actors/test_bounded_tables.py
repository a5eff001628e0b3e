"""A long-running supervisor's tables stay bounded, and no undelivered result is dropped."""

from __future__ import annotations

from typing import Any

import msgspec
from actor_helpers import FAST, SupervisorFactory

from actors import ChildControl, ChildOutcome, ChildRequest, SupervisorLimits
from actors._messages import SnapshotRequest

LIMITS = msgspec.structs.replace(
    FAST, max_retained_attempts=8, max_known_agents=6, max_active_attempts=16
)


async def echo(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    return ChildOutcome.completed(f"out:{request.prompt}", context_delta={"p": request.prompt})


def _actor(supervisor: Any) -> Any:
    """The supervisor actor object, to look at its tables (test-only introspection)."""
    return supervisor._ref._actor_weakref()


def test_the_bounds_have_documented_defaults_and_must_be_positive() -> None:
    limits = SupervisorLimits()
    assert (limits.max_retained_attempts, limits.max_known_agents) == (1024, 4096)
    for name in ("max_retained_attempts", "max_known_agents"):
        try:
            SupervisorLimits(**{name: 0})
        except ValueError as exc:
            assert name in str(exc)
        else:
            raise AssertionError(f"{name}=0 was accepted")


def test_a_long_run_keeps_the_tables_bounded_and_every_undelivered_result(
    make_supervisor: SupervisorFactory,
) -> None:
    supervisor = make_supervisor(runner=echo, limits=LIMITS)
    # Results nobody collects yet: they must survive every pruning pass.
    kept = [supervisor.delegate_sync("worker", f"keep-{n}").attempt_id for n in range(3)]
    done: list[str] = []
    for n in range(200):
        attempt_id = supervisor.delegate_sync("worker", f"run-{n}").attempt_id
        assert supervisor.wait_sync(attempt_id, 10).result == f"out:run-{n}"
        done.append(attempt_id)

    runtime = supervisor._runtime
    assert runtime is not None
    table = supervisor._ask(SnapshotRequest()).result()
    bound = LIMITS.max_retained_attempts + LIMITS.max_retained_attempts // 4 + len(kept) + 1
    assert len(table) <= bound
    assert len(runtime.views) <= bound
    assert len(supervisor.deliverer.delivered) <= bound
    assert len(supervisor.deltas) == len(kept)  # only the undelivered ones
    actor = _actor(supervisor)
    assert len(actor.ended_order) <= bound
    assert len(actor.delivered_ids) <= bound
    assert len(actor.agents) <= LIMITS.max_known_agents

    for n, attempt_id in enumerate(kept):
        waited = supervisor.wait_sync(attempt_id, 10)
        assert (waited.status, waited.result) == ("completed", f"out:keep-{n}")
        assert waited.context_delta == {"p": f"keep-{n}"}

    # A forgotten attempt is still answered, from the store.
    old = done[0]
    assert old not in runtime.views
    again = supervisor.wait_sync(old, 0)
    assert (again.status, again.owned_elsewhere, again.delivery_status) == (
        "completed",
        True,
        "delivered",
    )
    assert supervisor.cancel_sync(old, "late").status == "completed"


def test_a_forgotten_agent_can_still_be_continued(make_supervisor: SupervisorFactory) -> None:
    supervisor = make_supervisor(runner=echo, limits=LIMITS)
    first = supervisor.delegate_sync("worker", "first")
    supervisor.wait_sync(first.attempt_id, 10)
    for n in range(LIMITS.max_known_agents * 3):
        other = supervisor.delegate_sync("worker", f"other-{n}")
        supervisor.wait_sync(other.attempt_id, 10)

    assert first.agent_id not in _actor(supervisor).agents

    continued = supervisor.delegate_sync("worker", "again", agent_id=first.agent_id)

    assert continued.status == "continued"
    assert supervisor.wait_sync(continued.attempt_id, 10).result == "out:again"
