"""Bounded event streams: a subscriber that falls behind is cut and resumes without a gap.

SSE runs through the real ``serve_http`` on an ephemeral loopback port, in
process, so the test emits events on the host loop itself: a burst larger
than the subscriber's buffer, emitted while the client reads nothing, must end
the stream with ``stream.overflow`` and the last delivered sequence, and a
reconnect with ``Last-Event-ID`` must deliver everything after it. Odd
sequence numbers get -32602 / HTTP 400, never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from host_helpers import CONFIG, Client, memory_service

from subagents._host import Connection, HostService, open_host, parse_host_config
from subagents._host._http import serve_http
from subagents._host._stdio import serve_stdio
from subagents._host._streams import parse_seq

TIMEOUT = 30.0
TOKEN = "t" * 32
BUFFER = 8
BOUNDS = f"stream_buffer_events = {BUFFER}\nstream_heartbeat = 0.2\nstream_retry_ms = 1500\n"
ODD_SEQS = [
    str(2**64),
    str(2**63),
    "-1",
    "+1",
    " 1",
    "0x10",
    "1e3",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: str.isdigit() says yes
    "\u00b2",  # SUPERSCRIPT TWO: isdigit() yes, int() no
    "9" * 5000,
]

pytestmark = pytest.mark.timeout(120)


class Served:
    """``serve_http`` on 127.0.0.1:0 in this loop; ``stop()`` shuts it (and the service) down."""

    def __init__(self, service: HostService) -> None:
        self.service = service
        loop = asyncio.get_running_loop()
        self.url: asyncio.Future[str] = loop.create_future()
        self.task = loop.create_task(
            serve_http(service, service.dispatcher(), TOKEN, ready=self.url.set_result)
        )

    async def base(self) -> str:
        return await asyncio.wait_for(asyncio.shield(self.url), TIMEOUT)

    async def stop(self) -> None:
        self.service.shutdown_requested.set()
        await asyncio.wait_for(self.task, TIMEOUT)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    service = memory_service(CONFIG.replace("[host]\n", "[host]\n" + BOUNDS))
    await service.start()
    server = Served(service)
    try:
        await server.base()
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def open_stream(
    url: str, session_id: str, last_event_id: int | None = None
) -> AsyncIterator[AsyncIterator[str]]:
    """An SSE stream whose response head has arrived; the body is read only on demand."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    if last_event_id is not None:
        headers["last-event-id"] = str(last_event_id)
    async with (
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        client.stream("GET", "/events", params={"session_id": session_id}, headers=headers) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        yield r.aiter_text()


async def read_until(chunks: AsyncIterator[str], text: str, end: str) -> str:
    """``text`` plus the stream's text up to and including the first ``end`` after it
    (linear in the text read: a slow reader would be cut by the send timeout)."""
    parts, tail = [text], text[-len(end) :]
    while end not in tail:
        chunk = await asyncio.wait_for(anext(chunks), TIMEOUT)
        parts.append(chunk)
        tail = (tail + chunk)[-(len(chunk) + len(end)) :]
    return "".join(parts)


async def read_to_eof(chunks: AsyncIterator[str]) -> str:
    text = ""
    async with asyncio.timeout(TIMEOUT):
        async for chunk in chunks:
            text += chunk
    return text


def parse_sse(text: str) -> list[dict[str, str]]:
    """The SSE messages of ``text`` (comments kept as ``{"comment": ...}``)."""
    messages = []
    for block in text.split("\n\n"):
        message: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            message["comment" if name == "" else name] = value
        if message:
            messages.append(message)
    return messages


def events_of(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    return [m for m in messages if "data" in m and m.get("event") != "stream.overflow"]


def test_parse_seq_takes_ascii_digits_up_to_2_63_minus_1() -> None:
    assert parse_seq("0") == 0
    assert parse_seq(str(2**63 - 1)) == 2**63 - 1
    for raw in [*ODD_SEQS, "", "1.0", "\uff11"]:  # FULLWIDTH DIGIT ONE
        with pytest.raises(ValueError):
            parse_seq(raw)


async def test_a_subscriber_that_never_reads_is_cut_and_resumes_without_a_gap(
    served: Served,
) -> None:
    service = served.service
    url = await served.base()
    await Client(service.dispatcher()).result("session.create", {"session_id": "s1"})
    async with open_stream(url, "s1") as chunks:
        opening = await read_until(chunks, "", "\n\n")
        assert opening == ": subscribed\nretry: 1500\n\n"
        # The client reads nothing while a burst over its buffer arrives in one tick.
        total = 1 + 4 * BUFFER
        for n in range(total - 1):
            service.emit("s1", "test.filler", None, {"n": n})
        messages = parse_sse(await read_to_eof(chunks))  # the server ends the stream
    overflow = [m for m in messages if m.get("event") == "stream.overflow"]
    assert len(overflow) == 1, messages
    last = json.loads(overflow[0]["data"])["last_seq"]
    delivered = [int(m["id"]) for m in events_of(messages)]
    assert delivered == list(range(1, last + 1))  # in order, no gap, no repeat
    assert last < total and overflow[0]["id"] == str(last)
    assert len(service._subscriptions) == 0  # the listener went with the stream
    # Reconnect with the last delivered id: the rest comes from the committed log.
    async with open_stream(url, "s1", last_event_id=last) as chunks:
        text = await read_until(chunks, "", f"id: {total}\n")
        text = await read_until(chunks, text, ": heartbeat\n\n")  # idle now: heartbeats
        resumed = [int(m["id"]) for m in events_of(parse_sse(text))]
        assert resumed == list(range(last + 1, total + 1))
        service.emit("s1", "test.live", None, {})  # and it is still live
        text = await read_until(chunks, text, f"id: {total + 1}\n")
        live = events_of(parse_sse(await read_until(chunks, text, "\n\n")))[-1]
        assert live["id"] == str(total + 1) and live["event"] == "test.live"


@pytest.mark.parametrize("raw", ODD_SEQS, ids=lambda raw: repr(raw)[:24])
async def test_odd_sse_sequence_numbers_are_400(served: Served, raw: str) -> None:
    url = await served.base()
    await Client(served.service.dispatcher()).result("session.create", {"session_id": "s1"})
    auth = {"authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, headers=auth) as client:
        query = await client.get("/events", params={"session_id": "s1", "after_seq": raw})
        checks = [(query, "after_seq")]
        if raw == raw.strip():  # HTTP strips a header value's surrounding spaces
            header = await client.get(
                "/events", params={"session_id": "s1"}, headers={"last-event-id": raw.encode()}
            )
            checks.append((header, "Last-Event-ID"))
    for response, field in checks:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == -32602 and error["data"]["field"] == field


@pytest.mark.parametrize("store", ["memory", "lmdb"])
async def test_odd_rpc_sequence_numbers_are_invalid_params(store: str, tmp_path: Path) -> None:
    config = parse_host_config(CONFIG)
    service = (
        open_host(config, memory=True)
        if store == "memory"
        else open_host(config, data_dir=tmp_path / "data")
    )
    await service.start()
    conn_pushes: list[Any] = []
    client = Client(service.dispatcher(), Connection(transport="test", push=conn_pushes.append))
    try:
        await client.result("session.create", {"session_id": "s1"})
        values: list[Any] = [2**64, 2**63, 10**30, -1, "\u0663", "3", 1.5, True, None]
        for value in values:
            for method in ("events.replay", "events.subscribe"):
                if value is None and method == "events.subscribe":
                    continue  # null is "no replay" for subscribe
                reply = await client.call(method, {"session_id": "s1", "after_seq": value})
                assert reply["error"]["code"] == -32602, (method, value, reply)
        for literal in (b"1" + b"0" * 5000, b"1e400", b"-" + b"9" * 30):
            frame = (
                b'{"jsonrpc":"2.0","id":1,"method":"events.replay","params":'
                b'{"session_id":"s1","after_seq":' + literal + b"}}"
            )
            reply = await client.raw(frame)
            assert reply["error"]["code"] in (-32602, -32700), reply
        top = await client.result("events.replay", {"session_id": "s1", "after_seq": 2**63 - 1})
        assert top["events"] == []
        for limit in (0, 10_001, 2**64):
            reply = await client.call("events.replay", {"session_id": "s1", "limit": limit})
            assert reply["error"]["code"] == -32602
    finally:
        await service.close()


class StdioPipes:
    """``serve_stdio`` in this loop over two pipes; the test writes frames and reads lines."""

    def __init__(self, service: HostService) -> None:
        in_r, self._in_w = os.pipe()
        self._out_r, out_w = os.pipe()
        self.stdin = os.fdopen(in_r, "rb", buffering=0)
        self.stdout = os.fdopen(out_w, "wb", buffering=0)
        self.lines = os.fdopen(self._out_r, "rb")
        self.task = asyncio.get_running_loop().create_task(
            serve_stdio(service, service.dispatcher(), self.stdin, self.stdout)
        )
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        os.write(self._in_w, json.dumps(frame).encode() + b"\n")
        return self.next_id

    async def frame(self) -> dict[str, Any]:
        line = await asyncio.wait_for(asyncio.to_thread(self.lines.readline), TIMEOUT)
        assert line, "the host closed its output"
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    async def until(self, done: Any) -> list[dict[str, Any]]:
        frames = [await self.frame()]
        while not done(frames[-1]):
            frames.append(await self.frame())
        return frames

    async def close(self) -> None:
        os.close(self._in_w)  # end of input: the host stops
        await asyncio.wait_for(self.task, TIMEOUT)
        for stream in (self.stdin, self.stdout, self.lines):
            stream.close()


async def test_a_stdio_subscriber_that_never_reads_is_cut_and_resumes_without_a_gap() -> None:
    service = memory_service(CONFIG.replace("[host]\n", "[host]\n" + BOUNDS))
    await service.start()
    pipes = StdioPipes(service)
    try:
        first = pipes.send("session.create", {"session_id": "s1"})
        await pipes.until(lambda f: f.get("id") == first)
        sub = pipes.send("events.subscribe", {"session_id": "s1"})
        subscribed = (await pipes.until(lambda f: f.get("id") == sub))[-1]["result"]
        # The client reads nothing while events far over the pipe and the buffer arrive.
        total = 200
        for n in range(total - 1):
            service.emit("s1", "test.filler", None, {"n": n, "pad": "x" * 4096})
        frames = await pipes.until(lambda f: f.get("method") == "events.overflow")
        notice = frames[-1]["params"]
        assert notice["subscription_id"] == subscribed["subscription_id"]
        assert notice["reason"] == "lagged"
        last = notice["last_seq"]
        seqs = [f["params"]["event"]["seq"] for f in frames if f.get("method") == "events.event"]
        assert seqs == list(range(2, last + 1))  # from the subscription's start, no gap
        assert last < total
        assert len(service._subscriptions) == 0
        # Resubscribe from the last delivered seq until caught up: a backlog longer than
        # the buffer comes in rounds, each cut with its own last_seq; never a gap.
        resumed: list[int] = []
        while last < total:
            again = pipes.send("events.subscribe", {"session_id": "s1", "after_seq": last})
            frames = await pipes.until(lambda f, again=again: f.get("id") == again)
            events = [f["params"]["event"] for f in frames if f.get("method") == "events.event"]
            resumed += [event["seq"] for event in events]
            cut = [f["params"] for f in frames if f.get("method") == "events.overflow"]
            last = cut[0]["last_seq"] if cut else total
            assert resumed[-1] == last
        assert resumed == list(range(notice["last_seq"] + 1, total + 1))
    finally:
        await pipes.close()


async def test_an_sse_client_that_stops_reading_is_closed_at_the_send_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No buffer overflow here (the buffer is large): a client that reads nothing while
    megabytes arrive blocks the stream's writes; past ``stream_send_timeout`` the stream
    is closed with a log line, not a traceback, and the client resumes from its last id."""
    bounds = "stream_buffer_events = 10000\nstream_send_timeout = 1.0\n"
    service = memory_service(CONFIG.replace("[host]\n", "[host]\n" + bounds))
    await service.start()
    server = Served(service)
    try:
        url = await server.base()
        await Client(service.dispatcher()).result("session.create", {"session_id": "s1"})
        total = 1 + 400
        async with open_stream(url, "s1") as chunks:
            await read_until(chunks, "", "\n\n")
            for n in range(total - 1):  # 400 x 64 KiB: far more than the socket buffers
                service.emit("s1", "test.big", None, {"n": n, "pad": "x" * 65536})
            for _ in range(int(TIMEOUT / 0.05)):  # a bounded poll of the host's state
                if not service._subscriptions:
                    break
                await asyncio.sleep(0.05)
            assert not service._subscriptions, "the stalled stream is still open"
            parts: list[str] = []
            with contextlib.suppress(httpx.HTTPError):  # the server cut it mid-message
                async for chunk in chunks:
                    parts.append(chunk)
            text = "".join(parts)
        complete = text[: text.rfind("\n\n") + 2] if "\n\n" in text else ""
        delivered = [int(m["id"]) for m in events_of(parse_sse(complete))]
        assert delivered == list(range(1, len(delivered) + 1))
        last = delivered[-1] if delivered else 0
        assert last < total
        async with open_stream(url, "s1", last_event_id=last) as chunks:
            text = await read_until(chunks, "", f"id: {total}\n")
        resumed = [int(m["id"]) for m in events_of(parse_sse(text))]
        assert resumed[: total - last] == list(range(last + 1, total + 1))
    finally:
        await server.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert any("stopped reading" in m for m in messages), messages
    assert not any(r.exc_info for r in caplog.records), messages


async def test_streams_that_end_early_leave_no_listener_behind(served: Served) -> None:
    service = served.service
    url = await served.base()
    await Client(service.dispatcher()).result("session.create", {"session_id": "s1"})
    auth = {"authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, headers=auth) as client:
        for _ in range(20):  # HEAD answers with headers only: it never streams
            head = await client.head("/events", params={"session_id": "s1"})
            assert head.status_code == 200
    assert len(service._subscriptions) == 0
    for _ in range(20):  # clients that go away after the first bytes
        async with open_stream(url, "s1") as chunks:
            await read_until(chunks, "", "\n\n")
    for _ in range(int(TIMEOUT / 0.05)):  # a bounded poll: disconnects are noticed async
        if not service._subscriptions:
            break
        await asyncio.sleep(0.05)
    assert len(service._subscriptions) == 0
