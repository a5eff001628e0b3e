"""Named fault points: arming, counting, the four actions and environment activation."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import LEASE_TTL, acceptance, fresh_session, setup_session

from storage import (
    LmdbSessionStore,
    ManualClock,
    MemorySessionStore,
    NotFound,
    RetryableStorage,
    StaleFence,
    faults,
)
from storage._faultpoints import fault_point, instrument_backend
from storage.faults import FAULT_ACTIONS, FAULT_POINTS, FaultSpecError, parse_spec


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    faults.reset_faults()
    yield
    faults.reset_faults()


def test_the_points_and_actions_are_exactly_the_documented_ones() -> None:
    assert FAULT_POINTS == (
        "store.before_commit",
        "store.after_commit",
        "store.after_commit_before_response",
        "actor.mid_heartbeat",
        "actor.after_terminal_commit_before_callback",
        "delivery.after_continuation_admitted_before_ack",
        "actor.inside_finalizer",
    )
    assert FAULT_ACTIONS == ("raise_transient", "lose_response", "sleep_past_ttl", "sigkill")


def test_reset_faults_disarms_every_point_and_zeroes_the_counts() -> None:
    faults.arm("actor.mid_heartbeat", "raise_transient", nth=1, times=1)
    with pytest.raises(RetryableStorage):
        fault_point("actor.mid_heartbeat")
    faults.arm("actor.mid_heartbeat", "raise_transient")
    faults.reset_faults()
    fault_point("actor.mid_heartbeat")
    assert faults.fault_counts() == {}
    assert faults.reached_counts() == {}


def test_an_unarmed_point_does_nothing_and_counts_nothing() -> None:
    for name in FAULT_POINTS:
        fault_point(name)
    assert faults.fault_counts() == {}
    assert faults.reached_counts() == {}


def test_a_point_fires_on_its_nth_reach_for_the_given_number_of_times() -> None:
    faults.arm("actor.mid_heartbeat", "raise_transient", nth=2, times=2)
    fault_point("actor.mid_heartbeat")
    for _ in range(2):
        with pytest.raises(RetryableStorage) as caught:
            fault_point("actor.mid_heartbeat")
        assert caught.value.fault_point == "actor.mid_heartbeat"
    fault_point("actor.mid_heartbeat")
    fault_point("actor.inside_finalizer")
    assert faults.fault_counts() == {"actor.mid_heartbeat": 2}
    assert faults.reached_counts() == {"actor.mid_heartbeat": 4, "actor.inside_finalizer": 1}


def test_disarm_all_makes_every_point_a_no_op_again_but_keeps_the_counts() -> None:
    faults.arm("actor.inside_finalizer", "raise_transient", times=5)
    with pytest.raises(RetryableStorage):
        fault_point("actor.inside_finalizer")
    faults.disarm_all()
    fault_point("actor.inside_finalizer")
    assert faults.fault_counts() == {"actor.inside_finalizer": 1}
    faults.reset_fault_counts()
    assert faults.fault_counts() == {} and faults.reached_counts() == {}


@pytest.mark.parametrize(
    ("point", "action", "nth", "times", "reason"),
    [
        ("store.nowhere", "raise_transient", 1, 1, "point"),
        ("store.after_commit", "explode", 1, 1, "action"),
        ("store.after_commit", "sigkill", 0, 1, "nth"),
        ("store.after_commit", "sigkill", 1, 0, "times"),
    ],
)
def test_arming_something_unknown_is_a_typed_error_naming_it(
    point: str, action: str, nth: int, times: int, reason: str
) -> None:
    with pytest.raises(FaultSpecError) as caught:
        faults.arm(point, action, nth=nth, times=times)
    assert caught.value.reason == reason
    assert caught.value.part == point
    assert faults.reached_counts() == {}


def test_a_transient_fault_before_the_commit_writes_nothing() -> None:
    clock = ManualClock()
    store = MemorySessionStore(clock=clock)
    faults.arm("store.before_commit", "raise_transient")
    with pytest.raises(RetryableStorage):
        store.create_session(fresh_session(clock))
    with pytest.raises(NotFound):
        store.load_session("session-1")
    assert store.create_session(fresh_session(clock)).session_id == "session-1"


@pytest.mark.parametrize(
    ("point", "action"),
    [
        ("store.before_commit", "lose_response"),
        ("store.after_commit", "lose_response"),
        ("store.after_commit", "raise_transient"),
        ("store.after_commit_before_response", "lose_response"),
    ],
)
def test_a_lost_response_leaves_the_write_committed(point: str, action: str) -> None:
    clock = ManualClock()
    store = MemorySessionStore(clock=clock)
    faults.arm(point, action)
    session = fresh_session(clock)
    with pytest.raises(RetryableStorage):
        store.create_session(session)
    assert store.load_session("session-1") == session
    # The caller's exact replay of the same request is answered with the record.
    assert store.create_session(session) == session
    assert faults.fault_counts() == {point: 1}


def test_every_store_write_reaches_the_three_store_points_in_order(tmp_path: Path) -> None:
    clock = ManualClock()
    faults.arm("store.after_commit", "raise_transient", nth=10_000)
    store = LmdbSessionStore(tmp_path / "db", clock=clock)
    try:
        before = faults.reached_counts()
        store.create_session(fresh_session(clock))
        store.load_session("session-1")
        after = faults.reached_counts()
    finally:
        store.close()
    for name in ("store.before_commit", "store.after_commit", "store.after_commit_before_response"):
        assert after.get(name, 0) - before.get(name, 0) == 1


def test_instrumenting_a_backend_twice_reaches_each_point_once_per_write() -> None:
    clock = ManualClock()
    store = MemorySessionStore(clock=clock)
    instrument_backend(store.backend)
    faults.arm("store.before_commit", "raise_transient", nth=10_000)
    store.create_session(fresh_session(clock))
    assert faults.reached_counts()["store.before_commit"] == 1


def test_sleeping_past_the_ttl_loses_the_lease_and_the_stale_owners_write_is_refused() -> None:
    clock = ManualClock()
    store = MemorySessionStore(clock=clock)
    setup_session(store, clock)
    accepted = store.accept_attempt(acceptance(clock))
    faults.configure(sleeper=clock.advance, sleep_seconds=LEASE_TTL + 1)
    faults.arm("actor.mid_heartbeat", "sleep_past_ttl")
    fault_point("actor.mid_heartbeat")  # the owner pauses between renewals
    lease = accepted.owner_lease
    assert lease is not None
    with pytest.raises(StaleFence):
        store.heartbeat_attempt(
            accepted.attempt_id,
            lease.host_instance_id,
            lease.fencing_generation,
            clock.now() + LEASE_TTL,
        )
    taken = store.take_over_attempt(
        accepted.attempt_id, "host-b", lease.fencing_generation + 1, clock.now() + LEASE_TTL
    )
    assert taken.owner_lease is not None and taken.owner_lease.host_instance_id == "host-b"


def test_the_spec_parser_reads_points_actions_and_nth() -> None:
    assert parse_spec("store.after_commit=sigkill@3, actor.mid_heartbeat=raise_transient") == [
        ("store.after_commit", "sigkill", 3),
        ("actor.mid_heartbeat", "raise_transient", 1),
    ]
    assert parse_spec("") == []


@pytest.mark.parametrize(
    ("spec", "part", "reason"),
    [
        ("store.after_commit", "store.after_commit", "syntax"),
        ("store.after_commit=sigkill@x", "store.after_commit=sigkill@x", "nth"),
        ("store.after_commit=sigkill,bogus=sigkill@2", "bogus=sigkill@2", "point"),
        ("store.after_commit=nap@1", "store.after_commit=nap@1", "action"),
        ("store.after_commit=sigkill@0", "store.after_commit=sigkill@0", "nth"),
    ],
)
def test_a_malformed_environment_spec_names_the_bad_part_and_arms_nothing(
    spec: str, part: str, reason: str
) -> None:
    with pytest.raises(FaultSpecError) as caught:
        faults.arm_from_env({"SUBAGENTS_FAULTS": spec})
    assert caught.value.part == part
    assert caught.value.spec == spec
    assert caught.value.reason == reason
    fault_point("store.after_commit")
    assert faults.reached_counts() == {}


def test_arming_from_the_environment_logs_each_fired_action_with_the_pid(tmp_path: Path) -> None:
    log = tmp_path / "faults.log"
    armed = faults.arm_from_env(
        {
            "SUBAGENTS_FAULTS": "actor.inside_finalizer=raise_transient@2",
            "SUBAGENTS_FAULTS_LOG": str(log),
        }
    )
    assert armed == 1
    fault_point("actor.inside_finalizer")
    assert not log.exists()
    with pytest.raises(RetryableStorage):
        fault_point("actor.inside_finalizer")
    assert log.read_text() == f"actor.inside_finalizer raise_transient {os.getpid()}\n"


def test_an_unset_environment_arms_nothing() -> None:
    assert faults.arm_from_env({}) == 0
    fault_point("store.before_commit")
    assert faults.reached_counts() == {}


def test_sigkill_logs_the_line_then_kills_the_process(tmp_path: Path) -> None:
    log = tmp_path / "faults.log"
    script = (
        "from storage import faults\n"
        "from storage._faultpoints import fault_point\n"
        "faults.arm_from_env()\n"
        "fault_point('store.after_commit')\n"
        "fault_point('store.after_commit')\n"
        "print('survived', flush=True)\n"
    )
    env = dict(os.environ)
    env.update(SUBAGENTS_FAULTS="store.after_commit=sigkill@2", SUBAGENTS_FAULTS_LOG=str(log))
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL
    assert "survived" not in done.stdout
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    point, action, pid = lines[0].split()
    assert (point, action) == ("store.after_commit", "sigkill")
    assert int(pid) != os.getpid()


# Who may import the arming API: the harness (under properties/, or the SDK's
# verification package until it moves there) and the host, for crash-test mode.
FAULTS_IMPORTERS = ("properties/", "subagents/_reliability/", "subagents/_host/_service.py")


def _imports_faults(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(alias.name == "storage.faults" for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == "storage.faults" or (node.level == 1 and module == "faults"):
                return True
            if module in ("storage", "") and any(a.name == "faults" for a in node.names):
                return True
    return False


def test_only_tests_the_harness_and_the_crash_test_host_import_the_arming_api() -> None:
    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("statemachines", "storage", "actors", "subagents", "properties", "bench"):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if _imports_faults(ast.parse(path.read_text())) and not relative.startswith(
                FAULTS_IMPORTERS
            ):
                found.append(relative)
    assert found == []


def test_the_import_check_sees_each_form_of_import() -> None:
    for source in (
        "import storage.faults",
        "from storage import faults",
        "from storage.faults import arm",
        "from . import faults",
        "from .faults import arm",
    ):
        assert _imports_faults(ast.parse(source)), source
    assert not _imports_faults(ast.parse("from storage._faultpoints import fault_point"))


def test_importing_storage_does_not_import_the_arming_api() -> None:
    code = "import sys, storage, actors, subagents; print('storage.faults' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "False"
