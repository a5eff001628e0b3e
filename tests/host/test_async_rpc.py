"""RPC with the SDK's async-only delegation: a parent delegates in the background, its
run ends, and the late result comes back as exactly one continuation run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence

import pytest
from host_helpers import Client, memory_service, next_event, planner

from properties.reliability._scripted import planner_config
from subagents import (
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
    default_model_providers,
)
from subagents._host import HostService

pytestmark = pytest.mark.timeout(60)
TIMEOUT = 20.0

CONFIG = planner_config("slow:x")


@pytest.fixture
async def host() -> AsyncIterator[tuple[HostService, Client, threading.Event]]:
    release = threading.Event()

    async def slow(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        await asyncio.to_thread(release.wait, TIMEOUT)
        return "three facts"

    providers = default_model_providers().copy()
    providers.register("planner", lambda name, settings: FunctionModel(planner))
    providers.register("slow", lambda name, settings: FunctionModel(slow))
    svc = memory_service(CONFIG, providers)
    await svc.start()
    try:
        yield svc, Client(svc.dispatcher()), release
    finally:
        release.set()
        await svc.close()


async def test_async_delegation_over_rpc_ends_in_one_continuation(
    host: tuple[HostService, Client, threading.Event],
) -> None:
    service, client, release = host
    agent = service.build_agent("default", "s0")
    names = set(agent.tools().names())
    assert {"delegate", "steer_subagent", "cancel_subagent", "wait_subagent"} <= names
    assert "spawn_delegate" not in names
    assert service.delegation == "async"
    await client.result("session.create", {"session_id": "s1"})
    parent = await client.result("run.start", {"session_id": "s1", "input": "plan"})
    await next_event(service, "s1", "run.completed", parent["run_id"])
    status = await client.result("run.status", {"session_id": "s1", "run_id": parent["run_id"]})
    assert status["output_preview"] == "delegated; carrying on"
    release.set()  # the child finishes only after its parent run ended
    admitted = await next_event(service, "s1", "run.admitted")
    while admitted.run_id == parent["run_id"]:
        admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
    assert admitted.data["trigger_type"] == "async_subagent_result"
    done = await next_event(service, "s1", "run.completed", admitted.run_id)
    assert done.data["output"] == "continued: three facts"
    for _ in range(3):
        await service.maintain()
    runs = (await client.result("run.list", {"session_id": "s1"}))["runs"]
    assert [r["trigger_type"] for r in runs] == ["rpc", "async_subagent_result"]
