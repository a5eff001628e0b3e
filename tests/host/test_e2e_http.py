"""End to end: ``serve --http`` on an ephemeral loopback port, driven with httpx."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import Queue
from typing import Any

import httpx
import pytest
from host_helpers import ASYNC_CONFIG, CONFIG, REPO, SCRIPTED, TIMEOUT, cli_env

pytestmark = pytest.mark.timeout(120)


class HttpHost:
    def __init__(
        self,
        tmp_path: Path,
        config_text: str | None = None,
        *,
        nofile: int | None = None,
        host_settings: str = "",
    ) -> None:
        config = tmp_path / "host.toml"
        scripted = config_text is not None
        config.write_text(
            config_text
            if config_text is not None
            else CONFIG.replace("[host]\n", f"[host]\nmax_request_bytes = 4096\n{host_settings}")
        )
        launcher = [str(SCRIPTED)] if scripted else ["-m", "subagents._cli"]
        self.release = tmp_path / "release"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *launcher,
                "serve",
                "--http",
                "--config",
                str(config),
                "--data-dir",
                str(tmp_path / "data"),
                "--tick",
                "0.05",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**cli_env(), "SUBAGENTS_TEST_RELEASE": str(self.release)},
            cwd=REPO,
        )
        if nofile is not None:  # before it serves: a soft open-file limit (1024 is common)
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE, (nofile, hard))
        lines: Queue[bytes] = Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        reader = threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True)
        reader.start()
        first = lines.get(timeout=TIMEOUT)  # the readiness line
        assert first, self._stderr()
        ready = json.loads(first)
        self.url: str = ready["listening"]
        assert self.url.startswith("http://127.0.0.1:")
        token_file = Path(ready["token_file"])
        assert token_file.stat().st_mode & 0o077 == 0
        self.token = token_file.read_text()
        self.client = httpx.Client(
            base_url=self.url, headers={"authorization": f"Bearer {self.token}"}, timeout=TIMEOUT
        )
        self.next_id = 0

    def _stderr(self) -> str:
        self.proc.kill()
        _, err = self.proc.communicate(timeout=TIMEOUT)
        return err.decode()

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            frame["params"] = params
        response = self.client.post("/rpc", json=frame)
        assert response.status_code == 200, response.text
        return response.json()

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        reply = self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]

    def close(self) -> int:
        self.client.close()
        try:
            code = self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HttpHost]:
    server = HttpHost(tmp_path)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.call("shutdown")
        assert server.close() == 0


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in event:
                yield event
            event = {}
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(": ")
            event[field] = value


def test_http_session_run_sse_and_replay(host: HttpHost) -> None:
    init = host.result("initialize")
    assert "events.sse" in init["features"]
    host.result("session.create", {"session_id": "s1"})
    with (
        httpx.Client(base_url=host.url, timeout=TIMEOUT) as sse,
        sse.stream(
            "GET",
            "/events",
            params={"session_id": "s1"},
            headers={"authorization": f"Bearer {host.token}"},
        ) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        run = host.result("run.start", {"session_id": "s1", "input": "hello over http"})
        seen = []
        for event in sse_events(stream):
            seen.append(event["event"])
            data = json.loads(event["data"])
            assert int(event["id"]) == data["seq"]
            if event["event"] == "run.completed":
                assert data["run_id"] == run["run_id"]
                assert data["data"]["output"] == "hello over http"
                break
    assert seen == ["session.created", "run.admitted", "run.started", "run.completed"]
    status = host.result("run.status", {"session_id": "s1", "run_id": run["run_id"]})
    assert status["status"] == "completed"
    replay = host.result("events.replay", {"session_id": "s1", "after_seq": 1})
    assert [e["kind"] for e in replay["events"]] == ["run.admitted", "run.started", "run.completed"]
    # Resume the stream after seq 3 with Last-Event-ID: only the rest comes back.
    with (
        httpx.Client(base_url=host.url, timeout=TIMEOUT) as sse,
        sse.stream(
            "GET",
            "/events",
            params={"session_id": "s1"},
            headers={"authorization": f"Bearer {host.token}", "last-event-id": "3"},
        ) as stream,
    ):
        first = next(sse_events(stream))
        assert first["event"] == "run.completed"


def test_http_auth_limits_and_bad_frames(host: HttpHost) -> None:
    with httpx.Client(base_url=host.url, timeout=TIMEOUT) as anonymous:
        denied = anonymous.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == -32004
        wrong = anonymous.post(
            "/rpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize"},
            headers={"authorization": "Bearer nope"},
        )
        assert wrong.status_code == 401
        assert anonymous.get("/events", params={"session_id": "s1"}).status_code == 401
        assert anonymous.get("/health").json() == {"status": "ok"}
    big = host.client.post("/rpc", content=b'{"x":"' + b"y" * 10_000 + b'"}')
    assert big.status_code == 413
    assert big.json()["error"]["code"] == -32003
    malformed = host.client.post("/rpc", content=b"{nope")
    assert malformed.status_code == 200
    assert malformed.json()["error"]["code"] == -32700
    assert host.call("nope")["error"]["code"] == -32601
    assert host.call("run.start", {"session_id": 1})["error"]["code"] == -32602
    note = host.client.post("/rpc", json={"jsonrpc": "2.0", "method": "diagnostics.get"})
    assert note.status_code == 204
    batch = host.client.post(
        "/rpc",
        json=[
            {"jsonrpc": "2.0", "id": 1, "method": "diagnostics.get"},
            {"jsonrpc": "2.0", "id": 2, "method": "nope"},
        ],
    ).json()
    assert [r["id"] for r in batch] == [1, 2]
    subscribe = host.call("events.subscribe", {"session_id": "s1"})
    assert subscribe["error"]["code"] == -32002  # HTTP uses SSE instead
    missing = host.client.get("/events", params={"session_id": "ghost"})
    assert missing.status_code == 404
    assert host.result("diagnostics.get")["accepting"] is True


def test_http_sigterm_closes_the_host_cleanly(tmp_path: Path) -> None:
    server = HttpHost(tmp_path)
    try:
        server.result("session.create", {"session_id": "s1"})
        server.proc.send_signal(signal.SIGTERM)
    finally:
        code = server.close()
    assert code == 0
    again = HttpHost(tmp_path)
    try:
        assert again.result("session.get", {"session_id": "s1"})["status"] == "active"
        again.call("shutdown")
    finally:
        assert again.close() == 0


def test_http_background_delegation_becomes_one_continuation(tmp_path: Path) -> None:
    server = HttpHost(tmp_path, ASYNC_CONFIG)
    try:
        server.result("session.create", {"session_id": "s1"})
        with (
            httpx.Client(base_url=server.url, timeout=TIMEOUT) as sse,
            sse.stream(
                "GET",
                "/events",
                params={"session_id": "s1"},
                headers={"authorization": f"Bearer {server.token}"},
            ) as stream,
        ):
            parent = server.result("run.start", {"session_id": "s1", "input": "plan"})
            continuation = None
            for event in sse_events(stream):
                data = json.loads(event["data"])
                if event["event"] == "run.completed" and data["run_id"] == parent["run_id"]:
                    assert data["data"]["output"] == "delegated; carrying on"
                    server.release.touch()  # the child ends after its parent run
                if (
                    event["event"] == "run.admitted"
                    and data["data"]["trigger_type"] == "async_subagent_result"
                ):
                    continuation = data["run_id"]
                if event["event"] == "run.completed" and data["run_id"] == continuation:
                    assert data["data"]["output"] == "continued: three facts from the child"
                    break
        run = server.result("run.status", {"session_id": "s1", "run_id": continuation})
        assert run["trigger_type"] == "async_subagent_result"
        assert "three facts from the child" in run["input"]
        replay = server.result("events.replay", {"session_id": "s1"})
        assert [e["kind"] for e in replay["events"]].count("run.completed") == 2
        server.call("shutdown")
    finally:
        code = server.close()
    assert code == 0


HALF_OPEN = 2000
HEAD_DEADLINE = 4 * TIMEOUT
"""Longer than any client wait in the half-open test: no head deadline fires during it."""


@contextlib.contextmanager
def open_files(needed: int) -> Iterator[None]:
    """This test process may hold ``needed`` more descriptors (soft limit raised, restored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, needed + 256)
    assert hard == resource.RLIM_INFINITY or hard >= wanted, f"hard fd limit {hard} too low"
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_half_open_connections_leave_an_authenticated_call_answering(tmp_path: Path) -> None:
    """2,000 sockets that connect and send nothing or a partial head, against a host with
    a soft limit of 1,024 open files: an authenticated ``POST /rpc`` still answers, before
    any head deadline could have freed a connection, and the host logs a few lines, not a
    traceback per refusal.

    The head deadline (``HEAD_DEADLINE``) is longer than the client's whole timeout, so an
    answer proves the cap evicted a silent connection to admit the call: waiting for the
    silent ones to time out would have outlasted the client. No wall-clock bound is
    asserted: how long the kernel takes to accept the call's connection (a full listen
    queue retransmits the SYN after 1 s) is not the host's doing.
    """
    server = HttpHost(
        tmp_path, nofile=1024, host_settings=f"http_header_timeout = {HEAD_DEADLINE}\n"
    )
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sockets: list[socket.socket] = []
    shut_down = False
    try:
        with open_files(HALF_OPEN):
            for n in range(HALF_OPEN):
                sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
                sockets.append(sock)
                if n % 2:
                    sock.sendall(b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Le")
            with httpx.Client(base_url=server.url, timeout=TIMEOUT) as fresh:
                reply = fresh.post(
                    "/rpc",
                    json={"jsonrpc": "2.0", "id": 1, "method": "diagnostics.get"},
                    headers={"authorization": f"Bearer {server.token}"},
                )
            assert reply.status_code == 200, reply.text
            assert reply.json()["result"]["accepting"] is True
            for sock in sockets:
                sock.close()
            sockets.clear()
            server.call("shutdown")
            shut_down = True
    finally:
        for sock in sockets:
            sock.close()
        errors: list[bytes] = []
        assert server.proc.stderr is not None
        drain = threading.Thread(target=lambda: errors.extend(server.proc.stderr), daemon=True)
        drain.start()  # a flood of log lines must not block the host on a full pipe
        if not shut_down:
            server.proc.send_signal(signal.SIGTERM)  # the test failed before its shutdown
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=TIMEOUT)
        drain.join(timeout=TIMEOUT)
        code = server.close()
    err = b"".join(errors).decode(errors="replace")
    assert code == 0, err[-2000:]
    assert len(err.splitlines()) < 20 and "Traceback" not in err, err[-2000:]
