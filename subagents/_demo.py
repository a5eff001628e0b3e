"""``subagents demo``: the offline end-to-end story of durable background delegation.

It starts the real host as a subprocess (``python -m subagents._demo host``:
what ``subagents serve --stdio`` serves, on the shipped demo config, plus the
scripted ``demo:`` models of :mod:`._demo_models` and seeded ids) on a fresh
LMDB data directory, and drives it over JSON-RPC:

1. a parent run delegates in the background to ``researcher`` and
   ``reviewer``, steers the researcher and cancels the reviewer;
2. the researcher finishes; every terminal result gets its one continuation run;
3. a second parent run delegates to ``debugger``; while it runs, the host is
   killed with SIGKILL;
4. a second host process (another owner identity) opens the same data
   directory, reconciles the lost attempt and admits its one continuation run;
5. the store is checked (one terminal record per attempt, one continuation run
   per delivered result) and a timeline of every attempt is printed.

``python -m subagents._demo host DATA_DIR OWNER SEED`` is that host;
``python -m subagents._demo ARGS`` is the CLI with the ``demo:`` models.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from statemachines import SubagentsError
from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord, RunRecord, StoreError

from ._demo_models import GATES_ENV, register_demo_models
from ._host._datadir import open_store
from ._host._methods import HostEvent

ASSETS = Path(__file__).with_name("_demo_assets")
DEMO_CONFIG = ASSETS / "demo.toml"
SESSION = "demo"
STEP_TIMEOUT = 20.0
_TERMINAL = {"completed", "failed", "cancelled"}


class DemoError(SubagentsError):
    """The demo could not finish: ``message`` and a ``fix``, printed as one line each."""

    def __init__(self, message: str, fix: str = "rerun with a fresh --data-dir") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


# -- the host process -------------------------------------------------------------------------


class HostProcess:
    """One ``serve --stdio`` host subprocess; replies matched by id, events collected."""

    def __init__(self, data_dir: Path, owner: str, gates: Path, seed: int) -> None:
        env = dict(os.environ)
        env[GATES_ENV] = str(gates)
        env.pop("SUBAGENTS_CONFIG", None)
        root = Path(__file__).resolve().parents[1]
        if (root / "pyproject.toml").is_file():  # a checkout: the host imports this copy
            env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
        self.owner = owner
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "subagents._demo", "host", str(data_dir), owner, str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[str] = []
        self.events: list[HostEvent] = []
        self.replies: dict[int, dict[str, Any]] = {}
        self.next_id = 0
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.frames.put(json.loads(line))
        self.frames.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def _pump(self, deadline: float) -> None:
        """Take one frame (a reply or an event notification) or fail at the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise queue.Empty
        frame = self.frames.get(timeout=left)
        if frame is None:
            tail = "".join(self.stderr[-3:]).strip().splitlines()
            raise DemoError(
                f"host {self.owner} exited (status {self.proc.poll()})"
                + (f": {tail[-1]}" if tail else ""),
                "run `subagents serve --stdio -v` to see the host's logs",
            )
        if "id" in frame and frame.get("id") is not None:
            self.replies[int(frame["id"])] = frame
        elif frame.get("method") == "events.event":
            raw = frame["params"]["event"]
            self.events.append(
                HostEvent(
                    seq=raw["seq"],
                    session_id=raw["session_id"],
                    kind=raw["kind"],
                    at=raw["at"],
                    run_id=raw.get("run_id"),
                    data=raw.get("data") or {},
                )
            )

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        request_id = self.next_id
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = params
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise DemoError(f"host {self.owner} is gone", "rerun the demo") from None
        deadline = time.monotonic() + STEP_TIMEOUT
        try:
            while request_id not in self.replies:
                self._pump(deadline)
        except queue.Empty:
            raise DemoError(f"{method}: no reply within {STEP_TIMEOUT:.0f}s") from None
        reply = self.replies.pop(request_id)
        if "error" in reply:
            error = reply["error"]
            raise DemoError(f"{method} failed: {error.get('message')} ({error.get('code')})")
        return reply["result"]

    def wait_event(self, what: str, predicate: Callable[[HostEvent], bool]) -> HostEvent:
        deadline = time.monotonic() + STEP_TIMEOUT
        seen = 0
        try:
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                self._pump(deadline)
        except queue.Empty:
            raise DemoError(f"timed out waiting for {what}") from None

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self._reap()

    def stop(self) -> int:
        """Ask the host to shut down (``shutdown``, then EOF) and wait for its exit."""
        with contextlib.suppress(DemoError):
            self.call("shutdown")
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        return self._reap()

    def _reap(self) -> int:
        try:
            code = self.proc.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=STEP_TIMEOUT)
        for thread in self._threads:
            thread.join(timeout=STEP_TIMEOUT)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return code


# -- reading the data directory ---------------------------------------------------------------


@dataclass
class Snapshot:
    attempts: list[AttemptRecord]
    runs: list[RunRecord]
    events: list[HostEvent] = field(default_factory=list)


def snapshot(data_dir: Path, *, events: bool = False) -> Snapshot:
    """Attempts and runs of the demo session, read straight from the store."""
    opened = open_store(data_dir, shared=True)
    try:
        assert opened.store is not None
        attempts = sorted(opened.store.list_attempts("default"), key=lambda r: r.accepted_at)
        try:
            runs = sorted(opened.store.list_runs(SESSION), key=lambda r: r.sequence_no)
        except StoreError:  # no session yet
            runs = []
        log = opened.events.replay(SESSION, 0, 100_000) if events else []
        return Snapshot(attempts, runs, log)
    finally:
        opened.close()


def wait_store(
    data_dir: Path, what: str, predicate: Callable[[Snapshot], bool], timeout: float = STEP_TIMEOUT
) -> Snapshot:
    """Probe the store until ``predicate`` holds (leases lapse in real time)."""
    deadline = time.monotonic() + timeout
    while True:
        found = snapshot(data_dir)
        if predicate(found):
            return found
        if time.monotonic() > deadline:
            raise DemoError(f"timed out waiting for {what}")
        time.sleep(0.05)  # probe interval of a poll on the store, not a synchronization


def wait_file(path: Path, what: str, host: HostProcess) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not path.exists():
        if host.proc.poll() is not None:
            raise DemoError(f"host {host.owner} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise DemoError(f"timed out waiting for {what}")
        time.sleep(0.02)  # probe interval of a file written by the host's child


def continuation_runs(snap: Snapshot) -> dict[str, list[RunRecord]]:
    found: dict[str, list[RunRecord]] = {}
    for run in snap.runs:
        if run.trigger_type == ASYNC_SUBAGENT_RESULT:
            found.setdefault(run.metadata.get("async_subagent.attempt_id", "?"), []).append(run)
    return found


def settled(snap: Snapshot, names: set[str]) -> bool:
    """Every attempt of ``names`` terminal and delivered, and no run live."""
    mine = [a for a in snap.attempts if a.subagent_name in names]
    return (
        bool(mine)
        and all(
            str(a.execution_status) in _TERMINAL and str(a.delivery_status) == "delivered"
            for a in mine
        )
        and all(str(r.status) in _TERMINAL for r in snap.runs)
    )


# -- the story --------------------------------------------------------------------------------


class Demo:
    def __init__(self, console: Console, data_dir: Path, gates: Path) -> None:
        self.console = console
        self.data_dir = data_dir
        self.gates = gates
        self.t0 = time.time()
        self.step_no = 0
        self.notes: list[tuple[float, str, str, str]] = []  # (at, subagent, transition, detail)
        self.hosts: list[HostProcess] = []

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        self.step_no += 1
        started = time.monotonic()
        self.console.print(f"[bold cyan][{self.step_no}/10][/] {escape(text)} ...", end="")
        try:
            yield
        except BaseException:
            self.console.print(" [red]failed[/]")
            raise
        self.console.print(f" [green]ok[/] [dim]({time.monotonic() - started:.1f}s)[/]")

    def say(self, text: str) -> None:
        self.console.print(f"      {text}", highlight=False)

    def note(self, subagent: str, transition: str, detail: str = "") -> None:
        self.notes.append((time.time(), subagent, transition, detail))

    def start_host(self, owner: str) -> HostProcess:
        host = HostProcess(self.data_dir, owner, self.gates, seed=len(self.hosts) + 1)
        self.hosts.append(host)
        host.call("initialize", {"protocol_version": "1"})
        return host

    def run_parent(self, host: HostProcess, prompt: str) -> dict[str, Any]:
        run: dict[str, Any] = host.call("run.start", {"session_id": SESSION, "input": prompt})
        run_id = run["run_id"]
        end = host.wait_event(
            f"parent run {run_id} to end",
            lambda e: e.run_id == run_id and e.kind in {"run.completed", "run.failed"},
        )
        if end.kind != "run.completed":
            raise DemoError(f"the parent run failed: {end.data.get('error')}")
        run["output"] = end.data.get("output", "")
        return run

    def attempt(self, snap: Snapshot, name: str) -> AttemptRecord:
        for record in snap.attempts:
            if record.subagent_name == name:
                return record
        raise DemoError(f"no attempt of {name} in the store")

    def run(self) -> Snapshot:
        # 1. host #1
        with self.step("start host #1 (subprocess, fresh LMDB data dir)"):
            host = self.start_host("demo-host-1")
            host.call("session.create", {"session_id": SESSION})
            host.call("events.subscribe", {"session_id": SESSION, "after_seq": 0})
        self.say(f"pid {host.pid}, owner demo-host-1, data dir {self.data_dir}")

        # 2. delegate twice, steer one, cancel the other
        with self.step("parent run 1 delegates to researcher + reviewer, steers, cancels"):
            run1 = self.run_parent(host, "Plan the release: research it and review it")
            wait_file(self.gates / "researcher.started", "the researcher to start", host)
            snap = snapshot(self.data_dir)
        researcher = self.attempt(snap, "researcher")
        reviewer = self.attempt(snap, "reviewer")
        # The parent's tool calls, in its order: delegate, delegate, steer, cancel.
        self.notes.append(
            (reviewer.accepted_at + 1e-6, "researcher", "steered", "'Focus on the lease code path'")
        )
        self.notes.append(
            (
                (reviewer.terminal_at or reviewer.accepted_at) - 1e-6,
                "reviewer",
                "cancel requested",
                "review not needed",
            )
        )
        self.say(f"parent answered: [italic]{escape(run1['output'])}[/]")
        self.say(
            f"researcher {short(researcher.attempt_id)}: {researcher.execution_status} "
            f"(steering queued); reviewer {short(reviewer.attempt_id)}: "
            f"{reviewer.execution_status}"
        )

        # 3. the cancelled reviewer's result is delivered
        with self.step("the cancelled reviewer's result is delivered"):
            snap = wait_store(
                self.data_dir, "the reviewer to be delivered", lambda s: settled(s, {"reviewer"})
            )
        self.say(delivery(snap, self.attempt(snap, "reviewer")))

        # 4. the researcher finishes and gets its continuation run
        with self.step("release the researcher: it completes, its result is delivered"):
            (self.gates / "researcher.release").write_text("go")
            self.note("researcher", "released", "the child may answer")
            snap = wait_store(
                self.data_dir,
                "the researcher to be delivered",
                lambda s: settled(s, {"researcher", "reviewer"}),
            )
        self.say(delivery(snap, self.attempt(snap, "researcher")))

        # 4. a second parent run delegates to the debugger, which blocks
        with self.step("parent run 2 delegates to debugger (it keeps running)"):
            run2 = self.run_parent(host, "A test crashes in CI: debug the crash")
            wait_file(self.gates / "debugger.started", "the debugger to start", host)
        debugger = self.attempt(snapshot(self.data_dir), "debugger")
        self.say(f"parent answered: [italic]{escape(run2['output'])}[/]")
        self.say(
            f"debugger {short(debugger.attempt_id)}: {debugger.execution_status}, lease owned by "
            f"{debugger.owner_lease.host_instance_id}"
        )

        # 5. SIGKILL
        with self.step(f"SIGKILL host #1 (pid {host.pid}) while the debugger runs"):
            code = host.kill()
            self.note("debugger", "host killed", f"SIGKILL pid {host.pid} (exit {code})")
            snap = snapshot(self.data_dir)
        debugger = self.attempt(snap, "debugger")
        self.say(
            f"debugger in the store: {debugger.execution_status}, owner "
            f"{debugger.owner_lease.host_instance_id} (its lease lapses in <= 1s)"
        )

        # 6. restart
        with self.step("restart: host #2 (another owner) opens the same data dir"):
            host = self.start_host("demo-host-2")
            last = max((e.seq for e in self.hosts[0].events), default=0)
            host.call("events.subscribe", {"session_id": SESSION, "after_seq": last})
            self.note("debugger", "host restarted", f"pid {host.pid}, owner demo-host-2")
        self.say(f"pid {host.pid}, owner demo-host-2")

        # 7. reconciliation
        with self.step("reconciliation: the lost attempt and its one continuation run"):
            snap = wait_store(
                self.data_dir,
                "the debugger attempt to be reconciled and delivered",
                lambda s: settled(s, {"researcher", "reviewer", "debugger"}),
            )
        debugger = self.attempt(snap, "debugger")
        self.say(delivery(snap, debugger))

        # 8. checks
        with self.step("check the store: exactly-once terminal records and continuations"):
            problems = check(snap)
            if problems:
                raise DemoError(problems[0], "this is a bug: please report it")
        self.say(
            f"{len(snap.attempts)} attempts, each with one terminal record; "
            f"{len(continuation_runs(snap))} continuation runs, one per delivered result"
        )

        for name in ("researcher", "reviewer", "debugger"):
            started = self.gates / f"{name}.started"
            if started.exists():
                self.note(name, "running", "the child's model was called")
                self.notes[-1] = (started.stat().st_mtime, *self.notes[-1][1:])

        # 10. clean shutdown
        with self.step("stop host #2 (shutdown) and read the event log"):
            code = host.stop()
            if code != 0:
                raise DemoError(f"host #2 exited with status {code}")
            return snapshot(self.data_dir, events=True)


def delivery(snap: Snapshot, record: AttemptRecord) -> str:
    """One line: how an attempt ended and how its result reached the parent."""
    why = record.failure_category or record.cancellation_reason
    if why == str(record.execution_status):
        why = None
    head = f"{record.subagent_name}: {record.execution_status}" + (f" ({why})" if why else "")
    run = next((r for r in snap.runs if r.run_id == record.continuation_run_id), None)
    if run is None:
        return f"{head} -> delivered inside a live parent run (no continuation run needed)"
    return (
        f"{head} -> one continuation run {short(run.run_id)}, which answered: "
        f"[italic]{escape(run.output_preview or '')}[/]"
    )


def short(identifier: str) -> str:
    """``subattempt_1277b998-...`` -> ``subattempt_1277b998`` (tables stay narrow)."""
    prefix, _, rest = identifier.partition("_")
    return f"{prefix}_{rest[:8]}" if rest else identifier[:12]


def check(snap: Snapshot) -> list[str]:
    """The story's invariants; an empty list when they all hold."""
    problems: list[str] = []
    conts = continuation_runs(snap)
    for record in snap.attempts:
        name = f"{record.subagent_name} {record.attempt_id}"
        if str(record.execution_status) not in _TERMINAL or record.terminal_fingerprint is None:
            problems.append(f"{name} has no terminal record")
        linked = [r.run_id for r in conts.get(record.attempt_id, [])]
        if str(record.delivery_status) == "delivered" and record.continuation_run_id is not None:
            if linked != [record.continuation_run_id]:
                problems.append(f"{name}: continuation runs {linked}")
        elif len(linked) > 1:
            problems.append(f"{name}: {len(linked)} continuation runs")
    if {r.subagent_name for r in snap.attempts} != {"researcher", "reviewer", "debugger"}:
        problems.append("the store does not hold the three attempts of the story")
    return problems


# -- tables -----------------------------------------------------------------------------------


def _at(t0: float, at: float | None) -> str:
    return "-" if at is None else f"+{max(at - t0, 0.0):6.2f}s"


def timeline(demo: Demo, snap: Snapshot) -> Table:
    """Every attempt's transitions: store records, event log and the demo's own actions."""
    rows: list[tuple[float, str, str, str]] = []
    by_attempt = {r.attempt_id: r for r in snap.attempts}
    for record in snap.attempts:
        name = record.subagent_name
        rows.append(
            (
                record.accepted_at,
                name,
                "accepted",
                f"{short(record.attempt_id)} by {record.owner_lease.host_instance_id}"
                if record.owner_lease.host_instance_id == "demo-host-1"
                else short(record.attempt_id),
            )
        )
        if record.terminal_at is not None:
            why = record.failure_category or record.cancellation_reason or ""
            rows.append(
                (record.terminal_at, name, str(record.execution_status), why or "result stored")
            )
    for event in snap.events:
        attempt_id = event.data.get("attempt_id")
        if event.kind == "run.admitted" and attempt_id in by_attempt:
            name = by_attempt[str(attempt_id)].subagent_name
            rows.append((event.at, name, "continuation admitted", short(event.run_id or "")))
    cont_runs = {
        r.run_id: r.metadata.get("async_subagent.attempt_id", "")
        for r in snap.runs
        if r.trigger_type == ASYNC_SUBAGENT_RESULT
    }
    for event in snap.events:
        if event.kind in {"run.completed", "run.failed"} and event.run_id in cont_runs:
            consumed = by_attempt.get(cont_runs[event.run_id])
            if consumed is not None:
                rows.append(
                    (
                        event.at,
                        consumed.subagent_name,
                        "delivered (" + event.kind.split(".")[1] + ")",
                        short(event.run_id or ""),
                    )
                )
    rows.extend(demo.notes)
    table = Table(title="timeline of every attempt")
    table.add_column("at", justify="right", no_wrap=True)
    table.add_column("subagent", no_wrap=True)
    table.add_column("transition", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for at, name, transition, detail in sorted(rows, key=lambda row: row[0]):
        style = {"failed": "red", "cancelled": "yellow", "completed": "green"}.get(transition, "")
        table.add_row(
            _at(demo.t0, at),
            name,
            f"[{style}]{transition}[/]" if style else transition,
            escape(detail),
        )
    return table


def attempts_table(snap: Snapshot) -> Table:
    conts = continuation_runs(snap)
    table = Table(title="attempts (final store records)")
    for column in ("subagent", "attempt", "execution", "why", "delivery", "continuation runs"):
        table.add_column(column, overflow="fold")
    for record in snap.attempts:
        table.add_row(
            record.subagent_name,
            short(record.attempt_id),
            str(record.execution_status),
            record.failure_category or record.cancellation_reason or "-",
            str(record.delivery_status),
            str(len(conts.get(record.attempt_id, []))),
        )
    return table


def runs_table(snap: Snapshot) -> Table:
    table = Table(title=f"runs of session {SESSION!r}")
    for column in ("#", "run", "trigger", "status", "answer"):
        table.add_column(column, overflow="fold")
    for run in snap.runs:
        table.add_row(
            str(run.sequence_no),
            short(run.run_id),
            run.trigger_type or "-",
            str(run.status),
            escape(run.output_preview or ""),
        )
    return table


# -- entry point ------------------------------------------------------------------------------


def _fresh_dir(path: str | None) -> Path:
    if path is None:
        return Path(tempfile.mkdtemp(prefix="subagents-demo-"))
    directory = Path(path).expanduser().resolve()
    if directory.exists() and any(directory.iterdir()):
        raise DemoError(
            f"data directory {directory} is not empty",
            "pass a new or empty --data-dir (the demo needs a fresh store)",
        )
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def run_demo(data_dir: str | None = None, console: Console | None = None) -> int:
    """Run the story; raises :class:`DemoError` on failure. Returns 0."""
    console = console or Console(highlight=False)
    if not DEMO_CONFIG.is_file():
        raise DemoError(
            f"demo assets missing: {DEMO_CONFIG}", "reinstall subagents (pip install .)"
        )
    directory = _fresh_dir(data_dir)
    console.print(
        "[bold]subagents demo[/]: durable background delegation, offline "
        "(scripted demo: models, no network)"
    )
    with tempfile.TemporaryDirectory(prefix="subagents-demo-gates-") as gates:
        demo = Demo(console, directory, Path(gates))
        try:
            final = demo.run()
        finally:
            for host in demo.hosts:
                if host.proc.poll() is None:
                    host.kill()
    console.print()
    console.print(timeline(demo, final))
    console.print(attempts_table(final))
    console.print(runs_table(final))
    console.print(f"[bold]data lives in[/] {directory}")
    console.print(f"  {directory / 'lmdb'}  sessions, runs, attempts, results and the event log")
    console.print(
        f"  {len(final.events)} events of session {SESSION!r}, {len(final.runs)} runs, "
        f"{len(final.attempts)} attempts (replay: events.replay over serve --stdio)"
    )
    console.print(f"  {directory / 'host.lock'}  the serving host's lock (free now)")
    console.print(f"  inspect: subagents attempts list --data-dir {directory}")
    console.print("[bold green]demo finished[/]")
    return 0


def serve_host(data_dir: str, owner: str, seed: int) -> int:
    """The demo's host process: ``subagents serve --stdio`` on the demo config, plus the
    scripted ``demo:`` models and seeded ids (each host its own seed: reproducible ids)."""
    import argparse  # noqa: PLC0415
    import asyncio  # noqa: PLC0415
    import logging  # noqa: PLC0415

    from storage import SeededIds  # noqa: PLC0415

    from ._cli import _serve_async  # noqa: PLC0415
    from ._host import load_host_config, open_host  # noqa: PLC0415

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    register_demo_models()
    service = open_host(
        load_host_config(DEMO_CONFIG),
        data_dir=data_dir,
        host_instance_id=owner,
        ids=SeededIds(seed),
        tick_seconds=0.1,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_async(service, argparse.Namespace(stdio=True)))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        sys.exit(serve_host(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    register_demo_models()
    from ._cli import main  # the CLI plus the demo models

    sys.exit(main(sys.argv[1:]))
