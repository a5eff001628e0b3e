"""Soak: one host process, many sessions each delegating in the background, then SIGTERM.

Run: ``python bench/soak.py [--sessions 10000] [--attempts 1] [--window 64] [--json]``
(the issue's full size is ``--sessions 10000 --attempts 10``: 100,000 attempts).

One real host process (``subagents serve --stdio`` over an LMDB data directory,
the scripted offline parent ``planner:x`` and a test-model child; the
maintenance tick at ``--tick``) is driven through JSON-RPC on its stdin and
stdout. Each session is created with ``session.create``, subscribed to with
``events.subscribe``, and runs ``--attempts`` parent runs one after another
(``run.start``): each parent run delegates one background attempt and ends;
the child (one model request, no tools) completes; the host admits one
continuation run that consumes the result, durably. The session is done when
its last continuation run completed; it is then unsubscribed and stays idle
(its supervisor is kept: the spec's rule). ``--window`` sessions are in flight
at once.

At every tenth of the sessions done it samples the host's OS threads and RSS
(``/proc/PID/status``) and open fds (``/proc/PID/fd``), and reports them with
their slope per 1,000 sessions after warm-up (the first tenth) by least
squares. Then SIGTERM: the time until the process exits, against the host's
shutdown deadline (5 s) plus 2 s for the interpreter's exit. Last, the data
directory is opened and checked: every session holds ``--attempts`` attempts,
each terminal and delivered once; ``lost`` counts attempts missing, not
delivered or without a continuation run; ``duplicates`` counts continuation
runs beyond one per attempt (both must be 0).

Durability: LMDB with the host's defaults (every commit fsync'd); the LMDB
write transactions of the whole run per attempt are printed as its fsyncs per
attempt. Work: each attempt is one model request of the child (test model)
plus the parent's and the continuation's runs, message history and usage kept
in the store. The load average is printed before and after. Targets (issue 16): threads and fds
slope under 1 per 1,000 sessions, RSS growth under 2 KiB per idle session (the
LMDB map's resident pages count too, so this is an upper bound), shutdown within
its deadline, 0 lost, 0 duplicates.

This is a benchmark, not a test: it never asserts timing. Exit status is 0
whether or not the targets are met (the verify ``soak`` section is the check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

import msgspec

REPO = Path(__file__).resolve().parents[1]
CHILD_MODEL = "slow:x"
CHILD_SECONDS = 0.2
"""The child answers after this long, so its parent run has ended and the result comes
back as a continuation run (a result that ends first is delivered into the parent run)."""
INLINE_WAIT = 5.0
"""Seconds after its parent run without a continuation before a session counts its
result as delivered into the parent run (the store check decides at the end)."""
SHUTDOWN_DEADLINE = 5.0 + 2.0
CONFIG = """
[host]
lease_ttl = 10.0

[profiles.default]
model_id = "planner:x"
subagents = ["research"]

[profiles.research]
model_id = "{child}"

[subagents.research]
profile = "research"
description = "Collect facts"
"""


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    sessions: int
    seconds: float
    threads: int
    fds: int
    rss_kib: int


class SoakReport(msgspec.Struct, frozen=True, kw_only=True):
    """The figures of one soak run; green when ``violations`` is empty."""

    sessions: int
    attempts: int
    seconds: float
    samples: list[Sample]
    thread_slope_per_1000: float
    fd_slope_per_1000: float
    rss_kib_per_session: float
    shutdown_seconds: float
    shutdown_deadline: float
    exit_status: int | None
    lost: int
    duplicates: int
    inline: int
    """Results delivered into their parent run (no continuation run needed)."""
    violations: list[str]
    commits_per_attempt: float | None = None
    """LMDB write transactions (``last_txnid``, each one fsync'd) over the whole run,
    sessions, runs, events and continuations included, per attempt."""


def _serve(argv: list[str]) -> int:
    """The host process: the real CLI plus the scripted ``planner`` provider."""
    sys.path.insert(0, str(REPO))
    from properties.reliability._scripted import scripted_planner
    from subagents import FunctionModel, default_model_providers
    from subagents._cli import main

    planner = scripted_planner()

    async def slow(messages: Any, params: Any) -> str:
        await asyncio.sleep(CHILD_SECONDS)
        return "three facts"

    providers = default_model_providers()
    providers.register("planner", lambda name, settings: FunctionModel(planner))
    providers.register("slow", lambda name, settings: FunctionModel(slow))
    return main(argv)


class Host:
    """The host process and a reader of its stdout (responses by id, notifications)."""

    def __init__(self, workdir: Path, tick: float) -> None:
        config = workdir / "host.toml"
        config.write_text(CONFIG.format(child=CHILD_MODEL))
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
        argv = ["serve", "--stdio", "--config", str(config), "--data-dir", str(workdir / "data")]
        self.stderr = (workdir / "host.err").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", *argv, "--tick", str(tick)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.pid = self.proc.pid
        self.data = workdir / "data"
        self.inbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.next_id = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for line in stdout:
            self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def send(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        stdin: IO[bytes] | None = self.proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(frame).encode() + b"\n")
        stdin.flush()
        return self.next_id

    def sample(self, sessions: int, started: float) -> Sample:
        status: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("Threads", "VmRSS"):
                status[key] = int(value.split()[0])
        return Sample(
            sessions=sessions,
            seconds=round(time.monotonic() - started, 2),
            threads=status["Threads"],
            fds=len(os.listdir(f"/proc/{self.pid}/fd")),
            rss_kib=status["VmRSS"],
        )


class _Session:
    __slots__ = ("continuations", "parent", "parent_ended", "runs", "sid", "subscription")

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.runs = 0  # parent runs started
        self.continuations: set[str] = set()  # continuation runs admitted
        self.subscription: str | None = None
        self.parent: str | None = None  # the current parent run
        self.parent_ended: float | None = None  # when it ended (monotonic)


class Driver:
    """Keeps ``window`` sessions in flight; each runs ``attempts`` parent runs in turn."""

    def __init__(self, host: Host, sessions: int, attempts: int, window: int) -> None:
        self.host = host
        self.attempts = attempts
        self.waiting: deque[str] = deque(f"soak-{n:06d}" for n in range(sessions))
        self.live: dict[str, _Session] = {}
        self.pending: dict[int, tuple[str, str]] = {}  # request id -> (what, sid)
        self.window = window
        self.done = 0
        self.inline = 0  # results taken as delivered into their parent run
        self.violations: list[str] = []

    def fill(self) -> None:
        while self.waiting and len(self.live) < self.window:
            sid = self.waiting.popleft()
            self.live[sid] = _Session(sid)
            self._call("create", sid, "session.create", {"session_id": sid})

    def _call(self, what: str, sid: str, method: str, params: dict[str, Any]) -> None:
        self.pending[self.host.send(method, params)] = (what, sid)

    def handle(self, frame: dict[str, Any]) -> None:
        if "id" in frame and frame["id"] in self.pending:
            what, sid = self.pending.pop(frame["id"])
            if "error" in frame:
                self.violations.append(f"{what} of {sid} refused: {frame['error']}")
                self._finish(sid)
                return
            self._answered(what, sid, frame["result"])
        elif frame.get("method") == "events.event":
            self._event(frame["params"]["event"])
        elif frame.get("method") == "events.overflow":
            self.violations.append(f"a subscription was cut: {frame['params']}")

    def _answered(self, what: str, sid: str, result: dict[str, Any]) -> None:
        session = self.live.get(sid)
        if session is None:
            return
        if what == "create":
            self._call("subscribe", sid, "events.subscribe", {"session_id": sid})
        elif what == "subscribe":
            session.subscription = result["subscription_id"]
            self._start_run(session)

    def _start_run(self, session: _Session) -> None:
        session.runs += 1
        params = {"session_id": session.sid, "input": f"task {session.runs}"}
        self._call("run", session.sid, "run.start", params)

    def _event(self, event: dict[str, Any]) -> None:
        session = self.live.get(event["session_id"])
        if session is None:
            return
        kind, data, run_id = event["kind"], event.get("data") or {}, str(event.get("run_id"))
        if kind == "run.admitted" and data.get("trigger_type") == "async_subagent_result":
            session.continuations.add(run_id)
        elif kind == "run.admitted":
            session.parent, session.parent_ended = run_id, None
        elif kind in ("run.completed", "run.failed"):
            if kind == "run.failed":
                self.violations.append(f"run {run_id} of {session.sid} failed: {data}")
            if run_id == session.parent:
                session.parent_ended = time.monotonic()
            elif run_id in session.continuations:
                self._next(session)

    def _next(self, session: _Session) -> None:
        session.parent = session.parent_ended = None
        if session.runs < self.attempts:
            self._start_run(session)
        else:
            self._finish(session.sid)

    def expire(self) -> None:
        """Sessions whose parent ended ``INLINE_WAIT`` ago with no continuation: their
        result went into the parent run; move on (the store check counts it)."""
        cutoff = time.monotonic() - INLINE_WAIT
        for session in list(self.live.values()):
            if session.parent_ended is not None and session.parent_ended < cutoff:
                self.inline += 1
                self._next(session)

    def _finish(self, sid: str) -> None:
        session = self.live.pop(sid, None)
        if session is None:
            return
        self.done += 1
        if session.subscription is not None:
            self._call(
                "unsubscribe",
                sid,
                "events.unsubscribe",
                {
                    "subscription_id": session.subscription,
                },
            )


def _slope(samples: list[Sample], field: str) -> float:
    """Least-squares slope of ``field`` per 1,000 sessions over ``samples``."""
    xs = [float(s.sessions) for s in samples]
    ys = [float(getattr(s, field)) for s in samples]
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def _check_store(
    data: Path, sessions: int, attempts: int
) -> tuple[int, int, list[str], int | None]:
    """``(lost, duplicates, violations, commits)`` from the data directory after the host
    exited: every attempt asked for must be stored, terminal and delivered; no attempt
    may have more than one continuation run. ``commits``: LMDB's last write transaction
    id, the physical commits of the whole run."""
    sys.path.insert(0, str(REPO))
    from bench._common import lmdb_txn_id
    from storage import LmdbSessionStore

    store = LmdbSessionStore(data / "lmdb")
    commits = lmdb_txn_id(store)
    try:
        records = store.list_attempts("default")
        consumed: dict[str, int] = {}
        for session_id in {record.parent_session_id for record in records}:
            for run in store.list_runs(session_id):
                if run.trigger_type == "async_subagent_result":
                    attempt = run.metadata.get("async_subagent.attempt_id", run.run_id)
                    consumed[attempt] = consumed.get(attempt, 0) + 1
    finally:
        store.close()
    delivered = sum(str(r.delivery_status) == "delivered" for r in records)
    lost = max(0, sessions * attempts - delivered)
    duplicates = sum(n - 1 for n in consumed.values() if n > 1)
    violations = []
    if len(records) > sessions * attempts:
        violations.append(f"{len(records)} attempts stored, {sessions * attempts} asked for")
    return lost, duplicates, violations, commits


def run_soak(
    *,
    sessions: int,
    attempts: int = 1,
    window: int = 64,
    tick: float = 0.1,
    workdir: Path | None = None,
    deadline: float = 3600.0,
) -> SoakReport:
    """One soak run in ``workdir`` (a temporary directory by default)."""
    with tempfile.TemporaryDirectory(prefix="subagents-soak-") as tmp:
        where = workdir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        return _run(where, sessions, attempts, window=window, tick=tick, deadline=deadline)


def _run(
    where: Path, sessions: int, attempts: int, *, window: int, tick: float, deadline: float
) -> SoakReport:
    started = time.monotonic()
    host = Host(where, tick)
    driver = Driver(host, sessions, attempts, window)
    host.send("initialize", {"protocol_version": None})
    samples = [host.sample(0, started)]
    tenth = max(1, sessions // 10)
    driver.fill()
    violations: list[str] = []
    while driver.done < sessions:
        if time.monotonic() > started + deadline:
            violations.append(f"the soak did not finish in {deadline:g} s ({driver.done} done)")
            break
        try:
            frame = host.inbox.get(timeout=0.5)
        except queue.Empty:
            driver.expire()
            continue
        if frame is None:
            violations.append(f"the host exited early ({host.proc.poll()})")
            break
        before = driver.done
        driver.handle(frame)
        driver.expire()
        if driver.done // tenth > before // tenth:
            samples.append(host.sample(driver.done, started))
        driver.fill()
    seconds = time.monotonic() - started
    stopping = time.monotonic()
    host.proc.send_signal(signal.SIGTERM)
    try:
        status: int | None = host.proc.wait(60)
    except subprocess.TimeoutExpired:
        host.proc.kill()
        status = None
    shutdown = time.monotonic() - stopping
    host.stderr.close()
    lost, duplicates, found, commits = _check_store(host.data, sessions, attempts)
    violations += driver.violations[:20] + found
    warm = [s for s in samples if s.sessions >= tenth]
    rss = (warm[-1].rss_kib - warm[0].rss_kib) / max(1, warm[-1].sessions - warm[0].sessions)
    thread_slope, fd_slope = _slope(warm, "threads"), _slope(warm, "fds")
    if thread_slope >= 1.0:
        violations.append(f"threads grow {thread_slope:.2f} per 1,000 sessions")
    if fd_slope >= 1.0:
        violations.append(f"fds grow {fd_slope:.2f} per 1,000 sessions")
    if shutdown > SHUTDOWN_DEADLINE or status != 0:
        violations.append(f"SIGTERM: exit {status} after {shutdown:.2f} s")
    if lost or duplicates:
        violations.append(f"{lost} lost and {duplicates} duplicated results")
    return SoakReport(
        sessions=sessions,
        attempts=sessions * attempts,
        seconds=round(seconds, 2),
        samples=samples,
        thread_slope_per_1000=round(thread_slope, 3),
        fd_slope_per_1000=round(fd_slope, 3),
        rss_kib_per_session=round(rss, 3),
        shutdown_seconds=round(shutdown, 3),
        shutdown_deadline=SHUTDOWN_DEADLINE,
        exit_status=status,
        lost=lost,
        duplicates=duplicates,
        inline=driver.inline,
        violations=violations,
        commits_per_attempt=None
        if commits is None
        else round(commits / max(1, sessions * attempts), 2),
    )


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--attempts", type=int, default=1, help="attempts per session")
    parser.add_argument("--window", type=int, default=64, help="sessions in flight")
    parser.add_argument("--tick", type=float, default=0.1, help="the host's maintenance tick")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    load_before = load()
    report = run_soak(
        sessions=args.sessions, attempts=args.attempts, window=args.window, tick=args.tick
    )
    if args.json:
        print(msgspec.json.encode(report).decode())
        return 0
    print(f"load average before: {load_before}")
    print(f"{'sessions':>9}{'seconds':>9}{'threads':>9}{'fds':>6}{'rss KiB':>10}")
    for s in report.samples:
        print(f"{s.sessions:>9}{s.seconds:>9.1f}{s.threads:>9}{s.fds:>6}{s.rss_kib:>10}")
    print(
        f"{report.sessions} sessions, {report.attempts} attempts in {report.seconds:.1f} s; "
        f"slope per 1,000 sessions: threads {report.thread_slope_per_1000:.2f}, "
        f"fds {report.fd_slope_per_1000:.2f}; RSS {report.rss_kib_per_session:.2f} KiB/session"
    )
    print(
        f"SIGTERM: exit {report.exit_status} in {report.shutdown_seconds:.2f} s "
        f"(deadline {report.shutdown_deadline:g} s); lost {report.lost}, "
        f"duplicates {report.duplicates} ({report.inline} delivered into their parent run)"
    )
    print(
        f"fsyncs per attempt: {report.commits_per_attempt} LMDB write transactions per attempt "
        "over the whole run (sessions, runs, events and continuations included)"
    )
    for violation in report.violations:
        print(f"VIOLATION: {violation}")
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(_serve(sys.argv[2:]))
    sys.exit(main())
