"""An attempt's ``parent_run_id`` is the id of the durable run that delegated it, one
``run.list`` shows (it used to be the SDK's own run id, which no client knew)."""

from __future__ import annotations

from host_helpers import REPO, Client, memory_service, next_event

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
