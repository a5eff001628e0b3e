"""An attempt's ``parent_run_id`` is the id of the durable run that delegated it, one
``run.list`` shows (it used to be the SDK's own run id, which no client knew)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from host_helpers import Client, gated_delegating, memory_service, next_event

from subagents._host import HostConfigError, HostService

CONFIG = gated_delegating()
"""The researcher answers once ``researcher.release`` is in the gates directory."""


@pytest.fixture
def gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "gates"
    directory.mkdir()
    monkeypatch.setenv("SUBAGENTS_SCRIPT_GATES", str(directory))
    yield directory
    (directory / "researcher.release").touch()  # never left waiting, however the test ended


async def _delegated_and_completed(service: HostService, client: Client, gates: Path) -> str:
    """Start the parent run; once it completed (its child still gated, so its result
    cannot be handed over in-band), release the child. The parent run's id."""
    await client.result("session.create", {"session_id": "s1"})
    parent = await client.result("run.start", {"session_id": "s1", "input": "collect facts"})
    parent_run_id = str(parent["run_id"])
    done = await next_event(service, "s1", "run.completed", parent_run_id)
    assert done.data["output"] == "Done: delegate accepted."  # nothing arrived in-band
    (gates / "researcher.release").touch()
    return parent_run_id


async def test_the_attempt_names_the_run_the_client_started(gates: Path) -> None:
    service = memory_service(CONFIG)
    await service.start()
    try:
        client = Client(service.dispatcher())
        parent_run_id = await _delegated_and_completed(service, client, gates)
        admitted = await next_event(service, "s1", "run.admitted")
        while admitted.run_id == parent_run_id:
            admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
        await next_event(service, "s1", "run.completed", admitted.run_id)
        (attempt,) = service.store.list_attempts(service.namespace_id)
        runs = (await client.result("run.list", {"session_id": "s1"}))["runs"]
    finally:
        await service.close()
    assert attempt.parent_run_id == parent_run_id
    assert [r["run_id"] for r in runs] == [parent_run_id, admitted.run_id]
    continuation = runs[1]
    assert continuation["trigger_type"] == "async_subagent_result"
    assert continuation["parent_run_id"] == parent_run_id


async def test_a_continuation_runs_with_the_parent_profile_s_continuation_profile(
    gates: Path,
) -> None:
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
        parent_run_id = await _delegated_and_completed(service, client, gates)
        admitted = await next_event(service, "s1", "run.admitted")
        while admitted.run_id == parent_run_id:
            admitted = await next_event(service, "s1", "run.admitted", after=admitted.seq)
        started = await next_event(service, "s1", "run.started", admitted.run_id)
        await next_event(service, "s1", "run.completed", admitted.run_id)
        first = await next_event(service, "s1", "run.started", parent_run_id)
        runs = (await client.result("run.list", {"session_id": "s1"}))["runs"]
    finally:
        await service.close()
    assert first.data["profile"] == "default"
    assert started.data["profile"] == "reviewer"
    assert [r["trigger_type"] for r in runs] == ["rpc", "async_subagent_result"]


def test_an_unknown_continuation_profile_is_refused_with_its_key() -> None:
    config = CONFIG.replace(
        "[profiles.researcher]", 'continuation_profile = "nobody"\n\n[profiles.researcher]', 1
    )
    with pytest.raises(HostConfigError) as caught:
        memory_service(config)
    assert "profiles.default.continuation_profile" in str(caught.value)
    assert "nobody" in str(caught.value)
