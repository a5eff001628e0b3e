"""A real host process whose system clock steps (libfaketime) keeps its live attempt.

The host runs under ``libfaketime`` with its offset read from a file on every
clock call (``FAKETIME_NO_CACHE``) and the monotonic clock left alone
(``FAKETIME_DONT_FAKE_MONOTONIC``), as a real NTP step or VM resume does. While
a background child attempt is live, the test steps the host's wall clock by
+600 s and then by -1200 s (to -600 s), and watches thirty maintenance ticks
after each step: the host never reconciles its own attempt as lost. Released,
the child's real result becomes the one continuation. Needs the ``faketime``
package (``apt-get install faketime``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from host_processes import HostProc, observe, poll_until

from properties.reliability._scripted import planner_config

pytestmark = pytest.mark.timeout(120)

LEASE_TTL = 5.0  # heartbeats every LEASE_TTL / 3: a loaded machine stays well inside it
WINDOW = 1.5  # per step; a host judging leases by its wall clock fails at the next tick
DEADLINE = 30.0
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
poll = functools.partial(poll_until, timeout=DEADLINE)


def test_a_host_under_libfaketime_keeps_its_attempt_across_clock_steps(
    tmp_path: Path, hosts: list[HostProc]
) -> None:
    if not LIBFAKETIME.exists():
        # .ci/run installs it (and sets CI): there a missing library fails, never skips.
        if os.environ.get("CI"):
            pytest.fail("install libfaketime: apt-get install faketime")
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    config = tmp_path / "host.toml"
    config.write_text(planner_config("gated:x", lease_ttl=LEASE_TTL))
    offset = tmp_path / "faketime"

    def step_to(value: str) -> None:
        # Atomically: libfaketime rereads the file at every clock call and must never
        # see it empty or half-written.
        staged = tmp_path / "faketime.new"
        staged.write_text(value + "\n")
        staged.replace(offset)

    step_to("+0")
    release = tmp_path / "release"
    env = {
        "SUBAGENTS_TEST_RELEASE": str(release),
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    host = HostProc(
        "A",
        *("--config", str(config), "--data-dir", str(tmp_path / "data"), "--tick", "0.05"),
        env=env,
        deadline=DEADLINE,
    )
    hosts.append(host)
    host.result("session.create", {"session_id": "s1"})
    host.result("events.subscribe", {"session_id": "s1"})
    parent = host.result("run.start", {"session_id": "s1", "input": "plan"})
    host.wait_event(lambda e: e["kind"] == "run.completed" and e["run_id"] == parent["run_id"])

    def no_continuation() -> None:
        host.drain()
        admitted = [e for e in host.events if e["kind"] == "run.admitted"]
        if [e["run_id"] for e in admitted] != [parent["run_id"]]:
            runs = host.result("run.list", {"session_id": "s1"})["runs"]
            raise AssertionError(f"a continuation was admitted: {runs[-1]}\n{host.tail()}")

    for step in ("+600", "-600"):
        step_to(step)
        # Thirty maintenance ticks at the stepped clock: a host judging its own lease
        # by the wall clock would have reconciled the attempt as lost at the first.
        observe(no_continuation, WINDOW)
    release.touch()
    done = host.wait_event(
        lambda e: e["kind"] == "run.completed" and e["run_id"] != parent["run_id"]
    )
    assert done["data"]["output"] == "continued: three facts from the child"
    runs = host.result("run.list", {"session_id": "s1"})["runs"]
    assert [r["trigger_type"] for r in runs].count("async_subagent_result") == 1
    assert host.shutdown() == 0
