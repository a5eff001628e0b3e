"""Store factories: fresh stores, persistence across reopen, cleanup."""

from __future__ import annotations

import os

import pytest

from properties import LMDB, LMDB_REOPEN, MEMORY, StoreHandle, resolve_factory
from storage import ManualClock, SessionRecord


def _session(clock: ManualClock) -> SessionRecord:
    now = clock.now()
    return SessionRecord(session_id="s-1", namespace_id="ns", created_at=now, updated_at=now)


def test_lmdb_reopen_closes_and_reopens_between_steps_and_keeps_committed_data() -> None:
    clock = ManualClock()
    handle = LMDB_REOPEN(clock)
    try:
        first = handle.store
        handle.store.create_session(_session(clock))
        handle.step_boundary()
        assert handle.store is not first
        assert handle.reopens == 1
        assert handle.store.load_session("s-1").namespace_id == "ns"
    finally:
        handle.close()


def test_plain_lmdb_and_memory_do_not_reopen_between_steps() -> None:
    for factory in (LMDB, MEMORY):
        handle = factory(ManualClock())
        try:
            store = handle.store
            handle.step_boundary()
            assert handle.store is store
        finally:
            handle.close()


def test_closing_an_lmdb_handle_removes_its_temporary_directory() -> None:
    handle = LMDB(ManualClock())
    assert handle.path is not None
    assert os.path.isdir(handle.path)
    handle.close()
    handle.close()  # idempotent
    assert not os.path.exists(handle.path)


def test_a_bare_store_from_a_user_factory_is_wrapped_in_a_handle() -> None:
    factory = resolve_factory("properties._factories:_memory")
    handle = factory(ManualClock())
    assert isinstance(handle, StoreHandle)
    handle.close()


def test_unknown_store_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown store"):
        resolve_factory("sqlite")
