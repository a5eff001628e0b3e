"""Every family of the hostile corpus, run outside pytest for ``subagents verify --report``."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from storage import LmdbSessionStore

from ._common import untyped
from ._host import hostile_host
from ._jsonrpc import (
    FRAME_CASES,
    HttpApp,
    check_frame,
    check_http_frame,
    check_http_unauthorized,
)
from ._lmdb import LMDB_CASES, check_lmdb
from ._markdown import MARKDOWN_CASES, check_markdown, check_markdown_directory
from ._mcp import MCP_HTTP_CASES, MCP_LINE_CASES, run_mcp_http, run_mcp_lines
from ._sizes import SIZE_CASES, check_size
from ._stdio import LINE_CASES, run_stdio_lines
from ._toml import TOML_CASES, check_toml
from ._tools import TOOL_ARGUMENT_CASES, check_tool_arguments, tool_bench

FAMILIES: tuple[str, ...] = (
    "markdown",
    "toml",
    "jsonrpc",
    "tool-arguments",
    "sizes",
    "lmdb-full",
    "mcp",
)


class HostileReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`run_hostile_corpus` tried: cases per family, in total, and what broke.

    ``cases_by_family`` counts every case run on every surface it runs on;
    ``violations`` is empty when every case got its typed refusal, lost
    nothing and left the host serving, and every family ran at least its
    minimum number of cases.
    """

    cases_by_family: dict[str, int]
    tried: int
    violations: tuple[str, ...]
    seconds: float


MINIMUM_CASES: dict[str, int] = {
    "markdown": len(MARKDOWN_CASES) + 1,
    "toml": len(TOML_CASES),
    "jsonrpc": 2 * len(FRAME_CASES) + len(LINE_CASES) + 1,
    "tool-arguments": len(TOOL_ARGUMENT_CASES),
    "sizes": len(SIZE_CASES),
    "lmdb-full": len(LMDB_CASES),
    "mcp": len(MCP_LINE_CASES) + len(MCP_HTTP_CASES),
}
"""Each family must really run every one of its cases (a run that tried fewer is red)."""


FamilyRun = Callable[[Path], tuple[int, list[str]]]
"""One family's run in a scratch directory: (cases tried, violations)."""


def _markdown(root: Path) -> tuple[int, list[str]]:
    found = [v for case in MARKDOWN_CASES for v in check_markdown(case)]
    found += check_markdown_directory(root / "markdown")
    return len(MARKDOWN_CASES) + 1, found


def _toml(root: Path) -> tuple[int, list[str]]:
    return len(TOML_CASES), [v for c in TOML_CASES for v in check_toml(c, root / "toml")]


async def _jsonrpc_in_process(root: Path) -> list[str]:
    store = LmdbSessionStore(root / "jsonrpc-lmdb", sync=False)
    found: list[str] = []
    async with hostile_host(store=store) as host:
        for case in FRAME_CASES:
            found += await check_frame(host, case)
        app = HttpApp(host)
        for case in FRAME_CASES:
            found += await check_http_frame(host, app, case)
        found += await check_http_unauthorized(host, app)
    return found


def _jsonrpc(root: Path) -> tuple[int, list[str]]:
    found = asyncio.run(_jsonrpc_in_process(root))
    lines, stdio_found = run_stdio_lines(root / "stdio")
    return 2 * len(FRAME_CASES) + 1 + lines, found + stdio_found


async def _tool_arguments(root: Path) -> list[str]:
    async with tool_bench() as bench:
        return [v for c in TOOL_ARGUMENT_CASES for v in await check_tool_arguments(bench, c)]


async def _sizes(root: Path) -> list[str]:
    found: list[str] = []
    async with hostile_host() as host:
        for case in SIZE_CASES:
            found += await check_size(case, host)
    return found


async def _lmdb_full(root: Path) -> list[str]:
    return [v for c in LMDB_CASES for v in await check_lmdb(c, root / "lmdb")]


def _mcp(root: Path) -> tuple[int, list[str]]:
    lines, found = run_mcp_lines(root / "mcp-stdio")
    requests, http_found = run_mcp_http(root / "mcp-http")
    return lines + requests, found + http_found


FAMILY_RUNS: tuple[tuple[str, FamilyRun], ...] = (
    ("markdown", _markdown),
    ("toml", _toml),
    ("jsonrpc", _jsonrpc),
    ("tool-arguments", lambda root: (len(TOOL_ARGUMENT_CASES), asyncio.run(_tool_arguments(root)))),
    ("sizes", lambda root: (len(SIZE_CASES), asyncio.run(_sizes(root)))),
    ("lmdb-full", lambda root: (len(LMDB_CASES), asyncio.run(_lmdb_full(root)))),
    ("mcp", _mcp),
)
"""Every family, in run order (the names of :data:`FAMILIES`)."""


def run_hostile_corpus(
    *, workdir: Path, progress: Callable[[str], None] | None = None
) -> HostileReport:
    """Run every case of every family outside pytest; count them and collect violations.

    ``workdir`` receives the files and LMDB directories the cases need (a fresh
    subdirectory per run). ``progress`` is told each family as it starts.
    Never raises for a failing case: failures are violations in the report.
    """
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="hostile-", dir=workdir))
    counts: dict[str, int] = dict.fromkeys(FAMILIES, 0)
    violations: list[str] = []
    # Hostile input makes the host log what it refused (a full map, say); the report
    # carries the verdicts, so keep the host's log quiet for the run.
    host_log = logging.getLogger("subagents.host")
    level = host_log.level
    host_log.setLevel(logging.CRITICAL)
    try:
        for name, run in FAMILY_RUNS:
            if progress is not None:
                progress(name)
            try:
                tried, found = run(root)
            except BaseException as exc:
                tried, found = 0, [untyped(name, exc)]
            counts[name] += tried
            violations.extend(found)
    finally:
        host_log.setLevel(level)
        shutil.rmtree(root, ignore_errors=True)
    for name, minimum in MINIMUM_CASES.items():
        if counts[name] < minimum:
            violations.append(
                f"hostile family {name} tried {counts[name]} cases (minimum {minimum})"
            )
    return HostileReport(
        cases_by_family=counts,
        tried=sum(counts.values()),
        violations=tuple(violations),
        seconds=time.monotonic() - started,
    )
