"""The fsync budget (docs/durability.md): on its critical path, at concurrency 1, an
attempt costs at most three durable commits: acceptance, terminal, delivery; two
when an in-process wait was waiting for it (the terminal commit delivers to it).

Counted, not estimated: every figure is the difference of the store's own counters
(``store.counters()``: the LMDB batching writer's real commits, and those that
synced) around one attempt, on an LMDB store with ``sync=True``. No heartbeat tick
falls inside an attempt (a 5 s interval), so what is counted is the critical path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from actor_helpers import SupervisorFactory, wait_terminal
from test_consumer_runs import admit, end

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    Deliverer,
    SupervisorLimits,
    WaitResult,
)
from actors._record_view import RecordView
from properties import Gate
from statemachines import RunStatus
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AdmissionLease,
    AttemptRecord,
    InputPart,
    LmdbSessionStore,
    ManualClock,
    NotFound,
    RunRecord,
    SeededIds,
    StoreCounters,
)

BUDGET = 3
"""Durable commits (fsyncs) per attempt on its critical path, at concurrency 1."""
SLOW_BEAT = SupervisorLimits(heartbeat_interval=5.0, retry_interval=0.002)


async def reporting(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    """A child that reports everything it can (each report was a commit before)."""
    control.report_child_run_id(f"run-{request.prompt}")
    control.report_progress("running")
    control.report_progress("waiting")
    control.report_progress("running")
    return ChildOutcome.completed(f"out:{request.prompt}")


GATES: dict[str, Gate] = {}
"""Gates of :func:`gated_reporting` children, by prompt (a test's own prompts)."""


async def gated_reporting(request: ChildRequest, control: ChildControl) -> ChildOutcome:
    """:func:`reporting`, once the gate of its prompt (if any) opened."""
    gate = GATES.get(request.prompt)
    if gate is not None:
        await gate.wait()
    return await reporting(request, control)


@pytest.fixture
def durable(tmp_path: Path, clock: ManualClock) -> Iterator[LmdbSessionStore]:
    store = LmdbSessionStore(tmp_path / "durable", clock=clock, sync=True)
    yield store
    store.close()


def last_txnid(store: LmdbSessionStore) -> int:
    """LMDB's own id of the last committed write transaction (it moves only for a
    commit that changed something, the ones LMDB syncs)."""
    return int(store.lmdb_backend._live().env.info()["last_txnid"])


def counted(store: LmdbSessionStore, step: Callable[[], object]) -> StoreCounters:
    """The store's counters moved by ``step`` (every write answered within it),
    checked against LMDB's own transaction ids."""
    before, txnid = store.counters(), last_txnid(store)
    step()
    store.drain()
    moved = store.counters() - before
    assert moved.fsyncs == last_txnid(store) - txnid, moved
    return moved


def warm(
    make_supervisor: SupervisorFactory, store: LmdbSessionStore
) -> BackgroundSubagentSupervisor:
    """A supervisor whose session exists already (its creation is not an attempt's)."""
    supervisor = make_supervisor(runner=gated_reporting, store=store, limits=SLOW_BEAT)
    first = supervisor.delegate_sync("research", "warm").attempt_id
    assert supervisor.wait_sync(first, 10).status == "completed"
    return supervisor


def test_the_store_counts_writes_commits_and_fsyncs(durable: LmdbSessionStore) -> None:
    assert durable.counters().counted
    assert counted(durable, lambda: durable.list_sessions("default")) == StoreCounters()

    def refused() -> None:
        with pytest.raises(NotFound):
            durable.acknowledge_delivery("subattempt_missing", "claim")

    # A refused write is asked for, and aborted: nothing committed, nothing synced.
    assert counted(durable, refused) == StoreCounters(writes=1, commits=0, fsyncs=0)


def test_a_wait_that_comes_after_the_end_costs_three_fsyncs(
    durable: LmdbSessionStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = warm(make_supervisor, durable)
    for n in range(3):
        box: list[str] = []

        def attempt(n: int = n, box: list[str] = box) -> None:
            attempt_id = supervisor.delegate_sync("research", f"p{n}").attempt_id
            assert wait_terminal(supervisor, attempt_id) == "terminal"
            waited = supervisor.wait_sync(attempt_id, 10)
            assert (waited.status, waited.result) == ("completed", f"out:p{n}")
            box.append(attempt_id)

        moved = counted(durable, attempt)
        record = durable.load_attempt(box[0])
        # Received durably: delivered, and the path the child reported was persisted.
        assert (record.execution_status, record.delivery_status) == ("completed", "delivered")
        assert record.child_run_id == f"run-p{n}"
        # accept, terminal (with starting/running/waiting/running), claim+acknowledge
        assert moved.fsyncs <= BUDGET, moved
        assert moved.commits == moved.writes == BUDGET, moved


def test_a_wait_that_came_first_is_handed_the_result_in_two_fsyncs(
    durable: LmdbSessionStore, make_supervisor: SupervisorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered = threading.Event()
    offer = RecordView.offer

    def noted(view: RecordView, claim_id: str) -> bool:
        made = offer(view, claim_id)
        offered.set()
        return made

    monkeypatch.setattr(RecordView, "offer", noted)
    supervisor = warm(make_supervisor, durable)
    for n in range(3):
        offered.clear()
        gate = GATES[f"first{n}"] = Gate()
        box: list[str] = []

        def attempt(n: int = n, gate: Gate = gate, box: list[str] = box) -> None:
            attempt_id = supervisor.delegate_sync("research", f"first{n}").attempt_id
            answer: list[WaitResult] = []
            waiter = threading.Thread(
                target=lambda: answer.append(supervisor.wait_sync(attempt_id, 10))
            )
            waiter.start()
            assert offered.wait(10)
            gate.open()
            waiter.join(10)
            assert (answer[0].status, answer[0].result) == ("completed", f"out:first{n}")
            box.append(attempt_id)

        moved = counted(durable, attempt)
        record = durable.load_attempt(box[0])
        assert (record.execution_status, record.delivery_status) == ("completed", "delivered")
        assert record.child_run_id == f"run-first{n}"
        # accept, then terminal and delivery to the waiting wait in one commit
        assert moved.fsyncs == moved.commits == moved.writes == BUDGET - 1, moved


def test_a_wait_inside_a_durable_run_costs_three_fsyncs_and_the_run_acknowledges(
    durable: LmdbSessionStore, make_supervisor: SupervisorFactory
) -> None:
    supervisor = warm(make_supervisor, durable)
    run = admit(durable, supervisor.session_id, "run-consumer")
    box: list[str] = []

    def attempt() -> None:
        attempt_id = supervisor.delegate_sync("research", "q").attempt_id
        waited = supervisor.wait_sync(attempt_id, 10, "run-consumer")
        assert (waited.status, waited.result) == ("completed", "out:q")
        box.append(attempt_id)

    moved = counted(durable, attempt)
    assert moved.fsyncs <= BUDGET, moved  # accept, terminal, claim for the run
    assert durable.load_attempt(box[0]).delivery_status == "claimed"
    # The delivery's acknowledgement is the consumer run's own terminal commit.
    ended = counted(durable, lambda: end(durable, run, RunStatus.COMPLETED))
    assert ended.fsyncs == 1
    assert durable.load_attempt(box[0]).delivery_status == "delivered"


def continuation_for(record: AttemptRecord) -> Callable[[tuple[InputPart, ...], float], RunRecord]:
    def make(parts: tuple[InputPart, ...], now: float) -> RunRecord:
        return RunRecord(
            session_id=record.parent_session_id,
            run_id="run-continuation",
            created_at=now,
            updated_at=now,
            input=parts,
            trigger_type=ASYNC_SUBAGENT_RESULT,
            parent_run_id=record.parent_run_id,
            profile=record.profile,
            metadata={
                "async_subagent.attempt_id": record.attempt_id,
                "async_subagent.agent_id": record.agent_id,
                "async_subagent.parent_run_id": record.parent_run_id,
                "async_subagent.child_run_id": record.child_run_id or "",
            },
            admission_lease=AdmissionLease(
                admission_id="adm-continuation",
                host_instance_id="host-a",
                fencing_generation=1,
                lease_expires_at=now + 30,
            ),
        )

    return make


def test_a_continuation_run_delivery_costs_three_fsyncs_the_run_acknowledging(
    durable: LmdbSessionStore, make_supervisor: SupervisorFactory, clock: ManualClock
) -> None:
    supervisor = warm(make_supervisor, durable)
    deliverer = Deliverer(store=durable, ids=SeededIds(5), namespace_id=supervisor.namespace_id)
    box: list[str] = []

    def attempt() -> None:
        attempt_id = supervisor.delegate_sync("research", "c").attempt_id
        assert wait_terminal(supervisor, attempt_id) == "terminal"
        record = durable.load_attempt(attempt_id)
        receipt = deliverer.admit_continuation(record, continuation_for(record), clock.now())
        assert receipt.run.run_id == "run-continuation"
        box.append(attempt_id)

    moved = counted(durable, attempt)
    assert moved.fsyncs <= BUDGET, moved  # accept, terminal, claim + admission of the run
    assert durable.load_attempt(box[0]).delivery_status == "claimed"
    # The consumer run's own lifecycle; its terminal commit acknowledges the result.
    session = supervisor.session_id
    own = counted(
        durable,
        lambda: (
            durable.transition_run(
                session, "run-continuation", RunStatus.RUNNING, admission_id="adm-continuation"
            ),
            durable.transition_run(
                session, "run-continuation", RunStatus.COMPLETED, admission_id="adm-continuation"
            ),
        ),
    )
    assert own.fsyncs == 2
    record = durable.load_attempt(box[0])
    assert (record.delivery_status, record.delivered_to_run_id) == ("delivered", "run-continuation")


class Watched(LmdbSessionStore):
    """An LMDB store that records what each progress renewal cost, in its own counters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renewals: list[tuple[AttemptRecord, StoreCounters]] = []
        self.updates = 0
        self.renewed = threading.Event()

    def advance_attempt(self, record: AttemptRecord, **kwargs: Any) -> AttemptRecord:
        before = self.counters()
        stored = super().advance_attempt(record, **kwargs)
        self.renewals.append((stored, self.counters() - before))
        if stored.execution_status == "running":
            self.renewed.set()
        return stored

    def update_attempt_execution(self, record: AttemptRecord) -> AttemptRecord:
        self.updates += 1
        return super().update_attempt_execution(record)


def test_progress_rides_the_next_lease_renewal_in_one_commit(
    tmp_path: Path, clock: ManualClock, make_supervisor: SupervisorFactory
) -> None:
    store = Watched(tmp_path / "watched", clock=clock, sync=True)
    gate = Gate()

    async def held(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        control.report_child_run_id("run-held")
        control.report_progress("running")
        await gate.wait()
        return ChildOutcome.completed("ok")

    try:
        supervisor = make_supervisor(runner=held, store=store)  # heartbeats every 10 ms
        attempt = supervisor.delegate_sync("research", "p").attempt_id
        assert store.renewed.wait(10)
        # accepted -> (starting ->) running, the run id and the lease: one durable commit.
        stored, _ = store.renewals[-1]
        assert (stored.execution_status, stored.child_run_id) == ("running", "run-held")
        assert all(cost.fsyncs == 1 for _, cost in store.renewals), store.renewals
        assert store.updates == 0
        gate.open()
        assert supervisor.wait_sync(attempt, 10).status == "completed"
        supervisor.shutdown_checked_sync(5)
    finally:
        store.close()
