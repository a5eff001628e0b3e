"""The redo journal's file (storage._journal): what an append promises, what a
power cut can leave, and what reading it back returns or refuses.

The power-cut model is this file's own, not the module's: the disk holds every
write whose flush returned; the write in flight when the power went (an
append's block(s) or a checkpoint's header slot) reached the disk as any
prefix of its bytes, or as a prefix followed by garbage. Recovery must return
exactly the entries the model acknowledged since its last checkpoint.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Failed, StorageFull, StoreRefused
from storage._journal import (
    BLOCK,
    ENTRIES_AT,
    JOURNAL_NAME,
    SLOT_BYTES,
    Journal,
    JournalEntry,
    Recovered,
    open_journal,
)

REGION = 16 * BLOCK
METAS = b"m" * 8192


def _open(directory: Path, region: int = REGION) -> tuple[Journal, Recovered]:
    return open_journal(str(directory), txnid=7, metas=METAS, region_bytes=region)


def _ops(recovered: Recovered) -> list[tuple[tuple[str, bytes, bytes | None], ...]]:
    return [entry.ops for _, entry in recovered.entries]


def _reopen(directory: Path, journal: Journal) -> Recovered:
    journal.close()
    again, recovered = _open(directory)
    again.close()
    return recovered


def _damage(directory: Path, offset: int, data: bytes) -> None:
    with open(directory / JOURNAL_NAME, "r+b") as file:
        file.seek(offset)
        file.write(data)


def test_a_new_journal_has_its_full_size_and_the_callers_base(tmp_path: Path) -> None:
    journal, recovered = _open(tmp_path)
    journal.close()
    assert (tmp_path / JOURNAL_NAME).stat().st_size == ENTRIES_AT + REGION
    assert oct((tmp_path / JOURNAL_NAME).stat().st_mode & 0o777) == "0o600"
    assert (recovered.header.generation, recovered.header.txnid) == (1, 7)
    assert recovered.header.metas == METAS
    assert recovered.entries == ()
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed into place


def test_appended_entries_come_back_in_order_with_deletes(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    written = [
        (("A", b"k1", b"v1"), ("G", b"k2", b"v2")),
        (("A", b"k1", None),),
        (("T", b"x" * 5000, b"y" * 9000),),  # spans several blocks
    ]
    seqs = [journal.append(ops) for ops in written]
    assert seqs == [1, 2, 3]
    recovered = _reopen(tmp_path, journal)
    assert _ops(recovered) == written
    assert recovered.next_seq == 4
    assert recovered.offset == ENTRIES_AT + 2 * BLOCK + 4 * BLOCK


def test_appends_go_on_after_a_reopen(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"1", b"1")])
    journal.close()
    journal, _ = _open(tmp_path)
    assert journal.append([("A", b"2", b"2")]) == 2
    assert _ops(_reopen(tmp_path, journal)) == [(("A", b"1", b"1"),), (("A", b"2", b"2"),)]


def test_a_voided_entry_is_not_returned(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"a", b"1")])
    failed = journal.append([("A", b"b", b"2")])
    journal.void(failed)
    journal.append([("A", b"c", b"3")])
    recovered = _reopen(tmp_path, journal)
    assert _ops(recovered) == [(("A", b"a", b"1"),), (("A", b"c", b"3"),)]
    assert [seq for seq, _ in recovered.entries] == [1, 4]


def test_a_torn_last_entry_is_the_end_and_the_next_append_takes_its_place(
    tmp_path: Path,
) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"a", b"1")])
    journal.append([("A", b"b", b"2")])
    journal.close()
    _damage(tmp_path, ENTRIES_AT + BLOCK + 30, b"\xff" * 4)  # the second entry's body
    journal, recovered = _open(tmp_path)
    assert _ops(recovered) == [(("A", b"a", b"1"),)]
    assert journal.append([("A", b"c", b"3")]) == 2
    assert _ops(_reopen(tmp_path, journal)) == [(("A", b"a", b"1"),), (("A", b"c", b"3"),)]


def test_a_damaged_entry_before_a_whole_one_refuses_the_journal(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    for n in range(4):
        journal.append([("A", b"%d" % n, b"v")])
    journal.close()
    _damage(tmp_path, ENTRIES_AT + BLOCK + 30, b"\x00\x01")
    with pytest.raises(StoreRefused) as caught:
        _open(tmp_path)
    assert caught.value.fields["offset"] == ENTRIES_AT + BLOCK
    assert "entry 3" in str(caught.value)
    assert caught.value.fields["fix"]


def test_a_flipped_byte_that_still_decodes_is_caught_by_the_checksum(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"key", b"value-1")])
    journal.close()
    raw = (tmp_path / JOURNAL_NAME).read_bytes()
    at = raw.index(b"value-1", ENTRIES_AT)
    _damage(tmp_path, at + 6, b"2")  # still a valid entry, with another value
    _, recovered = _open(tmp_path)
    assert recovered.entries == ()


def test_a_checkpoint_starts_a_generation_and_older_entries_are_never_read(
    tmp_path: Path,
) -> None:
    journal, _ = _open(tmp_path)
    for n in range(3):
        journal.append([("A", b"old%d" % n, b"v")])
    journal.checkpoint(txnid=9, metas=b"n" * 8192)
    journal.append([("A", b"new", b"v")])  # overwrites the first old entry only
    recovered = _reopen(tmp_path, journal)
    assert (recovered.header.generation, recovered.header.txnid) == (2, 9)
    assert recovered.header.metas == b"n" * 8192
    assert _ops(recovered) == [(("A", b"new", b"v"),)]


def test_a_checkpoint_whose_header_tore_leaves_the_previous_generation(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"a", b"1")])
    journal.checkpoint(txnid=9, metas=METAS)
    journal.close()
    _damage(tmp_path, 0 + 20, b"\xee" * 4)  # generation 2 lives in slot 0
    _, recovered = _open(tmp_path)
    assert recovered.header.generation == 1
    assert _ops(recovered) == [(("A", b"a", b"1"),)]


def test_a_journal_without_a_whole_header_is_refused(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    journal.close()
    _damage(tmp_path, SLOT_BYTES + 12, b"\x00" * 16)
    with pytest.raises(StoreRefused, match="neither header slot"):
        _open(tmp_path)


def test_a_journal_shorter_than_its_region_is_refused(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path)
    journal.close()
    os.truncate(tmp_path / JOURNAL_NAME, ENTRIES_AT + BLOCK)
    with pytest.raises(StoreRefused, match="its header says") as caught:
        _open(tmp_path)
    assert caught.value.fields["size"] == ENTRIES_AT + BLOCK


def test_an_existing_journal_keeps_its_own_region_whatever_the_opener_asks(
    tmp_path: Path,
) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"a", b"1")])
    journal.close()
    journal, recovered = _open(tmp_path, region=4 * REGION)
    assert journal.region_bytes == REGION == recovered.header.region_bytes
    assert _ops(recovered) == [(("A", b"a", b"1"),)]
    journal.close()


def test_a_full_region_refuses_the_append_and_writes_nothing(tmp_path: Path) -> None:
    journal, _ = _open(tmp_path, region=2 * BLOCK)
    journal.append([("A", b"a", b"1")])
    journal.append([("A", b"b", b"2")])
    assert journal.room() == 0
    with pytest.raises(StorageFull, match="checkpoint first"):
        journal.append([("A", b"c", b"3")])
    journal.checkpoint(txnid=8, metas=METAS)
    assert journal.append([("A", b"c", b"3")]) == 1
    journal.close()
    _, recovered = _open(tmp_path, region=2 * BLOCK)
    assert _ops(recovered) == [(("A", b"c", b"3"),)]


@pytest.mark.parametrize(("number", "error"), [(errno.EIO, Failed), (errno.ENOSPC, StorageFull)])
def test_after_a_failed_flush_every_append_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int, error: type[Exception]
) -> None:
    journal, _ = _open(tmp_path)
    journal.append([("A", b"a", b"1")])

    def failing(fd: int) -> None:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(error):
        journal.append([("A", b"b", b"2")])
    monkeypatch.undo()
    with pytest.raises(Failed, match="after an I/O error"):
        journal.append([("A", b"c", b"3")])
    journal.close()


def test_a_directory_where_the_journal_belongs_is_refused(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_NAME).mkdir()
    with pytest.raises(StoreRefused, match="not a regular file"):
        _open(tmp_path)


def test_region_bytes_must_be_whole_blocks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 4096"):
        open_journal(str(tmp_path), txnid=1, metas=b"", region_bytes=BLOCK + 1)


def test_an_entry_is_a_frozen_record() -> None:
    entry = JournalEntry(ops=(("A", b"k", b"v"),))
    with pytest.raises(AttributeError):
        entry.void = 3  # type: ignore[misc]


# -- power cuts ----------------------------------------------------------------------------------

_op = st.tuples(
    st.sampled_from(["A", "G", "T"]),
    st.binary(min_size=1, max_size=40),
    st.none() | st.binary(max_size=6000),
)
_step = st.one_of(
    st.tuples(st.just("append"), st.lists(_op, min_size=1, max_size=4)),
    st.tuples(st.just("checkpoint"), st.integers(min_value=1, max_value=10**6)),
)


class _CutWrites:
    """Records the journal's writes so the last one can be replayed torn."""

    def __init__(self) -> None:
        self.writes: list[tuple[bytes, int]] = []
        self.write = os.pwrite

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.writes.append((bytes(data), offset))
        return self.write(fd, data, offset)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(_step, min_size=1, max_size=12),
    cut=st.floats(min_value=0.0, max_value=1.0),
    garbage=st.booleans(),
)
def test_after_a_power_cut_recovery_returns_exactly_what_was_acknowledged(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[str, object]],
    cut: float,
    garbage: bool,
) -> None:
    directory = tmp_path_factory.mktemp("cut")
    journal, _ = open_journal(str(directory), txnid=1, metas=b"base", region_bytes=64 * BLOCK)
    acknowledged: list[object] = []
    generation = 1
    for kind, value in steps[:-1]:
        if kind == "append":
            try:
                journal.append(value)  # type: ignore[arg-type]
            except StorageFull:
                continue
            acknowledged.append(tuple(value))  # type: ignore[arg-type]
        else:
            journal.checkpoint(txnid=value, metas=b"cp")  # type: ignore[arg-type]
            acknowledged, generation = [], generation + 1
    # The last step is cut: its write reaches the disk torn, and its flush never returns.
    kind, value = steps[-1]
    recorder = _CutWrites()
    original = os.pwrite
    os.pwrite = recorder.pwrite  # type: ignore[assignment]
    try:
        before = (directory / JOURNAL_NAME).read_bytes()
        try:
            if kind == "append":
                journal.append(value)  # type: ignore[arg-type]
            else:
                journal.checkpoint(txnid=value, metas=b"cp")  # type: ignore[arg-type]
        except StorageFull:
            pass
    finally:
        os.pwrite = original  # type: ignore[assignment]
        journal.close()
    image = bytearray(before)
    for data, offset in recorder.writes:
        kept = int(len(data) * cut)
        end = offset + len(data)
        rest = b"\xa5" * (len(data) - kept) if garbage else before[offset + kept : end]
        torn = data[:kept] + rest
        image[offset : offset + len(data)] = torn
    (directory / JOURNAL_NAME).write_bytes(bytes(image))
    _, recovered = open_journal(str(directory), txnid=1, metas=b"base", region_bytes=64 * BLOCK)
    got = [entry.ops for _, entry in recovered.entries]
    # The cut step never returned, so either outcome is right, and nothing else is.
    outcomes = [(acknowledged, generation)]
    if kind == "append":
        outcomes.append(([*acknowledged, tuple(value)], generation))  # type: ignore[arg-type]
    else:
        outcomes.append(([], generation + 1))
    assert (got, recovered.header.generation) in outcomes
