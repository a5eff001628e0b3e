"""Two hosts on one data directory, each with its own owner identity.

The second host leaves a live foreign attempt alone; once the owner's lease
expired (store time), its reconciliation records the attempt as lost and
admits the one continuation run for it. The first owner can never revive
the attempt or commit a second terminal outcome.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from host_helpers import CONFIG, next_event

from storage import LmdbSessionStore, ManualClock
from subagents import FunctionModel, ModelMessage, ModelRequestParameters, default_model_providers
from subagents._host import Connection, HostService, parse_host_config
from subagents._host._eventlog import LmdbEventLog
from subagents._host._methods import METHODS

pytestmark = pytest.mark.timeout(60)
TIMEOUT = 20.0


def parse_params(method: str, value: dict[str, object]) -> Any:
    spec = next(s for s in METHODS if s.name == method)
    return msgspec.convert(value, spec.params)


def conn() -> Connection:
    return Connection(transport="test")


def host(
    path: Path, clock: ManualClock, owner: str, providers: object, config_text: str
) -> HostService:
    store = LmdbSessionStore(path, clock=clock)
    events = LmdbEventLog(path)
    return HostService(
        parse_host_config(config_text, providers=providers),  # type: ignore[arg-type]
        store=store,
        events=events,
        clock=clock,
        host_instance_id=owner,
        store_name="lmdb",
        providers=providers,  # type: ignore[arg-type]
        tick_seconds=3600.0,  # maintenance is driven by the test
        shutdown_timeout=2.0,
        closers=[events.close, store.close],
    )


async def test_foreign_live_attempt_left_alone_then_reconciled_once(tmp_path: Path) -> None:
    entered = threading.Event()
    release = threading.Event()

    async def gated(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        entered.set()
        await asyncio.to_thread(release.wait, TIMEOUT)
        return "late child output"

    providers = default_model_providers().copy()
    providers.register("gate", lambda name, settings: FunctionModel(gated))
    text = CONFIG.replace('model_id = "test:text=three facts"', 'model_id = "gate:x"')
    clock = ManualClock()
    path = tmp_path / "lmdb"
    a = host(path, clock, "host-a", providers, text)
    await a.start()
    b: HostService | None = None
    try:
        session = await a.session_create(
            parse_params("session.create", {"session_id": "s1"}), conn()
        )
        assert session.status == "active"
        parent = await a.run_start(
            parse_params("run.start", {"session_id": "s1", "input": "plan"}), conn()
        )
        await next_event(a, "s1", "run.completed", parent.run_id)
        accepted = await a.supervisor("s1").delegate(
            "research", "collect", parent_run_id=parent.run_id
        )
        assert await asyncio.to_thread(entered.wait, TIMEOUT)

        b = host(path, clock, "host-b", providers, text)
        assert b.fencing_generation > a.fencing_generation
        await b.start()
        await b.maintain()
        record = b.store.load_attempt(accepted.attempt_id)
        assert record.owner_lease.host_instance_id == "host-a"
        assert str(record.execution_status) in {"accepted", "starting", "running"}

        clock.advance(a.lease_ttl + 1.0)  # host A's lease lapses at store time
        await b.maintain()
        record = b.store.load_attempt(accepted.attempt_id)
        assert str(record.execution_status) == "failed"
        assert record.failure_category == "host_process_lost"
        continuation = record.continuation_run_id
        assert continuation is not None
        await next_event(b, "s1", "run.completed", continuation)

        release.set()  # the old owner's child finishes now: its commit must fail closed
        await a.close()
        for _ in range(3):
            await b.maintain()
        final = b.store.load_attempt(accepted.attempt_id)
        assert final.terminal_fingerprint == record.terminal_fingerprint
        assert final.failure_category == "host_process_lost"
        runs = b.store.list_runs("s1")
        continuations = [r for r in runs if r.trigger_type == "async_subagent_result"]
        assert [r.run_id for r in continuations] == [continuation]
        assert "host process lost" in continuations[0].input[0].text
    finally:
        release.set()
        await a.close()
        if b is not None:
            await b.close()
