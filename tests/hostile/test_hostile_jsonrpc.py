"""Hostile JSON-RPC frames on every transport: the in-process dispatcher, the HTTP
app and a real ``serve --stdio`` process. Each gets its JSON-RPC error (or no reply,
for notifications), the store is unchanged and the host answers the next request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from properties.reliability._hostile import (
    FRAME_CASES,
    LINE_CASES,
    SEED_SESSION,
    FrameCase,
    HttpApp,
    LineCase,
    StdioHostProcess,
    check_frame,
    check_http_frame,
    check_http_unauthorized,
    check_line,
    hostile_host,
)

pytestmark = pytest.mark.timeout(120)

IDS = [case.name for case in FRAME_CASES]


@pytest.mark.parametrize("case", FRAME_CASES, ids=IDS)
async def test_a_hostile_frame_gets_its_error_and_the_dispatcher_keeps_serving(
    case: FrameCase,
) -> None:
    async with hostile_host() as host:
        assert await check_frame(host, case) == []


@pytest.mark.parametrize("case", FRAME_CASES, ids=IDS)
async def test_a_hostile_http_body_gets_its_error_and_status_and_the_app_keeps_serving(
    case: FrameCase,
) -> None:
    async with hostile_host() as host:
        assert await check_http_frame(host, HttpApp(host), case) == []


async def test_a_request_without_the_bearer_token_is_never_dispatched() -> None:
    async with hostile_host() as host:
        assert await check_http_unauthorized(host, HttpApp(host)) == []


@pytest.fixture(scope="module")
def stdio_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioHostProcess]:
    host = StdioHostProcess(tmp_path_factory.mktemp("stdio"))
    try:
        created, _ = host.call("session.create", {"session_id": SEED_SESSION})
        assert "result" in created, created
        yield host
        listed, _ = host.call("session.list", {})
        assert [s["session_id"] for s in listed["result"]["sessions"]] == [SEED_SESSION]
    finally:
        assert host.close() == 0


@pytest.mark.parametrize("case", LINE_CASES, ids=[case.name for case in LINE_CASES])
def test_a_hostile_stdio_line_gets_its_replies_and_the_process_keeps_serving(
    stdio_host: StdioHostProcess, case: LineCase
) -> None:
    assert check_line(stdio_host, case) == []


async def test_a_wrong_expectation_is_reported_with_the_reply() -> None:
    wrong = FrameCase("expects a result", b"{nope", 0)

    async with hostile_host() as host:
        found = await check_frame(host, wrong)

    assert len(found) == 1
    assert found[0].startswith("jsonrpc[dispatcher:expects a result]: expected a result")


def test_the_stdio_surface_sees_every_single_frame() -> None:
    names = {case.name for case in LINE_CASES}
    single = [c.name for c in FRAME_CASES if c.batch is None and c.frame.strip()]

    assert set(single) <= names
