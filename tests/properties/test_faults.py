"""The fault-injecting store wrapper: transient failures, lost responses, slow calls."""

from __future__ import annotations

import pytest

from properties import Fault, FaultyStore
from storage import ManualClock, MemorySessionStore, NotFound, RetryableStorage, SessionRecord


def session(clock: ManualClock, session_id: str = "s1") -> SessionRecord:
    now = clock.now()
    return SessionRecord(session_id=session_id, namespace_id="ns", created_at=now, updated_at=now)


def test_a_transient_failure_writes_nothing_and_the_retry_succeeds() -> None:
    clock = ManualClock()
    faulty = FaultyStore(MemorySessionStore(clock=clock))
    faulty.plan("create_session", Fault(1))
    with pytest.raises(RetryableStorage):
        faulty.create_session(session(clock))
    with pytest.raises(NotFound):
        faulty.load_session("s1")
    assert faulty.create_session(session(clock)).session_id == "s1"
    assert (faulty.calls["create_session"], faulty.failures["create_session"]) == (2, 1)


def test_a_lost_response_applies_the_write_and_the_exact_replay_is_answered() -> None:
    clock = ManualClock()
    faulty = FaultyStore(MemorySessionStore(clock=clock))
    faulty.plan("create_session", Fault(1, mode="lost"))
    record = session(clock)
    with pytest.raises(RetryableStorage):
        faulty.create_session(record)
    assert faulty.load_session("s1") == record
    assert faulty.create_session(record) == record


def test_a_slow_call_moves_store_time_without_sleeping() -> None:
    clock = ManualClock()
    faulty = FaultyStore(MemorySessionStore(clock=clock), clock=clock)
    faulty.plan("create_session", Fault(2, mode="slow", delay=45.0))
    before = clock.now()
    faulty.create_session(session(clock, "s1"))
    faulty.create_session(session(clock, "s2"))
    faulty.create_session(session(clock, "s3"))
    assert clock.now() == before + 90.0
    assert faulty.slowed["create_session"] == 2
    assert faulty.failures["create_session"] == 0


def test_slow_faults_need_a_clock_and_a_positive_delay() -> None:
    faulty = FaultyStore(MemorySessionStore(clock=ManualClock()))
    with pytest.raises(ValueError, match="clock"):
        faulty.plan("create_session", Fault(1, mode="slow", delay=1.0))
    with pytest.raises(ValueError, match="delay"):
        Fault(1, mode="slow")
