"""An attempt's ``parent_run_id`` is the id of the durable run that delegated it, one
``run.list`` shows (it used to be the SDK's own run id, which no client knew)."""

from __future__ import annotations

import pytest
from host_helpers import REPO, Client, memory_service, next_event

from subagents._host import HostConfigError

CONFIG = (REPO / "examples" / "delegating.toml").read_text()


async def test_the_attempt_names_the_run_the_client_started() -> None:
    service = memory_service(CONFIG)
    await service.start()
    try:
        client = Client(service.dispatcher())
        await client.result("session.create", {"session_id": "s1"})
        parent = await client.result("run.start", {"session_id": "s1", "input": "collect facts"})
        admitted = await next_event(service, "s1", "run.admitted")
        while admitted.run_id == parent["run_id"]:
            admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
        await next_event(service, "s1", "run.completed", admitted.run_id)
        (attempt,) = service.store.list_attempts(service.namespace_id)
        runs = (await client.result("run.list", {"session_id": "s1"}))["runs"]
    finally:
        await service.close()
    assert attempt.parent_run_id == parent["run_id"]
    assert [r["run_id"] for r in runs] == [parent["run_id"], admitted.run_id]
    continuation = runs[1]
    assert continuation["trigger_type"] == "async_subagent_result"
    assert continuation["parent_run_id"] == parent["run_id"]


async def test_a_continuation_runs_with_the_parent_profile_s_continuation_profile() -> None:
    """``continuation_profile`` names the profile that continues a profile's runs (a
    coordinator forced to delegate would delegate again from every continuation)."""
    config = CONFIG.replace(
        "[profiles.researcher]", 'continuation_profile = "reviewer"\n\n[profiles.researcher]', 1
    )
    assert 'continuation_profile = "reviewer"' in config
    service = memory_service(config)
    await service.start()
    try:
        client = Client(service.dispatcher())
        await client.result("session.create", {"session_id": "s1"})
        parent = await client.result("run.start", {"session_id": "s1", "input": "collect facts"})
        admitted = await next_event(service, "s1", "run.admitted")
        while admitted.run_id == parent["run_id"]:
            admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
        started = await next_event(service, "s1", "run.started", admitted.run_id)
        await next_event(service, "s1", "run.completed", admitted.run_id)
        first = await next_event(service, "s1", "run.started", parent["run_id"])
    finally:
        await service.close()
    assert first.data["profile"] == "default"
    assert started.data["profile"] == "reviewer"


def test_an_unknown_continuation_profile_is_refused_with_its_key() -> None:
    config = CONFIG.replace(
        "[profiles.researcher]", 'continuation_profile = "nobody"\n\n[profiles.researcher]', 1
    )
    with pytest.raises(HostConfigError) as caught:
        memory_service(config)
    assert "profiles.default.continuation_profile" in str(caught.value)
    assert "nobody" in str(caught.value)
