"""An RPC client watches background work without polling (issue 15).

The store commits each attempt's events with its change; the host's live
subscriptions are fed from the store's listener after the commit, on the loop
thread, in seq order without a gap or a repeat, whichever thread committed.
Steering a durable attempt appends ``attempt.steered`` (the steering receipt).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from host_helpers import CONFIG, Client, memory_service

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    OwnerIdentity,
    SupervisorLimits,
)
from properties.reliability._scripted import planner_config, scripted_planner
from storage import ManualClock, MemorySessionStore, SeededIds
from subagents import FunctionModel, default_model_providers
from subagents._host._jsonrpc import Connection
from subagents._host._methods import HostEvent

FAST = SupervisorLimits(heartbeat_interval=0.01, retry_interval=0.002, cancellation_grace=0.05)
TIMEOUT = 30.0


def test_steering_a_durable_attempt_appends_its_receipt_to_the_parent_session() -> None:
    store = MemorySessionStore(clock=ManualClock())
    release = threading.Event()

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await asyncio.to_thread(release.wait, TIMEOUT)
        return ChildOutcome.completed("ok")

    supervisor = BackgroundSubagentSupervisor(
        runner=run,
        store=store,
        owner=OwnerIdentity(host_instance_id="host-a", fencing_generation=1),
        session_id="s-steer",
        limits=FAST,
        ids=SeededIds(5),
    )
    try:
        attempt = supervisor.delegate_sync("research", "p", parent_run_id="run-p").attempt_id
        long = "focus on the tests " * 20
        receipt = supervisor.steer_sync(attempt, long, steering_id="st-1")
        assert supervisor.steer_sync(attempt, long, steering_id="st-1") == receipt  # replay
        supervisor.steer_sync(attempt, "and the docs")
        release.set()
        assert supervisor.wait_sync(attempt, TIMEOUT).status == "completed"
    finally:
        supervisor.shutdown_checked_sync(5.0)
    steered = [e for e in store.replay_events("s-steer") if e.kind == "attempt.steered"]
    assert len(steered) == 2  # the replayed steering_id appended nothing
    first = steered[0]
    assert first.run_id == "run-p"
    assert first.data["attempt_id"] == attempt
    assert first.data["text_preview"] == long[:200]
    assert steered[1].data["text_preview"] == "and the docs"
    kinds = [e.kind for e in store.replay_events("s-steer")]
    assert kinds.index("attempt.accepted") < kinds.index("attempt.steered")
    assert kinds.index("attempt.steered") < kinds.index("attempt.terminal")
    store.close()


def test_steering_the_child_takes_is_recorded_with_the_ids_it_took() -> None:
    """``attempt.steering_delivered`` names the steering ids a child drained, once each,
    in the order they were queued (so the console can say a receipt reached the child)."""
    store = MemorySessionStore(clock=ManualClock())
    queued, drained = threading.Event(), threading.Event()
    taken: list[list[str]] = []

    async def run(request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await asyncio.to_thread(queued.wait, TIMEOUT)
        taken.append(control.steering())
        taken.append(control.steering())  # nothing new: no second event
        drained.set()
        return ChildOutcome.completed("ok")

    supervisor = BackgroundSubagentSupervisor(
        runner=run,
        store=store,
        owner=OwnerIdentity(host_instance_id="host-a", fencing_generation=1),
        session_id="s-took",
        limits=FAST,
        ids=SeededIds(6),
    )
    try:
        attempt = supervisor.delegate_sync("research", "p", parent_run_id="run-p").attempt_id
        supervisor.steer_sync(attempt, "first", steering_id="st-a")
        supervisor.steer_sync(attempt, "second", steering_id="st-b")
        queued.set()
        assert drained.wait(TIMEOUT)
        assert supervisor.wait_sync(attempt, TIMEOUT).status == "completed"
    finally:
        supervisor.shutdown_checked_sync(5.0)
    assert taken == [["first", "second"], []]
    events = store.replay_events("s-took")
    took = [e for e in events if e.kind == "attempt.steering_delivered"]
    assert [(e.run_id, e.data) for e in took] == [
        ("run-p", {"attempt_id": attempt, "steering_ids": ["st-a", "st-b"]})
    ]
    kinds = [e.kind for e in events]
    assert kinds.index("attempt.steered") < kinds.index("attempt.steering_delivered")
    assert kinds.index("attempt.steering_delivered") < kinds.index("attempt.terminal")
    store.close()


async def test_a_subscriber_sees_the_attempts_life_live_in_order_on_the_loop() -> None:
    providers = default_model_providers().copy()
    providers.register("planner", lambda name, settings: FunctionModel(scripted_planner()))
    config = planner_config("test:text=three facts")
    service = memory_service(config, providers)
    await service.start()
    loop_thread = threading.get_ident()
    pushed: list[tuple[HostEvent, int]] = []
    done = asyncio.Event()

    def push(frame: dict[str, Any]) -> None:
        event = frame["params"]["event"]
        pushed.append((event, threading.get_ident()))
        if event.kind == "attempt.delivered":  # in-band at a turn, or by a continuation
            done.set()

    conn = Connection(transport="test")
    conn.push = push
    client = Client(service.dispatcher(), conn)
    try:
        await client.result("session.create", {"session_id": "s1"})
        await client.result("events.subscribe", {"session_id": "s1", "after_seq": 0})
        await client.result("run.start", {"session_id": "s1", "input": "plan the release"})
        try:
            await asyncio.wait_for(done.wait(), TIMEOUT)
        except TimeoutError:
            replay = await client.result("events.replay", {"session_id": "s1"})
            raise AssertionError(
                ([(e.seq, e.kind, e.data) for e, _ in pushed], replay["events"])
            ) from None
        events = [event for event, _ in pushed]
        assert {thread for _, thread in pushed} == {loop_thread}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        replay = await client.result("events.replay", {"session_id": "s1"})
        logged = [(e["seq"], e["kind"]) for e in replay["events"]]
        assert logged[: len(events)] == [(e.seq, e.kind) for e in events]  # what committed
        assert [e.kind for e in events if e.kind.startswith("attempt.")] == [
            "attempt.accepted",
            "attempt.started",
            "attempt.terminal",
            "attempt.claimed",
            "attempt.delivered",
        ]
    finally:
        await service.close()


async def test_events_committed_on_other_threads_reach_a_subscriber_once_and_in_order() -> None:
    service = memory_service(CONFIG)
    await service.start()
    got: list[int] = []
    enough = asyncio.Event()
    total = 200

    def push(frame: dict[str, Any]) -> None:
        got.append(frame["params"]["event"].seq)
        if len(got) >= total + 1:
            enough.set()

    conn = Connection(transport="test")
    conn.push = push
    client = Client(service.dispatcher(), conn)
    try:
        await client.result("session.create", {"session_id": "s1"})  # seq 1
        await client.result("events.subscribe", {"session_id": "s1", "after_seq": 0})

        def append(n: int) -> None:
            for index in range(n):
                service.store.append_event("s1", "note", None, {"i": index})

        writers = [threading.Thread(target=append, args=(total // 4,)) for _ in range(4)]
        for writer in writers:
            writer.start()
        await asyncio.to_thread(lambda: [w.join(TIMEOUT) for w in writers])
        await asyncio.wait_for(enough.wait(), TIMEOUT)
        assert got == list(range(1, total + 2))
    finally:
        await service.close()
