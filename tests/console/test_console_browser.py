"""The web console in Debian's real headless chromium, through the demo's story.

A ``serve --http`` host (the demo config and its scripted models) runs the
offline delegating scenario: a parent run delegates to researcher and reviewer,
steers the researcher and cancels the reviewer; the researcher is released; a
second run delegates to debugger; the host is SIGKILLed while the debugger
runs and a second host (another owner, the same token and port) opens the data
directory and reconciles. The page stays open the whole time: it must show the
attempt lanes, their states, the continuation links, and the reconciliation
arriving live after the restart (no reload). Screenshots are saved as test
artifacts (``$CONSOLE_ARTIFACTS``, else the test's tmp dir); with
``SUBAGENTS_CONSOLE_DOCS=1`` the README's two also replace ``docs/console-*.png``.

Steering receipts, in tests of their own: the story's steer shows on the
researcher's page (the steer path's ``attempt.steered`` event), and a receipt
whose preview is markup (seeded in the data directory) shows as text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cdp_browser import Browser, chromium_or_skip
from console_fixtures import REPO, ConsoleHost, poll_until

from statemachines import RunStatus
from storage import AttemptRecord, OwnerLease, RunRecord, SessionRecord
from subagents._host._datadir import open_store

pytestmark = pytest.mark.timeout(180)

SESSION = "demo"
DOCS = {"session", "attempt"}
"""The screenshots the README shows (docs/console-NAME.png)."""


def _lane(name: str) -> str:
    """JS: the lane element of the subagent ``name`` (or null)."""
    return (
        "[...document.querySelectorAll('[data-testid=lane]')].find(e => "
        f"e.querySelector('[data-testid=attempt-link]').textContent.startsWith({json.dumps(name)}))"
    )


def _phase(name: str) -> str:
    return f"{_lane(name)}?.querySelector('[data-testid=phase]').textContent"


def _continued(name: str) -> str:
    return f"{_lane(name)}?.querySelector('[data-testid=continuation-link]')?.getAttribute('href')"


class Shots:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = Path(os.environ.get("CONSOLE_ARTIFACTS") or tmp_path / "screenshots")
        self.docs = os.environ.get("SUBAGENTS_CONSOLE_DOCS") == "1"

    def take(self, browser: Browser, name: str) -> None:
        path = browser.screenshot(self.dir / f"console-{name}.png")
        assert path.stat().st_size > 1000
        if self.docs and name in DOCS:
            (REPO / "docs").mkdir(exist_ok=True)
            (REPO / "docs" / path.name).write_bytes(path.read_bytes())


def test_the_console_follows_the_demo_story_through_a_kill_and_restart(tmp_path: Path) -> None:
    chromium = chromium_or_skip()
    data, gates = tmp_path / "data", tmp_path / "gates"
    gates.mkdir()
    shots = Shots(tmp_path)
    hosts = [ConsoleHost(data, gates, "console-host-1")]
    browser: Browser | None = None
    try:
        first = hosts[0]
        assert first.line["console"].startswith(first.url + "/login#")
        first.rpc("session.create", {"session_id": SESSION})
        first.run_to_end(SESSION, "Plan the release: research it and review it")
        poll_until("the researcher to start", (gates / "researcher.started").exists)

        browser = Browser(chromium)
        browser.navigate(first.line["console"])
        browser.wait_for("document.body.dataset.view === 'sessions'", "the console after login")
        assert browser.evaluate("location.pathname + location.hash") in {"/", "/#/"}
        counts = browser.wait_for(
            "(c => c && c.textContent === '2' && c.textContent)("
            "document.querySelector('[data-session=demo] [data-testid=attempt-count]'))",
            "two attempts in the sessions table",
        )
        assert counts == "2"
        shots.take(browser, "sessions")

        browser.evaluate("window.__sameDocument = true; location.hash = '#/session/demo'")
        browser.wait_for(f"{_phase('researcher')} === 'running'", "the researcher lane running")
        browser.wait_for(
            f"{_phase('reviewer')} === 'delivered'", "the cancelled reviewer delivered"
        )
        browser.wait_for("document.body.dataset.live === 'open'", "the live event stream")
        reviewer = browser.evaluate(f"{_lane('reviewer')}.innerText")
        assert "reviewer" in reviewer and "cancelled" in reviewer  # what a person reads

        (gates / "researcher.release").write_text("go")
        browser.wait_for(
            f"{_phase('researcher')} === 'delivered'", "the researcher delivered, live"
        )
        link = browser.wait_for(_continued("researcher"), "the researcher's continuation link")
        assert link.startswith("#/session/demo?run=run")

        first.run_to_end(SESSION, "A test crashes in CI: debug the crash")
        poll_until("the debugger to start", (gates / "debugger.started").exists)
        browser.wait_for(f"{_phase('debugger')} === 'running'", "the debugger lane running")
        shots.take(browser, "session-running")

        first.kill()
        browser.wait_for(
            "document.body.dataset.live === 'reconnecting'", "the page noticing the kill"
        )
        hosts.append(ConsoleHost(data, gates, "console-host-2", port=first.port))
        browser.wait_for(
            f"{_phase('debugger')} === 'delivered'", "the reconciliation, live", timeout=40
        )
        browser.wait_for(_continued("debugger"), "the debugger's continuation run")
        browser.wait_for("document.body.dataset.live === 'open'", "the stream resumed")
        assert browser.evaluate("window.__sameDocument === true"), "the page was reloaded"
        seqs = browser.evaluate(
            "[...document.querySelectorAll('#events li')].map(e => +e.dataset.seq)"
        )
        # resumed from the last sequence: every event once, none missing across the restart
        assert seqs == list(range(seqs[0], seqs[0] - len(seqs), -1)), seqs
        triggers = browser.evaluate(
            "[...document.querySelectorAll('[data-testid=trigger]')].map(e => e.textContent)"
        )
        links = browser.evaluate(
            "document.querySelectorAll('[data-testid=continuation-link]').length"
        )
        # The cancelled reviewer's result reaches its parent in-band when the parent still
        # runs, else through a continuation run; the other two always through one.
        assert links in {2, 3}
        assert sorted(triggers) == ["async_subagent_result"] * links + ["rpc", "rpc"], triggers
        shots.take(browser, "session")

        href = browser.evaluate(
            f"{_lane('debugger')}.querySelector('[data-testid=attempt-link]').getAttribute('href')"
        )
        browser.evaluate(f"location.hash = {json.dumps(href)}")
        current = browser.wait_for(
            "document.querySelector('[data-testid=machine-phase] .state.current text')"
            "?.textContent",
            "the lifecycle diagram",
        )
        assert current == "delivered"
        lease = browser.text("[data-testid=lease]")
        assert "console-host-1" in lease or "console-host-2" in lease
        transitions = browser.text("[data-testid=transitions]")
        assert "accepted" in transitions and "delivered" in transitions
        assert browser.text("[data-testid=consumer-run]")
        assert browser.text("[data-testid=result-facts]").count("bytes") == 1
        shots.take(browser, "attempt")

        # The one write: a third run's debugger (never released) cancelled from its page.
        hosts[1].run_to_end(SESSION, "Another crash: debug it")
        browser.evaluate("location.hash = '#/session/demo'")
        second = (
            "[...document.querySelectorAll('[data-testid=lane]')].filter(e => e.querySelector("
            "'[data-testid=attempt-link]').textContent.startsWith('debugger'))[1]"
        )
        href = browser.wait_for(
            f"{second}?.querySelector('[data-testid=attempt-link]').getAttribute('href')",
            "the second debugger lane",
        )
        browser.evaluate(f"location.hash = {json.dumps(href)}")
        browser.wait_for("document.querySelector('[data-testid=cancel]')", "the cancel button")
        browser.evaluate("document.querySelector('[data-testid=cancel]').click()")
        said = browser.wait_for(
            "document.querySelector('[data-testid=cancel-result]')?.textContent", "the reply"
        )
        assert said == "→ cancellation_requested"
        phase = browser.wait_for(
            "(p => p && p !== 'running' && p !== 'accepted' && p)(document.querySelector("
            "'[data-testid=attempt-phase]')?.textContent)",
            "the cancelled attempt's phase, live",
        )
        assert phase in {"terminal", "delivered"}
        assert "cancelled" in browser.text("[data-testid=transitions]")
        assert browser.evaluate("document.body.dataset.cspViolation ?? null") is None
    finally:
        if browser is not None:
            browser.close()
        for host in hosts:
            host.stop()


def _open_attempt(browser: Browser, host: ConsoleHost, attempt_id: str) -> None:
    browser.navigate(host.line["console"])
    browser.wait_for("document.body.dataset.view === 'sessions'", "the console after login")
    browser.evaluate(f"location.hash = {json.dumps('#/attempt/' + attempt_id)}")
    browser.wait_for("document.body.dataset.view === 'attempt'", "the attempt page")


def test_the_attempt_page_shows_the_receipt_of_the_demo_steer(tmp_path: Path) -> None:
    """The demo planner steers the researcher; its page lists the receipt. Needs the
    steer path to append ``attempt.steered`` to the store's outbox (issue 15)."""
    chromium = chromium_or_skip()
    data, gates = tmp_path / "data", tmp_path / "gates"
    gates.mkdir()
    host = ConsoleHost(data, gates, "console-steer-host")
    browser: Browser | None = None
    try:
        host.rpc("session.create", {"session_id": SESSION})
        host.run_to_end(SESSION, "Plan the release: research it and review it")
        view = host.client.get("/console/api/session", params={"session_id": SESSION}).json()
        (researcher,) = [r for r in view["rows"] if r.get("subagent_name") == "researcher"]
        browser = Browser(chromium)
        _open_attempt(browser, host, researcher["attempt_id"])
        receipt = browser.wait_for(
            "document.querySelector('[data-testid=steering] tbody tr')?.innerText",
            "the steering receipt of the demo's steer",
        )
        assert "Focus on the lease code path" in receipt and "steer_" in receipt
        browser.evaluate("document.querySelector('[data-testid=steering]').scrollIntoView()")
        Shots(tmp_path).take(browser, "attempt-steered")
        assert browser.evaluate("document.body.dataset.cspViolation ?? null") is None
    finally:
        if browser is not None:
            browser.close()
        host.stop()


HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script></td>'


def _seed_steered(directory: Path) -> None:
    """A session with one accepted attempt (a live foreign lease: the host leaves it)
    and an ``attempt.steered`` event whose preview is markup."""
    opened = open_store(directory)
    try:
        store, now = opened.store, opened.store.clock.now()
        store.create_session(
            SessionRecord(
                session_id="seeded", namespace_id="default", created_at=now, updated_at=now
            )
        )
        run = RunRecord(session_id="seeded", run_id="run-seeded", created_at=now, updated_at=now)
        store.admit_run(run)
        store.transition_run("seeded", run.run_id, RunStatus.RUNNING)
        store.accept_attempt(
            AttemptRecord(
                attempt_id="subattempt_seeded",
                agent_id="agent-seeded",
                subagent_name="researcher",
                namespace_id="default",
                parent_session_id="seeded",
                parent_run_id=run.run_id,
                owner_lease=OwnerLease(
                    host_instance_id="elsewhere",
                    fencing_generation=1,
                    heartbeat_at=now,
                    lease_expires_at=now + 1e7,
                ),
                accepted_at=now,
                updated_at=now,
            )
        )
        data = {"attempt_id": "subattempt_seeded", "steering_id": "steer_seeded"}
        opened.events.append(
            "seeded", "attempt.steered", now + 1, run.run_id, {**data, "text_preview": HOSTILE}
        )
    finally:
        opened.close()


def test_a_steering_receipt_is_shown_as_text_never_as_markup(tmp_path: Path) -> None:
    chromium = chromium_or_skip()
    data, gates = tmp_path / "data", tmp_path / "gates"
    gates.mkdir()
    _seed_steered(data)
    host = ConsoleHost(data, gates, "console-escape-host")
    browser: Browser | None = None
    try:
        browser = Browser(chromium)
        _open_attempt(browser, host, "subattempt_seeded")
        cells = browser.wait_for(
            "(r => r && [...r.cells].map(c => c.textContent))("
            "document.querySelector('[data-testid=steering] tbody tr'))",
            "the seeded steering receipt",
        )
        assert cells[0] == "steer_seeded" and cells[2] == HOSTILE and cells[3] == "not recorded"
        injected = "document.querySelectorAll('[data-testid=steering] img, main script').length"
        assert browser.evaluate(injected) == 0
        assert browser.evaluate("window.__pwned ?? null") is None
        assert browser.evaluate("document.body.dataset.cspViolation ?? null") is None
    finally:
        if browser is not None:
            browser.close()
        host.stop()


def test_a_missing_browser_fails_under_ci_and_skips_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium on it
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        chromium_or_skip()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium_or_skip()
