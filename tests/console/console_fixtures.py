"""A real ``serve --http`` host process on the demo config, and its RPC client."""

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

import httpx

from subagents._cli._demo import DEMO_CONFIG

REPO = Path(__file__).resolve().parents[2]
HOST_SCRIPT = Path(__file__).with_name("console_host.py")
TOKEN = "console-test-token-0123456789abcdef"
DEADLINE = 30.0


def poll_until(what: str, probe: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    """A bounded poll of a store or RPC read (the interval is not a synchronization)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class ConsoleHost:
    """``serve --http`` (demo config, demo models) on ``port`` (0: ephemeral)."""

    def __init__(self, data_dir: Path, gates: Path, owner: str, port: int = 0) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "SUBAGENTS_DEMO_GATES": str(gates),
            "SUBAGENTS_HOST_TOKEN": TOKEN,
        }
        env.pop("SUBAGENTS_CONFIG", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HOST_SCRIPT),
                "serve",
                "--http",
                "--config",
                str(DEMO_CONFIG),
                "--data-dir",
                str(data_dir),
                "--owner",
                owner,
                "--port",
                str(port),
                "--tick",
                "0.1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        self.stderr: list[str] = []
        lines: queue.Queue[bytes] = queue.Queue()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.threads = [
            threading.Thread(target=self._out, args=(lines,), daemon=True),
            threading.Thread(target=self._err, daemon=True),
        ]
        for thread in self.threads:
            thread.start()
        try:
            first = lines.get(timeout=DEADLINE)
        except queue.Empty:
            self.kill()
            raise AssertionError(
                "the host printed nothing: " + "".join(self.stderr[-10:])
            ) from None
        if not first:
            raise AssertionError("the host exited: " + "".join(self.stderr[-10:]))
        self.line: dict[str, Any] = json.loads(first)
        self.url: str = self.line["listening"]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.client = httpx.Client(
            base_url=self.url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=DEADLINE
        )
        self.next_id = 0

    def _out(self, lines: queue.Queue[bytes]) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            lines.put(raw)
        lines.put(b"")

    def _err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode(errors="replace"))

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        reply = self.client.post("/rpc", json=frame).json()
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        return reply["result"]

    def run_to_end(self, session_id: str, prompt: str) -> dict[str, Any]:
        run = self.rpc("run.start", {"session_id": session_id, "input": prompt})
        ref = {"session_id": session_id, "run_id": run["run_id"]}
        return poll_until(  # type: ignore[no-any-return]
            f"run {run['run_id']} to end",
            lambda: (
                (info := self.rpc("run.status", ref))["status"] in {"completed", "failed"} and info
            ),
        )

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE)
        self.close_client()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=DEADLINE)
        self.close_client()

    def close_client(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        for thread in self.threads:
            thread.join(timeout=DEADLINE)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
