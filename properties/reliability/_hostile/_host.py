"""The in-process host the hostile cases run against: one store, a dispatcher, a probe
that says whether it still serves, and a snapshot of every committed record."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from storage import KernelStore, MemorySessionStore, SessionStore
from subagents._agent._models import (
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
)
from subagents._host._config import parse_host_config
from subagents._host._eventlog import MemoryEventLog
from subagents._host._jsonrpc import Connection, Dispatcher
from subagents._host._service import HostService
from subagents._specs._agent_spec import default_model_providers

HOST_CONFIG = """
[host]
lease_ttl = 30.0

[profiles.default]
model_id = "test:echo"

[profiles.gated]
model_id = "gated:x"
"""

SEED_SESSION = "hostile-seed"


def store_snapshot(store: SessionStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every committed record of a kernel store, table by table."""
    assert isinstance(store, KernelStore)
    return store.backend.read(lambda txn: {t: list(txn.scan(t)) for t in KernelStore.TABLES})


class HostileHost:
    """An in-process host on one store: a dispatcher, a connection, a probe.

    ``gated:x`` models wait until :meth:`release` (so a run stays live for
    steering). Runs on the caller's event loop.
    """

    def __init__(self, service: HostService, gate: asyncio.Event, entered: asyncio.Event) -> None:
        self.service = service
        self.dispatcher: Dispatcher = service.dispatcher()
        self.conn = Connection(transport="test")
        self.gate = gate
        self.entered = entered
        self.next_id = 0

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        reply = await self.dispatcher.handle(json.dumps(frame).encode(), self.conn)
        return None if reply is None else json.loads(reply)

    def snapshot(self) -> dict[str, list[tuple[bytes, bytes]]]:
        return store_snapshot(self.service.store)

    async def probe(self, where: str) -> list[str]:
        """The host still serves: diagnostics answer and the seed session reads back."""
        found = []
        diagnostics = await self.call("diagnostics.get")
        if not (isinstance(diagnostics, dict) and diagnostics.get("result", {}).get("accepting")):
            found.append(f"{where}: the host stopped serving: {str(diagnostics)[:200]}")
        seed = await self.call("session.get", {"session_id": SEED_SESSION})
        if not (isinstance(seed, dict) and "result" in seed):
            found.append(f"{where}: the seed session is gone: {str(seed)[:200]}")
        return found

    def release(self) -> None:
        self.gate.set()


@contextlib.asynccontextmanager
async def hostile_host(
    *,
    store: SessionStore | None = None,
    config: str = HOST_CONFIG,
    seed: bool = True,
) -> AsyncIterator[HostileHost]:
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def gated(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        entered.set()
        await gate.wait()
        return "released"

    providers = default_model_providers().with_provider(
        "gated", lambda name, settings: FunctionModel(gated)
    )
    store = store if store is not None else MemorySessionStore()
    service = HostService(
        parse_host_config(config, providers=providers),
        store=store,
        events=MemoryEventLog(),
        providers=providers,
        tick_seconds=3600.0,
        closers=[store.close],
    )
    await service.start()
    host = HostileHost(service, gate, entered)
    try:
        if seed:
            created = await host.call(
                "session.create", {"session_id": SEED_SESSION, "metadata": {"k": "v"}}
            )
            assert "result" in created, created
        yield host
    finally:
        gate.set()
        await service.close()
