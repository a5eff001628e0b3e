"""The ``lmdb-full`` family: a full LMDB map and a full reader table under a running
host; a typed, retryable refusal, nothing partial, and work resuming once there is room."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storage import KernelStore, LmdbBackend, LmdbSessionStore

from ._common import (
    KIB,
    MIB,
    TIMEOUT,
    UNAVAILABLE,
    untyped,
)
from ._host import SEED_SESSION, HostileHost, hostile_host
from ._jsonrpc import code_of

LMDB_CASES: tuple[str, ...] = (
    "map-full-session-create",
    "map-full-run-start",
    "map-full-grows-in-place",
    "map-full-reopen-larger",
    "readers-full",
)
"""The full-store cases, each run on a fresh LMDB directory."""

_SMALL_MAP = 256 * KIB


async def _fill(host: HostileHost, where: str) -> tuple[list[str], Any]:
    """Create sessions with 8 KiB of metadata until the store refuses one."""
    created: list[str] = []
    for n in range(10_000):
        session_id = f"fill-{n:05d}"
        reply = await host.call(
            "session.create", {"session_id": session_id, "metadata": {"pad": "p" * 8 * KIB}}
        )
        if "error" in reply:
            return created, reply
        created.append(session_id)
    raise AssertionError(f"{where}: the map never filled")


async def _all_there(host: HostileHost, where: str, created: Sequence[str]) -> list[str]:
    listed = await host.call("session.list", {})
    ids = {s["session_id"] for s in listed.get("result", {}).get("sessions", [])}
    missing = [s for s in created if s not in ids]
    return [f"{where}: {len(missing)} committed sessions lost"] if missing else []


async def check_lmdb(case: str, workdir: Path) -> list[str]:
    """One full-store case: the typed, retryable refusal, nothing partial, the host
    still serving, and work resuming once there is room."""
    where = f"lmdb-full[{case}]"
    path = workdir / case
    shutil.rmtree(path, ignore_errors=True)
    try:
        if case == "readers-full":
            return await _readers_full(path, where)
        return await _map_full(case, path, where)
    except BaseException as exc:
        return [untyped(where, exc)]


async def _map_full(case: str, path: Path, where: str) -> list[str]:
    found: list[str] = []
    store = LmdbSessionStore(path, map_size=_SMALL_MAP, sync=False)
    async with hostile_host(store=store) as host:
        created, refusal = await _fill(host, where)
        if len(created) < 5:
            found.append(f"{where}: the map filled after {len(created)} sessions")
        if code_of(refusal) != UNAVAILABLE:
            found.append(f"{where}: a full map answered {str(refusal)[:200]}")
        before = host.snapshot()
        if case == "map-full-run-start":
            again = await host.call("run.start", {"session_id": created[0], "input": "x" * 60_000})
            runs = await host.call("run.list", {"session_id": created[0]})
            if runs.get("result", {}).get("runs"):
                found.append(f"{where}: a run was admitted into a full map")
        else:
            again = await host.call(
                "session.create", {"session_id": "refused", "metadata": {"pad": "p" * 8 * KIB}}
            )
        if code_of(again) != UNAVAILABLE:
            found.append(f"{where}: a retry into the full map answered {str(again)[:200]}")
        if host.snapshot() != before:
            found.append(f"{where}: a refused write changed the store")
        found += await host.probe(where)
        found += await _all_there(host, where, created)
        if case == "map-full-grows-in-place":
            # Another opener on the same path turns auto_grow on for the shared environment.
            grower = LmdbBackend(
                path,
                tables=KernelStore.TABLES,
                sync=False,
                map_size=_SMALL_MAP,
                auto_grow=True,
                max_map_size=64 * MIB,
            )
            try:
                resumed = await host.call(
                    "session.create", {"session_id": "after-growth", "metadata": {"pad": "p"}}
                )
                if "result" not in resumed:
                    found.append(f"{where}: no room after growth: {str(resumed)[:200]}")
                found += await _all_there(host, where, [*created, "after-growth"])
            finally:
                grower.close()
    if case == "map-full-reopen-larger":
        bigger = LmdbSessionStore(path, map_size=4 * _SMALL_MAP, sync=False)
        async with hostile_host(store=bigger, seed=False) as host:
            resumed = await host.call("session.create", {"session_id": "after-growth"})
            if "result" not in resumed:
                found.append(f"{where}: no room after reopening larger: {str(resumed)[:200]}")
            found += await _all_there(host, where, [SEED_SESSION, *created, "after-growth"])
            found += await host.probe(where)
    return found


async def _readers_full(path: Path, where: str) -> list[str]:
    found: list[str] = []
    backend = LmdbBackend(path, tables=KernelStore.TABLES, sync=False, max_readers=1)
    store = KernelStore(backend)
    async with hostile_host(store=store) as host:
        entered = threading.Event()
        release = threading.Event()

        def hold(txn: Any) -> None:
            entered.set()
            release.wait(TIMEOUT)

        holder = threading.Thread(target=lambda: backend.read(hold), daemon=True)
        holder.start()
        entered.wait(TIMEOUT)
        try:
            refused = await host.call("session.get", {"session_id": SEED_SESSION})
            if code_of(refused) != UNAVAILABLE:
                found.append(f"{where}: a full reader table answered {str(refused)[:200]}")
            diagnostics = await host.call("diagnostics.get")
            if "result" not in diagnostics:
                found.append(f"{where}: the host stopped serving: {str(diagnostics)[:200]}")
        finally:
            release.set()
            holder.join(TIMEOUT)
        found += await host.probe(where)
    return found
