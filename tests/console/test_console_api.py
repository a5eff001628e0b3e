"""The console's HTTP surface in process (httpx over ASGI): login, headers, views, cancel.

The host is a real :class:`HostService` on the demo config with its scripted
models over a memory store; the console app is the one ``serve --http`` serves.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from statemachines import DELIVERY, EXECUTION, PHASE, RETENTION, RunStatus
from storage import AttemptRecord, MemorySessionStore, OwnerLease, RunRecord, SessionRecord
from subagents._cli._demo import DEMO_CONFIG, register_demo_models
from subagents._host import Connection, HostService, load_host_config
from subagents._host._console import (
    CODE_SECONDS,
    COOKIE,
    COOKIE_SECONDS,
    CSP,
    STATIC_DIR,
    ConsoleAuth,
)
from subagents._host._console_views import delegating_runs, machines_view, session_view
from subagents._host._eventlog import MemoryEventLog
from subagents._host._http import build_app
from subagents._host._methods import HostEvent

TOKEN = "api-test-token-0123456789"
BASE = "http://127.0.0.1:8080"
ORIGIN = {"origin": BASE}


@pytest.fixture
async def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[HostService]:
    monkeypatch.setenv("SUBAGENTS_DEMO_GATES", str(tmp_path))
    register_demo_models()
    store = MemorySessionStore()
    svc = HostService(
        load_host_config(DEMO_CONFIG),
        store=store,
        events=MemoryEventLog(),
        tick_seconds=0.05,
        closers=[store.close],
    )
    await svc.start()
    try:
        yield svc
    finally:
        await svc.close()


@pytest.fixture
async def web(service: HostService) -> AsyncIterator[httpx.AsyncClient]:
    app = build_app(service, service.dispatcher(), TOKEN, ConsoleAuth(TOKEN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client


async def login(web: httpx.AsyncClient) -> str:
    """Log ``web`` in through a one-time link; the cookie value."""
    link = await web.post("/console/login-link", headers={"authorization": f"Bearer {TOKEN}"})
    url = link.json()["url"]
    assert url.startswith(BASE + "/login#") and TOKEN not in url
    reply = await web.post("/login", json={"code": url.split("#", 1)[1]}, headers=ORIGIN)
    assert reply.status_code == 204, reply.text
    return reply.cookies[COOKIE]


async def test_the_pages_are_static_files_under_a_strict_csp(web: httpx.AsyncClient) -> None:
    for path in ("/", "/login", "/console/static/console.js", "/console/static/console.css"):
        reply = await web.get(path)
        assert reply.status_code == 200, path
        assert reply.headers["content-security-policy"] == CSP
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
    for path in STATIC_DIR.iterdir():  # no CDN, no inline script or style attribute
        text = path.read_text().replace("http://www.w3.org/2000/svg", "")  # a namespace
        assert "http://" not in text and "https://" not in text, path.name
        if path.suffix == ".html":
            assert "<script>" not in text and "style=" not in text, path.name
    assert (await web.get("/console/static/../_console.py")).status_code == 404


async def test_the_views_need_the_cookie_or_the_token(web: httpx.AsyncClient) -> None:
    assert (await web.get("/console/api/sessions")).status_code == 401
    web.cookies.set(COOKIE, "1.2.3")
    assert (await web.get("/console/api/sessions")).status_code == 401
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert (await web.get("/console/api/sessions", headers=bearer)).status_code == 200
    assert (await web.post("/console/login-link")).status_code == 401


async def test_a_login_code_buys_one_http_only_cookie(web: httpx.AsyncClient) -> None:
    link = await web.post("/console/login-link", headers={"authorization": f"Bearer {TOKEN}"})
    code = link.json()["url"].split("#", 1)[1]
    reply = await web.post("/login", json={"code": code}, headers=ORIGIN)
    assert reply.status_code == 204
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
    sessions = await web.get("/console/api/sessions")
    assert sessions.status_code == 200 and sessions.json()["sessions"] == []
    again = await web.post("/login", json={"code": code}, headers=ORIGIN)
    assert again.status_code == 401 and again.json()["reason"] == "login_expired"


async def test_a_foreign_origin_or_host_is_refused(web: httpx.AsyncClient) -> None:
    link = await web.post("/console/login-link", headers={"authorization": f"Bearer {TOKEN}"})
    code = link.json()["url"].split("#", 1)[1]
    evil = {"origin": "http://evil.example"}
    assert (await web.post("/login", json={"code": code}, headers=evil)).status_code == 403
    assert (await web.post("/login", json={"code": code})).status_code == 403  # no Origin
    await login(web)
    rebound = {"host": "evil.example:8080"}
    assert (await web.get("/", headers=rebound)).status_code == 421
    assert (await web.get("/console/api/sessions", headers=rebound)).status_code == 421
    assert (await web.get("/console/api/sessions")).status_code == 200
    cancel = await web.post("/console/api/cancel", json={"attempt_id": "x"}, headers=evil)
    assert cancel.status_code == 403


def test_codes_and_cookies_expire_and_cannot_be_forged() -> None:
    now = [1000.0]
    auth = ConsoleAuth(TOKEN, now=lambda: now[0])
    stale = auth.mint()
    now[0] += CODE_SECONDS + 1
    assert auth.redeem(stale) is None
    cookie = auth.redeem(auth.mint())
    assert cookie is not None and auth.valid(cookie)
    assert not ConsoleAuth("another token", now=lambda: now[0]).valid(cookie)
    expiry, nonce, mac = cookie.split(".")
    assert not auth.valid(f"{int(expiry) + 999}.{nonce}.{mac}")
    now[0] += COOKIE_SECONDS + 1
    assert not auth.valid(cookie)


async def _delegated(service: HostService, prompt: str) -> str:
    """Run the demo planner on ``prompt`` to its end; the one attempt it delegated."""
    done: asyncio.Future[HostEvent] = asyncio.get_running_loop().create_future()

    def ended(event: HostEvent) -> None:
        if event.kind in {"run.completed", "run.failed"} and not done.done():
            done.set_result(event)

    service.add_listener("s1", ended)
    client = service.dispatcher()
    conn = Connection(transport="test")
    await client.handle(
        b'{"jsonrpc":"2.0","id":1,"method":"session.create","params":{"session_id":"s1"}}', conn
    )
    params = {"session_id": "s1", "input": prompt}
    frame = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "run.start", "params": params})
    await client.handle(frame.encode(), conn)
    assert (await asyncio.wait_for(done, 20)).kind == "run.completed"
    (attempt,) = service.store.list_attempts("default", "s1")
    return attempt.attempt_id


async def test_cancel_goes_through_the_session_supervisor(
    service: HostService, web: httpx.AsyncClient
) -> None:
    attempt_id = await _delegated(service, "collect facts on leases")
    await login(web)
    no_origin = await web.post("/console/api/cancel", json={"attempt_id": attempt_id})
    assert no_origin.status_code == 403
    big = await web.post(
        "/console/api/cancel", json={"attempt_id": attempt_id, "reason": "x" * 5000}, headers=ORIGIN
    )
    assert big.status_code == 409 and "too large" in big.json()["error"]
    unknown = await web.post("/console/api/cancel", json={"attempt_id": "nope"}, headers=ORIGIN)
    assert unknown.status_code == 404
    view = (await web.get("/console/api/attempt", params={"attempt_id": attempt_id})).json()
    assert view["cancellable"] and view["current"]["phase"] in {"accepted", "running"}
    reply = await web.post(
        "/console/api/cancel",
        json={"attempt_id": attempt_id, "reason": "not needed"},
        headers=ORIGIN,
    )
    assert reply.status_code == 200 and reply.json()["status"] == "cancellation_requested"
    waited = await service.supervisor("s1").wait(attempt_id, 20)
    assert waited.status == "cancelled"
    record = service.store.load_attempt(attempt_id)
    assert str(record.execution_status) == "cancelled"
    assert record.cancellation_reason == "not needed"
    after = (await web.get("/console/api/attempt", params={"attempt_id": attempt_id})).json()
    assert not after["cancellable"] and after["result"]["size_bytes"] > 0
    assert [m["name"] for m in after["machines"]] == ["phase", "execution", "delivery", "retention"]
    artifact = await web.get("/console/api/artifact", params={"attempt_id": attempt_id})
    assert artifact.status_code == 200 and "not needed" in artifact.text
    assert artifact.headers["content-security-policy"].startswith("sandbox")


def _seed(store: MemorySessionStore, runs: int, attempts_per_run: int) -> list[RunRecord]:
    now = store.clock.now()
    store.create_session(
        SessionRecord(session_id="big", namespace_id="default", created_at=now, updated_at=now)
    )
    admitted: list[RunRecord] = []
    for number in range(runs):
        run = RunRecord(session_id="big", run_id=f"run-{number}", created_at=now, updated_at=now)
        admitted.append(store.admit_run(run).run)
        store.transition_run("big", run.run_id, RunStatus.RUNNING)
        for index in range(attempts_per_run):
            at = store.clock.now()
            store.accept_attempt(
                AttemptRecord(
                    attempt_id=f"subattempt_{number:03d}_{index:05d}",
                    agent_id=f"agent-{number}-{index}",
                    subagent_name="research",
                    namespace_id="default",
                    parent_session_id="big",
                    parent_run_id=f"agent-run-{number}",
                    owner_lease=OwnerLease(
                        host_instance_id="h",
                        fencing_generation=1,
                        heartbeat_at=at,
                        lease_expires_at=at + 1e6,
                    ),
                    accepted_at=at,
                    updated_at=at,
                )
            )
        store.transition_run("big", run.run_id, RunStatus.COMPLETED)
    return admitted


async def test_a_session_of_many_attempts_is_paged_under_its_runs(service: HostService) -> None:
    assert isinstance(service.store, MemorySessionStore)
    runs = _seed(service.store, runs=3, attempts_per_run=150)
    first = session_view(service, "big")
    assert first["pages"] == 3 and first["total_rows"] == 453 and len(first["rows"]) == 200
    assert first["summary"]["attempts"] == 450
    kinds = [row["kind"] for row in first["rows"]]
    assert kinds[0] == "run" and kinds[1:151] == ["attempt"] * 150 and kinds[151] == "run"
    # an attempt names its parent agent's run; the lane sits under the host run
    assert {row["parent_run_id"] for row in first["rows"][1:151]} == {runs[0].run_id}
    last = session_view(service, "big", run_id=runs[2].run_id)
    assert last["page"] == 1 and any(r.get("run_id") == runs[2].run_id for r in last["rows"])
    attempts = service.store.list_attempts("default", "big")
    mapping = delegating_runs(service.store.list_runs("big"), attempts)
    assert mapping == {f"agent-run-{n}": runs[n].run_id for n in range(3)}


def test_every_console_file_ships_as_package_data() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    for path in STATIC_DIR.iterdir():
        assert f'"console/*{path.suffix}"' in pyproject, path.name


def test_the_diagram_is_drawn_from_the_statemachines_tables() -> None:
    drawn = {machine["name"]: machine for machine in machines_view()}
    for spec in (PHASE, EXECUTION, DELIVERY, RETENTION):
        machine = drawn[spec.name]
        assert machine["states"] == list(spec.states) and machine["initial"] == spec.initial
        assert [(t["trigger"], t["source"], t["dest"]) for t in machine["transitions"]] == [
            (t.trigger, t.source, t.dest) for t in spec.transitions
        ]
