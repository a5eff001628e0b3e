"""The web console's page weight and time to first render, 1,000 and 10,000 attempts.

Run: ``python bench/console.py [--quick] [--json] [--reps N]``.

It seeds two LMDB data directories, each one session ``bench`` of delegating
runs with 10 background attempts each (1,000 attempts: 100 runs; 10,000:
1,000 runs) and the session's event log the store's outbox writes for them
(each run's admitted, started and completed events, each attempt's
``attempt.accepted``, one ``attempt.steered`` per run: 14,000 events for
10,000 attempts), serves each with a real ``subagents serve --http`` process and
loads the console in Debian's headless chromium (tests/console/cdp_browser.py,
the browser test's driver) with its cache disabled. For each view (sessions,
session timeline page 1, its last page, the first attempt, the last attempt:
its history at the end of the log) it reports:

- **bytes**: the page weight, every response body the page loaded (the HTML,
  the CSS, the script and the JSON of the view), from the browser's resource
  timing (``encodedBodySize``);
- **first render**: milliseconds from the navigation start to the console's
  ``console-rendered`` performance mark (set once the view's DOM is built),
  the median of ``--reps`` loads, the two sizes interleaved load by load; and
  the 10,000 / 1,000 ratio per pair of loads, its median with its min and max.

Work on both sizes: the same views, the same host and browser; no model
request during the loads (the sessions are seeded once, before; no
attempts are run while measuring: no fsyncs per attempt). The load average
is printed before and after (to stderr with ``--json``).

This is a benchmark, not a test: it never asserts timing; exit status is 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "console")]

from cdp_browser import Browser  # noqa: E402

from statemachines import RunStatus  # noqa: E402
from storage import AttemptRecord, OwnerLease, RunRecord, SessionRecord  # noqa: E402
from subagents._host._datadir import open_store  # noqa: E402

VIEWS = ("sessions", "session", "last-page", "attempt", "last-attempt")
TOKEN = "bench-console-token-0123456789abcdef"
SESSION = "bench"
PER_RUN = 10
CONFIG = """
[profiles.default]
model_id = "test:echo"
"""


def _attempt(run_id: str, number: int, index: int, at: float) -> AttemptRecord:
    return AttemptRecord(
        attempt_id=f"subattempt_{number:05d}_{index:02d}",
        agent_id=f"agent-{number}-{index}",
        subagent_name=("researcher", "reviewer", "debugger")[index % 3],
        namespace_id="default",
        parent_session_id=SESSION,
        parent_run_id=run_id,
        owner_lease=OwnerLease(
            host_instance_id="bench-owner",
            fencing_generation=1,
            heartbeat_at=at,
            lease_expires_at=at + 1e7,
        ),
        accepted_at=at,
        updated_at=at,
    )


def seed(directory: Path, attempts: int) -> float:
    """A session of ``attempts`` attempts, ``PER_RUN`` under each completed run (held
    by a live lease far in the future, so the serving host leaves them alone), and
    the events of those runs and attempts."""
    started = time.perf_counter()
    opened = open_store(directory)
    try:
        store, events = opened.store, opened.events
        now = store.clock.now()
        store.create_session(
            SessionRecord(
                session_id=SESSION, namespace_id="default", created_at=now, updated_at=now
            )
        )
        for number in range(attempts // PER_RUN):
            run_id = f"run-{number:05d}"
            run = RunRecord(
                session_id=SESSION,
                run_id=run_id,
                created_at=now,
                updated_at=now,
                trigger_type="rpc",
            )
            store.admit_run(run)
            events.append(SESSION, "run.admitted", now, run_id, {"trigger_type": "rpc"})
            store.transition_run(SESSION, run_id, RunStatus.RUNNING)
            events.append(SESSION, "run.started", store.clock.now(), run_id, {})
            for index in range(PER_RUN):
                record = store.accept_attempt(_attempt(run_id, number, index, store.clock.now()))
                data = {"attempt_id": record.attempt_id, "agent_id": record.agent_id}
                events.append(SESSION, "attempt.accepted", record.accepted_at, run_id, data)
            steer = {"steering_id": f"steer-{number}", "text_preview": "focus on the lease"}
            data = {"attempt_id": f"subattempt_{number:05d}_00", **steer}
            events.append(SESSION, "attempt.steered", store.clock.now(), run_id, data)
            store.transition_run(SESSION, run_id, RunStatus.COMPLETED, output_preview="done")
            events.append(SESSION, "run.completed", store.clock.now(), run_id, {})
    finally:
        opened.close()
    return time.perf_counter() - started


class Host:
    def __init__(self, directory: Path, config: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBAGENTS_HOST_TOKEN": TOKEN}
        env.pop("SUBAGENTS_CONFIG", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "subagents._cli",
                "serve",
                "--http",
                "--config",
                str(config),
                "--data-dir",
                str(directory),
                "--owner",
                "bench-console",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = json.loads(self.proc.stdout.readline())
        self.url: str = line["listening"]
        self.login: str = line["console"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


WEIGHT = """(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const mark = performance.getEntriesByName("console-rendered")[0];
  const bytes = performance.getEntriesByType("resource")
    .reduce((sum, e) => sum + e.encodedBodySize, nav.encodedBodySize);
  return {ms: mark.startTime, bytes: bytes};
})()"""


def load(browser: Browser, url: str, view: str) -> dict[str, float]:
    browser.navigate(url)
    browser.wait_for(f"document.body.dataset.view === {json.dumps(view)}", f"the {view} view", 60)
    result: dict[str, float] = browser.evaluate(WEIGHT)
    return result


def views(host: Host, size: int, rep: int) -> dict[str, tuple[str, str]]:
    return {
        "sessions": (f"{host.url}/?rep={rep}#/", "sessions"),
        "session": (f"{host.url}/?rep={rep}#/session/{SESSION}", "session"),
        "last-page": (f"{host.url}/?rep={rep}#/session/{SESSION}?page=999999", "session"),
        "attempt": (f"{host.url}/?rep={rep}#/attempt/subattempt_00000_00", "attempt"),
        "last-attempt": (f"{host.url}/?rep={rep}#/attempt/{last_attempt(size)}", "attempt"),
    }


def last_attempt(size: int) -> str:
    return f"subattempt_{size // PER_RUN - 1:05d}_00"


def measure(sizes: list[int], reps: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-console-"))
    config = work / "host.toml"
    config.write_text(CONFIG)
    hosts: dict[int, Host] = {}
    seeded: dict[int, float] = {}
    browser = None
    try:
        for size in sizes:
            seeded[size] = seed(work / str(size), size)
            hosts[size] = Host(work / str(size), config)
        browser = Browser(shutil.which("chromium") or "chromium")
        browser.page("Network.enable")
        browser.page("Network.setCacheDisabled", {"cacheDisabled": True})
        browser.navigate(hosts[sizes[0]].login)  # one cookie: both hosts share the token
        browser.wait_for("document.body.dataset.view === 'sessions'", "login", 60)
        samples: dict[tuple[str, int], list[dict[str, float]]] = {}
        for rep in range(reps):
            for view in VIEWS:
                for size in sizes:  # interleaved: 1k, 10k, 1k, 10k, ...
                    url, name = views(hosts[size], size, rep)[view]
                    samples.setdefault((view, size), []).append(load(browser, url, name))
        return {"seed_seconds": seeded, "samples": samples}
    finally:
        if browser is not None:
            browser.close()
        for host in hosts.values():
            host.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(sizes: list[int], measured: dict[str, Any], as_json: bool) -> None:
    rows = []
    samples = measured["samples"]
    for view in VIEWS:
        medians = {}
        for size in sizes:
            runs = samples[(view, size)]
            ms = [r["ms"] for r in runs]
            medians[size] = statistics.median(ms)
            rows.append(
                {
                    "view": view,
                    "attempts": size,
                    "bytes": int(statistics.median(r["bytes"] for r in runs)),
                    "first_render_ms": round(medians[size], 1),
                    "min_ms": round(min(ms), 1),
                    "max_ms": round(max(ms), 1),
                }
            )
        if len(sizes) == 2:
            # Per load pair (the two sizes are loaded one after the other, rep by rep).
            small, large = (samples[(view, size)] for size in sizes)
            pairs = [b["ms"] / a["ms"] for a, b in zip(small, large, strict=True)]
            rows[-1]["ratio_to_smaller"] = round(statistics.median(pairs), 2)
            rows[-1]["ratio_min"] = round(min(pairs), 2)
            rows[-1]["ratio_max"] = round(max(pairs), 2)
    if as_json:
        print(json.dumps({"rows": rows, "seed_seconds": measured["seed_seconds"]}))
        return
    print(f"{'view':<12} {'attempts':>8} {'bytes':>8} {'first render ms':>16} {'min..max':>14}")
    for row in rows:
        ratio = (
            f"  x{row['ratio_to_smaller']} [{row['ratio_min']}-{row['ratio_max']}]"
            if "ratio_to_smaller" in row
            else ""
        )
        print(
            f"{row['view']:<12} {row['attempts']:>8} {row['bytes']:>8} "
            f"{row['first_render_ms']:>16} {row['min_ms']:>6}..{row['max_ms']:<7}{ratio}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 attempts, 2 loads")
    parser.add_argument("--reps", type=int, default=7, help="loads per view and size")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    sizes = [100, 1000] if args.quick else [1000, 10_000]
    reps = 2 if args.quick else args.reps
    from bench._common import print_load

    stream = sys.stderr if args.json else sys.stdout
    print_load("before", stream)
    report(sizes, measure(sizes, reps), args.json)
    print_load("after", stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
