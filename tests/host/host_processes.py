"""Real scripted host processes for the multi-process host tests.

:class:`HostProc` is one ``scripted_host.py serve --stdio`` subprocess driven over
JSON-RPC: replies matched by id, ``events.event`` notifications collected, stderr
kept for failure messages, a deadline on every wait. :func:`poll_until` is a bounded
store poll (the probe interval is not a synchronization); :func:`observe` watches
a window for what must not happen; :func:`continuations` reads the continuation
runs one attempt admitted.
"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from host_helpers import REPO, SCRIPTED, cli_env

from storage import ASYNC_SUBAGENT_RESULT, RunRecord, SessionStore

PROBE = 0.05  # poll interval of a bounded store poll (not a synchronization)


class Unanswered(Exception):
    """No reply within the deadline."""


class HostProc:
    """One scripted ``serve --stdio`` host subprocess (``script``, by default
    ``scripted_host.py``); replies by id, events collected.

    ``deadline`` bounds every wait (a reply, an event, the process's exit).
    """

    def __init__(
        self,
        name: str,
        *args: str,
        env: dict[str, str],
        deadline: float,
        script: Path = SCRIPTED,
    ) -> None:
        self.name = name
        self.deadline = deadline
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "serve", "--stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**cli_env(), **env},
            cwd=REPO,
        )
        self.frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.next_id = 0
        self.threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.frames.put(json.loads(line))
        self.frames.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def tail(self) -> str:
        return "".join(self.stderr[-20:])

    def _pump(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Unanswered
        try:
            frame = self.frames.get(timeout=left)
        except queue.Empty:
            raise Unanswered from None
        assert frame is not None, f"host {self.name} exited: {self.tail()}"
        if frame.get("id") is not None:
            self.replies[int(frame["id"])] = frame
        elif frame.get("method") == "events.event":
            self.events.append(frame["params"]["event"])

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def reply(self, request_id: int, timeout: float | None = None) -> Any:
        """The result of request ``request_id``; :class:`Unanswered` past ``timeout``."""
        deadline = time.monotonic() + (self.deadline if timeout is None else timeout)
        while request_id not in self.replies:
            self._pump(deadline)
        frame = self.replies.pop(request_id)
        assert "result" in frame, (frame, self.tail())
        return frame["result"]

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        try:
            return self.reply(self.send(method, params))
        except Unanswered:
            raise AssertionError(f"host {self.name}: no reply to {method}") from None

    def wait_event(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + self.deadline
        seen = 0
        while True:
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            try:
                self._pump(deadline)
            except Unanswered:
                raise AssertionError(f"host {self.name}: no such event; {self.tail()}") from None

    def drain(self) -> None:
        """Take every frame already received (events that arrived meanwhile)."""
        with contextlib.suppress(Unanswered):
            while not self.frames.empty():
                self._pump(time.monotonic() + 1.0)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=self.deadline)

    def stop(self) -> int:
        """Resume if frozen, SIGTERM, wait; SIGKILL on timeout. Idempotent."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=self.deadline)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=self.deadline)
        for thread in self.threads:
            thread.join(timeout=5.0)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return code

    def shutdown(self) -> int:
        """``shutdown``, then end of input: the host's own clean exit."""
        self.result("shutdown")
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=self.deadline)
        finally:
            self.stop()


def poll_until(
    what: str,
    probe: Callable[[], Any],
    timeout: float,
    explain: Callable[[], object] | None = None,
) -> Any:
    """``probe()`` until it returns something truthy, or fail at the deadline (the
    message adds ``explain()``: the state that the wait found instead)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            found_instead = f"; found: {explain()!r}" if explain is not None else ""
            raise AssertionError(f"timed out waiting for {what}{found_instead}")
        time.sleep(PROBE)  # the probe interval of a bounded poll


def observe(check: Callable[[], object], seconds: float) -> None:
    """Call ``check()`` (it asserts) every probe interval for ``seconds``: a window in
    which something must not happen, not a wait for something to happen."""
    window = time.monotonic() + seconds
    while time.monotonic() < window:
        check()
        time.sleep(PROBE)  # the probe interval of an observation window


def continuations(store: SessionStore, session_id: str, attempt_id: str) -> list[RunRecord]:
    """The continuation runs of ``session_id`` that attempt ``attempt_id`` admitted."""
    return [
        run
        for run in store.list_runs(session_id)
        if run.trigger_type == ASYNC_SUBAGENT_RESULT
        and run.metadata.get("async_subagent.attempt_id") == attempt_id
    ]
