"""One demo host subprocess, driven over JSON-RPC on its stdin and stdout.

The subprocess is ``python -m subagents._cli._demo._host`` (see :mod:`._host`):
``subagents serve --stdio`` on the demo config with the ``demo:`` models.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._host._methods import HostEvent
from ._common import STEP_TIMEOUT, DemoError
from ._models import GATES_ENV

HOST_MODULE = "subagents._cli._demo._host"


class HostProcess:
    """One ``serve --stdio`` host subprocess; replies matched by id, events collected."""

    def __init__(self, data_dir: Path, owner: str, gates: Path, seed: int) -> None:
        env = dict(os.environ)
        env[GATES_ENV] = str(gates)
        env.pop("SUBAGENTS_CONFIG", None)
        root = Path(__file__).resolve().parents[3]
        if (root / "pyproject.toml").is_file():  # a checkout: the host imports this copy
            env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
        self.owner = owner
        self.proc = subprocess.Popen(
            [sys.executable, "-m", HOST_MODULE, str(data_dir), owner, str(seed)],
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
