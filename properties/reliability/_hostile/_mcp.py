"""The ``mcp`` family: hostile MCP frames against a real ``subagents serve --mcp`` process.

Over stdio (one line each): oversized lines, lines that are not JSON or not
JSON-RPC, unusable ids, unknown methods, bad params, unknown tools and
resources, tool arguments with unknown fields or invented ids. Over streamable
HTTP: no or a wrong bearer token, a foreign ``Origin``, a rebinding ``Host``,
an oversized body. Each gets its typed error (a JSON-RPC error object, or for a
tool a result with ``isError`` and a typed ``structuredContent.error``); the
durable session's attempts are the same after as before, and the server still
answers a probe after every case.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ._common import HUGE, INVALID, MIB, PARAMS, PARSE, RESULT, TIMEOUT, TOO_LARGE, UNKNOWN, untyped

TOOL_ERROR = 1
"""An expected reply meaning: a tool result with ``isError`` and a typed error."""
NOT_FOUND = -32002
"""The resource-not-found code of MCP."""

MCP_CONFIG = """
[host]
lease_ttl = 30.0

[profiles.default]
model_id = "test:echo"
subagents = ["research"]

[profiles.research]
model_id = "test:text=three facts"

[subagents.research]
profile = "research"
description = "Collect facts"
"""

INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "hostile", "version": "0"},
}


def _frame(method: str, params: Any = None, request_id: Any = 7) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame).encode()


def _tool(name: str, arguments: Any) -> bytes:
    return _frame("tools/call", {"name": name, "arguments": arguments})


@dataclass(frozen=True)
class McpLineCase:
    """One stdio line; ``replies`` lists the codes it must produce (any order)."""

    name: str
    data: bytes
    replies: tuple[int, ...]


MCP_LINE_CASES: tuple[McpLineCase, ...] = (
    McpLineCase("line-over-the-limit", b"x" * (MIB + 1) + b"\n", (TOO_LARGE,)),
    McpLineCase("16-mib-line", b'{"x":"' + b"y" * HUGE + b'"}\n', (TOO_LARGE,)),
    McpLineCase("not-json", b"not json\n", (PARSE,)),
    McpLineCase("invalid-utf8", b"\xff\xfe\n", (PARSE,)),
    McpLineCase("blank-line", b"\n", ()),
    McpLineCase("json-not-jsonrpc", b'{"foo": 1}\n', (INVALID,)),
    McpLineCase("batch", b"[1, 2]\n", (INVALID,)),
    McpLineCase("params-a-list", _frame("tools/list", [1]) + b"\n", (INVALID,)),
    McpLineCase("null-id", _frame("ping", request_id=None) + b"\n", (INVALID,)),
    McpLineCase("boolean-id", _frame("ping", request_id=True) + b"\n", (INVALID,)),
    McpLineCase("unknown-method", _frame("nope/nope") + b"\n", (UNKNOWN,)),
    McpLineCase("unknown-notification", b'{"jsonrpc":"2.0","method":"nope/nope"}\n', ()),
    McpLineCase("tools-call-without-name", _frame("tools/call", {}) + b"\n", (PARAMS,)),
    McpLineCase("tools-call-arguments-a-string", _tool("delegate", "x") + b"\n", (PARAMS,)),
    McpLineCase("unknown-tool", _tool("ghost", {}) + b"\n", (PARAMS,)),
    McpLineCase(
        "delegate-unknown-field",
        _tool("delegate", {"subagent_name": "research", "prompt": "x", "bogus": 1}) + b"\n",
        (TOOL_ERROR,),
    ),
    McpLineCase(
        "delegate-unknown-subagent",
        _tool("delegate", {"subagent_name": "ghost", "prompt": "x"}) + b"\n",
        (TOOL_ERROR,),
    ),
    McpLineCase(
        "delegate-invented-agent-id",
        _tool("delegate", {"subagent_name": "research", "prompt": "x", "agent_id": "made-up"})
        + b"\n",
        (TOOL_ERROR,),
    ),
    McpLineCase(
        "steer-invented-attempt",
        _tool("steer_subagent", {"attempt_id": "made-up", "message": "x"}) + b"\n",
        (TOOL_ERROR,),
    ),
    McpLineCase(
        "cancel-invented-attempt",
        _tool("cancel_subagent", {"attempt_id": "made-up"}) + b"\n",
        (TOOL_ERROR,),
    ),
    McpLineCase(
        "wait-timeout-a-string",
        _tool("wait_subagent", {"attempt_id": "x", "timeout_seconds": "soon"}) + b"\n",
        (TOOL_ERROR,),
    ),
    McpLineCase(
        "info-with-arguments", _tool("subagent_info", {"all": True}) + b"\n", (TOOL_ERROR,)
    ),
    McpLineCase(
        "read-unknown-resource",
        _frame("resources/read", {"uri": "subagents://attempt/made-up"}) + b"\n",
        (NOT_FOUND,),
    ),
    McpLineCase(
        "read-foreign-scheme",
        _frame("resources/read", {"uri": "file:///etc/passwd"}) + b"\n",
        (NOT_FOUND,),
    ),
    McpLineCase("read-uri-a-number", _frame("resources/read", {"uri": 5}) + b"\n", (PARAMS,)),
    McpLineCase(
        "subscribe-unknown-resource",
        _frame("resources/subscribe", {"uri": "subagents://attempt/made-up"}) + b"\n",
        (NOT_FOUND,),
    ),
    McpLineCase("initialize-again-without-params", _frame("initialize", {}) + b"\n", (PARAMS,)),
)
"""What a stdio MCP server reads, each line with the replies it must produce."""


def _reply_code(frame: Any) -> int:
    if not isinstance(frame, dict):
        return -1
    if "error" in frame:
        code = frame["error"].get("code") if isinstance(frame["error"], dict) else None
        return code if isinstance(code, int) else -1
    result = frame.get("result")
    if isinstance(result, dict) and result.get("isError"):
        error = (result.get("structuredContent") or {}).get("error") or {}
        return TOOL_ERROR if error.get("type") and error.get("message") else -1
    return RESULT


def _server_env() -> dict[str, str]:
    repo = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != "SUBAGENTS_CONFIG"}
    env["PYTHONPATH"] = str(repo) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _serve_command(workdir: Path, *extra: str) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "host.toml"
    config.write_text(MCP_CONFIG)
    return [
        sys.executable,
        "-m",
        "subagents._cli",
        "serve",
        "--mcp",
        "--config",
        str(config),
        "--data-dir",
        str(workdir / "data"),
        *extra,
    ]


class McpStdioProcess:
    """``subagents serve --mcp`` over stdio on an LMDB data directory, initialized."""

    def __init__(self, workdir: Path) -> None:
        self.proc = subprocess.Popen(
            _serve_command(workdir, "--session", "hostile"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_server_env(),
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.next_probe = 0
        initialized, _ = self.call("initialize", INITIALIZE)
        if "result" not in initialized:
            raise RuntimeError(f"initialize failed: {initialized}")
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _next(self) -> Any:
        line = self.lines.get(timeout=TIMEOUT)
        if line is None:
            raise EOFError("the MCP server exited")
        return json.loads(line)

    def call(self, method: str, params: Any = None) -> tuple[Any, list[Any]]:
        """One request; its reply and every other frame read before it."""
        self.next_probe += 1
        request_id = f"probe-{self.next_probe}"
        self.send(_frame(method, params, request_id) + b"\n")
        others: list[Any] = []
        while True:
            frame = self._next()
            if isinstance(frame, dict) and frame.get("id") == request_id:
                return frame, others
            others.append(frame)

    def more(self, count: int) -> list[Any]:
        return [self._next() for _ in range(count)]

    def close(self) -> int:
        with contextlib.suppress(BrokenPipeError, OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=TIMEOUT)
        self._reader.join(timeout=TIMEOUT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def _attempts(server: McpStdioProcess) -> Any:
    info, _ = server.call("tools/call", {"name": "subagent_info", "arguments": {}})
    return info.get("result", {}).get("structuredContent", {}).get("background")


def check_mcp_line(server: McpStdioProcess, case: McpLineCase) -> list[str]:
    """Write ``case``, then probe: the expected replies (any order) and a served probe."""
    where = f"mcp[stdio:{case.name}]"
    try:
        server.send(case.data)
        probe, replies = server.call("tools/list")
        codes = [_reply_code(f) for f in replies]
        while len(codes) < len(case.replies):
            codes += [_reply_code(f) for f in server.more(1)]
    except BaseException as exc:
        return [untyped(where, exc)]
    found = []
    if sorted(codes) != sorted(case.replies):
        found.append(f"{where}: reply codes {sorted(codes)}, expected {sorted(case.replies)}")
    if len(probe.get("result", {}).get("tools", [])) != 6:
        found.append(f"{where}: the server stopped serving: {str(probe)[:200]}")
    return found


def run_mcp_lines(
    workdir: Path, cases: Sequence[McpLineCase] = MCP_LINE_CASES
) -> tuple[int, list[str]]:
    """Every stdio case against one server; (cases run, violations)."""
    found: list[str] = []
    tried = 0
    try:
        server = McpStdioProcess(workdir)
    except BaseException as exc:
        return 0, [untyped("mcp[stdio]", exc)]
    try:
        before = _attempts(server)
        for case in cases:
            found += check_mcp_line(server, case)
            tried += 1
        if _attempts(server) != before:
            found.append("mcp[stdio]: the session's attempts changed under hostile frames")
    except BaseException as exc:
        found.append(untyped("mcp[stdio]", exc))
    finally:
        code = server.close()
    if code != 0:
        found.append(f"mcp[stdio]: the server exited with {code}")
    return tried, found


@dataclass(frozen=True)
class McpHttpCase:
    """One HTTP request to ``/mcp``: header overrides (``None`` drops one), body, and the
    status and ``error.data.reason`` it must get."""

    name: str
    headers: dict[str, str | None] = field(default_factory=dict)
    body: bytes = b""
    status: int = 0
    reason: str = ""


_INIT_BODY = _frame("initialize", INITIALIZE, 1)

MCP_HTTP_CASES: tuple[McpHttpCase, ...] = (
    McpHttpCase("no-token", {"Authorization": None}, _INIT_BODY, 401, "auth"),
    McpHttpCase("wrong-token", {"Authorization": "Bearer nope"}, _INIT_BODY, 401, "auth"),
    McpHttpCase(
        "foreign-origin", {"Origin": "https://evil.example"}, _INIT_BODY, 403, "bad_origin"
    ),
    McpHttpCase("null-origin", {"Origin": "null"}, _INIT_BODY, 403, "bad_origin"),
    McpHttpCase("rebinding-host", {"Host": "evil.example:80"}, _INIT_BODY, 421, "bad_host"),
    McpHttpCase("oversized-body", {}, b'{"x":"' + b"y" * (MIB + 1) + b'"}', 413, "too_large"),
)
"""What the streamable HTTP guard refuses before the SDK sees it."""


class McpHttpProcess:
    """``subagents serve --mcp --http`` on an LMDB data directory."""

    def __init__(self, workdir: Path) -> None:
        self.proc = subprocess.Popen(
            _serve_command(workdir, "--http", "--port", "0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_server_env(),
        )
        assert self.proc.stdout is not None
        line = json.loads(self.proc.stdout.readline())
        self.url: str = line["listening"]
        self.token = Path(line["token_file"]).read_text().strip()

    def post(self, headers: dict[str, str | None], body: bytes) -> httpx.Response:
        base: dict[str, str | None] = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        merged = {k: v for k, v in {**base, **headers}.items() if v is not None}
        return httpx.post(self.url, headers=merged, content=body, timeout=TIMEOUT)

    def close(self) -> int:
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=TIMEOUT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def check_mcp_http(server: McpHttpProcess, case: McpHttpCase) -> list[str]:
    where = f"mcp[http:{case.name}]"
    try:
        refused = server.post(case.headers, case.body)
        probe = server.post({}, _INIT_BODY)
    except BaseException as exc:
        return [untyped(where, exc)]
    found = []
    try:
        error = refused.json()["error"]
        typed = isinstance(error["code"], int) and error["data"]["reason"] == case.reason
    except (ValueError, KeyError, TypeError):
        typed = False
    if refused.status_code != case.status or not typed:
        found.append(f"{where}: {refused.status_code} {refused.text[:200]!r}")
    if probe.status_code != 200:
        found.append(f"{where}: the server stopped serving ({probe.status_code})")
    return found


def run_mcp_http(
    workdir: Path, cases: Sequence[McpHttpCase] = MCP_HTTP_CASES
) -> tuple[int, list[str]]:
    try:
        server = McpHttpProcess(workdir)
    except BaseException as exc:
        return 0, [untyped("mcp[http]", exc)]
    try:
        found = [v for case in cases for v in check_mcp_http(server, case)]
    finally:
        server.close()
    return len(cases), found
