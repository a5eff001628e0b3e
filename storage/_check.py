"""The store check: every record's checksum and decoding, every index entry against its record.

:func:`check_store` reads one consistent snapshot of a kernel store (any
backend) and reports, by table and key:

- ``checksum``: a value whose seal does not match (see :mod:`storage._sealed`);
- ``undecodable``: a sealed value that does not decode as its table's record;
- ``orphan index entry``: an index entry no record calls for;
- ``missing index entry``: a record's index entry that is not there;
- ``wrong index entry``: an index entry whose value is not the record's.

The index entries a record calls for are derived from the records alone
(:func:`expected_index`), the same rules the kernel applies as it writes:
a non-terminal attempt has its ``G`` entry; a terminal one its flagged ``R``
entry while its retention runs, else its ``A`` entry (and a ``P`` entry while
undelivered); a
claimed one its ``C`` entry; an artifact its ``Q`` entry; a run its ``S``
entry and a session's latest run its ``H`` entry.

``repair=True`` then fixes what it found, in one write transaction: every
value that fails its checksum or does not decode is moved to the
``quarantine`` table (key ``table NUL key``, its stored bytes kept as they
were) and the indexes are rebuilt from the remaining records. The store's
``meta`` values (layout marker, identity) are never moved: a store whose meta
is damaged does not open, and the check reports that instead.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from statemachines import EXECUTION, DeliveryStatus, RetentionStatus

from . import _codec as codec
from ._backend import Txn
from ._errors import CorruptRecord
from ._kernel import KernelStore
from ._records import Artifact, AttemptRecord, RunRecord
from ._sealed import SealedTxn, intact, unseal

_U64 = struct.Struct(">Q")
_TERMINAL = frozenset(EXECUTION.terminal)
_INDEX_TABLE = "index"
_RUN_INDEX = (codec.SEQ, codec.HEAD)
QUARANTINE = "quarantine"


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing wrong with one stored value."""

    table: str
    key: bytes
    problem: str
    detail: str = ""

    def describe(self) -> str:
        """One line: ``table key: problem (detail)`` with the key shown printably."""
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.table} {printable_key(self.key)}: {self.problem}{extra}"


class CheckReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a check found (and, with ``repair``, what it did)."""

    records: int
    index_entries: int
    findings: tuple[Finding, ...]
    repaired: bool = False
    quarantined: int = 0
    index_rewritten: int = 0
    refused: str | None = None
    """Set when the store could not even be opened (the typed error's message)."""

    @property
    def ok(self) -> bool:
        """Nothing is wrong (a repaired store is ok only if its check now passes)."""
        return not self.findings and self.refused is None


def printable_key(key: bytes) -> str:
    """``key`` with NUL shown as ``/`` and other unprintable bytes as ``\\xNN``."""
    out = []
    for byte in key:
        if byte == 0:
            out.append("/")
        elif 32 <= byte < 127 and byte != 92:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)


# -- decoding --------------------------------------------------------------------------------


def _decoder(table: str, key: bytes) -> Callable[[bytes], Any] | None:
    """How a record of ``table`` under ``key`` decodes (``None``: an index entry or meta)."""
    if table == "runs":
        if key.startswith((codec.SEQ, codec.HEAD)):
            return None
        return lambda data: codec.RUN.decode(data, table=table, key=key)
    plain: dict[str, codec.Codec[Any]] = {
        "sessions": codec.SESSION,
        "receipts": codec.ADMISSION_RECEIPT,
        "attempts": codec.ATTEMPT,
        "artifacts": codec.ARTIFACT,
        "continuations": codec.CONTINUATION_RECEIPT,
    }
    found = plain.get(table)
    if found is None:
        return None
    return lambda data: found.decode(data, table=table, key=key)


def _is_index(table: str, key: bytes) -> bool:
    return table == _INDEX_TABLE or (table == "runs" and key.startswith(_RUN_INDEX))


class _Walk:
    """The records and index entries of one snapshot, and what is wrong with them."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.bad: list[tuple[str, bytes]] = []
        self.index: dict[tuple[str, bytes], bytes] = {}
        self.attempts: list[AttemptRecord] = []
        self.artifacts: list[Artifact] = []
        self.runs: list[RunRecord] = []
        self.records = 0

    def value(self, table: str, key: bytes, raw: bytes) -> None:
        if not intact(table, key, raw):
            self._bad(table, key, "checksum", "the stored bytes do not match their CRC-32")
            return
        data = unseal(table, key, raw)
        if _is_index(table, key):
            self.index[(table, key)] = data
            return
        decode = _decoder(table, key)
        if decode is None:
            return
        self.records += 1
        try:
            record = decode(data)
        except CorruptRecord as exc:
            self._bad(table, key, "undecodable", str(exc.fields.get("reason", exc.message)))
            return
        if isinstance(record, AttemptRecord):
            self.attempts.append(record)
        elif isinstance(record, Artifact):
            self.artifacts.append(record)
        elif isinstance(record, RunRecord):
            self.runs.append(record)

    def _bad(self, table: str, key: bytes, problem: str, detail: str) -> None:
        self.findings.append(Finding(table=table, key=key, problem=problem, detail=detail))
        if table != "meta":
            self.bad.append((table, key))


def _walk(txn: Txn, tables: Iterable[str]) -> _Walk:
    walk = _Walk()
    for table in tables:
        if table == QUARANTINE:
            continue
        for key, raw in txn.scan(table):
            walk.value(table, key, raw)
    return walk


# -- the indexes a record set calls for ---------------------------------------------------------


def expected_index(
    attempts: Iterable[AttemptRecord], artifacts: Iterable[Artifact], runs: Iterable[RunRecord]
) -> dict[tuple[str, bytes], bytes]:
    """Every index entry the records call for: ``(table, key) -> value``."""
    index: dict[tuple[str, bytes], bytes] = {}
    for record in attempts:
        for key, value in _attempt_entries(record):
            index[(_INDEX_TABLE, key)] = value
    for artifact in artifacts:
        key = codec.timed_key(
            codec.QUOTA, artifact.namespace_id, artifact.expires_at, artifact.artifact_ref
        )
        index[(_INDEX_TABLE, key)] = _U64.pack(artifact.size_bytes)
    heads: dict[str, RunRecord] = {}
    for run in runs:
        index[("runs", codec.seq_key(run.session_id, run.sequence_no))] = run.run_id.encode()
        head = heads.get(run.session_id)
        if head is None or run.sequence_no > head.sequence_no:
            heads[run.session_id] = run
    for session_id, run in heads.items():
        head_value = codec.RUN_HEAD.encode(
            codec.RunHead(sequence_no=run.sequence_no, run_id=run.run_id)
        )
        index[("runs", codec.ikey(codec.HEAD, session_id))] = head_value
    return index


def _attempt_entries(record: AttemptRecord) -> list[tuple[bytes, bytes]]:
    ns, sess, aid = record.namespace_id, record.parent_session_id, record.attempt_id
    if record.execution_status not in _TERMINAL:
        return [(codec.agent_key(ns, sess, record.agent_id), aid.encode("utf-8"))]
    entries: list[tuple[bytes, bytes]] = []
    delivered = record.delivery_status == DeliveryStatus.DELIVERED
    deadline = record.retention_expires_at
    if deadline is not None and record.retention_status != RetentionStatus.EXPIRED:
        flag = codec.DELIVERED if delivered else codec.UNDELIVERED
        entries.append((codec.retain_key(ns, sess, deadline, aid), flag))
    else:
        # No ``R`` entry: reached through ``A`` (and ``P`` while undelivered).
        agent = codec.agent_attempt_key(ns, sess, record.agent_id, aid)
        entries.append((agent, record.subagent_name.encode("utf-8")))
        if not delivered:
            entries.append((codec.pending_key(ns, sess, aid), b""))
    if record.delivery_claim is not None:
        claim = codec.time_key(record.delivery_claim.deadline)
        entries.append((codec.claim_key(ns, sess, aid), claim))
        consumer = record.delivery_claim.continuation_run_id
        if consumer is not None:
            entries.append((codec.link_key(sess, consumer, aid), b""))
    return entries


def _compare(walk: _Walk) -> list[Finding]:
    expected = expected_index(walk.attempts, walk.artifacts, walk.runs)
    findings = []
    for (table, key), value in sorted(walk.index.items()):
        want = expected.get((table, key))
        if want is None:
            findings.append(Finding(table=table, key=key, problem="orphan index entry"))
        elif want != value:
            findings.append(
                Finding(
                    table=table,
                    key=key,
                    problem="wrong index entry",
                    detail=f"holds {value!r}, its record calls for {want!r}",
                )
            )
    for table, key in sorted(expected.keys() - walk.index.keys()):
        findings.append(Finding(table=table, key=key, problem="missing index entry"))
    return findings


# -- check and repair ---------------------------------------------------------------------------


def check_store(store: KernelStore, *, repair: bool = False) -> CheckReport:
    """Check every value of ``store`` (see the module docstring); with ``repair``,
    quarantine unreadable values and rebuild the indexes, then check again.

    Runs on the caller's thread: one read transaction (plus one write with
    ``repair``). Other processes may keep using the store meanwhile.
    """
    tables = store.TABLES
    walk = store.raw_backend.read(lambda txn: _walk(txn, tables))
    findings = walk.findings + _compare(walk)
    report = CheckReport(
        records=walk.records, index_entries=len(walk.index), findings=tuple(findings)
    )
    if not repair or not findings:
        return report
    quarantined, rewritten = store.raw_backend.write(lambda txn: _repair(txn, tables))
    after = check_store(store)
    return msgspec.structs.replace(
        after, repaired=True, quarantined=quarantined, index_rewritten=rewritten
    )


def _repair(txn: Txn, tables: Iterable[str]) -> tuple[int, int]:
    """Quarantine the unreadable values, rebuild every index; (quarantined, rewritten)."""
    # Walked again inside the write: what another writer changed since counts.
    walk = _walk(txn, tables)
    sealed = SealedTxn(txn)
    for table, key in walk.bad:
        raw = txn.get(table, key)
        if raw is not None:
            sealed.put(QUARANTINE, table.encode("utf-8") + b"\x00" + key, raw)
            txn.delete(table, key)
    expected = expected_index(walk.attempts, walk.artifacts, walk.runs)
    rewritten = 0
    for table, key in list(walk.index):
        if (table, key) not in expected:
            txn.delete(table, key)
            rewritten += 1
    for (table, key), value in expected.items():
        if walk.index.get((table, key)) != value:
            sealed.put(table, key, value)
            rewritten += 1
    # Index entries whose own seal failed were counted as bad values above and
    # quarantined; the rebuild put back the ones the records call for.
    return len(walk.bad), rewritten


def quarantined(store: KernelStore) -> list[tuple[str, bytes, bytes]]:
    """``(table, key, stored bytes)`` of every value a repair moved aside."""

    def fn(txn: Txn) -> list[tuple[str, bytes, bytes]]:
        out = []
        for key, raw in SealedTxn(txn).scan(QUARANTINE):
            table, _, original = key.partition(b"\x00")
            out.append((table.decode("utf-8", "replace"), original, raw))
        return out

    return store.raw_backend.read(fn)
