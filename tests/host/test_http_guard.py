"""The HTTP server's bounds: head and body deadlines, the connection cap, quiet logs, binding."""

from __future__ import annotations

import asyncio
import errno
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from host_helpers import CONFIG, memory_service

from subagents._host import HostConfigError, HostService, parse_host_config
from subagents._host._config import resolve_bind
from subagents._host._http import serve_http
from subagents._host._httpguard import ConnectionGuard, RateLimitFilter, fd_budget

TIMEOUT = 30.0
TOKEN = "t" * 32

pytestmark = pytest.mark.timeout(60)


class FakeTransport(asyncio.BaseTransport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = asyncio.Event()

    def close(self) -> None:
        self.closed.set()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_at_the_cap_the_oldest_connection_without_a_head_makes_room() -> None:
    clock = Clock()
    guard = ConnectionGuard(max_connections=2, header_timeout=60.0, log_interval=10.0, now=clock)
    a, b, c, d = (FakeTransport() for _ in range(4))
    assert guard.admit(a) and guard.admit(b)
    assert guard.admit(c)  # a (silent longest) is evicted for c
    assert a.closed.is_set() and not b.closed.is_set()
    assert guard.live == 2 and guard.totals["evicted"] == 1
    guard.head_received(b)
    guard.head_received(c)
    assert not guard.admit(d)  # everyone is past their head: d is refused
    assert d.closed.is_set() and guard.totals["refused"] == 1
    guard.closed(b)
    assert guard.admit(FakeTransport())  # room again


async def test_a_connection_without_a_complete_head_is_closed_at_the_deadline() -> None:
    guard = ConnectionGuard(max_connections=10, header_timeout=0.05, log_interval=10.0)
    slow, quick = FakeTransport(), FakeTransport()
    guard.admit(slow)
    guard.admit(quick)
    guard.head_received(quick)
    await asyncio.wait_for(slow.closed.wait(), TIMEOUT)
    assert guard.totals["head_timeouts"] == 1
    assert not quick.closed.is_set() and guard.live == 1


async def test_bounds_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    guard = ConnectionGuard(max_connections=1, header_timeout=60.0, log_interval=10.0, now=clock)
    busy = FakeTransport()
    guard.admit(busy)
    guard.head_received(busy)
    with caplog.at_level(logging.WARNING, logger="subagents.host.http"):
        for _ in range(500):
            guard.admit(FakeTransport())
        assert len(caplog.records) == 1  # the first refusal, at once
        clock.now = 10.0
        guard.admit(FakeTransport())
    assert len(caplog.records) == 2
    assert "refused 500" in caplog.records[1].getMessage()


def test_the_rate_limit_filter_passes_one_record_per_interval() -> None:
    clock = Clock()
    limiter = RateLimitFilter(10.0, now=clock)

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, text, None, None)

    text = "socket.accept() out of system resource"
    passed = [limiter.filter(record(f"{text}\nsocket: <TransportSocket fd={n}>")) for n in range(9)]
    assert passed == [True] + [False] * 8
    assert limiter.filter(record("another message entirely"))
    clock.now = 10.0
    last = record(f"{text}\nsocket: <TransportSocket fd=9>")
    assert limiter.filter(last)
    assert "(8 similar suppressed)" in last.getMessage()


def test_an_accept_out_of_descriptors_is_one_line_without_a_traceback() -> None:
    """asyncio logs EMFILE from accept() with its traceback; at the limit that would be
    a traceback per retry, so the filter keeps the first line and the error only."""
    limiter = RateLimitFilter(10.0, now=Clock())
    try:
        raise OSError(errno.EMFILE, "Too many open files")
    except OSError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "asyncio",
        logging.ERROR,
        __file__,
        1,
        "socket.accept() out of system resource\nsocket: <TransportSocket fd=10>",
        None,
        exc_info,
    )
    assert limiter.filter(record)
    assert record.exc_info is None
    assert logging.Formatter().format(record) == (
        "socket.accept() out of system resource: Too many open files"
    )
    other = logging.LogRecord(
        "asyncio", logging.ERROR, __file__, 1, "a handler failed", None, exc_info=None
    )
    try:
        raise ValueError("a bug")
    except ValueError:
        other.exc_info = sys.exc_info()
    assert limiter.filter(other)
    assert other.exc_info is not None  # a real error keeps its traceback


def test_the_connection_cap_stays_under_the_fd_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap, backlog = fd_budget(10**9)
    assert cap + 2 * backlog + 64 <= soft
    assert fd_budget(5)[0] == 5


def test_bind_addresses() -> None:
    config = parse_host_config(CONFIG)
    assert resolve_bind(config, None, operator_token=False) == "127.0.0.1"
    for loopback in ("127.0.0.2", "::1", "localhost"):
        assert resolve_bind(config, loopback, operator_token=False) == loopback
    with pytest.raises(HostConfigError) as refused:
        resolve_bind(config, "0.0.0.0", operator_token=False)
    assert refused.value.key == "host.bind" and "SUBAGENTS_HOST_TOKEN" in refused.value.fix
    assert resolve_bind(config, "0.0.0.0", operator_token=True) == "0.0.0.0"
    with pytest.raises(HostConfigError):
        resolve_bind(config, "example.com", operator_token=True)
    remote = parse_host_config(CONFIG.replace("[host]\n", '[host]\nbind = "10.1.2.3"\n'))
    with pytest.raises(HostConfigError):
        resolve_bind(remote, None, operator_token=False)


@pytest.mark.parametrize(
    "line",
    [
        'bind = "not an address"',
        "stream_buffer_events = 0",
        "stream_buffer_events = 10001",
        "stream_heartbeat = 0.0",
        "stream_heartbeat = nan",
        "http_header_timeout = -1.0",
        "http_max_connections = 0",
        "http_max_header_bytes = 100",
        "stream_retry_ms = -1",
    ],
)
def test_bad_bounds_are_config_errors(line: str) -> None:
    with pytest.raises(HostConfigError) as error:
        parse_host_config(CONFIG.replace("[host]\n", f"[host]\n{line}\n"))
    assert error.value.key == "host." + line.split(" ", maxsplit=1)[0]


async def test_a_non_loopback_bind_without_an_operator_token_is_refused() -> None:
    service = memory_service(CONFIG)
    await service.start()
    with pytest.raises(HostConfigError):
        await serve_http(service, service.dispatcher(), TOKEN, bind="0.0.0.0")
    assert service._closed  # the service is closed on every exit path


@pytest.fixture
async def served() -> AsyncIterator[tuple[HostService, str, int]]:
    bounds = "http_header_timeout = 0.2\nhttp_body_timeout = 0.2\nhttp_keep_alive_timeout = 600.0\n"
    service = memory_service(CONFIG.replace("[host]\n", "[host]\n" + bounds))
    await service.start()
    loop = asyncio.get_running_loop()
    url: asyncio.Future[str] = loop.create_future()
    task = loop.create_task(serve_http(service, service.dispatcher(), TOKEN, ready=url.set_result))
    try:
        host, port = (await asyncio.wait_for(url, TIMEOUT)).removeprefix("http://").rsplit(":", 1)
        yield service, host, int(port)
    finally:
        service.shutdown_requested.set()
        await asyncio.wait_for(task, TIMEOUT)


async def exchange(host: str, port: int, data: bytes) -> Any:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), TIMEOUT)  # until the server closes
    finally:
        writer.close()


async def test_a_partial_head_is_dropped_at_the_head_deadline(
    served: tuple[HostService, str, int],
) -> None:
    _, host, port = served
    assert await exchange(host, port, b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-") == b""
    assert await exchange(host, port, b"") == b""  # silent: dropped as well


async def test_a_body_that_stalls_gets_408(served: tuple[HostService, str, int]) -> None:
    _, host, port = served
    head = (
        f"POST /rpc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head.encode() + b'{"jsonrpc":')  # 11 of the 100 bytes, then nothing
        reply = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        assert reply.startswith(b"HTTP/1.1 408 "), reply
        length = int(reply.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert b'"body_timeout"' in await reader.readexactly(length)
    finally:
        writer.close()


async def test_the_next_request_on_a_kept_alive_connection_has_a_head_deadline_too(
    served: tuple[HostService, str, int],
) -> None:
    """uvicorn stops its keep-alive timer at the first byte of the next request; the
    guard's head deadline starts there, so a trickled second head is dropped too."""
    _, host, port = served
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        assert head.startswith(b"HTTP/1.1 200 ")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert await reader.readexactly(length) == b'{"status":"ok"}'
        writer.write(b"GET /health HTTP/1.1\r\nHo")  # and then nothing more
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""  # closed by the host
    finally:
        writer.close()
