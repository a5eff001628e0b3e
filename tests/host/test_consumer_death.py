"""Delivered means consumed: a consumer run that dies never makes a result disappear.

Real host processes (``consumer_host.py serve --stdio`` over one LMDB data
directory) driven over JSON-RPC and SIGKILLed. Run A delegates in the
background; the child ends when the test says so. Then a consumer run takes the
result and the host is killed while that run is still alive with it in hand:

- run B calls ``wait_subagent`` and receives the result (in-band delivery);
- the automatic continuation run of the result (its twin).

After a restart the dead consumer is ``failed / host_process_lost`` and the
result must end consumed by exactly one run that *completed*: the completed
runs whose output carries the child's output are counted (the consumer
models answer with it), never zero, never two; a later explicit run gets
nothing more. A third case: the ``wait`` run fails by itself after taking the
result, so automatic continuation is suppressed, and an explicit ``run.start``
(on a restarted host) consumes the result exactly once.

The store is read by the test itself through ``storage.LmdbSessionStore``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from consumer_host import CHILD_OUTPUT
from host_processes import HostProc, poll_until

from storage import AttemptRecord, LmdbSessionStore, RunRecord

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("consumer_host.py")
LEASE_TTL = 1.0
TICK = "0.1"
DEADLINE = 30.0
CONSUMED = 15.0  # a restarted host consumes the result well within this
SESSION = "s1"
CONFIG = f"""
[host]
lease_ttl = {LEASE_TTL}

[profiles.default]
model_id = "consumer:x"
subagents = ["research"]

[profiles.research]
model_id = "consumer-gated:x"

[subagents.research]
profile = "research"
description = "Collect facts"
"""
poll = functools.partial(poll_until, timeout=DEADLINE)


class Scenario:
    """One data directory, the test directory the models read, and host lives on it."""

    def __init__(self, tmp_path: Path, hosts: list[HostProc]) -> None:
        self.dir = tmp_path
        self.hosts = hosts
        self.config = tmp_path / "host.toml"
        self.config.write_text(CONFIG)
        self.data = tmp_path / "data"
        self.lives = 0

    def start(self) -> HostProc:
        self.lives += 1
        host = HostProc(
            f"H{self.lives}",
            *("--config", str(self.config), "--data-dir", str(self.data), "--tick", TICK),
            env={"SUBAGENTS_TEST_DIR": str(self.dir)},
            deadline=DEADLINE,
            script=SCRIPT,
        )
        self.hosts.append(host)
        if self.lives > 1:
            host.result("events.subscribe", {"session_id": SESSION})
        return host

    def run(self, host: HostProc, text: str) -> str:
        run: str = host.result("run.start", {"session_id": SESSION, "input": text})["run_id"]
        return run

    def finished(self, host: HostProc, run_id: str) -> dict[str, object]:
        terminal = {"run.completed", "run.failed", "run.cancelled"}
        return host.wait_event(lambda e: e["kind"] in terminal and e["run_id"] == run_id)

    def flag(self, name: str, on: bool = True) -> None:
        path = self.dir / name
        if on:
            path.touch()
        else:
            path.unlink(missing_ok=True)

    def first_host_delegates(self) -> tuple[HostProc, str]:
        """Host H1, session s1, run A delegating one gated child; the attempt's id."""
        host = self.start()
        host.result("session.create", {"session_id": SESSION})
        host.result("events.subscribe", {"session_id": SESSION})
        run_a = self.run(host, "plan")
        assert self.finished(host, run_a)["kind"] == "run.completed"
        with self.store() as store:
            (attempt,) = store.list_attempts("default")
        return host, attempt.attempt_id

    @contextlib.contextmanager
    def store(self) -> Iterator[LmdbSessionStore]:
        """The data directory's store, opened by the test for one read."""
        store = LmdbSessionStore(self.data / "lmdb")
        try:
            yield store
        finally:
            store.close()


def first_run(scenario: Scenario) -> str:
    """Run A, the session's first run."""
    with scenario.store() as store:
        return store.list_runs(SESSION)[0].run_id


def _consumers(runs: list[RunRecord]) -> list[RunRecord]:
    """The completed runs that consumed the child's result (their output carries it)."""
    return [
        r for r in runs if str(r.status) == "completed" and CHILD_OUTPUT in (r.output_preview or "")
    ]


def _consumed_once(scenario: Scenario, attempt_id: str) -> tuple[RunRecord, AttemptRecord]:
    """Poll until the result is delivered to a completed run; exactly one ever."""

    def settled() -> tuple[RunRecord, AttemptRecord] | None:
        with scenario.store() as store:
            runs = store.list_runs(SESSION)
            record = store.load_attempt(attempt_id)
        consumers = _consumers(runs)
        assert len(consumers) <= 1, [(r.run_id, r.output_preview) for r in consumers]
        if consumers and str(record.delivery_status) == "delivered":
            return consumers[0], record
        return None

    found: tuple[RunRecord, AttemptRecord] = poll_until(
        "one completed consumer", settled, timeout=CONSUMED
    )
    return found


def _later_run_gets_nothing(scenario: Scenario, host: HostProc) -> None:
    later = scenario.run(host, "anything new?")
    event = scenario.finished(host, later)
    assert event["kind"] == "run.completed"
    assert event["data"] == {"output": "idle"}


def _assert_one_consumer(
    scenario: Scenario, host: HostProc, attempt_id: str, dead: str | None
) -> RunRecord:
    consumer, record = _consumed_once(scenario, attempt_id)
    assert consumer.run_id != dead
    assert record.delivered_to_run_id == consumer.run_id
    if dead is not None:

        def reconciled() -> bool:
            with scenario.store() as store:
                return str(store.load_run(SESSION, dead).status) == "failed"

        poll("the dead consumer run reconciled as failed", reconciled)
    _later_run_gets_nothing(scenario, host)
    with scenario.store() as store:
        assert len(_consumers(store.list_runs(SESSION))) == 1
    return consumer


def test_a_wait_consumer_killed_with_the_result_in_hand_loses_nothing(
    tmp_path: Path, hosts: list[HostProc]
) -> None:
    scenario = Scenario(tmp_path, hosts)
    first, attempt_id = scenario.first_host_delegates()
    scenario.flag("hold-wait")
    run_b = scenario.run(first, f"wait {attempt_id}")
    poll("run B calling wait_subagent", (tmp_path / "in-wait").exists)
    scenario.flag("release")
    poll("run B holding the result", (tmp_path / "in-hold-wait").exists)
    with scenario.store() as store:
        assert str(store.load_attempt(attempt_id).execution_status) == "completed"
        assert str(store.load_run(SESSION, run_b).status) == "running"
    first.kill()
    scenario.flag("hold-wait", on=False)
    second = scenario.start()
    consumer = _assert_one_consumer(scenario, second, attempt_id, dead=run_b)
    assert consumer.output_preview == "continued: " + CHILD_OUTPUT
    assert consumer.restore_from_run_id == run_b  # the session's head, not the causal parent
    assert second.shutdown() == 0


def test_a_continuation_run_killed_mid_run_loses_nothing(
    tmp_path: Path, hosts: list[HostProc]
) -> None:
    scenario = Scenario(tmp_path, hosts)
    first, attempt_id = scenario.first_host_delegates()
    scenario.flag("hold-result")
    scenario.flag("release")
    poll("the continuation run holding the result", (tmp_path / "in-hold-result").exists)
    with scenario.store() as store:
        (dead,) = [r for r in store.list_runs(SESSION) if str(r.status) == "running"]
    first.kill()
    scenario.flag("hold-result", on=False)
    second = scenario.start()
    consumer = _assert_one_consumer(scenario, second, attempt_id, dead=dead.run_id)
    assert consumer.output_preview == "continued: " + CHILD_OUTPUT
    assert consumer.trigger_type == "async_subagent_result"
    assert consumer.restore_from_run_id == dead.run_id  # the head when it was admitted
    assert dead.restore_from_run_id == first_run(scenario)
    assert second.shutdown() == 0


def test_a_failed_consumer_leaves_the_result_to_one_explicit_run(
    tmp_path: Path, hosts: list[HostProc]
) -> None:
    scenario = Scenario(tmp_path, hosts)
    first, attempt_id = scenario.first_host_delegates()
    scenario.flag("fail-wait")
    run_b = scenario.run(first, f"wait {attempt_id}")
    poll("run B calling wait_subagent", (tmp_path / "in-wait").exists)
    scenario.flag("release")
    assert scenario.finished(first, run_b)["kind"] == "run.failed"
    with scenario.store() as store:
        record = store.load_attempt(attempt_id)
    assert str(record.delivery_status) == "undelivered"
    assert record.automatic_continuation_suppressed_by_run_id == run_b
    first.kill()  # the explicit run comes from another host process
    second = scenario.start()
    explicit = scenario.run(second, "carry on")
    event = scenario.finished(second, explicit)
    assert event["kind"] == "run.completed"
    consumer = _assert_one_consumer(scenario, second, attempt_id, dead=None)
    assert consumer.run_id == explicit
    assert second.shutdown() == 0
