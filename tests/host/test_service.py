"""The host service in process: sessions, runs, events, interrupts, continuations, restarts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from host_helpers import CONFIG, Client, memory_service, next_event

from storage import AdmissionLease, ManualClock, MemorySessionStore, RunRecord, SessionRecord
from subagents import FunctionModel, ModelMessage, ModelRequestParameters, default_model_providers
from subagents._host import HostService, parse_host_config
from subagents._host._eventlog import MemoryEventLog
from subagents._host._methods import HostEvent

TIMEOUT = 10.0


async def wait_event(
    service: HostService, session_id: str, kind: str, run_id: str | None = None
) -> HostEvent:
    return await next_event(service, session_id, kind, run_id)


class Gate:
    """A model that blocks until released; ``entered`` is set once it is called."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> str:
        self.entered.set()
        await self.release.wait()
        return "released"


GATED = CONFIG + '\n[profiles.gated]\nmodel_id = "gate:x"\n[profiles.broken]\nmodel_id = "boom:x"\n'


@pytest.fixture
async def gated() -> AsyncIterator[tuple[HostService, Client, Gate]]:
    gate = Gate()

    def boom(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        raise RuntimeError("sk-secret-key leaked by a provider")

    providers = default_model_providers().copy()
    providers.register("gate", lambda name, settings: FunctionModel(gate))
    providers.register("boom", lambda name, settings: FunctionModel(boom))
    svc = memory_service(GATED, providers)
    await svc.start()
    try:
        yield svc, Client(svc.dispatcher()), gate
    finally:
        gate.release.set()
        await svc.close()


async def test_initialize_and_catalog(client: Client) -> None:
    init = await client.result("initialize", {"protocol_version": "1", "client": {"name": "t"}})
    assert init["protocol"] == "subagents.host"
    assert "run.start" in init["methods"]
    bad = await client.call("initialize", {"protocol_version": "9"})
    assert bad["error"]["code"] == -32602
    catalog = await client.result("catalog.list")
    assert [p["name"] for p in catalog["profiles"]] == ["default", "research"]
    research = next(p for p in catalog["profiles"] if p["name"] == "research")
    assert research["child"] is True
    assert catalog["subagents"][0]["name"] == "research"
    profile = await client.result("profile.get", {"name": "default"})
    assert profile["subagents"] == ["research"]
    missing = await client.call("profile.get", {"name": "ghost"})
    assert missing["error"]["code"] == -32010


async def test_session_lifecycle(client: Client) -> None:
    created = await client.result("session.create", {"session_id": "s1", "metadata": {"k": "v"}})
    assert created["status"] == "active"
    assert created["profile"] == "default"
    again = await client.result("session.create", {"session_id": "s1", "metadata": {"k": "v"}})
    assert again == created  # an identical retry returns the stored record
    generated = await client.result("session.create")
    assert generated["session_id"].startswith("session_")
    listed = await client.result("session.list")
    assert {s["session_id"] for s in listed["sessions"]} == {"s1", generated["session_id"]}
    assert (await client.result("session.list", {"status": "deleting"}))["sessions"] == []
    deleted = await client.result("session.delete", {"session_id": "s1"})
    assert deleted["status"] == "deleting"
    refused = await client.call("run.start", {"session_id": "s1", "input": "hi"})
    assert refused["error"]["code"] == -32016  # the deletion fence
    bad_status = await client.call("session.list", {"status": "zombie"})
    assert bad_status["error"]["code"] == -32602


async def test_run_to_completion_with_events(client: Client, service: HostService) -> None:
    await client.result("session.create", {"session_id": "s1"})
    run = await client.result("run.start", {"session_id": "s1", "input": "hello"})
    assert run["status"] == "admitted"
    assert run["trigger_type"] == "rpc"
    await wait_event(service, "s1", "run.completed", run["run_id"])
    status = await client.result("run.status", {"session_id": "s1", "run_id": run["run_id"]})
    assert status["status"] == "completed"
    assert status["output_preview"] == "hello"
    runs = await client.result("run.list", {"session_id": "s1"})
    assert [r["run_id"] for r in runs["runs"]] == [run["run_id"]]
    replay = await client.result("events.replay", {"session_id": "s1"})
    kinds = [e["kind"] for e in replay["events"]]
    assert kinds == ["session.created", "run.admitted", "run.started", "run.completed"]
    assert [e["seq"] for e in replay["events"]] == [1, 2, 3, 4]
    assert replay["next_seq"] == 4
    tail = await client.result("events.replay", {"session_id": "s1", "after_seq": 2, "limit": 1})
    assert [e["kind"] for e in tail["events"]] == ["run.started"]
    bad = await client.call("events.replay", {"session_id": "s1", "limit": 0})
    assert bad["error"]["code"] == -32602


async def test_run_start_input_checks(client: Client) -> None:
    await client.result("session.create", {"session_id": "s1"})
    empty = await client.call("run.start", {"session_id": "s1", "input": ""})
    assert empty["error"]["code"] == -32602
    huge = await client.call("run.start", {"session_id": "s1", "input": "x" * (70 * 1024)})
    assert huge["error"]["code"] == -32602
    ghost = await client.call("run.start", {"session_id": "s1", "input": "x", "profile": "ghost"})
    assert ghost["error"]["code"] == -32050
    nosession = await client.call("run.start", {"session_id": "nope", "input": "x"})
    assert nosession["error"]["code"] == -32010


async def test_idempotent_run_start(gated: tuple[HostService, Client, Gate]) -> None:
    service, client, gate = gated
    await client.result("session.create", {"session_id": "s1", "profile": "gated"})
    params = {"session_id": "s1", "input": "go", "idempotency_key": "k1"}
    first = await client.result("run.start", params)
    second = await client.result("run.start", params)
    assert second["run_id"] == first["run_id"]
    assert second["idempotent_replay"] is True
    other = await client.call("run.start", {**params, "input": "other"})
    assert other["error"]["code"] == -32012
    busy = await client.call("run.start", {"session_id": "s1", "input": "again"})
    assert busy["error"]["code"] == -32013  # one live run per session
    gate.release.set()
    await wait_event(service, "s1", "run.completed", first["run_id"])


async def test_interrupt_and_steer(gated: tuple[HostService, Client, Gate]) -> None:
    service, client, gate = gated
    await client.result("session.create", {"session_id": "s1", "profile": "gated"})
    run = await client.result("run.start", {"session_id": "s1", "input": "go"})
    ref = {"session_id": "s1", "run_id": run["run_id"]}
    await asyncio.wait_for(gate.entered.wait(), TIMEOUT)
    steer = await client.result("run.steer", {**ref, "message": "focus", "steering_id": "st1"})
    assert steer["status"] == "queued"
    again = await client.result("run.steer", {**ref, "message": "focus", "steering_id": "st1"})
    assert again == steer
    clash = await client.call("run.steer", {**ref, "message": "other", "steering_id": "st1"})
    assert clash["error"]["code"] == -32012
    interrupted = await client.result("run.interrupt", {**ref, "reason": "changed my mind"})
    assert interrupted["status"] == "cancelled"
    assert interrupted["output_preview"] == "changed my mind"
    repeat = await client.result("run.interrupt", ref)
    assert repeat["status"] == "cancelled"
    late = await client.call("run.steer", {**ref, "message": "too late"})
    assert late["error"]["code"] == -32016
    kinds = [e.kind for e in service.events.replay("s1")]
    assert kinds[-2:] == ["run.steered", "run.cancelled"]


async def test_failure_text_is_reduced_to_a_category(
    gated: tuple[HostService, Client, Gate],
) -> None:
    service, client, _ = gated
    await client.result("session.create", {"session_id": "s1", "profile": "broken"})
    run = await client.result("run.start", {"session_id": "s1", "input": "go"})
    event = await wait_event(service, "s1", "run.failed", run["run_id"])
    failure = {"category": "model_error", "reason": None, "status": None, "provider": None}
    assert event.data == {"error": "model_error", "failure": failure}
    status = await client.result("run.status", {"session_id": "s1", "run_id": run["run_id"]})
    assert status["status"] == "failed"
    assert "secret" not in str(status)


async def test_subscribe_pushes_events(service: HostService) -> None:
    pushed: list[dict[str, Any]] = []
    from subagents._host import Connection

    client = Client(service.dispatcher(), Connection(transport="test", push=pushed.append))
    await client.result("session.create", {"session_id": "s1"})
    sub = await client.result("events.subscribe", {"session_id": "s1", "after_seq": 0})
    assert pushed[0]["method"] == "events.event"
    assert pushed[0]["params"]["event"].kind == "session.created"
    run = await client.result("run.start", {"session_id": "s1", "input": "hi"})
    await wait_event(service, "s1", "run.completed", run["run_id"])
    kinds = [p["params"]["event"].kind for p in pushed]
    assert kinds == ["session.created", "run.admitted", "run.started", "run.completed"]
    removed = await client.result("events.unsubscribe", {"subscription_id": sub["subscription_id"]})
    assert removed["removed"] is True
    again = await client.result("events.unsubscribe", {"subscription_id": sub["subscription_id"]})
    assert again["removed"] is False


async def test_subscribe_needs_a_push_channel(client: Client) -> None:
    await client.result("session.create", {"session_id": "s1"})
    reply = await client.call("events.subscribe", {"session_id": "s1"})
    assert reply["error"]["code"] == -32002


async def test_shutdown_stops_admission(client: Client, service: HostService) -> None:
    await client.result("session.create", {"session_id": "s1"})
    assert (await client.result("shutdown"))["status"] == "shutting_down"
    assert service.shutdown_requested.is_set()
    refused = await client.call("run.start", {"session_id": "s1", "input": "x"})
    assert refused["error"]["code"] == -32005
    # Reads keep working until the transport closes.
    assert (await client.result("session.get", {"session_id": "s1"}))["session_id"] == "s1"


async def test_background_result_becomes_exactly_one_continuation(
    client: Client, service: HostService
) -> None:
    await client.result("session.create", {"session_id": "s1"})
    parent = await client.result("run.start", {"session_id": "s1", "input": "plan"})
    await wait_event(service, "s1", "run.completed", parent["run_id"])
    supervisor = service.supervisor("s1")
    accepted = await supervisor.delegate("research", "collect", parent_run_id=parent["run_id"])
    admitted = await wait_event(service, "s1", "run.admitted")  # the first one is the parent's
    while admitted.run_id == parent["run_id"]:
        admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
    assert admitted.data == {
        "trigger_type": "async_subagent_result",
        "attempt_id": accepted.attempt_id,
    }
    await wait_event(service, "s1", "run.completed", admitted.run_id)
    run = await client.result("run.status", {"session_id": "s1", "run_id": admitted.run_id})
    assert run["trigger_type"] == "async_subagent_result"
    assert run["parent_run_id"] == parent["run_id"]
    assert "three facts" in run["input"]
    assert accepted.attempt_id in run["input"]
    assert run["metadata"]["async_subagent.attempt_id"] == accepted.attempt_id
    # More reconciliation passes never admit a second continuation.
    for _ in range(3):
        await service.maintain()
    runs = (await client.result("run.list", {"session_id": "s1"}))["runs"]
    continuations = [r for r in runs if r["trigger_type"] == "async_subagent_result"]
    assert len(continuations) == 1
    parent_after = await client.result(
        "run.status", {"session_id": "s1", "run_id": parent["run_id"]}
    )
    assert parent_after["status"] == "completed"  # the terminal parent run is never changed
    record = service.store.load_attempt(accepted.attempt_id)
    assert str(record.delivery_status) == "delivered"
    assert record.continuation_run_id == admitted.run_id


async def test_restart_fails_runs_of_a_dead_host_and_leaves_live_ones() -> None:
    clock = ManualClock()
    store = MemorySessionStore(clock=clock)
    now = clock.now()
    store.create_session(
        SessionRecord(session_id="s1", namespace_id="default", created_at=now, updated_at=now)
    )
    store.create_session(
        SessionRecord(session_id="s2", namespace_id="default", created_at=now, updated_at=now)
    )

    def admit(session_id: str, run_id: str, ttl: float) -> None:
        store.admit_run(
            RunRecord(
                session_id=session_id,
                run_id=run_id,
                created_at=now,
                updated_at=now,
                admission_lease=AdmissionLease(
                    admission_id=f"adm-{run_id}",
                    host_instance_id="dead-host",
                    fencing_generation=1,
                    lease_expires_at=now + ttl,
                ),
            )
        )

    admit("s1", "run-lost", 5.0)
    admit("s2", "run-live", 500.0)
    clock.advance(10.0)
    svc = HostService(
        parse_host_config(CONFIG),
        store=store,
        events=MemoryEventLog(),
        clock=clock,
        tick_seconds=60.0,
        closers=[store.close],
    )
    await svc.start()
    try:
        assert str(store.load_run("s1", "run-lost").status) == "failed"
        assert store.load_run("s1", "run-lost").output_preview == "host_process_lost"
        assert str(store.load_run("s2", "run-live").status) == "admitted"  # foreign, live
        assert [e.kind for e in svc.events.replay("s1")] == ["run.admitted", "run.failed"]
        # A foreign live run is watched: once its lease lapses, the next pass fails it.
        clock.advance(600.0)
        await svc.maintain()
        assert store.load_run("s2", "run-live").output_preview == "host_process_lost"
    finally:
        await svc.close()


async def test_continuation_when_the_parent_is_the_sdk_run(
    client: Client, service: HostService
) -> None:
    """Async tools may name the SDK's own run id: the session's profile is used then."""
    await client.result("session.create", {"session_id": "s1"})
    supervisor = service.supervisor("s1")
    accepted = await supervisor.delegate("research", "collect", parent_run_id="sdk-run-1")
    admitted = await wait_event(service, "s1", "run.admitted")
    assert admitted.data["attempt_id"] == accepted.attempt_id
    await wait_event(service, "s1", "run.completed", admitted.run_id)
    run = service.store.load_run("s1", admitted.run_id or "")
    assert run.parent_run_id == "sdk-run-1"
    assert str(run.status) == "completed"


async def test_markdown_subagents_from_a_directory() -> None:
    from host_helpers import REPO

    text = (
        f'[host]\nsubagents_dir = "{REPO / "examples" / "agents"}"\n'
        '[profiles.default]\nmodel_id = "test:echo"\nsubagents = ["reviewer"]\n'
    )
    store = MemorySessionStore()
    svc = HostService(
        parse_host_config(text), store=store, events=MemoryEventLog(), closers=[store.close]
    )
    await svc.start()
    try:
        client = Client(svc.dispatcher())
        catalog = await client.result("catalog.list")
        markdown = {s["name"]: s for s in catalog["subagents"] if s["source"] == "markdown"}
        assert {"debugger", "researcher", "reviewer"} <= set(markdown)
        assert markdown["debugger"]["required_tools"] == ["grep", "view"]
        agent = svc.build_agent("default", "s1")
        assert "delegate" in agent.tools().names()
        assert svc.warnings == []
    finally:
        await svc.close()


async def test_unknown_markdown_subagent_is_a_config_error() -> None:
    from host_helpers import REPO

    from subagents._host import HostConfigError

    text = (
        f'[host]\nsubagents_dir = "{REPO / "examples" / "agents"}"\n'
        '[profiles.default]\nmodel_id = "test:echo"\nsubagents = ["ghost"]\n'
    )
    store = MemorySessionStore()
    try:
        with pytest.raises(HostConfigError) as info:
            HostService(parse_host_config(text), store=store, events=MemoryEventLog())
        assert info.value.key == "profiles.default.subagents[0]"
        assert "ghost.md" in info.value.fix
    finally:
        store.close()
