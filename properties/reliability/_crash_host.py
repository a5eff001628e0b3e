"""The host side of crash runs: a real host process a parent drives and SIGKILLs.

``python -m properties.reliability._crash_host zygote`` imports the host once
and then forks one *host life* per ``spawn`` line it reads on stdin (so a
restart costs a fork, not a second interpreter start-up). Every life is its own
OS process: it opens the data directory (lock, LMDB store, event log), builds
a :class:`~subagents._host.HostService` with a scripted planner and a slow
child model, connects to the parent's Unix socket and then does what the
parent asks until it is killed or told to close.

The wire is JSON lines both ways. The parent sends ``session``, ``run``
(``run.start`` with an idempotency key; the planner delegates ``k`` background
attempts), ``delegate`` (``n`` attempts straight through the session's
supervisor, for the load run), ``status`` and ``close``. The life reports
``hello`` (pid, fencing generation, owner), ``ready``, the answers, the
host's ``run.*`` events, and a ``submit`` / ``committed`` pair around every
``accept_attempt``, ``admit_run`` and ``acquire_continuation`` call (the
request is sent msgpack+base64, so the parent can replay it exactly after a
kill). A send happens before the step it reports, so the parent knows about a
step even when the kill lands right after it.

With ``args.refusals`` the life also reports the owner's fenced writes
(``heartbeat_attempt``, ``advance_attempt``: a renewal carrying progress,
``update_attempt_execution``, ``commit_terminal``):
``wrote`` when one commits, ``refused`` (with the error's type and the
``time.monotonic()`` of the refusal) when the store turns it down, so a parent
can count the late writes of an owner it paused.

``CRASH_PAUSE="<method>:<nth>"`` freezes the life right after the nth commit
of that store method, before the caller sees the response (it reports
``paused`` and blocks until the parent's SIGKILL): a lost response at a
precise point. ``CRASH_CONSUMER`` freezes it inside a consumer run, the same
way: ``mid_continuation`` when the planner is first asked to answer a
background result (the continuation run holds the result, nothing of it is
committed), ``before_terminal_commit`` right before the first ``completed``
transition of a continuation run (the run did all its work; its terminal
commit, which is the delivery's acknowledgement, never happens). Named fault
points (``SUBAGENTS_FAULTS``) are armed from the environment at the start of
each life.

Zygote protocol (stdin/stdout, JSON lines): ``{"op": "spawn", "env": {...},
"args": {...}}`` answers ``{"pid": N}``; ``{"op": "wait", "pid": N}`` reaps
that life and answers ``{"pid": N, "status": S}``; ``{"op": "exit"}`` ends the
zygote. A life's stdin/stdout are ``/dev/null``; its stderr is ``args.stderr``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import re
import socket
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from actors import BackgroundSubagentError
from statemachines import RunStatus
from storage import ASYNC_SUBAGENT_RESULT, NotFound, StoreError
from subagents import (
    FunctionModel,
    ModelMessage,
    ModelRequestParameters,
    ToolCallPart,
    default_model_providers,
)
from subagents._host import HostService, parse_host_config
from subagents._host._datadir import open_store
from subagents._host._jsonrpc import Connection, RpcError
from subagents._host._methods import HostEvent, RunStartParams, SessionCreateParams

from ._scripted import latest_prompt, planner_config, scripted_planner

CONSUMER_POINTS = ("mid_continuation", "before_terminal_commit")
"""Where ``CRASH_CONSUMER`` freezes a life inside a consumer run."""

TAPPED = ("accept_attempt", "admit_run", "acquire_continuation")
"""Store methods whose request and commit a life reports to the parent."""

CHILD_PREFIX = "facts for "
"""A child's output is this prefix plus its prompt, so the parent can recognize it."""

_PLAN = re.compile(r"^plan (\S+) k=(\d+)$")
_ENCODER = msgspec.msgpack.Encoder()


def encode_request(value: Any) -> str:
    """``value`` (a msgspec record) as base64 msgpack, for the wire."""
    return base64.b64encode(_ENCODER.encode(value)).decode("ascii")


def decode_request(text: str, kind: type[Any]) -> Any:
    """The inverse of :func:`encode_request`."""
    return msgspec.msgpack.decode(base64.b64decode(text), type=kind)


def _plan(prompt: str) -> tuple[ToolCallPart, ...]:
    """``plan KEY k=N``: N background delegations ``collect KEY-<i>`` (else one, key ``x``)."""
    match = _PLAN.match(prompt)
    key, count = (match.group(1), int(match.group(2))) if match else ("x", 1)
    return tuple(
        ToolCallPart(
            tool_name="delegate",
            args={"subagent_name": "research", "prompt": f"collect {key}-{index}"},
            tool_call_id=f"call-{index}",
        )
        for index in range(count)
    )


WAIT_SECONDS = 0.2
"""How long a waiting run's parent waits for its first attempt (children take
0.1-0.7 s: some waits take the result in-band, the rest time out)."""
WAIT_EVERY = 5


def _wait(prompt: str) -> float | None:
    """One ``plan`` run in :data:`WAIT_EVERY` (by a digest of its key) waits once."""
    match = _PLAN.match(prompt)
    if match is None or zlib.crc32(match.group(1).encode()) % WAIT_EVERY:
        return None
    return WAIT_SECONDS


planner = scripted_planner(_plan, delegated="delegated", wait=_wait)
"""A scripted parent: ``plan KEY k=N`` delegates N background attempts in one
turn, one run in five then waits (bounded) on its first attempt, and then says
``delegated``; a continuation answers with the result's last line."""


class _Wire:
    """The life's side of the parent's socket: thread-safe sends, a reader thread."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address)
        self._lock = threading.Lock()

    def send(self, **message: Any) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self.sock.sendall(data)

    def lines(self) -> Any:
        with self.sock.makefile("rb") as stream:
            for raw in stream:
                yield json.loads(raw)


def _tap(store: Any, wire: _Wire, pause: tuple[str, int] | None) -> None:
    """Report every call of the tapped store methods; maybe freeze after one commit."""
    counts = dict.fromkeys(TAPPED, 0)
    lock = threading.Lock()

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def tapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            ident = _ident(name, request)
            wire.send(ev="submit", m=name, id=ident, b=encode_request(request))
            try:
                result = original(request, *args, **kwargs)
            except BaseException:
                wire.send(ev="raised", m=name, id=ident)
                raise
            with lock:
                counts[name] += 1
                hit = pause is not None and pause == (name, counts[name])
            if hit:
                wire.send(ev="paused", m=name, id=ident)
                threading.Event().wait()  # the parent's SIGKILL ends this process here
            wire.send(ev="committed", m=name, id=ident)
            return result

        return tapped

    for name in TAPPED:
        setattr(store, name, wrap(name, getattr(store, name)))


def _ident(method: str, request: Any) -> str:
    if method == "admit_run":
        return str(request.run_id)
    return str(request.attempt_id)


def _freeze(wire: _Wire, point: str) -> None:
    """Report ``paused`` at consumer point ``point`` and block until the parent's SIGKILL."""
    wire.send(ev="paused", m=f"consumer:{point}", id="")
    threading.Event().wait()


def _consumer_points(store: Any, wire: _Wire, point: str) -> Callable[..., Any]:
    """Arm ``CRASH_CONSUMER=point``; returns the planner function to serve."""
    if point == "before_terminal_commit":
        original = store.transition_run

        def transition_run(session_id: str, run_id: str, status: Any, **kwargs: Any) -> Any:
            if status == RunStatus.COMPLETED:
                with contextlib.suppress(StoreError):
                    run = store.load_run(session_id, run_id)
                    if run.trigger_type == ASYNC_SUBAGENT_RESULT:
                        _freeze(wire, point)
            return original(session_id, run_id, status, **kwargs)

        store.transition_run = transition_run
        return planner

    def frozen_planner(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> Any:
        if point == "mid_continuation" and latest_prompt(messages).startswith(
            "Background subagent result"
        ):
            _freeze(wire, point)
        return planner(messages, params)

    return frozen_planner


FENCED_WRITES = (
    "heartbeat_attempt",
    "advance_attempt",
    "update_attempt_execution",
    "commit_terminal",
)
"""The owner's lease-fenced writes a life reports with ``args.refusals``."""


def _tap_refusals(store: Any, wire: _Wire) -> None:
    """Report each fenced write of the owner: ``wrote`` or ``refused`` (error type)."""

    def attempt_of(name: str, first: Any) -> str:
        if name == "heartbeat_attempt":
            return str(first)
        if name == "commit_terminal":
            return str(first.record.attempt_id)
        return str(first.attempt_id)

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def tapped(first: Any, *args: Any, **kwargs: Any) -> Any:
            ident = attempt_of(name, first)
            try:
                result = original(first, *args, **kwargs)
            except StoreError as exc:
                # CLOCK_MONOTONIC is system-wide: the parent can place the refusal
                # before or after the moment it resumed this process.
                wire.send(
                    ev="refused", m=name, id=ident, kind=type(exc).__name__, t=time.monotonic()
                )
                raise
            status = getattr(result, "execution_status", None)
            wire.send(ev="wrote", m=name, id=ident, status=str(status))
            return result

        return tapped

    for name in FENCED_WRITES:
        setattr(store, name, wrap(name, getattr(store, name)))


async def _life(args: dict[str, Any]) -> int:
    wire = _Wire(args["address"])
    rng = random.Random(args.get("seed", 0))
    child_min, child_max = args.get("child_seconds", (0.1, 0.7))

    async def slow(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
        await asyncio.sleep(rng.uniform(child_min, child_max))
        return CHILD_PREFIX + latest_prompt(messages)

    opened = open_store(Path(args["data_dir"]))
    parent = _consumer_points(opened.store, wire, os.environ.get("CRASH_CONSUMER", ""))
    providers = default_model_providers().copy()
    providers.register("planner", lambda name, settings: FunctionModel(parent))
    providers.register("slow", lambda name, settings: FunctionModel(slow))
    pause = None
    if os.environ.get("CRASH_PAUSE"):
        method, _, nth = os.environ["CRASH_PAUSE"].partition(":")
        pause = (method, int(nth))
    if args.get("tap", True):
        _tap(opened.store, wire, pause)
    if args.get("refusals", False):
        _tap_refusals(opened.store, wire)
    service = HostService(
        parse_host_config(
            planner_config("slow:x", lease_ttl=args.get("lease_ttl", 0.6)), providers=providers
        ),
        store=opened.store,
        events=opened.events,
        providers=providers,
        store_name=opened.name,
        data_dir=opened.data_dir,
        tick_seconds=args.get("tick_seconds", 0.05),
        shutdown_timeout=2.0,
        closers=opened.closers,
        crash_test=True,
    )
    wire.send(
        ev="hello",
        pid=os.getpid(),
        gen=service.fencing_generation,
        host=service.host_instance_id,
    )
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def read() -> None:
        try:
            for message in wire.lines():
                loop.call_soon_threadsafe(commands.put_nowait, message)
        finally:
            loop.call_soon_threadsafe(commands.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    watched: set[str] = set()

    def watch(session_id: str) -> None:
        if session_id in watched:
            return
        watched.add(session_id)

        def push(event: HostEvent) -> None:
            if event.kind.startswith("run."):
                wire.send(
                    ev="event",
                    sid=session_id,
                    kind=event.kind,
                    run_id=event.run_id,
                    trigger=event.data.get("trigger_type"),
                    attempt=event.data.get("attempt_id"),
                )

        service.add_listener(session_id, push)

    await service.start()
    wire.send(ev="ready")
    conn = Connection(transport="crash")
    pending: set[asyncio.Task[None]] = set()

    async def handle(message: dict[str, Any]) -> None:
        op = message["op"]
        try:
            if op == "session":
                watch(message["sid"])
                await service.session_create(SessionCreateParams(session_id=message["sid"]), conn)
                wire.send(ev="session", sid=message["sid"])
            elif op == "run":
                watch(message["sid"])
                info = await service.run_start(
                    RunStartParams(
                        session_id=message["sid"],
                        input=f"plan {message['key']} k={message['k']}",
                        idempotency_key=message["key"],
                    ),
                    conn,
                )
                wire.send(
                    ev="run", key=message["key"], run_id=info.run_id, replay=info.idempotent_replay
                )
            elif op == "delegate":
                await _delegate_many(service, wire, message)
            elif op == "status":
                wire.send(ev="status", **_status(service))
        except Exception as exc:
            code = exc.code if isinstance(exc, RpcError) else None
            wire.send(
                ev="error",
                op=op,
                key=message.get("key"),
                sid=message.get("sid"),
                code=int(code) if code is not None else None,
                kind=type(exc).__name__,
            )

    while True:
        message = await commands.get()
        if message is None or message["op"] == "close":
            break
        task = loop.create_task(handle(message))
        pending.add(task)
        task.add_done_callback(pending.discard)
    for task in list(pending):
        task.cancel()
    await service.close()
    with contextlib.suppress(OSError):
        wire.send(ev="closed")
    return 0


async def _delegate_many(service: HostService, wire: _Wire, message: dict[str, Any]) -> None:
    """Accept ``n`` attempts in session ``sid`` through its supervisor, waiting out quotas."""
    session_id, parent_run_id = message["sid"], message["parent"]
    supervisor = service.supervisor(session_id)
    done = 0
    while done < message["n"]:
        try:
            accepted = await supervisor.delegate(
                "research",
                f"collect {session_id}-{message['base'] + done}",
                parent_run_id=parent_run_id,
            )
        except BackgroundSubagentError.QuotaExceeded:
            await asyncio.sleep(0.02)  # a quota frees when an attempt ends; poll cheaply
            continue
        wire.send(ev="delegated", sid=session_id, attempt=accepted.attempt_id)
        done += 1
    wire.send(ev="delegate-done", sid=session_id)


def _status(service: HostService) -> dict[str, Any]:
    """What is still moving: non-terminal attempts, undelivered results, live runs."""
    store = service.store
    try:
        active = len(store.list_active_attempts(service.namespace_id))
        undelivered = sum(
            1
            for r in store.list_pending_attempts(service.namespace_id)
            if r.automatic_continuation_suppressed_by_run_id is None
        )
        live = 0
        for session in store.list_sessions(service.namespace_id):
            live += sum(
                1
                for run in store.list_runs(session.session_id)
                if str(run.status) not in {"completed", "failed", "cancelled"}
            )
    except (NotFound, StoreError) as exc:
        return {"error": type(exc).__name__}
    return {"active": active, "undelivered": undelivered, "live": live, "local": len(service._runs)}


def run_life(args: dict[str, Any]) -> int:
    """Run one host life in this process (the forked child of the zygote).

    The named fault points are armed from the environment by
    :meth:`HostService.start`, like in any host process.
    """
    return asyncio.run(_life(args))


def _spawn(message: dict[str, Any]) -> int:
    args = message["args"]
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.environ.update(message.get("env", {}))
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        err = os.open(args["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(err, 2)
        code = run_life(args)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def zygote() -> int:
    """Serve ``spawn`` / ``wait`` / ``exit`` on stdin/stdout (see the module docstring)."""
    out = sys.stdout
    for raw in sys.stdin:
        message = json.loads(raw)
        op = message["op"]
        if op == "spawn":
            reply: dict[str, Any] = {"pid": _spawn(message)}
        elif op == "wait":
            _, status = os.waitpid(message["pid"], 0)
            reply = {"pid": message["pid"], "status": status}
        else:
            return 0
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(zygote())
