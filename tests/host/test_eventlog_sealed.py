"""The host's event log is checksummed like the store: every value sealed, an
unsealed log sealed on open, a damaged value a typed ``CorruptRecord`` naming
its table and key, and ``check_event_log`` (``subagents db check``) finding and
moving aside damaged values (LMDB and a real PostgreSQL database)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_helpers import CONFIG, Client
from postgres_db import scratch_database

from storage import CorruptRecord, LmdbBackend, LmdbSessionStore, Txn
from storage._sealed import intact
from subagents._host import open_host, parse_host_config
from subagents._host._eventlog import (
    QUARANTINE_PREFIX,
    TABLES,
    BackendEventLog,
    LmdbEventLog,
    PostgresEventLog,
    StoreEventLog,
    check_event_log,
)

EVENTS, META = TABLES


def _key(session: str, seq: int) -> bytes:
    return session.encode() + b"\0" + seq.to_bytes(8, "big")


@pytest.fixture
def lmdb_dir(tmp_path: Path) -> Iterator[Path]:
    store = LmdbSessionStore(tmp_path)  # sizes the environment's tables, as a host does
    yield tmp_path
    store.close()


def _fill(log: BackendEventLog) -> None:
    for session in ("s1", "s2"):
        for index in range(3):
            log.append(session, "note", 1.0 + index, None, {"i": index})
    log.next_generation()


def _all_raw(log: BackendEventLog) -> list[tuple[str, bytes, bytes]]:
    def fn(txn: Txn) -> list[tuple[str, bytes, bytes]]:
        return [(t, k, v) for t in TABLES for k, v in txn.scan(t)]

    return log.raw_backend.read(fn)


def _put_raw(log: BackendEventLog, table: str, key: bytes, value: bytes) -> None:
    log.raw_backend.write(lambda txn: txn.put(table, key, value))


def _flip(log: BackendEventLog, table: str, key: bytes) -> None:
    value = log.raw_backend.read(lambda txn: txn.get(table, key))
    assert value is not None
    _put_raw(log, table, key, bytes([value[0] ^ 0x20]) + value[1:])


def test_every_value_is_sealed(lmdb_dir: Path) -> None:
    log = LmdbEventLog(lmdb_dir)
    try:
        _fill(log)
        stored = _all_raw(log)
        assert len(stored) >= 6 + 2 + 2  # events, two seq counters, generation, layout
        assert all(intact(t, k, v) for t, k, v in stored)
    finally:
        log.close()


def test_an_unsealed_log_is_sealed_on_open_and_keeps_its_history(tmp_path: Path) -> None:
    # A log written before checksums: plain JSON events and 8-byte counters, no marker
    # (in a directory no store opened yet: a store stamps the marker of a fresh log).
    raw = LmdbBackend(tmp_path, tables=TABLES)

    def old(txn: Txn) -> None:
        for seq in (1, 2):
            body = {"seq": seq, "session_id": "s", "kind": "note", "at": 1.0, "data": {}}
            txn.put(EVENTS, _key("s", seq), json.dumps({**body, "run_id": None}).encode())
        txn.put(META, b"seq\0s", (2).to_bytes(8, "big"))
        txn.put(META, b"generation", (7).to_bytes(8, "big"))

    raw.write(old)
    raw.close()
    log = LmdbEventLog(tmp_path)
    try:
        assert [e.seq for e in log.replay("s")] == [1, 2]
        assert log.append("s", "note", 2.0, None, {}).seq == 3
        assert log.next_generation() == 8
        assert all(intact(t, k, v) for t, k, v in _all_raw(log))
    finally:
        log.close()
    reopened = LmdbEventLog(tmp_path)  # sealed already: opens as it is
    try:
        assert [e.seq for e in reopened.replay("s")] == [1, 2, 3]
    finally:
        reopened.close()


def test_a_damaged_event_is_a_corrupt_record_naming_table_and_key(lmdb_dir: Path) -> None:
    log = LmdbEventLog(lmdb_dir)
    try:
        _fill(log)
        _flip(log, EVENTS, _key("s1", 2))
        with pytest.raises(CorruptRecord) as info:
            log.replay("s1")
        assert info.value.fields["table"] == EVENTS
        assert info.value.fields["key"] == _key("s1", 2)
        assert [e.seq for e in log.replay("s1", after_seq=2)] == [3]
        assert [e.seq for e in log.replay("s2")] == [1, 2, 3]  # other sessions still served
    finally:
        log.close()


def test_sealed_bytes_that_do_not_decode_are_a_corrupt_record(lmdb_dir: Path) -> None:
    log = LmdbEventLog(lmdb_dir)
    try:
        log._backend.write(lambda txn: txn.put(EVENTS, _key("s", 1), b"not json"))
        with pytest.raises(CorruptRecord) as info:
            log.replay("s")
        assert info.value.fields["key"] == _key("s", 1)
        assert "undecodable" in info.value.message
    finally:
        log.close()


def test_check_finds_and_repair_moves_aside_damaged_values(lmdb_dir: Path) -> None:
    log = LmdbEventLog(lmdb_dir)
    try:
        _fill(log)
        assert check_event_log(log.raw_backend)[1] == []
        _flip(log, EVENTS, _key("s1", 3))
        _flip(log, META, b"seq\0s2")
        _flip(log, META, b"generation")
        count, findings = check_event_log(log.raw_backend)
        assert count == 10
        assert {(f.table, f.key, f.problem) for f in findings} == {
            (EVENTS, _key("s1", 3), "checksum"),
            (META, b"seq\0s2", "checksum"),
            (META, b"generation", "checksum"),
        }
        _, after = check_event_log(log.raw_backend, repair=True, now_us=lambda: 10**15)
        assert after == []
        assert [e.seq for e in log.replay("s1")] == [1, 2]
        assert log.append("s2", "note", 9.0, None, {}).seq == 4  # counter rebuilt from events
        assert log.next_generation() == 10**15 + 1
        aside = log.raw_backend.read(
            lambda txn: [k for k, _ in txn.scan(META, prefix=QUARANTINE_PREFIX)]
        )
        assert QUARANTINE_PREFIX + b"host_events\0" + _key("s1", 3) in aside
    finally:
        log.close()


def test_a_damaged_layout_marker_refuses_to_open(lmdb_dir: Path) -> None:
    log = LmdbEventLog(lmdb_dir)
    _flip(log, META, b"layout")
    log.close()
    with pytest.raises(CorruptRecord) as info:
        LmdbEventLog(lmdb_dir)
    assert info.value.fields["table"] == META
    assert info.value.fields["key"] == b"layout"


def test_postgres_event_values_are_sealed_and_checked() -> None:
    with scratch_database("subagents_evseal") as url:
        from storage import PostgresSessionStore

        store = PostgresSessionStore(url)  # applies the migrations of the host tables
        log = PostgresEventLog(url)
        try:
            _fill(log)
            assert all(intact(t, k, v) for t, k, v in _all_raw(log))
            _flip(log, EVENTS, _key("s2", 1))
            with pytest.raises(CorruptRecord) as info:
                log.replay("s2")
            assert info.value.fields["key"] == _key("s2", 1)
            findings = check_event_log(log.raw_backend)[1]
            assert [(f.table, f.key) for f in findings] == [(EVENTS, _key("s2", 1))]
        finally:
            log.close()
            store.close()


async def test_a_damaged_event_over_rpc_names_its_table_and_key(tmp_path: Path) -> None:
    service = open_host(parse_host_config(CONFIG), data_dir=tmp_path / "data")
    await service.start()
    try:
        client = Client(service.dispatcher())
        session = (await client.result("session.create", {}))["session_id"]
        events = service.events
        assert isinstance(events, StoreEventLog)
        events.append(session, "note", 1.0, None, {})
        _flip(events, EVENTS, _key(session, 1))
        reply = await client.call("events.replay", {"session_id": session})
        assert reply["error"]["code"] == -32000
        assert "db check" in reply["error"]["message"]
        assert reply["error"]["data"] == {
            "reason": "corrupt_record",
            "table": "host_events",
            "key": f"{session}////////\\x01",
        }
        assert "result" in await client.call("session.list", {})  # the host keeps serving
    finally:
        await service.close()


async def test_diagnostics_lists_the_store_warnings(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)  # readable by others: the open warns
    service = open_host(parse_host_config(CONFIG), data_dir=directory)
    await service.start()
    try:
        diagnostics = await Client(service.dispatcher()).result("diagnostics.get", {})
        assert any("can be read by other users" in w for w in diagnostics["warnings"])
    finally:
        await service.close()
