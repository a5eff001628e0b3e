"""Shared helpers of the host tests: offline configs, an in-process client, real host processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from properties.reliability._scripted import planner_config, scripted_planner
from storage import (
    AttemptRecord,
    ManualClock,
    MemorySessionStore,
    OwnerLease,
    SessionRecord,
    SessionStore,
)
from subagents import ModelProviderRegistry
from subagents._host import Connection, Dispatcher, HostService, parse_host_config
from subagents._host._eventlog import MemoryEventLog
from subagents._host._methods import HostEvent

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = Path(__file__).with_name("scripted_host.py")
"""The real CLI plus scripted offline providers (``planner:x``, ``gated:x``)."""

ASYNC_CONFIG = planner_config("gated:x")
TIMEOUT = 30.0

DELEGATING = REPO / "examples" / "delegating.toml"
"""The offline example host config: ``script:parent=researcher`` delegates to a
``script:worker=researcher`` child that works 0.3 s."""


def gated_delegating() -> str:
    """``examples/delegating.toml`` with a researcher that answers only once
    ``$SUBAGENTS_SCRIPT_GATES/researcher.release`` exists (``script:gated``).

    A test that expects a continuation run releases it after the parent's run
    completed: a result that arrives while that run is live is handed to the
    parent in-band instead (" Meanwhile a result arrived: ..."), and no
    continuation run is admitted; an ungated child can finish that early on a
    loaded machine."""
    text = DELEGATING.read_text()
    gated = text.replace('"script:worker=researcher"', '"script:gated=researcher"')
    assert gated != text, "the example's researcher is no longer script:worker=researcher"
    return gated


def gated_config(directory: Path) -> Path:
    """:func:`gated_delegating` written to ``directory/gated.toml``, for ``--config``."""
    path = directory / "gated.toml"
    path.write_text(gated_delegating())
    return path


CONFIG = """
[host]
lease_ttl = 5.0

[profiles.default]
model_id = "test:echo"
subagents = ["research"]

[profiles.research]
model_id = "test:text=three facts"

[subagents.research]
profile = "research"
description = "Collect facts"
"""


def memory_service(
    config: str, providers: ModelProviderRegistry | None = None, *, tick_seconds: float = 0.05
) -> HostService:
    """A host over a fresh memory store and event log; closing the host closes the store."""
    store = MemorySessionStore()
    return HostService(
        parse_host_config(config, providers=providers),
        store=store,
        events=MemoryEventLog(),
        providers=providers,
        tick_seconds=tick_seconds,
        closers=[store.close],
    )


class Client:
    """Calls a dispatcher in process, frame by frame, like a transport would."""

    def __init__(self, dispatcher: Dispatcher, conn: Connection | None = None) -> None:
        self.dispatcher = dispatcher
        self.conn = conn or Connection(transport="test")
        self.next_id = 0

    async def raw(self, frame: bytes) -> Any:
        reply = await self.dispatcher.handle(frame, self.conn)
        return None if reply is None else json.loads(reply)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        reply = await self.raw(json.dumps(frame).encode())
        assert reply["id"] == self.next_id
        return reply

    async def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = await self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SUBAGENTS_CONFIG", None)
    return env


def run_cli(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagents._cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=cwd or REPO,
        timeout=120,
        check=False,
    )


class StdioHost:
    """``subagents serve --stdio`` as a real subprocess; replies matched by id."""

    def __init__(
        self, *args: str, scripted: bool = False, env: dict[str, str] | None = None
    ) -> None:
        launcher = [str(SCRIPTED)] if scripted else ["-m", "subagents._cli"]
        self.proc = subprocess.Popen(
            [sys.executable, *launcher, "serve", "--stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**cli_env(), **(env or {})},
            cwd=REPO,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._err.start()
        self.next_id = 0
        self.notifications: list[dict[str, Any]] = []
        self.pending: dict[Any, dict[str, Any]] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def next_frame(self) -> Any:
        line = self.lines.get(timeout=TIMEOUT)
        assert line is not None, b"".join(self.stderr).decode()
        return json.loads(line)

    def reply_for(self, request_id: Any) -> dict[str, Any]:
        if request_id in self.pending:
            return self.pending.pop(request_id)
        while True:
            frame = self.next_frame()
            if "method" in frame and "id" not in frame:
                self.notifications.append(frame)
                continue
            if frame.get("id") == request_id:
                return dict(frame)
            self.pending[frame.get("id")] = frame

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        self.send_raw(json.dumps(frame).encode() + b"\n")
        return self.reply_for(self.next_id)

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]

    def wait_notification(self, predicate: Any) -> dict[str, Any]:
        for frame in self.notifications:
            if predicate(frame):
                self.notifications.remove(frame)
                return frame
        while True:
            frame = self.next_frame()
            if "method" in frame and "id" not in frame:
                if predicate(frame):
                    return dict(frame)
                self.notifications.append(frame)
            else:
                self.pending[frame.get("id")] = frame

    def close(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=TIMEOUT)
        self._reader.join(timeout=TIMEOUT)
        self._err.join(timeout=TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


async def next_event(
    service: HostService,
    session_id: str,
    kind: str,
    run_id: str | None = None,
    *,
    after: int = 0,
) -> HostEvent:
    """The first stored or future event of ``kind`` after seq ``after`` (event-driven)."""
    loop = asyncio.get_running_loop()
    found: asyncio.Future[HostEvent] = loop.create_future()

    def match(event: HostEvent) -> None:
        if (
            event.kind == kind
            and event.seq > after
            and (run_id is None or event.run_id == run_id)
            and not found.done()
        ):
            found.set_result(event)

    sub = service.add_listener(session_id, match)
    try:
        for event in service.events.replay(session_id, after, 10_000):
            match(event)
        return await asyncio.wait_for(found, TIMEOUT)
    finally:
        service.remove_listener(sub)


planner = scripted_planner()
"""A scripted parent: delegates to ``research`` in the background once, then
carries on; a continuation run answers with the result's last line."""


def seed_two_attempts(store: SessionStore, clock: ManualClock) -> None:
    """For ``subagents attempts``: in session ``s1``, ``subattempt_0000lost``
    (its owner's 30 s lease lapsed if ``clock`` started 1000 s ago) and
    ``subattempt_0000live`` (a lease of 10,000 s), both owned by ``host-dead``."""
    now = clock.now()
    store.create_session(
        SessionRecord(session_id="s1", namespace_id="default", created_at=now, updated_at=now)
    )
    for attempt_id, ttl in (("subattempt_0000lost", 30.0), ("subattempt_0000live", 10_000.0)):
        at = clock.now()
        store.accept_attempt(
            AttemptRecord(
                attempt_id=attempt_id,
                agent_id=f"research-bg-{attempt_id[-8:]}",
                subagent_name="research",
                namespace_id="default",
                parent_session_id="s1",
                parent_run_id="run-1",
                owner_lease=OwnerLease(
                    host_instance_id="host-dead",
                    fencing_generation=1,
                    heartbeat_at=at,
                    lease_expires_at=at + ttl,
                ),
                accepted_at=at,
                updated_at=at,
            )
        )
