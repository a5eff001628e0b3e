"""The soak run: one host process, many sessions each delegating in the background, SIGTERM.

:func:`run_soak` starts one real host process (``python -m
properties.reliability._soak host``: :func:`subagents._host.open_host`'s
service over an LMDB data directory, served on stdio exactly as ``subagents
serve --stdio`` serves it, with the scripted offline parent ``planner:x`` and a
child that answers after :data:`CHILD_SECONDS`) and drives it through JSON-RPC
on its stdin and stdout. Each session is created (``session.create``),
subscribed to (``events.subscribe``) and runs ``attempts`` parent runs one
after another (``run.start``): each parent run delegates one background
attempt and ends; the child completes; the host admits one continuation run
that consumes the result. The session is done when its last continuation run
completed; it is unsubscribed and stays idle (its supervisor is kept: the
spec's rule). ``window`` sessions are in flight at once.

At every tenth of the sessions done it samples the host: OS threads,
``VmRSS``, ``RssAnon`` and ``RssFile`` (``/proc/PID/status``), open fds
(``/proc/PID/fd``) and the host's Python threads by name (the host writes them
when sent ``SIGUSR1``). Slopes per 1,000 sessions are least squares over the
samples after warm-up: the first :data:`WARMUP_TENTHS` tenths of the sessions
(pools filling up to their bounds, the allocator's arenas, the first LMDB
pages) are left out. Then SIGTERM: the time until the process exits, against
the host's shutdown deadline plus :data:`EXIT_GRACE` for the interpreter's
exit. Last the data directory is opened and checked: every attempt the host
accepted (committed) is delivered (``lost`` counts those not delivered) and no
attempt has more than one completed continuation run (``duplicates``). An
attempt asked for that the host never accepted (a refused request) is not a
lost result: ``refused`` counts those, and the violations say why.

A session starts its next parent run only when the event stream shows the
current attempt done (:class:`Driver`): the store writes the ``attempt.*``
events in the transaction of each change, so the driver never guesses.

RSS per idle session is judged on ``RssAnon``: the process's private memory
(the Python heap, malloc's arenas), where what an idle session retains lives.
``RssFile`` is reported beside it and not judged: it is file-backed pages, the
LMDB map's pages the process touched (the page cache: shared, evictable, grown
by the data written, not by sessions kept) and the shared libraries.

:func:`soak_section_fields` runs the ``soak`` section of ``subagents verify
--report`` (:data:`SOAK_SIZES` sizes it per profile). ``bench/soak.py`` prints a run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections import Counter, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec

from ._scripted import planner_config

CHILD_SECONDS = 0.2
"""The child answers after this long, so its parent run has ended and the result comes
back as a continuation run (a result that ends first is delivered into the parent run)."""
SHUTDOWN_TIMEOUT = 5.0
"""The host's shutdown deadline (``HostService.shutdown_timeout``'s default)."""
EXIT_GRACE = 2.0
"""Seconds past the shutdown deadline allowed for the interpreter's own exit."""
WARMUP_TENTHS = 2
"""Tenths of the sessions left out of every slope (see the module docstring)."""
MAX_THREADS_PER_1000 = 1.0
MAX_FDS_PER_1000 = 1.0
RSS_TARGET_KIB = 2.0
"""Target RSS growth per idle session (``RssAnon``); reported, not a violation."""
PROBE_TIMEOUT = 60.0


class SoakSize(msgspec.Struct, frozen=True, kw_only=True):
    sessions: int
    attempts: int
    """Attempts per session."""
    window: int = 64


SOAK_SIZES: dict[str, SoakSize] = {
    "ci": SoakSize(sessions=2_000, attempts=1),
    "deep": SoakSize(sessions=10_000, attempts=10),
}
"""The ``soak`` section's size per ``verify --report`` profile."""


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    sessions: int
    seconds: float
    threads: int
    fds: int
    rss_kib: int
    rss_anon_kib: int
    rss_file_kib: int
    thread_names: dict[str, int] = {}
    """The host's Python threads by name (a trailing number dropped), counted."""


class SoakReport(msgspec.Struct, frozen=True, kw_only=True):
    """The figures of one soak run; green when ``violations`` is empty."""

    sessions: int
    attempts: int
    seconds: float
    samples: list[Sample]
    warmup_sessions: int
    thread_slope_per_1000: float
    fd_slope_per_1000: float
    rss_anon_kib_per_session: float
    rss_file_kib_per_session: float
    rss_kib_per_session: float
    shutdown_seconds: float
    shutdown_deadline: float
    exit_status: int | None
    lost: int
    duplicates: int
    inline: int
    """Results delivered into their parent run (no continuation run needed)."""
    violations: list[str]
    refused: int = 0
    """Attempts asked for that the host never accepted (a refused request, or a parent
    run that delegated nothing); not in ``lost``, each listed in ``violations``."""


# -- the host process ---------------------------------------------------------------------------


def _thread_names() -> dict[str, int]:
    names: dict[str, int] = {}
    for thread in threading.enumerate():
        name = re.sub(r"[-_ ]?\d+(\s*\(.*\))?$", "", thread.name) or thread.name
        names[name] = names.get(name, 0) + 1
    return dict(sorted(names.items()))


def _write_garbage(out: IO[str]) -> None:
    """Collect every generation, keeping what was cyclic garbage, and write its most
    common kinds and the frames in it (a cycle through a traceback names its code)."""
    import gc  # noqa: PLC0415

    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        found = gc.collect()
        kinds = Counter(type(obj).__qualname__ for obj in gc.garbage)
        frames = Counter(
            f"{obj.f_code.co_filename.rsplit('/', 1)[-1]}:{obj.f_code.co_qualname}"
            for obj in gc.garbage
            if isinstance(obj, types.FrameType)
        )
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
    out.write(f"cyclic garbage: {found} objects; {kinds.most_common(25)}\n")
    out.write(f"frames in it: {frames.most_common(30)}\n")


def _write_allocator_stats(out: IO[str]) -> None:
    """Write pymalloc's arena statistics and glibc's ``malloc_stats``: both print on
    the C-level stderr, so it points at ``out`` meanwhile."""
    import ctypes  # noqa: PLC0415

    out.flush()
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(out.fileno(), 2)
    try:
        sys._debugmallocstats()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_stats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _probe(where: Path, trace: bool) -> None:
    """Write the host's thread names and its allocators' statistics (``probe-N.json``,
    ``probe-N.malloc``) to ``where``; when tracing, first collect and describe the
    cyclic garbage (in the ``.malloc`` file) and keep a tracemalloc snapshot
    (``probe-N.trace``). Runs on the loop thread."""
    import tracemalloc  # noqa: PLC0415

    n = len(list(where.glob("probe-*.json")))
    with (where / f"probe-{n}.malloc").open("w") as out:
        if trace:
            _write_garbage(out)
            tracemalloc.take_snapshot().dump(str(where / f"probe-{n}.trace"))
        _write_allocator_stats(out)
    temp = where / f"probe-{n}.tmp"
    temp.write_text(json.dumps({"threads": _thread_names()}))
    temp.rename(where / f"probe-{n}.json")


def _providers() -> Any:
    from subagents import FunctionModel, default_model_providers  # noqa: PLC0415

    from ._scripted import scripted_planner  # noqa: PLC0415

    planner = scripted_planner()

    async def slow(messages: Any, params: Any) -> str:
        await asyncio.sleep(CHILD_SECONDS)
        return "three facts"

    providers = default_model_providers().copy()
    providers.register("planner", lambda name, settings: FunctionModel(planner))
    providers.register("slow", lambda name, settings: FunctionModel(slow))
    return providers


async def _host(args: argparse.Namespace) -> None:
    """Serve as ``subagents serve --stdio --data-dir`` does (SIGTERM and SIGINT stop
    admission and close the service); ``SIGUSR1`` writes a probe."""
    from subagents._host import HostService, parse_host_config  # noqa: PLC0415
    from subagents._host._datadir import open_host_store  # noqa: PLC0415
    from subagents._host._stdio import serve_stdio  # noqa: PLC0415

    providers = _providers()
    config = parse_host_config(Path(args.config).read_text(), providers=providers)
    opened = open_host_store(config, data_dir=args.data_dir)
    service = HostService(
        config,
        store=opened.store,
        events=opened.events,
        clock=opened.store.clock,
        store_name=opened.name,
        data_dir=opened.data_dir,
        providers=providers,
        tick_seconds=args.tick,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
        closers=opened.closers,
    )
    try:
        await service.start()
    except BaseException:
        await service.close()
        raise
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.shutdown_requested.set)
    where = Path(args.probes)
    loop.add_signal_handler(signal.SIGUSR1, _probe, where, args.trace)
    await serve_stdio(service, service.dispatcher())


def host_main(argv: Sequence[str]) -> int:
    """``python -m properties.reliability._soak host ...``: the soak's host process."""
    parser = argparse.ArgumentParser(prog="soak host")
    parser.add_argument("--config", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--tick", type=float, default=0.1)
    parser.add_argument("--probes", required=True, help="where SIGUSR1 writes its probes")
    parser.add_argument("--trace", action="store_true", help="tracemalloc snapshots too")
    args = parser.parse_args(argv)
    if args.trace:
        import tracemalloc  # noqa: PLC0415

        tracemalloc.start(8)
    asyncio.run(_host(args))
    return 0


# -- the driver ---------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    status: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS", "RssAnon", "RssFile"):
            status[key] = int(value.split()[0])
    return status


class Host:
    """The host process and a reader of its stdout (responses by id, notifications)."""

    def __init__(self, workdir: Path, tick: float, *, trace: bool = False) -> None:
        config = workdir / "host.toml"
        config.write_text(planner_config("slow:x", lease_ttl=10.0))
        self.data = workdir / "data"
        self.probes = workdir / "probes"
        self.probes.mkdir(exist_ok=True)
        argv = ["--config", str(config), "--data-dir", str(self.data), "--tick", str(tick)]
        argv += ["--probes", str(self.probes), *(["--trace"] if trace else [])]
        self.stderr = (workdir / "host.err").open("wb")
        here = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "properties.reliability._soak", "host", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env={**os.environ, "PYTHONPATH": path},
        )
        self.pid = self.proc.pid
        self.inbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.next_id = 0
        self.probed = 0
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

    def close(self) -> None:
        """Release the pipes and the stderr file (once the process exited)."""
        self.reader.join(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def initialize(self) -> str:
        """Send ``initialize`` and wait for its answer (the host is serving, its probe
        handler installed); a violation, or ``""``."""
        asked = self.send("initialize", {"protocol_version": None})
        while True:
            frame = self.inbox.get()
            if frame is None:
                return f"the host exited before serving ({self.proc.wait()})"
            if frame.get("id") == asked:
                return f"initialize refused: {frame['error']}" if "error" in frame else ""

    def probe(self) -> dict[str, Any]:
        """Ask the host for a probe (``SIGUSR1``) and read it; ``{}`` if it never came."""
        path = self.probes / f"probe-{self.probed}.json"
        self.probed += 1
        self.proc.send_signal(signal.SIGUSR1)
        give_up = time.monotonic() + PROBE_TIMEOUT
        while not path.exists():
            if time.monotonic() > give_up or self.proc.poll() is not None:
                return {}
            time.sleep(0.01)  # a bench's poll of another process's file, not a test
        found: dict[str, Any] = json.loads(path.read_text())
        return found

    def sample(self, sessions: int, started: float) -> Sample:
        probe = self.probe()
        status = _status(self.pid)
        return Sample(
            sessions=sessions,
            seconds=round(time.monotonic() - started, 2),
            threads=status["Threads"],
            fds=len(os.listdir(f"/proc/{self.pid}/fd")),
            rss_kib=status["VmRSS"],
            rss_anon_kib=status.get("RssAnon", 0),
            rss_file_kib=status.get("RssFile", 0),
            thread_names=probe.get("threads", {}),
        )


class _Session:
    """One session's state in the driver: its current parent run and what the event
    stream said about that run's attempt (nothing here is a guess)."""

    __slots__ = ("attempt", "delivered_to", "ended", "parent", "runs", "sid", "subscription")

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.runs = 0  # parent runs started
        self.subscription: str | None = None
        self.parent: str | None = None  # the current parent run
        self.attempt: str | None = None  # the attempt it delegated (``attempt.accepted``)
        self.delivered_to: str | None = None  # the run its result went into
        self.ended: set[str] = set()  # runs of this round that ended

    def new_round(self, parent: str) -> None:
        self.parent, self.attempt, self.delivered_to = parent, None, None
        self.ended = set()


class Driver:
    """Keeps ``window`` sessions in flight; each runs ``attempts`` parent runs in turn.

    A session starts its next parent run only once the event stream showed the
    current attempt done: ``attempt.delivered`` named the run its result went
    into (the parent run itself, or a continuation run) and that run, and the
    parent run, ended. The store commits each ``attempt.*`` event with its change
    and a continuation run's ``run.completed`` with the delivery, so no other
    run of the session can still be admitted then. A parent run that ended
    without ``attempt.accepted`` delegated nothing: that request counts as
    refused (:attr:`refusals`), as does a refused ``run.start``, and every
    attempt a session never asked for because one of its requests was refused."""

    def __init__(self, host: Host, sessions: int, attempts: int, window: int) -> None:
        self.host = host
        self.attempts = attempts
        self.waiting: deque[str] = deque(f"soak-{n:06d}" for n in range(sessions))
        self.live: dict[str, _Session] = {}
        self.pending: dict[int, tuple[str, str]] = {}  # request id -> (what, sid)
        self.window = window
        self.done = 0
        self.accepted = 0  # attempts the host accepted (``attempt.accepted`` seen)
        self.inline = 0  # results delivered into their parent run
        self.refusals: list[str] = []  # one reason per attempt asked for and not accepted
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
                self._refused(what, sid, frame["error"])
                return
            self._answered(what, sid, frame["result"])
        elif frame.get("method") == "events.event":
            self._event(frame["params"]["event"])
        elif frame.get("method") == "events.overflow":
            self.violations.append(f"a subscription was cut: {frame['params']}")

    def _refused(self, what: str, sid: str, error: Any) -> None:
        """A refused request ends its session: the attempts it had not asked for yet
        (the refused one included) are refusals, not lost results."""
        reason = f"{what} of {sid} refused: {error}"
        session = self.live.get(sid)
        if session is not None and what in ("create", "subscribe", "run"):
            asked = session.runs - 1 if what == "run" else session.runs
            self.refusals += [reason] * (self.attempts - asked)
        else:
            self.violations.append(reason)
        self._finish(sid)

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
        if kind == "run.admitted" and data.get("trigger_type") != "async_subagent_result":
            session.new_round(run_id)
        elif kind == "attempt.accepted" and run_id == session.parent:
            session.attempt = data.get("attempt_id")
            self.accepted += 1
        elif kind == "attempt.delivered" and session.attempt is not None:
            if data.get("attempt_id") == session.attempt:
                # no consumer run named: it went into the run that asked for it
                session.delivered_to = str(data.get("consumer_run_id") or run_id)
        elif kind in ("run.completed", "run.failed"):
            if kind == "run.failed":
                self.violations.append(f"run {run_id} of {session.sid} failed: {data}")
            session.ended.add(run_id)
        self._settle(session)

    def _settle(self, session: _Session) -> None:
        """Move on once the current round is done (see the class docstring)."""
        if session.parent is None or session.parent not in session.ended:
            return
        if session.attempt is None:  # accepted commits before the parent run can end
            self.refusals.append(f"run {session.parent} of {session.sid} delegated nothing")
            self._next(session)
        elif session.delivered_to is not None and session.delivered_to in session.ended:
            self.inline += session.delivered_to == session.parent
            self._next(session)

    def _next(self, session: _Session) -> None:
        session.parent = None
        if session.runs < self.attempts:
            self._start_run(session)
        else:
            self._finish(session.sid)

    def _finish(self, sid: str) -> None:
        session = self.live.pop(sid, None)
        if session is None:
            return
        self.done += 1
        if session.subscription is not None:
            params = {"subscription_id": session.subscription}
            self._call("unsubscribe", sid, "events.unsubscribe", params)


# -- figures ------------------------------------------------------------------------------------


def slope(samples: Sequence[Sample], field: str) -> float:
    """Least-squares slope of ``field`` per session over ``samples`` (0 for fewer than 2)."""
    xs = [float(s.sessions) for s in samples]
    ys = [float(getattr(s, field)) for s in samples]
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def check_store(
    data: Path, sessions: int, attempts: int, *, accepted: int | None = None
) -> tuple[int, int, list[str]]:
    """``(lost, duplicates, violations)`` from the data directory after the host exited.

    ``lost`` counts stored (accepted, committed) attempts whose result was not
    delivered; ``duplicates`` the completed continuation runs past the first of an
    attempt. A request the host refused stored no attempt, so it is neither (the
    driver reports it as refused). Violations: more attempts stored than asked
    for, or (given ``accepted``, the driver's count of ``attempt.accepted``
    events) a store that disagrees with the event stream."""
    from statemachines import RunStatus  # noqa: PLC0415
    from storage import ASYNC_SUBAGENT_RESULT, LmdbSessionStore  # noqa: PLC0415

    store = LmdbSessionStore(data / "lmdb")
    try:
        records = store.list_attempts("default")
        consumed: dict[str, int] = {}
        for session_id in {record.parent_session_id for record in records}:
            for run in store.list_runs(session_id):
                if run.trigger_type == ASYNC_SUBAGENT_RESULT and run.status == RunStatus.COMPLETED:
                    attempt = run.metadata.get("async_subagent.attempt_id", run.run_id)
                    consumed[attempt] = consumed.get(attempt, 0) + 1
    finally:
        store.close()
    lost = sum(str(r.delivery_status) != "delivered" for r in records)
    duplicates = sum(n - 1 for n in consumed.values() if n > 1)
    violations = []
    if len(records) > sessions * attempts:
        violations.append(f"{len(records)} attempts stored, {sessions * attempts} asked for")
    if accepted is not None and accepted != len(records):
        violations.append(f"{len(records)} attempts stored, {accepted} accepted events seen")
    return lost, duplicates, violations


def _drive(
    host: Host,
    driver: Driver,
    sessions: int,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[Sample], str]:
    """Run every session; the samples at each tenth and a violation ('' when none).
    ``clock`` only bounds the run by ``deadline``: no session moves on by time."""
    started = clock()
    samples = [host.sample(0, started)]
    tenth = max(1, sessions // 10)
    driver.fill()
    while driver.done < sessions:
        if clock() > started + deadline:
            return samples, f"the soak did not finish in {deadline:g} s ({driver.done} done)"
        before = driver.done
        try:
            frame = host.inbox.get(timeout=0.5)
        except queue.Empty:
            frame = {}
        if frame is None:
            return samples, f"the host exited early ({host.proc.poll()})"
        if frame:
            driver.handle(frame)
        if driver.done // tenth > before // tenth:
            samples.append(host.sample(driver.done, started))
        driver.fill()
    return samples, ""


def _stop(host: Host) -> tuple[int | None, float]:
    """SIGTERM; ``(exit status or None when it had to be killed, seconds to exit)``."""
    stopping = time.monotonic()
    host.proc.send_signal(signal.SIGTERM)
    try:
        status: int | None = host.proc.wait(60)
    except subprocess.TimeoutExpired:
        host.proc.kill()
        host.proc.wait()
        status = None
    shutdown = time.monotonic() - stopping
    host.close()
    return status, shutdown


def _judge(report: SoakReport) -> list[str]:
    found = []
    if report.thread_slope_per_1000 >= MAX_THREADS_PER_1000:
        found.append(f"threads grow {report.thread_slope_per_1000:.2f} per 1,000 sessions")
    if report.fd_slope_per_1000 >= MAX_FDS_PER_1000:
        found.append(f"fds grow {report.fd_slope_per_1000:.2f} per 1,000 sessions")
    if report.shutdown_seconds > report.shutdown_deadline or report.exit_status != 0:
        found.append(
            f"SIGTERM: exit {report.exit_status} after {report.shutdown_seconds:.2f} s "
            f"(deadline {report.shutdown_deadline:g} s)"
        )
    if report.lost or report.duplicates:
        found.append(f"{report.lost} lost and {report.duplicates} duplicated results")
    return found


def _refusal_violations(refusals: Sequence[str]) -> list[str]:
    """One violation per distinct reason (with its count), so the report says why."""
    found = [f"refused ({n} attempts): {reason}" for reason, n in Counter(refusals).items()]
    return found[:20] + ([f"... {len(found) - 20} more refusals"] if len(found) > 20 else [])


def run_soak(
    *,
    sessions: int,
    attempts: int = 1,
    window: int = 64,
    tick: float = 0.1,
    workdir: Path | None = None,
    deadline: float = 3600.0,
    trace: bool = False,
) -> SoakReport:
    """One soak run in ``workdir`` (a temporary directory by default); ``attempts`` per
    session. ``trace`` has the host keep tracemalloc snapshots beside its probes."""
    with tempfile.TemporaryDirectory(prefix="subagents-soak-") as tmp:
        where = workdir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        host = Host(where, tick, trace=trace)
        driver = Driver(host, sessions, attempts, window)
        early = host.initialize()
        samples, early = _drive(host, driver, sessions, deadline) if not early else ([], early)
        seconds = time.monotonic() - started
        status, shutdown = _stop(host)
        lost, duplicates, found = check_store(
            host.data, sessions, attempts, accepted=driver.accepted
        )
    warmup = WARMUP_TENTHS * max(1, sessions // 10)
    warm = [s for s in samples if s.sessions >= warmup]
    report = SoakReport(
        sessions=sessions,
        attempts=sessions * attempts,
        seconds=round(seconds, 2),
        samples=samples,
        warmup_sessions=warmup,
        thread_slope_per_1000=round(1000 * slope(warm, "threads"), 3),
        fd_slope_per_1000=round(1000 * slope(warm, "fds"), 3),
        rss_anon_kib_per_session=round(slope(warm, "rss_anon_kib"), 3),
        rss_file_kib_per_session=round(slope(warm, "rss_file_kib"), 3),
        rss_kib_per_session=round(slope(warm, "rss_kib"), 3),
        shutdown_seconds=round(shutdown, 3),
        shutdown_deadline=SHUTDOWN_TIMEOUT + EXIT_GRACE,
        exit_status=status,
        lost=lost,
        duplicates=duplicates,
        inline=driver.inline,
        violations=[],
        refused=len(driver.refusals),
    )
    violations = ([early] if early else []) + driver.violations[:20] + found + _judge(report)
    violations += _refusal_violations(driver.refusals)
    return msgspec.structs.replace(report, violations=violations)


def section_fields(report: SoakReport) -> dict[str, Any]:
    """The ``soak`` section of ``verify --report`` (the fields of its ``Section``): a
    violation on any lost or duplicated result, threads or fds growing by 1 or more per
    1,000 sessions after warm-up, or a SIGTERM shutdown past its deadline."""
    return {
        "name": "soak",
        "figures": {
            "sessions": report.sessions,
            "attempts": report.attempts,
            "warm-up sessions": report.warmup_sessions,
            "threads per 1000 sessions": report.thread_slope_per_1000,
            "fds per 1000 sessions": report.fd_slope_per_1000,
            "RssAnon KiB per session": report.rss_anon_kib_per_session,
            "RssFile KiB per session": report.rss_file_kib_per_session,
            "shutdown s": report.shutdown_seconds,
            "lost": report.lost,
            "duplicates": report.duplicates,
            "refused": report.refused,
        },
        "violations": tuple(report.violations),
        "seconds": report.seconds,
        "columns": ("sessions", "seconds", "threads", "fds", "RssAnon KiB", "RssFile KiB"),
        "rows": tuple(
            (
                f"{s.sessions:,}",
                f"{s.seconds:.1f}",
                str(s.threads),
                str(s.fds),
                f"{s.rss_anon_kib:,}",
                f"{s.rss_file_kib:,}",
            )
            for s in report.samples
        ),
    }


def soak_section_fields(profile: str, workdir: Path) -> dict[str, Any]:
    """Run the soak at ``profile``'s :data:`SOAK_SIZES` in ``workdir``; its section's fields."""
    size = SOAK_SIZES[profile]
    workdir.mkdir(parents=True, exist_ok=True)
    report = run_soak(
        sessions=size.sessions, attempts=size.attempts, window=size.window, workdir=workdir
    )
    return section_fields(report)


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        sys.exit(host_main(sys.argv[2:]))
    sys.exit("usage: python -m properties.reliability._soak host --config ... --data-dir ...")
