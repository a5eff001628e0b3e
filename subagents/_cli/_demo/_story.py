"""``subagents demo``: the offline end-to-end story of durable background delegation.

It starts the real host as a subprocess (:mod:`._host`: what ``subagents
serve --stdio`` serves, on the shipped demo config, plus the scripted ``demo:``
models of :mod:`._models` and seeded ids) on a fresh LMDB data directory, and
drives it over JSON-RPC:

1. a parent run delegates in the background to ``researcher`` and
   ``reviewer``, steers the researcher and cancels the reviewer;
2. the researcher finishes; every terminal result gets its one continuation run;
3. a second parent run delegates to ``debugger``; while it runs, the host is
   killed with SIGKILL;
4. a second host process (another owner identity) opens the same data
   directory, reconciles the lost attempt and admits its one continuation run;
5. the store is checked (one terminal record per attempt, one continuation run
   per delivered result) and a timeline of every attempt is printed.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from storage import AttemptRecord

from ._common import SESSION, DemoError
from ._models import DEMO_CONFIG
from ._open import serve_console
from ._process import HostProcess
from ._store import Snapshot, check, continuation_runs, settled, snapshot, wait_file, wait_store
from ._tables import Note, attempts_table, delivery, runs_table, short, timeline

STEPS = 10
EVERY_CHILD = ("researcher", "reviewer", "debugger")


class Demo:
    """The story, step by step, on one data directory; ``gates`` is where the gated
    children report that they started and wait to be released."""

    def __init__(self, console: Console, data_dir: Path, gates: Path) -> None:
        self.console = console
        self.data_dir = data_dir
        self.gates = gates
        self.t0 = time.time()
        self.step_no = 0
        self.notes: list[Note] = []
        self.hosts: list[HostProcess] = []

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        self.step_no += 1
        started = time.monotonic()
        self.console.print(f"[bold cyan][{self.step_no}/{STEPS}][/] {escape(text)} ...", end="")
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

    def wait_settled(self, what: str, names: set[str]) -> Snapshot:
        return wait_store(self.data_dir, what, lambda s: settled(s, names))

    def run(self) -> Snapshot:
        """Every step in order; the final store snapshot, with the event log."""
        host = self.first_host()
        self.delegate_steer_cancel(host)
        self.deliver_reviewer()
        self.release_researcher()
        self.delegate_debugger(host)
        self.kill(host)
        host = self.restart()
        snap = self.reconcile()
        self.check(snap)
        return self.stop(host)

    def first_host(self) -> HostProcess:
        with self.step("start host #1 (subprocess, fresh LMDB data dir)"):
            host = self.start_host("demo-host-1")
            host.call("session.create", {"session_id": SESSION})
            host.call("events.subscribe", {"session_id": SESSION, "after_seq": 0})
        self.say(f"pid {host.pid}, owner demo-host-1, data dir {self.data_dir}")
        return host

    def delegate_steer_cancel(self, host: HostProcess) -> None:
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
        cancelled_at = (reviewer.terminal_at or reviewer.accepted_at) - 1e-6
        self.notes.append((cancelled_at, "reviewer", "cancel requested", "review not needed"))
        self.say(f"parent answered: [italic]{escape(run1['output'])}[/]")
        self.say(
            f"researcher {short(researcher.attempt_id)}: {researcher.execution_status} "
            f"(steering queued); reviewer {short(reviewer.attempt_id)}: "
            f"{reviewer.execution_status}"
        )

    def deliver_reviewer(self) -> None:
        with self.step("the cancelled reviewer's result is delivered"):
            snap = self.wait_settled("the reviewer to be delivered", {"reviewer"})
        self.say(delivery(snap, self.attempt(snap, "reviewer")))

    def release_researcher(self) -> None:
        with self.step("release the researcher: it completes, its result is delivered"):
            (self.gates / "researcher.release").write_text("go")
            self.note("researcher", "released", "the child may answer")
            snap = self.wait_settled("the researcher to be delivered", {"researcher", "reviewer"})
        self.say(delivery(snap, self.attempt(snap, "researcher")))

    def delegate_debugger(self, host: HostProcess) -> None:
        with self.step("parent run 2 delegates to debugger (it keeps running)"):
            run2 = self.run_parent(host, "A test crashes in CI: debug the crash")
            wait_file(self.gates / "debugger.started", "the debugger to start", host)
        debugger = self.attempt(snapshot(self.data_dir), "debugger")
        self.say(f"parent answered: [italic]{escape(run2['output'])}[/]")
        self.say(
            f"debugger {short(debugger.attempt_id)}: {debugger.execution_status}, lease owned by "
            f"{debugger.owner_lease.host_instance_id}"
        )

    def kill(self, host: HostProcess) -> None:
        with self.step(f"SIGKILL host #1 (pid {host.pid}) while the debugger runs"):
            code = host.kill()
            self.note("debugger", "host killed", f"SIGKILL pid {host.pid} (exit {code})")
            snap = snapshot(self.data_dir)
        debugger = self.attempt(snap, "debugger")
        self.say(
            f"debugger in the store: {debugger.execution_status}, owner "
            f"{debugger.owner_lease.host_instance_id} (its lease lapses in <= 1s)"
        )

    def restart(self) -> HostProcess:
        with self.step("restart: host #2 (another owner) opens the same data dir"):
            host = self.start_host("demo-host-2")
            last = max((e.seq for e in self.hosts[0].events), default=0)
            host.call("events.subscribe", {"session_id": SESSION, "after_seq": last})
            self.note("debugger", "host restarted", f"pid {host.pid}, owner demo-host-2")
        self.say(f"pid {host.pid}, owner demo-host-2")
        return host

    def reconcile(self) -> Snapshot:
        with self.step("reconciliation: the lost attempt and its one continuation run"):
            snap = self.wait_settled(
                "the debugger attempt to be reconciled and delivered", set(EVERY_CHILD)
            )
        self.say(delivery(snap, self.attempt(snap, "debugger")))
        return snap

    def check(self, snap: Snapshot) -> None:
        with self.step("check the store: exactly-once terminal records and continuations"):
            problems = check(snap)
            if problems:
                raise DemoError(problems[0], "this is a bug: please report it")
        self.say(
            f"{len(snap.attempts)} attempts, each with one terminal record; "
            f"{len(continuation_runs(snap))} continuation runs, one per delivered result"
        )
        for name in EVERY_CHILD:
            started = self.gates / f"{name}.started"
            if started.exists():
                self.notes.append(
                    (started.stat().st_mtime, name, "running", "the child's model was called")
                )

    def stop(self, host: HostProcess) -> Snapshot:
        with self.step("stop host #2 (shutdown) and read the event log"):
            code = host.stop()
            if code != 0:
                raise DemoError(f"host #2 exited with status {code}")
            return snapshot(self.data_dir, events=True)


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


def run_demo(
    data_dir: str | None = None,
    console: Console | None = None,
    *,
    open_console: bool = False,
    port: int = 0,
) -> int:
    """Run the story on ``data_dir`` (a new or empty directory; default: a temp dir,
    kept) and print it; returns 0. Raises :class:`DemoError` when it cannot finish;
    every host process it started is gone when it returns or raises.

    ``open_console``: then serve the data directory over HTTP on ``port`` (0:
    ephemeral) and print the web console's one-time link, until Ctrl-C."""
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
    console.print(timeline(final, demo.notes, demo.t0))
    console.print(attempts_table(final))
    console.print(runs_table(final))
    _print_where(console, directory, final)
    console.print("[bold green]demo finished[/]")
    if open_console:
        shown = console

        def say(link: str) -> None:
            shown.print(f"[bold]console[/] {escape(link)}", soft_wrap=True)
            shown.print("  open it in a browser (one-time link); Ctrl-C stops the host")

        return serve_console(directory, say, port)
    return 0


def _print_where(console: Console, directory: Path, final: Snapshot) -> None:
    console.print(f"[bold]data lives in[/] {directory}")
    console.print(f"  {directory / 'lmdb'}  sessions, runs, attempts, results and the event log")
    console.print(
        f"  {len(final.events)} events of session {SESSION!r}, {len(final.runs)} runs, "
        f"{len(final.attempts)} attempts (replay: events.replay over serve --stdio)"
    )
    console.print(f"  {directory / 'host.lock'}  the serving host's lock (free now)")
    console.print(f"  inspect: subagents attempts list --data-dir {directory}")
