"""Starting, talking to and killing host lives (the parent side of :mod:`._crash_host`).

:class:`Zygote` runs ``python -m properties.reliability._crash_host`` once and
forks every host life from it; :class:`HostLife` is one life: its pid, its
fencing generation and the queue of messages it sent over the parent's Unix
socket (read by a daemon thread until the socket closes).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ._oracle import OracleLog

HOST_MODULE = "properties.reliability._crash_host"
CONNECT_TIMEOUT = 30.0


class LifeFailed(Exception):
    """A host life did not start or did not talk as expected."""


class Zygote:
    """The process that forks host lives; close it when done (idempotent)."""

    def __init__(self, workdir: Path, command: Sequence[str] | None = None) -> None:
        """Start the zygote: ``command`` (default ``python -m`` :data:`HOST_MODULE`)."""
        self.workdir = workdir
        self.address = f"\0subagents-crash-{os.getpid()}-{secrets.token_hex(6)}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(8)
        self.listener.settimeout(CONNECT_TIMEOUT)
        self._stderr = (workdir / "zygote.err").open("ab")
        self.proc = subprocess.Popen(
            list(command or [sys.executable, "-m", HOST_MODULE]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lock = threading.Lock()

    def request(self, **message: Any) -> dict[str, Any]:
        with self._lock:
            stdin, stdout = self.proc.stdin, self.proc.stdout
            assert stdin is not None and stdout is not None
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()
            line = stdout.readline()
        if not line:
            raise LifeFailed(f"the zygote exited ({self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def spawn(
        self, args: dict[str, Any], env: dict[str, str], log: OracleLog | None = None
    ) -> HostLife:
        full = {"address": self.address, "stderr": str(self.workdir / "host.err"), **args}
        pid = int(self.request(op="spawn", args=full, env=env)["pid"])
        try:
            conn, _ = self.listener.accept()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.request(op="wait", pid=pid)
            raise LifeFailed("the host life never connected") from None
        return HostLife(self, pid, conn, log)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                stdin = self.proc.stdin
                assert stdin is not None
                stdin.write(json.dumps({"op": "exit"}) + "\n")
                stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()
        self.listener.close()


class HostLife:
    """One forked host process; messages arrive on :attr:`inbox` (``None`` at EOF)."""

    def __init__(
        self, zygote: Zygote, pid: int, conn: socket.socket, log: OracleLog | None
    ) -> None:
        self.zygote = zygote
        self.pid = pid
        self.conn = conn
        self.log = log
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.generation = 0
        self.host = ""
        self.started = time.time()
        self.died: float | None = None
        self.status: int | None = None
        self.eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream: IO[bytes] = self.conn.makefile("rb")
        try:
            for raw in stream:
                with contextlib.suppress(ValueError):
                    self.inbox.put(json.loads(raw))
        except OSError:
            pass
        finally:
            stream.close()
            self.inbox.put(None)

    def send(self, **message: Any) -> bool:
        """Send one command; ``False`` if the life is already gone."""
        if self.log is not None:
            self.log.note("ask", life=self.pid, msg=message)
            self.log.sync()  # what was asked is on disk before the host can act on it
        try:
            self.conn.sendall((json.dumps(message) + "\n").encode())
        except OSError:
            return False
        return True

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next message, ``None`` at EOF; raises ``queue.Empty`` after ``timeout``."""
        if self.eof:
            return None
        message = self.inbox.get(timeout=max(0.0, timeout))
        if message is None:
            self.eof = True
        elif self.log is not None:
            self.log.note("saw", life=self.pid, msg=message)
        return message

    def close(
        self, timeout: float, on_message: Callable[[dict[str, Any]], object] | None = None
    ) -> int:
        """Ask the life to close, take its messages until it ends its stream (each to
        ``on_message``, when given) or ``timeout`` seconds pass between two of them,
        then :meth:`reap` it and return its status. Runs on the caller's thread."""
        self.send(op="close")
        with contextlib.suppress(queue.Empty):
            while (message := self.next(timeout)) is not None:
                if on_message is not None:
                    on_message(message)
        return self.reap()

    def kill(self) -> None:
        """SIGKILL the life (if still running) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.reap()

    def reap(self) -> int:
        """Wait for the process to be gone; note the time of death."""
        if self.status is None:
            self.status = int(self.zygote.request(op="wait", pid=self.pid)["status"])
            self.died = time.time()
            with contextlib.suppress(OSError):
                self.conn.shutdown(socket.SHUT_WR)
            self._reader.join(timeout=10)
            self.conn.close()
        return self.status

    def drain(self) -> list[dict[str, Any]]:
        """Every message still queued (after :meth:`reap`, everything the life sent)."""
        out: list[dict[str, Any]] = []
        while True:
            try:
                message = self.next(0.0)
            except queue.Empty:
                return out
            if message is None:
                return out
            out.append(message)
