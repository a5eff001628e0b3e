"""The ``jsonrpc`` family over a real ``subagents serve --stdio`` process: every single
frame as one line, plus the line-framing cases (blank, CRLF, NUL, invalid UTF-8, oversized)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import (
    HUGE,
    INVALID,
    MIB,
    PARSE,
    RESULT,
    TIMEOUT,
    TOO_LARGE,
    UNKNOWN,
    untyped,
)
from ._host import HOST_CONFIG, SEED_SESSION
from ._jsonrpc import (
    FRAME_CASES,
    code_of,
    rpc_frame,
)


@dataclass(frozen=True)
class LineCase:
    """Raw bytes written to a stdio host. ``replies`` lists the codes of the replies
    it must produce (:data:`RESULT` for a result), in any order."""

    name: str
    data: bytes
    replies: tuple[int, ...]


def _stdio_frame_cases() -> Iterator[LineCase]:
    for case in FRAME_CASES:
        if not case.frame.strip() or b"\n" in case.frame or b"\r" in case.frame:
            continue
        if case.batch is not None:
            continue  # a batch reply is one line; judged by the dispatcher and HTTP surfaces
        replies = () if case.code is None else (case.code,)
        yield LineCase(case.name, case.frame + b"\n", replies)


LINE_CASES: tuple[LineCase, ...] = (
    LineCase("blank-line", b"\n", ()),
    LineCase("whitespace-line", b"  \t \n", ()),
    LineCase("crlf-line", rpc_frame("diagnostics.get") + b"\r\n", (RESULT,)),
    LineCase(
        "cr-inside-a-line", b'{"jsonrpc":"2.0",\r"id":1,"method":"diagnostics.get"}\n', (RESULT,)
    ),
    LineCase("nul-line", b"\x00" * 64 + b"\n", (PARSE,)),
    LineCase("invalid-utf8-line", b"\xff\xfe\xfd\n", (PARSE,)),
    LineCase(
        "two-frames-one-line",
        rpc_frame("diagnostics.get") + rpc_frame("diagnostics.get") + b"\n",
        (PARSE,),
    ),
    LineCase(
        "duplicate-ids",
        rpc_frame("diagnostics.get", request_id=5)
        + b"\n"
        + rpc_frame("nope", request_id=5)
        + b"\n",
        (RESULT, UNKNOWN),
    ),
    LineCase("line-over-the-limit", b"x" * (MIB + 1) + b"\n", (TOO_LARGE,)),
    LineCase("16-mib-line", b'{"x":"' + b"y" * HUGE + b'"}\n', (TOO_LARGE,)),
    LineCase("batch-line", b'[1, {"jsonrpc":"2.0","id":1,"method":"nope"}]\n', (INVALID, UNKNOWN)),
    *_stdio_frame_cases(),
)
"""What a stdio host reads: every single frame of :data:`FRAME_CASES` as one line,
plus the framing cases (blank, CRLF, NUL, invalid UTF-8, oversized lines)."""


class StdioHostProcess:
    """``subagents serve --stdio`` as a child process on an LMDB data directory."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "host.toml"
        config.write_text(HOST_CONFIG.replace('model_id = "gated:x"', 'model_id = "test:echo"'))
        repo = Path(__file__).resolve().parents[3]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(repo) + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("SUBAGENTS_CONFIG", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "subagents._cli",
                "serve",
                "--stdio",
                "--config",
                str(config),
                "--data-dir",
                str(workdir / "data"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=repo,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.next_probe = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
        """Send one request; its reply and every other frame read before it."""
        self.next_probe += 1
        request_id = f"probe-{self.next_probe}"
        self.send(rpc_frame(method, params, request_id=request_id) + b"\n")
        others: list[Any] = []
        while True:
            line = self.lines.get(timeout=TIMEOUT)
            if line is None:
                raise EOFError("the stdio host exited")
            frame = json.loads(line)
            if isinstance(frame, dict) and frame.get("id") == request_id:
                return frame, others
            others.append(frame)

    def more(self, count: int) -> list[Any]:
        """Read ``count`` more frames (a reply that came after the probe's)."""
        frames = []
        for _ in range(count):
            line = self.lines.get(timeout=TIMEOUT)
            if line is None:
                raise EOFError("the stdio host exited")
            frames.append(json.loads(line))
        return frames

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


def _flat_codes(frames: Sequence[Any]) -> list[int]:
    """The reply codes in ``frames`` (:data:`RESULT` for a result), batches flattened."""
    codes: list[int] = []
    for frame in frames:
        for reply in frame if isinstance(frame, list) else [frame]:
            codes.append(
                RESULT if isinstance(reply, dict) and "result" in reply else code_of(reply)
            )
    return codes


def check_line(host: StdioHostProcess, case: LineCase) -> list[str]:
    """Write ``case`` to a stdio host, then probe it: the expected replies, in any
    order, and a probe that still gets its diagnostics."""
    where = f"jsonrpc[stdio:{case.name}]"
    try:
        host.send(case.data)
        probe, replies = host.call("diagnostics.get")
        codes = _flat_codes(replies)
        while len(codes) < len(case.replies):
            codes += _flat_codes(host.more(1))
    except BaseException as exc:
        return [untyped(where, exc)]
    found = []
    codes.sort()
    if codes != sorted(case.replies):
        found.append(f"{where}: reply codes {codes}, expected {sorted(case.replies)}")
    if not probe.get("result", {}).get("accepting"):
        found.append(f"{where}: the host stopped serving: {str(probe)[:200]}")
    return found


def run_stdio_lines(workdir: Path, cases: Sequence[LineCase] = LINE_CASES) -> tuple[int, list[str]]:
    """Every line case against one stdio host; (cases run, violations). The host's
    sessions are the same before and after, and it exits cleanly at end of input."""
    host = StdioHostProcess(workdir)
    found: list[str] = []
    tried = 0
    try:
        created, _ = host.call("session.create", {"session_id": SEED_SESSION})
        if "result" not in created:
            return 0, [f"jsonrpc[stdio]: the host did not start: {created}"]
        before, _ = host.call("session.list", {})
        for case in cases:
            found += check_line(host, case)
            tried += 1
        after, _ = host.call("session.list", {})
        if after != {**before, "id": after["id"]}:
            found.append("jsonrpc[stdio]: the sessions changed under hostile frames")
    except BaseException as exc:
        found.append(untyped("jsonrpc[stdio]", exc))
    finally:
        code = host.close()
    if code != 0:
        found.append(f"jsonrpc[stdio]: the host exited with {code}")
    return tried, found
