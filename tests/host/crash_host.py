"""A host process for the crash tests (run as a subprocess, killed with SIGKILL).

``python crash_host.py work DATA_DIR N`` opens a host on DATA_DIR, runs a
parent run, delegates N background attempts to a slow child and prints one
marker line per step (``marker <name>``) so the test can kill it at a chosen
point. ``python crash_host.py recover DATA_DIR`` is the restarted host: it
reconciles until every attempt is terminal and delivered (or a deadline
passes), then exits.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from storage import StoreError
from subagents import FunctionModel, ModelMessage, ModelRequestParameters, default_model_providers
from subagents._host import HostService, parse_host_config
from subagents._host._datadir import open_store
from subagents._host._jsonrpc import Connection
from subagents._host._methods import HostEvent, RunStartParams, SessionCreateParams

CONFIG = """
[host]
lease_ttl = 1.0

[profiles.default]
model_id = "test:echo"
subagents = ["research"]

[profiles.research]
model_id = "slow:x"

[subagents.research]
profile = "research"
"""

CHILD_SECONDS = 0.3


def marker(name: str) -> None:
    sys.stdout.write(f"marker {name}\n")
    sys.stdout.flush()


async def slow(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    marker("child-started")
    await asyncio.sleep(CHILD_SECONDS)
    marker("child-finishing")
    return "child result: 42 facts"


def service_for(data_dir: Path) -> HostService:
    providers = default_model_providers().copy()
    providers.register("slow", lambda name, settings: FunctionModel(slow))
    opened = open_store(data_dir)
    return HostService(
        parse_host_config(CONFIG, providers=providers),
        store=opened.store,
        events=opened.events,
        providers=providers,
        store_name=opened.name,
        data_dir=opened.data_dir,
        tick_seconds=0.05,
        closers=opened.closers,
    )


async def work(data_dir: Path, attempts: int) -> None:
    service = service_for(data_dir)
    await service.start()
    conn = Connection(transport="crash")

    def watch(event: HostEvent) -> None:
        if (
            event.kind == "run.admitted"
            and event.data.get("trigger_type") == "async_subagent_result"
        ):
            marker("continuation-admitted")
        elif event.kind == "run.completed" and event.run_id != parent.run_id:
            marker("continuation-completed")

    await service.session_create(SessionCreateParams(session_id="s1"), conn)
    marker("session")
    service.add_listener("s1", watch)
    done = asyncio.get_running_loop().create_future()
    parent = await service.run_start(RunStartParams(session_id="s1", input="plan"), conn)

    def parent_done(event: HostEvent) -> None:
        if event.kind == "run.completed" and event.run_id == parent.run_id and not done.done():
            done.set_result(None)

    service.add_listener("s1", parent_done)
    await done
    marker("parent-completed")
    supervisor = service.supervisor("s1")
    for index in range(attempts):
        await supervisor.delegate("research", f"collect {index}", parent_run_id=parent.run_id)
        marker("accepted")
    await asyncio.Event().wait()  # until killed


async def recover(data_dir: Path) -> int:
    service = service_for(data_dir)
    await service.start()
    deadline = time.monotonic() + 30.0
    try:
        while time.monotonic() < deadline:
            await service.maintain()
            try:
                records = service.store.list_attempts(service.namespace_id)
                runs = service.store.list_runs("s1") if records else []
            except StoreError:
                records, runs = [], []
            settled = all(
                str(r.execution_status) in {"completed", "failed", "cancelled"}
                and str(r.delivery_status) == "delivered"
                for r in records
            ) and all(str(r.status) in {"completed", "failed", "cancelled"} for r in runs)
            if settled and not service._runs:
                marker("settled")
                return 0
            await asyncio.sleep(0.1)  # leases lapse in real time; this is the probe interval
        marker("timeout")
        return 1
    finally:
        await service.close()


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    if mode == "work":
        asyncio.run(work(directory, int(sys.argv[3])))
    else:
        sys.exit(asyncio.run(recover(directory)))
