"""MemoryBackend: atomic write-through transactions with an undo log, ordered scans,
serialized writers."""

from __future__ import annotations

import threading

import pytest

from storage import Failed, Txn
from storage._memory import MemoryBackend


def _backend() -> MemoryBackend:
    return MemoryBackend(("t", "u"))


def test_a_write_that_returns_is_visible_to_later_reads() -> None:
    backend = _backend()
    backend.write(lambda txn: txn.put("t", b"k", b"v"))
    assert backend.read(lambda txn: txn.get("t", b"k")) == b"v"


def test_a_write_that_raises_leaves_nothing_behind() -> None:
    backend = _backend()
    backend.write(lambda txn: txn.put("t", b"keep", b"1"))

    def fn(txn: Txn) -> None:
        txn.put("t", b"new", b"2")
        txn.delete("t", b"keep")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        backend.write(fn)
    assert backend.read(lambda txn: list(txn.scan("t"))) == [(b"keep", b"1")]


def test_a_write_that_raises_restores_overwritten_and_deleted_values_in_order() -> None:
    backend = _backend()
    backend.write(lambda txn: [txn.put("t", k, b"old-" + k) for k in (b"a", b"b", b"c")])

    def fn(txn: Txn) -> None:
        txn.put("t", b"b", b"first")
        txn.put("t", b"b", b"second")
        txn.delete("t", b"a")
        txn.put("t", b"a", b"back")
        txn.delete("t", b"c")
        txn.put("u", b"x", b"other table")
        raise KeyboardInterrupt  # a BaseException is rolled back too

    with pytest.raises(KeyboardInterrupt):
        backend.write(fn)
    assert backend.read(lambda txn: list(txn.scan("t"))) == [
        (b"a", b"old-a"),
        (b"b", b"old-b"),
        (b"c", b"old-c"),
    ]
    assert backend.read(lambda txn: list(txn.scan("u"))) == []


def test_a_write_keeps_its_own_copy_of_a_mutable_value() -> None:
    backend = _backend()
    value = bytearray(b"v1")
    backend.write(lambda txn: txn.put("t", b"k", value))  # type: ignore[arg-type]
    value[:] = b"v2"
    assert backend.read(lambda txn: txn.get("t", b"k")) == b"v1"


def test_scans_are_ordered_and_merge_the_transactions_own_writes() -> None:
    backend = _backend()
    backend.write(lambda txn: [txn.put("t", k, k) for k in (b"a\x00c", b"a\x00a", b"b\x00a")])

    def fn(txn: Txn) -> list[bytes]:
        txn.put("t", b"a\x00b", b"new")
        txn.delete("t", b"a\x00c")
        txn.put("t", b"a\x00a", b"changed")
        return [k + b"=" + v for k, v in txn.scan("t", b"a\x00")]

    assert backend.write(fn) == [b"a\x00a=changed", b"a\x00b=new"]


def test_a_scan_starts_at_start_and_stops_at_the_end_of_the_prefix() -> None:
    backend = _backend()
    backend.write(lambda txn: [txn.put("t", bytes([65 + i]), b"") for i in range(6)])
    keys = backend.read(lambda txn: [k for k, _ in txn.scan("t", b"", b"C")])
    assert keys == [b"C", b"D", b"E", b"F"]
    assert backend.read(lambda txn: [k for k, _ in txn.scan("t", b"B")]) == [b"B"]


def test_delete_reports_whether_the_key_existed() -> None:
    backend = _backend()
    backend.write(lambda txn: txn.put("t", b"k", b"v"))
    assert backend.write(lambda txn: (txn.delete("t", b"k"), txn.delete("t", b"k"))) == (
        True,
        False,
    )


def test_tables_are_separate() -> None:
    backend = _backend()
    backend.write(lambda txn: txn.put("t", b"k", b"v"))
    assert backend.read(lambda txn: txn.get("u", b"k")) is None


def test_a_read_transaction_refuses_writes_and_unknown_tables_fail() -> None:
    backend = _backend()
    with pytest.raises(Failed):
        backend.read(lambda txn: txn.put("t", b"k", b"v"))
    with pytest.raises(Failed):
        backend.read(lambda txn: txn.get("nope", b"k"))


def test_concurrent_read_modify_write_transactions_are_serialized() -> None:
    backend = _backend()
    backend.write(lambda txn: txn.put("t", b"n", b"0"))

    def bump(txn: Txn) -> None:
        raw = txn.get("t", b"n")
        assert raw is not None
        txn.put("t", b"n", str(int(raw) + 1).encode())

    def worker() -> None:
        for _ in range(200):
            backend.write(bump)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend.read(lambda txn: txn.get("t", b"n")) == b"800"


def test_after_close_every_call_fails_and_drain_still_returns() -> None:
    backend = _backend()
    backend.drain()
    backend.close()
    backend.close()
    backend.drain()
    with pytest.raises(Failed):
        backend.read(lambda txn: txn.get("t", b"k"))
    with pytest.raises(Failed):
        backend.write(lambda txn: txn.put("t", b"k", b"v"))
