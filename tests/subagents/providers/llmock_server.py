"""llmock (PyPI ``llmock``), a mock of the OpenAI and Anthropic APIs written elsewhere,
run as a subprocess on a free loopback port and scripted over its ``/_llmock`` API.

Scripting: :meth:`LLMock.queue` posts behaviours (``{"type": "reply", ...}``,
``{"type": "fail", "status": 429, "retry_after": 2}``, ``{"type":
"stream_fault", "kind": "truncate", "after_chunks": 3}``, ...) that the next
matching requests consume; :meth:`LLMock.requests` reads back the journal of
what the server received.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import httpx

#: The base URL path each SDK needs, as llmock serves them.
BASE_PATHS = {"openai-chat": "/v1", "openai-responses": "/v1", "anthropic": "/anthropic"}


# llmock's CLI, run so that it also exits when its stdin closes: a test run that
# is killed (and never reaches the fixture's teardown) leaves no server behind.
_SERVE = """
import os, sys, threading
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
from llmock.cli import app
app(sys.argv[1:])
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@dataclass
class LLMock:
    """A running llmock server; :meth:`stop` ends the subprocess."""

    process: subprocess.Popen[bytes]
    port: int

    @classmethod
    def start(cls) -> LLMock:
        port = free_port()
        options = ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, "serve", *options],
            stdin=subprocess.PIPE,
            # A test run's allocation tracing would only slow the server down.
            env={k: v for k, v in os.environ.items() if k != "PYTHONTRACEMALLOC"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = cls(process, port)
        try:
            # httpx retries refused connections with backoff until the server listens.
            transport = httpx.HTTPTransport(retries=10)
            with httpx.Client(transport=transport, timeout=10.0) as client:
                client.get(f"{server.url}/health").raise_for_status()
        except BaseException:
            server.stop()
            raise
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def base_url(self, provider: str) -> str:
        return self.url + BASE_PATHS[provider]

    def _admin(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, f"{self.url}/_llmock{path}", json=body, timeout=10.0)
        response.raise_for_status()
        return response.json()

    def queue(self, *behaviors: dict[str, Any]) -> None:
        self._admin("POST", "/scenario", {"behaviors": list(behaviors)})

    def requests(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._admin("GET", "/requests")["requests"]
        return found

    def reset(self) -> None:
        self._admin("POST", "/reset")

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
