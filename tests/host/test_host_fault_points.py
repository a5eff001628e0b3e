"""A host in crash-test mode arms fault points from ``SUBAGENTS_FAULTS`` at start (a
production host never reads it), and reaches the continuation point when it admits a
continuation run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from host_helpers import CONFIG, Client, next_event

from storage import MemorySessionStore, faults
from subagents._host import HostService, parse_host_config
from subagents._host._eventlog import MemoryEventLog


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    faults.reset_faults()
    yield
    faults.reset_faults()


def make_service(*, crash_test: bool = True) -> HostService:
    store = MemorySessionStore()
    return HostService(
        parse_host_config(CONFIG),
        store=store,
        events=MemoryEventLog(),
        tick_seconds=0.05,
        closers=[store.close],
        crash_test=crash_test,
    )


async def create_a_session(svc: HostService) -> None:
    await svc.start()
    try:
        client = Client(svc.dispatcher())
        await client.result("session.create", {"session_id": "s1"})
    finally:
        await svc.close()


async def test_a_crash_test_host_without_the_variable_arms_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SUBAGENTS_FAULTS", raising=False)
    await create_a_session(make_service())
    assert faults.reached_counts() == {}


async def test_a_production_host_never_reads_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Malformed on purpose: reading it at all would raise FaultSpecError at start.
    monkeypatch.setenv("SUBAGENTS_FAULTS", "store.before_commit=sigkill@0,nonsense")
    await create_a_session(make_service(crash_test=False))
    assert faults.reached_counts() == {}


async def test_a_crash_test_host_arms_the_variable_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUBAGENTS_FAULTS", "store.after_commit=raise_transient@1000")
    await create_a_session(make_service())
    assert faults.reached_counts()["store.after_commit"] >= 1
    assert faults.fault_counts() == {}


async def test_a_lost_continuation_admission_is_replayed_and_its_run_launched_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "SUBAGENTS_FAULTS", "delivery.after_continuation_admitted_before_ack=lose_response"
    )
    svc = make_service()
    await svc.start()
    try:
        client = Client(svc.dispatcher())
        await client.result("session.create", {"session_id": "s1"})
        parent = await client.result("run.start", {"session_id": "s1", "input": "plan"})
        await next_event(svc, "s1", "run.completed", parent["run_id"])
        accepted = await svc.supervisor("s1").delegate(
            "research", "collect", parent_run_id=parent["run_id"]
        )
        point = "delivery.after_continuation_admitted_before_ack"
        # The maintenance tick admits the continuation once the result is terminal.
        assert await asyncio.to_thread(faults.wait_fired, point, 1, 10)
        record = svc.store.load_attempt(accepted.attempt_id)
        assert record.continuation_run_id is not None
        # The exact replay found the admitted run, so the host launched it.
        await next_event(svc, "s1", "run.completed", record.continuation_run_id)
        for _ in range(5):
            await svc.maintain()
        assert faults.fault_counts() == {point: 1}
        runs = (await client.result("run.list", {"session_id": "s1"}))["runs"]
        continuations = [r for r in runs if r["trigger_type"] == "async_subagent_result"]
        assert [r["run_id"] for r in continuations] == [record.continuation_run_id]
        assert continuations[0]["status"] == "completed"
        assert record.result_ref is not None  # the result stays as evidence
        # The host keeps serving.
        await client.result("session.create", {"session_id": "s2"})
    finally:
        await svc.close()
