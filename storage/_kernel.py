"""The SessionStore contract logic, once, on top of any :class:`~storage.Backend`.

Every contract operation is exactly one ``backend.write(fn)`` (or one
``backend.read(fn)`` for loads and lists). ``fn`` reads the store's clock
*inside* the transaction, checks everything, and only then writes; when it
raises, the backend discards every write it made, so a failed operation leaves
nothing behind. The few operations that must commit something *and* report a
failure (``claim_delivery`` acknowledging a completed consumer's old claim, or
releasing a dead consumer's claim and then refusing an automatic claim) let
``fn`` return the error as a value and raise it after ``write`` returned.

Tables (``bytes -> bytes``; keys are NUL-joined UTF-8 ids, index entries start
with NUL and a kind letter, see :mod:`storage._codec`):

============= ================================================ =====================
table         key                                              value
============= ================================================ =====================
sessions      session_id                                       SessionRecord
runs          session_id, run_id                               RunRecord
runs          ``S`` session_id, 8-byte sequence_no             run_id
runs          ``H`` session_id                                 RunHead (latest run)
receipts      session_id, idempotency key                      RunAdmissionReceipt
attempts      attempt_id                                       AttemptRecord
index         ``G`` namespace, session_id, agent_id            attempt_id (non-terminal)
index         ``C`` namespace, session_id, attempt_id          claim deadline
index         ``L`` session_id, run_id, attempt_id             ``b""`` (claimed for
                                                               consumer run run_id)
index         ``T`` namespace, session_id, ``R`` deadline,     ``P`` (undelivered) or
              attempt_id                                       ``b""`` (delivered)
index         ``T`` namespace, session_id, ``P`` attempt_id    ``b""`` (undelivered,
                                                               retention expired)
index         ``A`` namespace, session_id, agent_id,           subagent_name (terminal,
              attempt_id                                       no ``R`` entry)
index         ``Q`` namespace, expires_at, artifact_ref        size_bytes
artifacts     artifact_ref                                     Artifact
continuations attempt_id                                       ContinuationReceipt
meta          ``b"schema_version"``                            :data:`STORE_SCHEMA_VERSION`
meta          ``b"store_identity"``                            StoreIdentity
quarantine    table, NUL, key                                  the bytes a repair moved aside
============= ================================================ =====================

Events (the outbox, :mod:`storage._events`): when the backend also has the
tables ``host_events`` / ``host_meta`` (:attr:`KernelStore.EVENT_TABLES`; every
store of this package gives them), each operation appends the run and attempt
events of its change inside its own transaction (``_emit``), numbered densely per
session; they have a layout marker and sealing of their own, so the kernel's
migration never seals them.

Checksums (layout 3): every value of every table is *sealed*
(:mod:`storage._sealed`): stored with a CRC-32 over its table, key and bytes.
The kernel runs on a :class:`~storage._sealed.SealedBackend` view, so a value
that fails its check is :class:`CorruptRecord` naming its table and key and
is never decoded; the other records keep being served.

Why this layout: on LMDB every page a commit dirties is written before the
fsync, so an operation should dirty as few pages as it can. The attempt indexes
have their own table: the ``attempts`` tree grows with every record ever
accepted (large values, a deep tree), the index tree only with live and
retained entries (small values), so an index change copies a short path
instead of a branch of the deep tree. A terminal result has *one* index entry
while its retention runs, its ``R`` entry, flagged while undelivered: accept
adds ``G``; terminal drops ``G`` and adds ``R``; claim adds ``C`` (and ``L`` when
the claim names a consumer run); acknowledge drops them and flips the ``R``
flag. The ``L`` entries let a run's terminal commit settle exactly its own
claims (acknowledge on ``completed``, release with suppression on ``failed``
or ``cancelled``) without reading any other result. A store written before
``L`` existed has run-linked claims without it: reconcile still settles them
at their deadline, and ``storage.admin`` check/repair reports and adds the
missing entries. The ``G`` and ``C`` entries live in two
namespace-wide ranges of their own, apart from the per-session ``T`` entries
(``R`` and ``P``), so the range of live attempts and the range of claims hold
only active work however much history the namespace retains; inside each
range a session's entries are adjacent (``G`` namespace, session_id is a
prefix). The price: a terminal commit (``G`` to ``R``) and an acknowledge
(drop ``C``, flip ``R``) can dirty two index leaves (one in the ``G`` or ``C``
range, one among the session's ``T`` entries) where a small session's entries
could share one. The ``G`` entries are at once the
one-active-attempt-per-agent rule and the index of non-terminal attempts.

Every attempt of a session is reachable from the session's own ranges: its
``G`` entry while active, its ``R`` entry while its result is retained, its
``A`` entry after (written by retention expiry, off the hot path, and kept:
attempt records are never deleted). ``list_attempts`` reads those ranges and
``find_agent`` one ``G`` or ``A`` entry (or, for an agent whose results are all
retained, the session's ``R`` entries), so neither reads the rest of the store.
Layout 4 added ``A``; opening an older store writes the ``A`` entries its
records call for, in the migration's transaction.

Cost of maintenance: reconcile and ``list_active_attempts`` read the
namespace's ``G`` and ``C`` ranges only, so they follow the active attempts
and claims, never the history of results nor the number of sessions holding
it. Retention expiry still walks the namespace session by session (seeking
from one session's ``T`` entries to the next) and reads each one's ``R``
entries only up to now (deadline order), so it follows the sessions holding
retained or pending results plus the due results. Listing pending results
reads the ``R`` and ``P`` entries of the session (or namespace) asked for,
i.e. its retained results; the aggregate artifact quota reads ``Q`` entries
from now on (unexpired artifacts only).

Schema: the ``meta`` marker holds :data:`STORE_SCHEMA_VERSION`, the version of
this layout (record formats carry their own ``schema_version``). The marker
is itself sealed from layout 3 on (12 bytes; layouts 1 and 2 wrote 8 plain
bytes), so it also says whether the values are. Opening a store of layout 1
or 2 seals every value first (one write transaction, with the rest of the
migration), then migrates the layout. Opening a
store of layout 1 (every index in ``attempts``, ``G`` and ``C`` entries
under their session's ``T`` prefix, a namespace-wide ``R`` index and a ``P``
entry for every undelivered result) migrates it in one write transaction; a
newer layout is refused with :class:`CorruptRecord`.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import msgspec

from statemachines import (
    DELIVERY,
    EXECUTION,
    RETENTION,
    RUN,
    SESSION,
    DeliveryStatus,
    ExecutionStatus,
    MachineSpec,
    RetentionStatus,
    RunStatus,
    SessionStatus,
)

from . import _codec as codec
from . import _events as evlog
from ._backend import Backend, StoreCounters, Txn
from ._clock import AnchoredClock, Clock, IdSource, RandomIds
from ._continuation import continuation_cause, continuation_input, retained_view
from ._contract import SessionStore
from ._digest import request_digest, result_digest, terminal_fingerprint
from ._errors import (
    AlreadyExists,
    Conflict,
    CorruptRecord,
    Delivered,
    DeliveryClaimed,
    Failed,
    IdempotencyConflict,
    IllegalTransition,
    InvalidRecord,
    NotFound,
    QuotaExceeded,
    RunConflict,
    StaleFence,
    StoreError,
    StoreRefused,
)
from ._faultpoints import instrument_backend
from ._identity import FIX_MOVE_ASIDE, StoreIdentity, decode_identity, encode_identity
from ._records import (
    ASYNC_SUBAGENT_RESULT,
    SCHEMA_VERSION,
    AcquireContinuation,
    Artifact,
    AttemptRecord,
    ConsumerTerminated,
    ContinuationReceipt,
    DeliveryClaim,
    DeliveryRelease,
    OwnerLease,
    ResultRef,
    RunAdmissionReceipt,
    RunRecord,
    SessionRecord,
    TerminalCommit,
)
from ._sealed import SEAL_BYTES, SealedTxn, raw_backend, seal, sealed, unseal

T = TypeVar("T")

_replace = msgspec.structs.replace
_U64 = struct.Struct(">Q")

_IX = "index"
"""The table holding the attempt indexes (see the module docstring)."""

STORE_SCHEMA_VERSION = 4
"""Version of the kernel's table layout, kept in ``meta``. 1: the attempt
indexes in ``attempts``, live attempts and claims under their session's ``T``
prefix, retained results in one namespace-wide ``R`` index beside a ``P`` entry
per undelivered result. 2: the ``index`` table, namespace-wide ``G`` and ``C``
ranges and session-local, flagged ``R`` entries (see the module docstring).
3: every value sealed with its checksum, a store identity in ``meta``, the
``quarantine`` table. 4: ``A`` entries, so a session's attempts are read from
its own index ranges (``list_attempts``, ``find_agent``), not from the whole
``attempts`` table."""

HOST_PROCESS_LOST = "host_process_lost"
"""``failure_category`` of an attempt whose owner lease expired before a terminal commit."""
HOST_PROCESS_LOST_ERROR = "host process lost"
"""The public error text reconcile stores for a lost attempt."""
FAILURE_CATEGORIES = frozenset({"execution_error", "cancelled", HOST_PROCESS_LOST})

_TERMINAL_EXEC = frozenset(EXECUTION.terminal)
_BEFORE_RUNNING = frozenset({ExecutionStatus.ACCEPTED, ExecutionStatus.STARTING})
_RUN_EVENT_KIND = {
    RunStatus.RUNNING: "run.started",
    RunStatus.COMPLETED: "run.completed",
    RunStatus.FAILED: "run.failed",
    RunStatus.CANCELLED: "run.cancelled",
}
_RUN_EVENT_FIELD = {
    RunStatus.COMPLETED: "output",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "reason",
}
_LIVE_RUN = frozenset({RunStatus.ADMITTED, RunStatus.RUNNING})
_DEAD_CONSUMER = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})
_META_SCHEMA = b"schema_version"
_META_IDENTITY = b"store_identity"
_V1_RETAIN = codec.INDEX + b"R"
"""Prefix of layout 1's namespace-wide retention index (migrated on open)."""

# Async-subagent metadata a continuation run must carry (see RunRecord).
_META_ATTEMPT = "async_subagent.attempt_id"
_META_AGENT = "async_subagent.agent_id"
_META_PARENT_RUN = "async_subagent.parent_run_id"
_META_CHILD_RUN = "async_subagent.child_run_id"


def _check(machine: MachineSpec, source: str, dest: str, **fields: Any) -> None:
    """Raise :class:`IllegalTransition` unless the table allows ``source -> dest``."""
    if not machine.allows(source, dest):
        raise IllegalTransition(
            f"{machine.name}: {source} -> {dest} is not an allowed transition",
            machine=machine.name,
            source=str(source),
            dest=str(dest),
            **fields,
        )


def _walk(stored: AttemptRecord, via: tuple[ExecutionStatus, ...]) -> str:
    """Where ``via`` leads from ``stored``'s execution status, each step checked
    against :data:`EXECUTION` (:class:`IllegalTransition` otherwise): the
    intermediate statuses a commit persists in the same transaction as its last.
    A stored status on the path (the owner persisted part of it already, with a
    lease renewal) is where the walk starts."""
    status = str(stored.execution_status)
    if status in via:
        via = via[len(via) - via[::-1].index(ExecutionStatus(status)) :]
    for step in via:
        _check(EXECUTION, status, step, attempt_id=stored.attempt_id)
        status = str(step)
    return status


def _check_progress(stored: AttemptRecord, record: AttemptRecord) -> None:
    """:class:`InvalidRecord` unless ``record`` is ``stored`` with a non-terminal
    execution status and, where none is set yet, a child run id."""
    aid = stored.attempt_id
    if record.execution_status in _TERMINAL_EXEC:
        raise InvalidRecord("terminal outcomes go through commit_terminal", attempt_id=aid)
    if record.child_run_id != stored.child_run_id and stored.child_run_id is not None:
        raise InvalidRecord("child_run_id is already set", attempt_id=aid)
    same = _replace(
        record,
        execution_status=stored.execution_status,
        child_run_id=stored.child_run_id,
        updated_at=stored.updated_at,
        owner_lease=stored.owner_lease,
    )
    if same != stored:
        raise InvalidRecord("only execution_status and child_run_id may change", attempt_id=aid)


MAX_ID_BYTES = 128
"""Longest id the store accepts, in UTF-8 bytes: one LMDB key holds up to three ids
(namespace, session, attempt) within LMDB's 511 bytes, and every store refuses alike."""


def _check_id(what: str, value: object) -> None:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidRecord(f"{what} must be a non-empty string without NUL", field=what)
    if len(value.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise InvalidRecord(f"{what} is longer than {MAX_ID_BYTES} UTF-8 bytes", field=what)


def _time(what: str, value: object) -> float:
    """A finite time or :class:`InvalidRecord` (NaN or infinity would never expire)."""
    # Every record passed through its schema, so times are almost always plain
    # floats: check those with one subtraction (inf - inf and NaN are not 0.0)
    # before the general checks, which cost several isinstance calls a time.
    if type(value) is float and value - value == 0.0:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRecord(f"{what} must be a finite number of seconds", field=what)
    return float(value)


def _times(what: str, *values: object) -> None:
    for value in values:
        _time(what, value)


def _run_live(run: RunRecord, now: float) -> bool:
    """Admitted or running, and (when it has one) under an unexpired admission lease."""
    if run.status not in _LIVE_RUN:
        return False
    lease = run.admission_lease
    return lease is None or lease.lease_expires_at > now


def _normalized_request(run: RunRecord) -> RunRecord:
    # Fields the store stamps are not part of what the caller asked for.
    return _replace(run, created_at=0.0, updated_at=0.0, sequence_no=0)


class KernelStore(SessionStore):
    """The contract logic of :class:`~storage.SessionStore` over a byte-level backend.

    ``backend`` must provide every table in :attr:`TABLES`. ``clock`` is the
    store's time, read once inside each transaction (default: an
    :class:`~storage.AnchoredClock` anchored to the wall clock now, when the store
    is opened, so wall-clock steps later in this process do not move leases).
    ``retention_seconds`` is how long reconcile keeps the result it synthesizes for a lost attempt.

    Threads: every method may be called from any thread; atomicity and
    isolation come from the backend's transactions.

    ``has_events``: whether the backend has :attr:`EVENT_TABLES` (then every run and
    attempt change commits its event with it, and :meth:`append_event` works).
    """

    TABLES: tuple[str, ...] = (
        "sessions",
        "runs",
        "receipts",
        "attempts",
        "index",
        "artifacts",
        "continuations",
        "meta",
        "quarantine",
    )
    EVENT_TABLES: tuple[str, ...] = evlog.EVENT_TABLES
    """The outbox's tables (:mod:`storage._events`): a backend that has them gets
    every run and attempt event appended in the transaction of its change."""

    def __init__(
        self,
        backend: Backend,
        *,
        clock: Clock | None = None,
        retention_seconds: float = 86400.0,
        ids: IdSource | None = None,
        expect_store_id: str | None = None,
    ) -> None:
        missing = sorted(set(self.TABLES) - set(backend.tables))
        if missing:
            raise Failed("backend lacks tables the kernel needs", tables=missing)
        if not retention_seconds > 0:
            raise ValueError("retention_seconds must be positive")
        if isinstance(backend, evlog.EventOutbox):  # another store's view: share its backend
            backend = backend.inner
        self._raw_backend = raw_backend(backend)
        self._outbox = evlog.EventOutbox(sealed(backend))
        self._backend: Backend = instrument_backend(self._outbox)
        self.has_events = set(self.EVENT_TABLES) <= set(backend.tables)
        self.clock: Clock = clock if clock is not None else AnchoredClock()
        self.retention_seconds = float(retention_seconds)
        self.identity: StoreIdentity = self._open_layout(
            ids if ids is not None else RandomIds(), expect_store_id
        )
        if self.has_events:
            evlog.open_event_layout(self._raw_backend)

    @property
    def backend(self) -> Backend:
        """The backend this store runs on, as the kernel sees it: every value is
        sealed on write and checked on read (tests inject bytes through it)."""
        return self._backend

    @property
    def raw_backend(self) -> Backend:
        """The backend under the checksums: values as stored, seals included."""
        return self._raw_backend

    def _open_layout(self, ids: IdSource, expect_store_id: str | None) -> StoreIdentity:
        """Stamp a fresh store with the layout version and its identity, migrate
        layouts 1 to 3, refuse any other version (:class:`CorruptRecord` naming
        the version found and the one expected). Returns the store's identity.

        ``expect_store_id`` (the LMDB marker's) says the store exists already:
        then a database without that identity is :class:`StoreRefused` and
        nothing is written to it."""

        def look(txn: Txn) -> tuple[int | None, bool, StoreIdentity | None]:
            version, is_sealed = _layout_of(txn)
            identity = _identity_of(txn) if is_sealed else None
            _expect(identity, expect_store_id)
            return version, is_sealed, identity

        def fn(txn: Txn) -> StoreIdentity:
            # Decided again inside the write: another process may have done it.
            version, is_sealed, identity = look(txn)
            if version == STORE_SCHEMA_VERSION and identity is not None:
                return identity
            if not is_sealed:
                _seal_every_value(txn, self.TABLES)
            view = SealedTxn(txn)
            if version == 1:
                self._migrate_from_1(view)
            if version is not None and version < 4:
                _index_agents(view)
            if identity is None:
                identity = StoreIdentity(
                    store_id=str(ids.uuid4()),
                    layout=STORE_SCHEMA_VERSION,
                    created_at=self.clock.now(),
                )
                view.put("meta", _META_IDENTITY, encode_identity(identity))
            view.put("meta", _META_SCHEMA, _U64.pack(STORE_SCHEMA_VERSION))
            return identity

        version, _, identity = self._raw_backend.read(look)
        if version == STORE_SCHEMA_VERSION and identity is not None:
            return identity
        return self._raw_backend.write(fn)

    def _migrate_from_1(self, txn: Txn) -> None:
        """Layout 1 to 2: move every index entry from ``attempts`` to ``index``;
        a session's ``T`` ... ``G`` / ``C`` entry moves to the namespace-wide
        ``G`` / ``C`` range; a namespace-wide ``R`` entry becomes its session's
        flagged ``R`` entry, which replaces the ``P`` entry of an undelivered
        result."""
        entries = list(txn.scan("attempts", codec.INDEX))
        retained: list[str] = []
        for k, value in entries:
            txn.delete("attempts", k)
            if k.startswith(_V1_RETAIN):
                # ``R ns\0 time_key(deadline) \0 attempt_id``: the id follows the deadline.
                retained.append(k[k.index(codec.SEP, 2) + 10 :].decode("utf-8"))
            elif k.startswith(codec.TRACK):
                txn.put(_IX, _from_layout_1_track(k), value)
            else:
                txn.put(_IX, k, value)
        for attempt_id in retained:
            record = self._attempt(txn, attempt_id)
            key = _retain_key(record)
            if key is None:
                continue  # no retention left to index: its P entry (if any) stays
            delivered = record.delivery_status == DeliveryStatus.DELIVERED
            txn.put(_IX, key, codec.DELIVERED if delivered else codec.UNDELIVERED)
            txn.delete(
                _IX,
                codec.pending_key(record.namespace_id, record.parent_session_id, attempt_id),
            )

    # -- low-level helpers (inside a transaction) --------------------------------------------

    @staticmethod
    def _session(txn: Txn, session_id: str) -> SessionRecord | None:
        k = codec.key(session_id)
        raw = txn.get("sessions", k)
        return None if raw is None else codec.SESSION.decode(raw, table="sessions", key=k)

    @staticmethod
    def _run(txn: Txn, session_id: str, run_id: str) -> RunRecord | None:
        k = codec.run_key(session_id, run_id)
        raw = txn.get("runs", k)
        return None if raw is None else codec.RUN.decode(raw, table="runs", key=k)

    @staticmethod
    def _head(txn: Txn, session_id: str) -> codec.RunHead | None:
        k = codec.ikey(codec.HEAD, session_id)
        raw = txn.get("runs", k)
        return None if raw is None else codec.RUN_HEAD.decode(raw, table="runs", key=k)

    @staticmethod
    def _attempt(txn: Txn, attempt_id: str) -> AttemptRecord:
        k = codec.attempt_key(attempt_id)
        raw = txn.get("attempts", k)
        if raw is None:
            raise NotFound("no such attempt", attempt_id=attempt_id)
        return codec.ATTEMPT.decode(raw, table="attempts", key=k)

    @staticmethod
    def _put_attempt(txn: Txn, record: AttemptRecord) -> None:
        txn.put("attempts", codec.attempt_key(record.attempt_id), codec.ATTEMPT.encode(record))

    def _emit(
        self,
        txn: Txn,
        session_id: str,
        kind: str,
        run_id: str | None,
        data: dict[str, Any],
        *,
        now: float,
    ) -> None:
        """Append one event in this transaction (the outbox); nothing without event tables."""
        if self.has_events:
            self._outbox.append(txn, session_id, kind, run_id, data, at=now)

    def _emit_attempt(
        self, txn: Txn, record: AttemptRecord, kind: str, now: float, **data: Any
    ) -> None:
        """An ``attempt.*`` event of ``record``, under its parent session and run."""
        data = {"attempt_id": record.attempt_id, **data}
        self._emit(txn, record.parent_session_id, kind, record.parent_run_id, data, now=now)

    def _emit_run(self, txn: Txn, run: RunRecord, now: float, extra: dict[str, Any] | None) -> None:
        """``run.started`` or the run's terminal event, with the caller's ``extra``."""
        kind = _RUN_EVENT_KIND.get(run.status)
        if kind is None:
            return
        if run.status == RunStatus.RUNNING:
            data: dict[str, Any] = {"profile": run.profile} if run.profile else {}
        else:
            data = {_RUN_EVENT_FIELD[run.status]: run.output_preview}
        if extra:
            data.update(extra)
        self._emit(txn, run.session_id, kind, run.run_id, data, now=now)

    def _emit_started(self, txn: Txn, record: AttemptRecord, now: float) -> None:
        fencing = record.owner_lease.fencing_generation
        self._emit_attempt(txn, record, "attempt.started", now, fencing_generation=fencing)

    def _emit_terminal(
        self, txn: Txn, record: AttemptRecord, now: float, *, started: bool = False
    ) -> None:
        """``attempt.terminal`` (after ``attempt.started`` when the same commit also
        made the attempt running)."""
        if started:
            self._emit_started(txn, record, now)
        ref = record.result_ref
        data: dict[str, Any] = {"status": str(record.execution_status)}
        if record.failure_category is not None:
            data["error_category"] = record.failure_category
        if ref is not None:
            data["result_digest"] = ref.digest
            data["result_bytes"] = ref.size_bytes
        self._emit_attempt(txn, record, "attempt.terminal", now, **data)

    def _live_head(self, txn: Txn, session_id: str, now: float) -> RunRecord | None:
        """The session's latest run when it is live. Earlier runs cannot be: a run
        is only admitted while the previous head is not live, and an expired
        admission lease never revives."""
        head = self._head(txn, session_id)
        if head is None:
            return None
        run = self._run(txn, session_id, head.run_id)
        if run is None:
            raise CorruptRecord(
                "session head names a missing run",
                table="runs",
                key=codec.ikey(codec.HEAD, session_id),
            )
        return run if _run_live(run, now) else None

    def _insert_run(self, txn: Txn, run: RunRecord, now: float) -> RunRecord:
        """Allocate ``sequence_no``, stamp times and store a new head run."""
        head = self._head(txn, run.session_id)
        seq = 1 if head is None else head.sequence_no + 1
        stored = _replace(run, created_at=now, updated_at=now, sequence_no=seq)
        txn.put("runs", codec.run_key(run.session_id, run.run_id), codec.RUN.encode(stored))
        txn.put("runs", codec.seq_key(run.session_id, seq), run.run_id.encode("utf-8"))
        txn.put(
            "runs",
            codec.ikey(codec.HEAD, run.session_id),
            codec.RUN_HEAD.encode(codec.RunHead(sequence_no=seq, run_id=run.run_id)),
        )
        return stored

    @staticmethod
    def _require_owner(
        stored: AttemptRecord, host_instance_id: str, fencing_generation: int, now: float
    ) -> None:
        lease = stored.owner_lease
        if (
            lease.host_instance_id != host_instance_id
            or lease.fencing_generation != fencing_generation
        ):
            raise StaleFence(
                "writer is not the current owner",
                attempt_id=stored.attempt_id,
                owner=lease.host_instance_id,
                fencing_generation=lease.fencing_generation,
                writer=host_instance_id,
                writer_generation=fencing_generation,
            )
        if lease.lease_expires_at <= now:
            raise StaleFence(
                "owner lease expired",
                attempt_id=stored.attempt_id,
                owner=lease.host_instance_id,
                fencing_generation=lease.fencing_generation,
                lease_expires_at=lease.lease_expires_at,
                now=now,
            )

    def _require_not_fenced(self, txn: Txn, record: AttemptRecord) -> None:
        # The session record is the one source of truth for the fence; a missing
        # session fails closed too.
        session = self._session(txn, record.parent_session_id)
        if session is None or session.status == SessionStatus.DELETING:
            raise Conflict(
                "session is fenced for deletion",
                attempt_id=record.attempt_id,
                session_id=record.parent_session_id,
            )

    @staticmethod
    def _leave_active(txn: Txn, record: AttemptRecord, *, pending: bool = True) -> None:
        """Drop a newly terminal attempt from the active indexes; index it as pending,
        unless ``pending`` is false (delivered in the same commit: ``_deliver`` writes
        its retained entry, so it is not written twice)."""
        ns, sess, aid = record.namespace_id, record.parent_session_id, record.attempt_id
        agent_key = codec.agent_key(ns, sess, record.agent_id)
        if txn.get(_IX, agent_key) == aid.encode("utf-8"):
            txn.delete(_IX, agent_key)
        if _retain_key(record) is None:  # no ``R`` entry will hold it (no deadline)
            _put_agent_entry(txn, record)
        if not pending:
            return
        deadline = record.retention_expires_at
        if deadline is None:
            txn.put(_IX, codec.pending_key(ns, sess, aid), b"")
        else:
            txn.put(_IX, codec.retain_key(ns, sess, deadline, aid), codec.UNDELIVERED)

    def _deliver(
        self,
        txn: Txn,
        record: AttemptRecord,
        claim_id: str,
        now: float,
        *,
        continuation_run_id: str | None = None,
    ) -> AttemptRecord:
        _check(
            DELIVERY, record.delivery_status, DeliveryStatus.DELIVERED, attempt_id=record.attempt_id
        )
        claim = record.delivery_claim
        new = _replace(
            record,
            delivery_status=DeliveryStatus.DELIVERED,
            delivery_claim=None,
            delivered_claim_id=claim_id,
            delivered_to_run_id=claim.continuation_run_id if claim is not None else None,
            automatic_continuation_suppressed_by_run_id=None,
            continuation_run_id=continuation_run_id or record.continuation_run_id,
            updated_at=now,
        )
        ns = record.namespace_id
        retained = _retain_key(record)
        if retained is None:
            txn.delete(_IX, codec.pending_key(ns, record.parent_session_id, record.attempt_id))
        else:
            txn.put(_IX, retained, codec.DELIVERED)
        if claim is not None:
            self._drop_claim_entries(txn, record, claim)
        self._put_attempt(txn, new)
        self._emit_attempt(
            txn,
            new,
            "attempt.delivered",
            now,
            claim_id=claim_id,
            consumer_run_id=new.delivered_to_run_id,
        )
        return new

    @staticmethod
    def _drop_claim_entries(txn: Txn, record: AttemptRecord, claim: DeliveryClaim) -> None:
        """Remove a claim's ``C`` entry and, when it names a consumer run, its ``L`` entry."""
        sess, aid = record.parent_session_id, record.attempt_id
        txn.delete(_IX, codec.claim_key(record.namespace_id, sess, aid))
        if claim.continuation_run_id is not None:
            txn.delete(_IX, codec.link_key(sess, claim.continuation_run_id, aid))

    def _put_claim(
        self, txn: Txn, record: AttemptRecord, claim: DeliveryClaim, now: float
    ) -> AttemptRecord:
        """Store ``record`` claimed under ``claim`` (replacing any claim it holds)."""
        if record.delivery_status != DeliveryStatus.CLAIMED:
            _check(
                DELIVERY,
                record.delivery_status,
                DeliveryStatus.CLAIMED,
                attempt_id=record.attempt_id,
            )
        if record.delivery_claim is not None:
            self._drop_claim_entries(txn, record, record.delivery_claim)
        new = _replace(
            record, delivery_status=DeliveryStatus.CLAIMED, delivery_claim=claim, updated_at=now
        )
        self._put_attempt(txn, new)
        sess, aid = record.parent_session_id, record.attempt_id
        txn.put(
            _IX, codec.claim_key(record.namespace_id, sess, aid), codec.time_key(claim.deadline)
        )
        if claim.continuation_run_id is not None:
            txn.put(_IX, codec.link_key(sess, claim.continuation_run_id, aid), b"")
        self._emit_attempt(
            txn,
            new,
            "attempt.claimed",
            now,
            claim_id=claim.claim_id,
            consumer_run_id=claim.continuation_run_id,
        )
        return new

    def _release(
        self, txn: Txn, record: AttemptRecord, now: float, suppress_by: str | None
    ) -> AttemptRecord:
        _check(
            DELIVERY,
            record.delivery_status,
            DeliveryStatus.UNDELIVERED,
            attempt_id=record.attempt_id,
        )
        new = _replace(
            record,
            delivery_status=DeliveryStatus.UNDELIVERED,
            delivery_claim=None,
            automatic_continuation_suppressed_by_run_id=(
                suppress_by or record.automatic_continuation_suppressed_by_run_id
            ),
            updated_at=now,
        )
        if record.delivery_claim is not None:
            self._drop_claim_entries(txn, record, record.delivery_claim)
        self._put_attempt(txn, new)
        self._emit_attempt(
            txn,
            new,
            "attempt.released",
            now,
            claim_id=record.delivery_claim.claim_id if record.delivery_claim else None,
            suppressed_by_run_id=new.automatic_continuation_suppressed_by_run_id,
        )
        return new

    def _settle_linked(self, txn: Txn, run: RunRecord, now: float) -> None:
        """A consumer run's terminal commit settles the claims linked to it, in the same
        transaction: ``completed`` acknowledges them, ``failed`` or ``cancelled``
        releases them with suppression, or without when the run's admission lease had
        lapsed (a dead host's run, recorded by a reconciler: a lost consumer)."""
        lease = run.admission_lease
        lost = lease is not None and lease.lease_expires_at <= now
        prefix = codec.link_prefix(run.session_id, run.run_id)
        cut = len(prefix)
        ids = [k[cut:].decode("utf-8") for k, _ in txn.scan(_IX, prefix)]
        for attempt_id in ids:
            record = self._attempt(txn, attempt_id)
            claim = record.delivery_claim
            if (
                record.delivery_status != DeliveryStatus.CLAIMED
                or claim is None
                or claim.continuation_run_id != run.run_id
            ):
                raise CorruptRecord(
                    "link index names a result not claimed for the run",
                    table=_IX,
                    key=codec.link_key(run.session_id, run.run_id, attempt_id),
                )
            if run.status == RunStatus.COMPLETED:
                self._deliver(txn, record, claim.claim_id, now)
            else:
                self._release(txn, record, now, None if lost else run.run_id)

    def _settle_expired_claim(
        self, txn: Txn, record: AttemptRecord, now: float
    ) -> tuple[str, AttemptRecord]:
        """Decide the fate of a claim whose deadline passed.

        ``("keep", record)`` while its consumer run is live under its admission
        lease; ``("acknowledged", new)`` if the consumer completed; otherwise
        ``("released", new)`` (suppressing automatic continuation when the
        consumer failed or was cancelled).
        """
        claim = record.delivery_claim
        assert claim is not None  # callers only pass claimed records
        run = None
        if claim.continuation_run_id is not None:
            run = self._run(txn, record.parent_session_id, claim.continuation_run_id)
        if run is not None and _run_live(run, now):
            return "keep", record
        if run is not None and run.status == RunStatus.COMPLETED:
            return "acknowledged", self._deliver(txn, record, claim.claim_id, now)
        suppress = run.run_id if run is not None and run.status in _DEAD_CONSUMER else None
        return "released", self._release(txn, record, now, suppress)

    # -- sessions ----------------------------------------------------------------------------

    def create_session(self, session: SessionRecord) -> SessionRecord:
        session = codec.SESSION.normalize(session, what="SessionRecord")
        _times("session times", session.created_at, session.updated_at)
        _check_id("session_id", session.session_id)
        _check_id("namespace_id", session.namespace_id)
        if session.status == SessionStatus.DELETING:
            raise InvalidRecord("a new session cannot be fenced", session_id=session.session_id)
        if session.schema_version != SCHEMA_VERSION:
            raise InvalidRecord("unsupported schema_version", session_id=session.session_id)

        def fn(txn: Txn) -> SessionRecord:
            existing = self._session(txn, session.session_id)
            if existing is not None:
                if existing == session:
                    return existing
                raise AlreadyExists("another session holds this id", session_id=session.session_id)
            txn.put("sessions", codec.key(session.session_id), codec.SESSION.encode(session))
            return session

        return self.backend.write(fn)

    def load_session(self, session_id: str) -> SessionRecord:
        def fn(txn: Txn) -> SessionRecord:
            session = self._session(txn, session_id)
            if session is None:
                raise NotFound("no such session", session_id=session_id)
            return session

        return self.backend.read(fn)

    def list_sessions(self, namespace_id: str) -> list[SessionRecord]:
        def fn(txn: Txn) -> list[SessionRecord]:
            out = []
            for k, raw in txn.scan("sessions"):
                session = codec.SESSION.decode(raw, table="sessions", key=k)
                if session.namespace_id == namespace_id:
                    out.append(session)
            return out

        return self.backend.read(fn)

    def update_session_status(self, session_id: str, status: SessionStatus) -> SessionRecord:
        def fn(txn: Txn) -> SessionRecord:
            now = self.clock.now()
            session = self._session(txn, session_id)
            if session is None:
                raise NotFound("no such session", session_id=session_id)
            if session.status == status:
                return session
            if status == SessionStatus.DELETING:
                raise IllegalTransition(
                    "use fence_session_deletion to fence a session",
                    machine=SESSION.name,
                    source=str(session.status),
                    dest=str(status),
                    session_id=session_id,
                )
            _check(SESSION, session.status, status, session_id=session_id)
            new = _replace(session, status=status, updated_at=now)
            txn.put("sessions", codec.key(session_id), codec.SESSION.encode(new))
            return new

        return self.backend.write(fn)

    def fence_session_deletion(self, session_id: str) -> SessionRecord:
        def fn(txn: Txn) -> SessionRecord:
            now = self.clock.now()
            session = self._session(txn, session_id)
            if session is None:
                raise NotFound("no such session", session_id=session_id)
            if session.status == SessionStatus.DELETING:
                return session
            agents = codec.live_prefix(session.namespace_id, session_id)
            for _, raw_id in txn.scan(_IX, agents):
                attempt_id = raw_id.decode("utf-8")
                record = self._attempt(txn, attempt_id)
                if record.owner_lease.lease_expires_at > now:
                    raise Conflict(
                        "an attempt of the session holds a live lease",
                        session_id=session_id,
                        attempt_id=attempt_id,
                        owner=record.owner_lease.host_instance_id,
                        lease_expires_at=record.owner_lease.lease_expires_at,
                    )
            _check(SESSION, session.status, SessionStatus.DELETING, session_id=session_id)
            new = _replace(session, status=SessionStatus.DELETING, updated_at=now)
            txn.put("sessions", codec.key(session_id), codec.SESSION.encode(new))
            return new

        return self.backend.write(fn)

    # -- runs --------------------------------------------------------------------------------

    def admit_run(
        self, run: RunRecord, *, idempotency_key: str | None = None
    ) -> RunAdmissionReceipt:
        run = codec.RUN.normalize(run, what="RunRecord")
        _check_id("session_id", run.session_id)
        _check_id("run_id", run.run_id)
        if run.admission_lease is not None:
            _time("admission lease_expires_at", run.admission_lease.lease_expires_at)
        if idempotency_key is not None:
            _check_id("idempotency_key", idempotency_key)
        if run.trigger_type == ASYNC_SUBAGENT_RESULT:
            raise InvalidRecord(
                "continuation runs are admitted only through acquire_continuation",
                run_id=run.run_id,
            )
        if run.status != RunStatus.ADMITTED or run.schema_version != SCHEMA_VERSION:
            raise InvalidRecord("a new run must be admitted", run_id=run.run_id)
        lease = run.admission_lease
        if lease is not None and (
            not lease.admission_id or not lease.host_instance_id or lease.fencing_generation <= 0
        ):
            raise InvalidRecord("invalid admission lease", run_id=run.run_id)
        digest = request_digest(_normalized_request(run))

        def fn(txn: Txn) -> RunAdmissionReceipt:
            now = self.clock.now()
            receipt_key = None
            if idempotency_key is not None:
                receipt_key = codec.key(run.session_id, idempotency_key)
                raw = txn.get("receipts", receipt_key)
                if raw is not None:
                    prior = codec.ADMISSION_RECEIPT.decode(raw, table="receipts", key=receipt_key)
                    if prior.request_digest != digest:
                        raise IdempotencyConflict(
                            "idempotency key reused with another request",
                            session_id=run.session_id,
                            idempotency_key=idempotency_key,
                        )
                    return _replace(prior, idempotent_replay=True)
            session = self._session(txn, run.session_id)
            if session is None:
                raise NotFound("no such session", session_id=run.session_id)
            if session.status != SessionStatus.ACTIVE:
                raise Conflict(
                    "session is not active", session_id=run.session_id, status=str(session.status)
                )
            if self._run(txn, run.session_id, run.run_id) is not None:
                raise AlreadyExists(
                    "run already exists", session_id=run.session_id, run_id=run.run_id
                )
            if lease is not None and lease.lease_expires_at <= now:
                raise Conflict("admission lease already expired", run_id=run.run_id)
            live = self._live_head(txn, run.session_id, now)
            if live is not None:
                raise RunConflict(
                    "another run of the session is live",
                    session_id=run.session_id,
                    run_id=live.run_id,
                )
            stored = self._insert_run(txn, run, now)
            self._emit(
                txn,
                run.session_id,
                "run.admitted",
                run.run_id,
                {"trigger_type": run.trigger_type},
                now=now,
            )
            receipt = RunAdmissionReceipt(
                run=stored, idempotency_key=idempotency_key, request_digest=digest
            )
            if receipt_key is not None:
                txn.put("receipts", receipt_key, codec.ADMISSION_RECEIPT.encode(receipt))
            return receipt

        return self.backend.write(fn)

    def load_run(self, session_id: str, run_id: str) -> RunRecord:
        def fn(txn: Txn) -> RunRecord:
            run = self._run(txn, session_id, run_id)
            if run is None:
                raise NotFound("no such run", session_id=session_id, run_id=run_id)
            return run

        return self.backend.read(fn)

    def list_runs(self, session_id: str) -> list[RunRecord]:
        def fn(txn: Txn) -> list[RunRecord]:
            out = []
            for k, raw in txn.scan("runs", codec.iprefix(codec.SEQ, session_id)):
                run_id = raw.decode("utf-8", errors="replace")
                run = self._run(txn, session_id, run_id)
                if run is None:
                    raise CorruptRecord("run index names a missing run", table="runs", key=k)
                out.append(run)
            return out

        return self.backend.read(fn)

    def head_run_id(self, session_id: str) -> str | None:
        head = self.backend.read(lambda txn: self._head(txn, session_id))
        return None if head is None else head.run_id

    def transition_run(
        self,
        session_id: str,
        run_id: str,
        status: RunStatus,
        *,
        admission_id: str | None = None,
        output_preview: str | None = None,
        event_data: dict[str, Any] | None = None,
    ) -> RunRecord:
        def fn(txn: Txn) -> RunRecord:
            now = self.clock.now()
            run = self._run(txn, session_id, run_id)
            if run is None:
                raise NotFound("no such run", session_id=session_id, run_id=run_id)
            lease = run.admission_lease
            if lease is not None and admission_id != lease.admission_id:
                raise StaleFence(
                    "admission id does not match the run's lease",
                    session_id=session_id,
                    run_id=run_id,
                    admission_id=admission_id,
                )
            if run.status == status and (
                output_preview is None or output_preview == run.output_preview
            ):
                return run
            # A run whose lease lapsed may still be failed or cancelled (a dead host's
            # run, by the reconciler), never resumed or completed: its claims may have
            # been released to a replacement consumer already.
            if (
                status in (RunStatus.RUNNING, RunStatus.COMPLETED)
                and lease is not None
                and lease.lease_expires_at <= now
            ):
                raise StaleFence(
                    "admission lease expired",
                    session_id=session_id,
                    run_id=run_id,
                    lease_expires_at=lease.lease_expires_at,
                )
            _check(RUN, run.status, status, session_id=session_id, run_id=run_id)
            new = _replace(
                run,
                status=status,
                updated_at=now,
                output_preview=output_preview if output_preview is not None else run.output_preview,
            )
            txn.put("runs", codec.run_key(session_id, run_id), codec.RUN.encode(new))
            if run.status != status:
                self._emit_run(txn, new, now, event_data)
            if status not in _LIVE_RUN:
                self._settle_linked(txn, new, now)
            return new

        return self.backend.write(fn)

    def renew_run_admission(
        self, session_id: str, run_id: str, admission_id: str, lease_expires_at: float
    ) -> RunRecord:
        lease_expires_at = _time("lease_expires_at", lease_expires_at)

        def fn(txn: Txn) -> RunRecord:
            now = self.clock.now()
            run = self._run(txn, session_id, run_id)
            if run is None:
                raise NotFound("no such run", session_id=session_id, run_id=run_id)
            lease = run.admission_lease
            if lease is None or lease.admission_id != admission_id:
                raise StaleFence(
                    "admission id does not match the run's lease",
                    session_id=session_id,
                    run_id=run_id,
                    admission_id=admission_id,
                )
            if run.status not in _LIVE_RUN:
                raise Conflict("run is terminal", session_id=session_id, run_id=run_id)
            if lease.lease_expires_at <= now:
                raise StaleFence(
                    "admission lease expired",
                    session_id=session_id,
                    run_id=run_id,
                    lease_expires_at=lease.lease_expires_at,
                )
            if lease_expires_at <= now:
                raise Conflict("new expiry is not in the future", run_id=run_id, now=now)
            new = _replace(
                run,
                admission_lease=_replace(lease, lease_expires_at=float(lease_expires_at)),
                updated_at=now,
            )
            txn.put("runs", codec.run_key(session_id, run_id), codec.RUN.encode(new))
            return new

        return self.backend.write(fn)

    # -- background attempts -----------------------------------------------------------------

    def accept_attempt(self, record: AttemptRecord) -> AttemptRecord:
        record = codec.ATTEMPT.normalize(record, what="AttemptRecord")
        _validate_acceptance(record)

        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            k = codec.attempt_key(record.attempt_id)
            raw = txn.get("attempts", k)
            if raw is not None:
                existing = codec.ATTEMPT.decode(raw, table="attempts", key=k)
                if existing == record:
                    return existing
                raise AlreadyExists("another attempt holds this id", attempt_id=record.attempt_id)
            if record.owner_lease.lease_expires_at <= now:
                raise Conflict(
                    "acceptance lease already expired",
                    attempt_id=record.attempt_id,
                    lease_expires_at=record.owner_lease.lease_expires_at,
                    now=now,
                )
            session = self._session(txn, record.parent_session_id)
            if session is None:
                raise Conflict(
                    "parent session does not exist",
                    attempt_id=record.attempt_id,
                    session_id=record.parent_session_id,
                )
            if (
                session.status != SessionStatus.ACTIVE
                or session.namespace_id != record.namespace_id
            ):
                raise Conflict(
                    "parent session is not active in this namespace",
                    attempt_id=record.attempt_id,
                    session_id=record.parent_session_id,
                    status=str(session.status),
                )
            ns, sess = record.namespace_id, record.parent_session_id
            agent_key = codec.agent_key(ns, sess, record.agent_id)
            holder = txn.get(_IX, agent_key)
            if holder is not None:
                raise Conflict(
                    "another non-terminal attempt holds this agent_id",
                    attempt_id=record.attempt_id,
                    agent_id=record.agent_id,
                    holder=holder.decode("utf-8", errors="replace"),
                )
            txn.put("attempts", k, codec.ATTEMPT.encode(record))
            txn.put(_IX, agent_key, record.attempt_id.encode("utf-8"))
            lease = record.owner_lease
            self._emit_attempt(
                txn,
                record,
                "attempt.accepted",
                now,
                agent_id=record.agent_id,
                fencing_generation=lease.fencing_generation,
                owner=lease.host_instance_id,
            )
            return record

        return self.backend.write(fn)

    def update_attempt_execution(self, record: AttemptRecord) -> AttemptRecord:
        record = codec.ATTEMPT.normalize(record, what="AttemptRecord")

        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            stored = self._attempt(txn, record.attempt_id)
            lease = record.owner_lease
            self._require_owner(stored, lease.host_instance_id, lease.fencing_generation, now)
            if stored.execution_status in _TERMINAL_EXEC:
                raise IllegalTransition(
                    "attempt is terminal",
                    machine=EXECUTION.name,
                    source=str(stored.execution_status),
                    dest=str(record.execution_status),
                    attempt_id=stored.attempt_id,
                )
            self._require_not_fenced(txn, stored)
            if record.execution_status in _TERMINAL_EXEC:
                raise InvalidRecord(
                    "terminal outcomes go through commit_terminal", attempt_id=stored.attempt_id
                )
            child = record.child_run_id
            if child != stored.child_run_id and stored.child_run_id is not None:
                raise InvalidRecord("child_run_id is already set", attempt_id=stored.attempt_id)
            unchanged = _replace(
                record,
                execution_status=stored.execution_status,
                child_run_id=stored.child_run_id,
                updated_at=stored.updated_at,
                owner_lease=stored.owner_lease,
            )
            if unchanged != stored:
                raise InvalidRecord(
                    "only execution_status and child_run_id may change",
                    attempt_id=stored.attempt_id,
                )
            if record.execution_status == stored.execution_status and child == stored.child_run_id:
                return stored
            if record.execution_status != stored.execution_status:
                _check(
                    EXECUTION,
                    stored.execution_status,
                    record.execution_status,
                    attempt_id=stored.attempt_id,
                )
            new = _replace(
                stored,
                execution_status=record.execution_status,
                child_run_id=child,
                updated_at=now,
            )
            self._put_attempt(txn, new)
            if new.execution_status == ExecutionStatus.RUNNING and (
                stored.execution_status in _BEFORE_RUNNING
            ):
                self._emit_started(txn, new, now)
            return new

        return self.backend.write(fn)

    def advance_attempt(
        self,
        record: AttemptRecord,
        *,
        via: tuple[ExecutionStatus, ...] = (),
        lease_expires_at: float | None = None,
    ) -> AttemptRecord:
        """The progress of a heartbeat tick and the lease renewal in one transaction:
        every step checked as :meth:`update_attempt_execution` checks one, the
        renewal as :meth:`heartbeat_attempt` checks it; one durable commit."""
        record = codec.ATTEMPT.normalize(record, what="AttemptRecord")
        expiry = None if lease_expires_at is None else _time("lease_expires_at", lease_expires_at)

        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            stored = self._attempt(txn, record.attempt_id)
            writer = record.owner_lease
            self._require_owner(stored, writer.host_instance_id, writer.fencing_generation, now)
            if stored.execution_status in _TERMINAL_EXEC:
                raise Conflict("attempt is terminal", attempt_id=stored.attempt_id)
            self._require_not_fenced(txn, stored)
            _check_progress(stored, record)
            reached = _walk(stored, via)
            if record.execution_status != reached:
                _check(EXECUTION, reached, record.execution_status, attempt_id=stored.attempt_id)
            lease = stored.owner_lease
            if expiry is not None:
                if expiry <= now:
                    raise Conflict(
                        "new lease expiry is not in the future",
                        attempt_id=stored.attempt_id,
                        now=now,
                    )
                lease = _replace(lease, heartbeat_at=now, lease_expires_at=expiry)
            new = _replace(
                stored,
                execution_status=record.execution_status,
                child_run_id=record.child_run_id,
                owner_lease=lease,
                updated_at=now,
            )
            self._put_attempt(txn, new)
            path = (*via, new.execution_status)
            if stored.execution_status in _BEFORE_RUNNING and ExecutionStatus.RUNNING in path:
                self._emit_started(txn, new, now)
            return new

        return self.backend.write(fn)

    def heartbeat_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        lease_expires_at = _time("lease_expires_at", lease_expires_at)

        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            stored = self._attempt(txn, attempt_id)
            self._require_owner(stored, host_instance_id, fencing_generation, now)
            if stored.execution_status in _TERMINAL_EXEC:
                raise Conflict("attempt is terminal", attempt_id=attempt_id)
            if lease_expires_at <= now:
                raise Conflict(
                    "new lease expiry is not in the future", attempt_id=attempt_id, now=now
                )
            self._require_not_fenced(txn, stored)
            new = _replace(
                stored,
                owner_lease=_replace(
                    stored.owner_lease, heartbeat_at=now, lease_expires_at=float(lease_expires_at)
                ),
                updated_at=now,
            )
            self._put_attempt(txn, new)
            return new

        return self.backend.write(fn)

    def take_over_attempt(
        self,
        attempt_id: str,
        host_instance_id: str,
        fencing_generation: int,
        lease_expires_at: float,
    ) -> AttemptRecord:
        lease_expires_at = _time("lease_expires_at", lease_expires_at)
        _check_id("host_instance_id", host_instance_id)

        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            stored = self._attempt(txn, attempt_id)
            if stored.execution_status in _TERMINAL_EXEC:
                raise Conflict("attempt is terminal", attempt_id=attempt_id)
            lease = stored.owner_lease
            if lease.lease_expires_at > now:
                raise StaleFence(
                    "current owner lease is live",
                    attempt_id=attempt_id,
                    owner=lease.host_instance_id,
                    fencing_generation=lease.fencing_generation,
                    lease_expires_at=lease.lease_expires_at,
                )
            if fencing_generation <= lease.fencing_generation:
                raise StaleFence(
                    "takeover needs a newer fencing generation",
                    attempt_id=attempt_id,
                    owner=lease.host_instance_id,
                    fencing_generation=lease.fencing_generation,
                    writer_generation=fencing_generation,
                )
            if lease_expires_at <= now:
                raise Conflict(
                    "new lease expiry is not in the future", attempt_id=attempt_id, now=now
                )
            self._require_not_fenced(txn, stored)
            new = _replace(
                stored,
                owner_lease=OwnerLease(
                    host_instance_id=host_instance_id,
                    fencing_generation=fencing_generation,
                    heartbeat_at=now,
                    lease_expires_at=float(lease_expires_at),
                ),
                updated_at=now,
            )
            self._put_attempt(txn, new)
            return new

        return self.backend.write(fn)

    def commit_terminal(self, commit: TerminalCommit) -> AttemptRecord:
        commit = codec.TERMINAL_COMMIT.normalize(commit, what="TerminalCommit")
        record = commit.record
        handed_to = commit.deliver_claim_id
        if handed_to is not None:
            _check_id("deliver_claim_id", handed_to)
        # Pure work (hashing, validating the submitted projection) happens before
        # the transaction so the writer holds the lock for as little as possible.
        fingerprint = terminal_fingerprint(commit)

        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            stored = self._attempt(txn, record.attempt_id)
            if stored.execution_status in _TERMINAL_EXEC:
                if stored.terminal_fingerprint is not None and (
                    stored.terminal_fingerprint == fingerprint
                ):
                    return stored
                raise Conflict(
                    "attempt already has a different terminal outcome",
                    attempt_id=stored.attempt_id,
                    stored_fingerprint=stored.terminal_fingerprint,
                    fingerprint=fingerprint,
                )
            lease = record.owner_lease
            self._require_owner(stored, lease.host_instance_id, lease.fencing_generation, now)
            self._require_not_fenced(txn, stored)
            _check(
                EXECUTION,
                _walk(stored, commit.via),
                record.execution_status,
                attempt_id=stored.attempt_id,
            )
            _validate_terminal(stored, commit, now, fingerprint)
            artifact = commit.artifact
            if artifact is not None:
                self._admit_artifact(txn, commit, artifact, now)
            new = _replace(record, owner_lease=stored.owner_lease, terminal_fingerprint=fingerprint)
            self._leave_active(txn, new, pending=handed_to is None)
            self._emit_terminal(txn, new, now, started=_starts(stored, commit))
            if handed_to is None:
                self._put_attempt(txn, new)
                return new
            # The waiting in-process consumer's claim_and_acknowledge, in this commit
            # (it puts the record, delivered: the terminal one is never put on its own).
            return self._deliver(txn, new, handed_to, now)

        return self.backend.write(fn)

    @staticmethod
    def _admit_artifact(txn: Txn, commit: TerminalCommit, artifact: Artifact, now: float) -> None:
        limits = commit.artifact_limits
        assert limits is not None  # _validate_terminal checked it
        ak = codec.key(artifact.artifact_ref)
        raw = txn.get("artifacts", ak)
        if raw is not None:
            existing = codec.ARTIFACT.decode(raw, table="artifacts", key=ak)
            raise Conflict(
                "artifact ref already holds other bytes"
                if existing != artifact
                else "artifact ref is already bound",
                artifact_ref=artifact.artifact_ref,
                attempt_id=existing.attempt_id,
            )
        if artifact.size_bytes > limits.max_single_bytes:
            raise QuotaExceeded(
                "artifact exceeds the per-artifact limit",
                artifact_ref=artifact.artifact_ref,
                size_bytes=artifact.size_bytes,
                limit=limits.max_single_bytes,
            )
        ns = artifact.namespace_id
        # Keys sort by expiry: starting just past ``now`` counts unexpired artifacts only.
        quota = codec.iprefix(codec.QUOTA, ns)
        start = quota + codec.time_key(now) + b"\x01"
        retained = 0
        for _, size in txn.scan(_IX, quota, start):
            retained += _U64.unpack(size)[0]
        if retained + artifact.size_bytes > limits.max_retained_bytes:
            raise QuotaExceeded(
                "artifact exceeds the namespace's retained-bytes limit",
                artifact_ref=artifact.artifact_ref,
                namespace_id=ns,
                retained_bytes=retained,
                size_bytes=artifact.size_bytes,
                limit=limits.max_retained_bytes,
            )
        txn.put("artifacts", ak, codec.ARTIFACT.encode(artifact))
        txn.put(
            _IX,
            codec.timed_key(codec.QUOTA, ns, artifact.expires_at, artifact.artifact_ref),
            _U64.pack(artifact.size_bytes),
        )

    def load_attempt(self, attempt_id: str) -> AttemptRecord:
        return self.backend.read(lambda txn: self._attempt(txn, attempt_id))

    def list_attempts(
        self, namespace_id: str, session_id: str | None = None
    ) -> list[AttemptRecord]:
        """Read from the namespace's (or session's) own ``G``, ``T`` and ``A`` ranges:
        the cost follows the attempts listed, never the rest of the store."""
        within = () if session_id is None else (session_id,)

        def fn(txn: Txn) -> list[AttemptRecord]:
            ids = set(_attempt_ids(txn, namespace_id, within))
            out = [self._attempt(txn, aid) for aid in ids]
            out.sort(key=lambda r: (r.accepted_at, r.attempt_id))
            return out

        return self.backend.read(fn)

    def find_agent(self, namespace_id: str, session_id: str, agent_id: str) -> str | None:
        """One point read for an active or expired agent; for an agent whose
        results are all still retained, the session's retained results (``R``
        entries, bounded by the retention window), never the rest of the store."""

        def fn(txn: Txn) -> str | None:
            active = txn.get(_IX, codec.agent_key(namespace_id, session_id, agent_id))
            if active is not None:
                return self._attempt(txn, active.decode("utf-8")).subagent_name
            scan = iter(txn.scan(_IX, codec.agent_prefix(namespace_id, session_id, agent_id)))
            first = next(scan, None)
            _close(scan)
            if first is not None:
                return first[1].decode("utf-8")
            session = codec.track_prefix(namespace_id, session_id)
            for _kind, aid, _flag in _session_entries(txn, session, b"R"):
                record = self._attempt(txn, aid)
                if record.agent_id == agent_id:
                    return record.subagent_name
            return None

        return self.backend.read(fn)

    def list_active_attempts(self, namespace_id: str) -> list[AttemptRecord]:
        def fn(txn: Txn) -> list[AttemptRecord]:
            ids = [raw.decode("utf-8") for _, raw in txn.scan(_IX, codec.live_prefix(namespace_id))]
            return [self._attempt(txn, aid) for aid in ids]

        return self.backend.read(fn)

    def list_pending_attempts(
        self, namespace_id: str, session_id: str | None = None
    ) -> list[AttemptRecord]:
        def fn(txn: Txn) -> list[AttemptRecord]:
            if session_id is None:
                sessions: Iterable[bytes] = _sessions(txn, namespace_id)
            else:
                sessions = (codec.track_prefix(namespace_id, session_id),)
            out: list[AttemptRecord] = []
            for session in sessions:
                # Session by session, each in attempt id order (as the P keys were).
                found = _session_entries(txn, session, b"P", b"R")
                ids = sorted(
                    aid for kind, aid, flag in found if kind == b"P" or flag == codec.UNDELIVERED
                )
                out.extend(self._attempt(txn, aid) for aid in ids)
            return out

        return self.backend.read(fn)

    def load_artifact(self, artifact_ref: str) -> Artifact:
        def fn(txn: Txn) -> Artifact:
            now = self.clock.now()
            k = codec.key(artifact_ref)
            raw = txn.get("artifacts", k)
            if raw is None:
                raise NotFound("no such artifact", artifact_ref=artifact_ref)
            artifact = codec.ARTIFACT.decode(raw, table="artifacts", key=k)
            if artifact.expires_at <= now:
                raise NotFound("artifact expired", artifact_ref=artifact_ref)
            _verify_artifact(artifact, k)
            return artifact

        return self.backend.read(fn)

    # -- delivery ----------------------------------------------------------------------------

    def claim_delivery(
        self, attempt_id: str, claim: DeliveryClaim, *, automatic: bool = False
    ) -> AttemptRecord:
        claim = codec.DELIVERY_CLAIM.normalize(claim, what="DeliveryClaim")
        _check_id("claim_id", claim.claim_id)
        _time("claim deadline", claim.deadline)

        def fn(txn: Txn) -> tuple[AttemptRecord, StoreError | None]:
            now = self.clock.now()
            record = self._attempt(txn, attempt_id)
            if record.execution_status not in _TERMINAL_EXEC:
                raise Conflict("attempt is not terminal", attempt_id=attempt_id)
            if record.delivery_status == DeliveryStatus.CLAIMED and record.delivery_claim == claim:
                return record, None
            if record.delivery_status == DeliveryStatus.DELIVERED:
                raise Delivered(
                    "result already delivered",
                    attempt_id=attempt_id,
                    delivered_claim_id=record.delivered_claim_id,
                )
            if claim.deadline <= now:
                raise Conflict("claim deadline is not in the future", attempt_id=attempt_id)
            self._require_live_consumer(txn, record, claim, now)
            released = False
            old = record.delivery_claim
            if record.delivery_status == DeliveryStatus.CLAIMED and old is not None:
                if old.deadline > now:
                    raise DeliveryClaimed(
                        "another consumer holds a live claim",
                        attempt_id=attempt_id,
                        claim_id=old.claim_id,
                        deadline=old.deadline,
                    )
                fate, record = self._settle_expired_claim(txn, record, now)
                if fate == "keep":
                    raise DeliveryClaimed(
                        "the claim's consumer run is still live",
                        attempt_id=attempt_id,
                        claim_id=old.claim_id,
                        run_id=old.continuation_run_id,
                    )
                if fate == "acknowledged":
                    return record, Delivered(
                        "the previous consumer completed; result delivered",
                        attempt_id=attempt_id,
                        delivered_claim_id=old.claim_id,
                    )
                released = True
            if automatic:
                refusal = self._automatic_refusal(txn, record)
                if refusal is not None:
                    if released:
                        return record, refusal
                    raise refusal
            _check(DELIVERY, record.delivery_status, DeliveryStatus.CLAIMED, attempt_id=attempt_id)
            return self._put_claim(txn, record, claim, now), None

        record, error = self.backend.write(fn)
        if error is not None:
            raise error
        return record

    def _require_live_consumer(
        self, txn: Txn, record: AttemptRecord, claim: DeliveryClaim, now: float
    ) -> None:
        """:class:`Conflict` unless a claim's consumer run (if it names one) is a live
        run of the attempt's parent session."""
        consumer = claim.continuation_run_id
        if consumer is None:
            return
        run = self._run(txn, record.parent_session_id, consumer)
        if run is None or not _run_live(run, now):
            raise Conflict(
                "the claim's consumer run is not live",
                attempt_id=record.attempt_id,
                run_id=consumer,
                status=str(run.status) if run is not None else None,
            )

    def _automatic_refusal(self, txn: Txn, record: AttemptRecord) -> Conflict | None:
        if record.automatic_continuation_suppressed_by_run_id is not None:
            return Conflict(
                "automatic continuation is suppressed",
                attempt_id=record.attempt_id,
                suppressed_by_run_id=record.automatic_continuation_suppressed_by_run_id,
            )
        session = self._session(txn, record.parent_session_id)
        if session is None or session.status != SessionStatus.ACTIVE:
            return Conflict(
                "session is not active",
                attempt_id=record.attempt_id,
                session_id=record.parent_session_id,
            )
        return None

    def acknowledge_delivery(self, attempt_id: str, claim_id: str) -> AttemptRecord:
        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            record = self._attempt(txn, attempt_id)
            if record.delivery_status == DeliveryStatus.DELIVERED:
                if record.delivered_claim_id == claim_id:
                    return record
                raise Delivered(
                    "result delivered under another claim",
                    attempt_id=attempt_id,
                    delivered_claim_id=record.delivered_claim_id,
                )
            claim = record.delivery_claim
            if record.delivery_status != DeliveryStatus.CLAIMED or claim is None:
                raise Conflict("result is not claimed", attempt_id=attempt_id, claim_id=claim_id)
            if claim.claim_id != claim_id:
                raise DeliveryClaimed(
                    "another consumer holds the claim",
                    attempt_id=attempt_id,
                    claim_id=claim.claim_id,
                )
            if claim.continuation_run_id is not None:
                raise Conflict(
                    "a run-linked claim is acknowledged by its run completing",
                    attempt_id=attempt_id,
                    claim_id=claim_id,
                    run_id=claim.continuation_run_id,
                )
            return self._deliver(txn, record, claim_id, now)

        return self.backend.write(fn)

    def claim_and_acknowledge(self, attempt_id: str, claim: DeliveryClaim) -> AttemptRecord:
        """:meth:`claim_delivery` and :meth:`acknowledge_delivery` in one transaction
        (the ``deliver`` edge of ``DELIVERY``, or ``claim`` then ``acknowledge`` past
        an expired claim that was released): one durable commit."""
        claim = codec.DELIVERY_CLAIM.normalize(claim, what="DeliveryClaim")
        _check_id("claim_id", claim.claim_id)
        _time("claim deadline", claim.deadline)
        if claim.continuation_run_id is not None:
            raise Conflict(
                "a run-linked claim is acknowledged by its run completing",
                attempt_id=attempt_id,
                run_id=claim.continuation_run_id,
            )

        def fn(txn: Txn) -> tuple[AttemptRecord, StoreError | None]:
            now = self.clock.now()
            record = self._attempt(txn, attempt_id)
            done = record.delivery_status == DeliveryStatus.DELIVERED
            if done and record.delivered_claim_id == claim.claim_id:
                return record, None  # an exact repeat of an applied delivery
            if record.execution_status not in _TERMINAL_EXEC:
                raise Conflict("attempt is not terminal", attempt_id=attempt_id)
            if done:
                raise Delivered(
                    "result already delivered",
                    attempt_id=attempt_id,
                    delivered_claim_id=record.delivered_claim_id,
                )
            if now >= claim.deadline:
                raise Conflict("claim deadline is not in the future", attempt_id=attempt_id)
            held = record.delivery_claim
            if record.delivery_status == DeliveryStatus.CLAIMED and held is not None:
                fate, record = (
                    ("keep", record)
                    if now < held.deadline
                    else self._settle_expired_claim(txn, record, now)
                )
                if fate == "keep":
                    raise DeliveryClaimed(
                        "another consumer holds a live claim",
                        attempt_id=attempt_id,
                        claim_id=held.claim_id,
                    )
                if fate == "acknowledged":
                    return record, Delivered(
                        "the previous consumer completed; result delivered",
                        attempt_id=attempt_id,
                        delivered_claim_id=held.claim_id,
                    )
            return self._deliver(txn, record, claim.claim_id, now), None

        record, error = self.backend.write(fn)
        if error is not None:
            raise error
        return record

    def release_delivery(
        self, attempt_id: str, claim_id: str, release: DeliveryRelease
    ) -> AttemptRecord:
        def fn(txn: Txn) -> AttemptRecord:
            now = self.clock.now()
            record = self._attempt(txn, attempt_id)
            if record.execution_status not in _TERMINAL_EXEC:
                raise Conflict("attempt is not terminal", attempt_id=attempt_id)
            if record.delivery_status == DeliveryStatus.DELIVERED:
                raise Delivered(
                    "result already delivered",
                    attempt_id=attempt_id,
                    delivered_claim_id=record.delivered_claim_id,
                )
            claim = record.delivery_claim
            if record.delivery_status != DeliveryStatus.CLAIMED or claim is None:
                if isinstance(release, ConsumerTerminated):
                    raise Conflict(
                        "ConsumerTerminated needs a claimed record",
                        attempt_id=attempt_id,
                        claim_id=claim_id,
                    )
                return record  # already released: Retryable is idempotent
            if claim.claim_id != claim_id:
                raise DeliveryClaimed(
                    "another consumer holds the claim",
                    attempt_id=attempt_id,
                    claim_id=claim.claim_id,
                )
            suppress = None
            if isinstance(release, ConsumerTerminated):
                if claim.continuation_run_id != release.run_id:
                    raise Conflict(
                        "the claim's consumer is another run",
                        attempt_id=attempt_id,
                        claim_id=claim_id,
                        run_id=release.run_id,
                        consumer_run_id=claim.continuation_run_id,
                    )
                suppress = release.run_id
            return self._release(txn, record, now, suppress)

        return self.backend.write(fn)

    def acquire_continuation(self, request: AcquireContinuation) -> ContinuationReceipt:
        request = codec.ACQUIRE.normalize(request, what="AcquireContinuation")
        _time("claim_deadline", request.claim_deadline)
        run = request.run
        _check_id("run_id", run.run_id)
        _check_id("claim_id", request.claim_id)
        submitted = _normalized_request(run)

        def fn(txn: Txn) -> ContinuationReceipt:
            now = self.clock.now()
            attempt_id = request.attempt_id
            record = self._attempt(txn, attempt_id)
            ck = codec.key(attempt_id)
            raw = txn.get("continuations", ck)
            if raw is not None:
                prior = codec.CONTINUATION_RECEIPT.decode(raw, table="continuations", key=ck)
                if _receipt_claim_id(prior) == request.claim_id and (
                    _normalized_request(prior.run) == submitted
                ):
                    return _replace(prior, idempotent_replay=True)
            if record.delivery_status == DeliveryStatus.DELIVERED:
                raise Delivered(
                    "result already delivered",
                    attempt_id=attempt_id,
                    delivered_claim_id=record.delivered_claim_id,
                )
            if record.execution_status not in _TERMINAL_EXEC:
                raise Conflict("attempt is not terminal", attempt_id=attempt_id)
            claim = record.delivery_claim
            if record.delivery_status == DeliveryStatus.CLAIMED:
                if claim is None or claim.claim_id != request.claim_id:
                    raise DeliveryClaimed(
                        "another consumer holds the claim",
                        attempt_id=attempt_id,
                        claim_id=claim.claim_id if claim else None,
                    )
            elif request.claim_deadline <= now:
                raise Conflict("claim deadline is not in the future", attempt_id=attempt_id)
            if record.automatic_continuation_suppressed_by_run_id is not None:
                raise Conflict(
                    "automatic continuation is suppressed",
                    attempt_id=attempt_id,
                    suppressed_by_run_id=record.automatic_continuation_suppressed_by_run_id,
                )
            session_id = record.parent_session_id
            session = self._session(txn, session_id)
            if session is None or session.status != SessionStatus.ACTIVE:
                raise Conflict(
                    "session is not active", attempt_id=attempt_id, session_id=session_id
                )
            head = self._head(txn, session_id)
            if request.expected_head_run_id is not None and (
                head is None or head.run_id != request.expected_head_run_id
            ):
                raise Conflict(
                    "stale head: the session moved on",
                    attempt_id=attempt_id,
                    expected_head_run_id=request.expected_head_run_id,
                    head_run_id=head.run_id if head else None,
                )
            if run.restore_from_run_id != (head.run_id if head else None):
                raise Conflict(
                    "a continuation restores from the session's head run",
                    attempt_id=attempt_id,
                    restore_from_run_id=run.restore_from_run_id,
                    head_run_id=head.run_id if head else None,
                )
            live = self._live_head(txn, session_id, now)
            if live is not None:
                raise RunConflict(
                    "another run of the session is live", session_id=session_id, run_id=live.run_id
                )
            _validate_continuation_run(record, run, now)
            if self._run(txn, session_id, run.run_id) is not None:
                raise AlreadyExists("run already exists", session_id=session_id, run_id=run.run_id)
            # Content past its retention deadline is never delivered, even
            # before the batched expiry removed it: derive the summary.
            visible = retained_view(record, now)
            artifact_content = self._continuation_artifact(txn, visible)
            expected = continuation_input(visible, artifact_content)
            if tuple(run.input) != expected or not expected:
                raise Conflict(
                    "run input is not the canonical continuation input",
                    attempt_id=attempt_id,
                    run_id=run.run_id,
                )
            cause = continuation_cause(visible, expected)
            if request.cause != cause:
                raise Conflict(
                    "continuation cause does not match the record",
                    attempt_id=attempt_id,
                    run_id=run.run_id,
                )
            admitted = self._insert_run(txn, run, now)
            admitted_data = {"trigger_type": run.trigger_type, "attempt_id": attempt_id}
            self._emit(txn, session_id, "run.admitted", run.run_id, admitted_data, now=now)
            # Claimed for the continuation run: its completion is the acknowledgement.
            linked = DeliveryClaim(
                claim_id=request.claim_id,
                deadline=request.claim_deadline,
                continuation_run_id=run.run_id,
            )
            claimed = self._put_claim(
                txn, _replace(record, continuation_run_id=run.run_id), linked, now
            )
            receipt = ContinuationReceipt(cause=cause, record=claimed, run=admitted)
            txn.put("continuations", ck, codec.CONTINUATION_RECEIPT.encode(receipt))
            return receipt

        return self.backend.write(fn)

    def claim_pending_for_run(
        self, session_id: str, run_id: str, deadline: float
    ) -> list[AttemptRecord]:
        deadline = _time("claim deadline", deadline)

        def fn(txn: Txn) -> list[AttemptRecord]:
            now = self.clock.now()
            run = self._run(txn, session_id, run_id)
            if run is None:
                raise NotFound("no such run", session_id=session_id, run_id=run_id)
            if not _run_live(run, now):
                raise Conflict("the run is not live", session_id=session_id, run_id=run_id)
            if deadline <= now:
                raise Conflict("claim deadline is not in the future", run_id=run_id)
            session = self._session(txn, session_id)
            if session is None:
                raise NotFound("no such session", session_id=session_id)
            found = _session_entries(
                txn, codec.track_prefix(session.namespace_id, session_id), b"P", b"R"
            )
            ids = [aid for kind, aid, flag in found if kind == b"P" or flag == codec.UNDELIVERED]
            taken = [
                record
                for record in (self._pending_for(txn, aid, run_id, now) for aid in ids)
                if record is not None
            ]
            taken.sort(key=lambda r: (r.terminal_at or 0.0, r.attempt_id))
            claim = DeliveryClaim(
                claim_id=f"run:{run_id}", deadline=deadline, continuation_run_id=run_id
            )
            return [
                self._put_claim(txn, record, claim, now)
                if record.delivery_status == DeliveryStatus.UNDELIVERED
                else record
                for record in taken
            ]

        return self.backend.write(fn)

    def _pending_for(
        self, txn: Txn, attempt_id: str, run_id: str, now: float
    ) -> AttemptRecord | None:
        """``attempt_id``'s record if run ``run_id`` may take it now (already linked to
        the run, or undelivered once a dead consumer's expired claim is released), else
        ``None``: delivered, retention expired, or held by another live claim."""
        record = self._attempt(txn, attempt_id)
        if record.execution_status not in _TERMINAL_EXEC:
            return None
        if retained_view(record, now).retention_status == RetentionStatus.EXPIRED:
            return None
        claim = record.delivery_claim
        if record.delivery_status == DeliveryStatus.CLAIMED and claim is not None:
            if claim.continuation_run_id == run_id:
                return record
            if claim.deadline > now:
                return None
            fate, record = self._settle_expired_claim(txn, record, now)
            if fate != "released":
                return None
        if record.delivery_status != DeliveryStatus.UNDELIVERED:
            return None
        return record

    @staticmethod
    def _continuation_artifact(txn: Txn, record: AttemptRecord) -> str | None:
        """The full artifact content a continuation must carry, if the result has one."""
        if record.retention_status != RetentionStatus.ARTIFACT:
            return None
        ref = record.result_ref.artifact_ref if record.result_ref else None
        k = codec.key(ref or "")
        raw = None if ref is None else txn.get("artifacts", k)
        if raw is None:
            raise CorruptRecord(
                "retained artifact is missing",
                table="artifacts",
                key=k,
                attempt_id=record.attempt_id,
            )
        artifact = codec.ARTIFACT.decode(raw, table="artifacts", key=k)
        _verify_artifact(artifact, k)
        return artifact.content

    # -- maintenance -------------------------------------------------------------------------

    def reconcile(self, namespace_id: str) -> list[AttemptRecord]:
        # Most calls find nothing to do: a read-only snapshot says so without a write
        # transaction (which, on a serializable store, would lock the ranges it read).
        if not self.backend.read(lambda txn: self._reconcilable(txn, namespace_id)):
            return []

        def fn(txn: Txn) -> list[AttemptRecord]:
            now = self.clock.now()
            now_key = codec.time_key(now)
            changed: list[AttemptRecord] = []
            # Collect first, then write: no write while a scan is open.
            active: list[str] = []
            expired_claims: list[str] = []
            # Only the namespace's G and C ranges: active work, never history.
            for _, raw_id in txn.scan(_IX, codec.live_prefix(namespace_id)):
                active.append(raw_id.decode("utf-8"))
            for k, deadline_key in txn.scan(_IX, codec.claim_prefix(namespace_id)):
                if deadline_key <= now_key:
                    expired_claims.append(k[k.rindex(codec.SEP) + 1 :].decode("utf-8"))
            for attempt_id in active:
                record = self._attempt(txn, attempt_id)
                if record.owner_lease.lease_expires_at > now:
                    continue  # a live (possibly foreign) owner: leave it alone
                lost = self._synthesize_lost(record, now)
                self._put_attempt(txn, lost)
                self._leave_active(txn, lost)
                self._emit_terminal(txn, lost, now)
                changed.append(lost)
            for attempt_id in expired_claims:
                record = self._attempt(txn, attempt_id)
                if (
                    record.delivery_status != DeliveryStatus.CLAIMED
                    or record.delivery_claim is None
                ):
                    raise CorruptRecord(
                        "claim index names an unclaimed attempt",
                        table=_IX,
                        key=codec.claim_key(namespace_id, record.parent_session_id, attempt_id),
                    )
                fate, new = self._settle_expired_claim(txn, record, now)
                if fate != "keep":
                    changed.append(new)
            return changed

        return self.backend.write(fn)

    def _reconcilable(self, txn: Txn, namespace_id: str) -> bool:
        """Whether :meth:`reconcile` would change anything now: an active attempt whose
        owner lease lapsed, or a delivery claim past its deadline."""
        now = self.clock.now()
        now_key = codec.time_key(now)
        for _, deadline_key in txn.scan(_IX, codec.claim_prefix(namespace_id)):
            if deadline_key <= now_key:
                return True
        active = [raw.decode("utf-8") for _, raw in txn.scan(_IX, codec.live_prefix(namespace_id))]
        return any(self._attempt(txn, aid).owner_lease.lease_expires_at <= now for aid in active)

    def _synthesize_lost(self, record: AttemptRecord, now: float) -> AttemptRecord:
        _check(
            EXECUTION, record.execution_status, ExecutionStatus.FAILED, attempt_id=record.attempt_id
        )
        error = HOST_PROCESS_LOST_ERROR
        lost = _replace(
            record,
            execution_status=ExecutionStatus.FAILED,
            result_ref=ResultRef(
                error=error,
                digest=result_digest(None, error),
                size_bytes=len(error.encode("utf-8")),
            ),
            failure_category=HOST_PROCESS_LOST,
            retention_status=RetentionStatus.INLINE,
            retention_expires_at=now + self.retention_seconds,
            terminal_at=now,
            updated_at=now,
            terminal_fingerprint=None,
        )
        return _replace(
            lost, terminal_fingerprint=terminal_fingerprint(TerminalCommit(record=lost))
        )

    def expire_retention(self, namespace_id: str, limit: int = 1000) -> list[AttemptRecord]:
        def fn(txn: Txn) -> list[AttemptRecord]:
            now = self.clock.now()
            changed = []
            for index_key, _, attempt_id, flag in _due(txn, namespace_id, now, limit):
                txn.delete(_IX, index_key)
                record = self._attempt(txn, attempt_id)
                _put_agent_entry(txn, record)  # the session's ranges keep reaching it
                if flag == codec.UNDELIVERED:
                    # Still to be delivered (as its expiry summary): keep it pending.
                    txn.put(
                        _IX,
                        codec.pending_key(namespace_id, record.parent_session_id, attempt_id),
                        b"",
                    )
                if record.retention_status == RetentionStatus.EXPIRED:
                    continue
                changed.append(self._expire(txn, record, now))
            return changed

        if limit <= 0:
            return []
        return self.backend.write(fn)

    def _expire(self, txn: Txn, record: AttemptRecord, now: float) -> AttemptRecord:
        _check(
            RETENTION,
            record.retention_status,
            RetentionStatus.EXPIRED,
            attempt_id=record.attempt_id,
        )
        ref = record.result_ref
        artifact: Artifact | None = None
        if ref is not None and ref.artifact_ref is not None:
            ak = codec.key(ref.artifact_ref)
            raw = txn.get("artifacts", ak)
            if raw is not None:
                artifact = codec.ARTIFACT.decode(raw, table="artifacts", key=ak)
                txn.delete("artifacts", ak)
                txn.delete(
                    _IX,
                    codec.timed_key(
                        codec.QUOTA,
                        artifact.namespace_id,
                        artifact.expires_at,
                        artifact.artifact_ref,
                    ),
                )
        fingerprint = record.terminal_fingerprint
        complete = record.retention_status == RetentionStatus.INLINE or artifact is not None
        if fingerprint is None and complete:
            # Legacy evidence: backfill while the complete projection still exists.
            fingerprint = terminal_fingerprint(TerminalCommit(record=record, artifact=artifact))
        new = _replace(
            record,
            result_ref=ResultRef(digest=ref.digest, size_bytes=ref.size_bytes) if ref else None,
            retention_status=RetentionStatus.EXPIRED,
            terminal_fingerprint=fingerprint,
            updated_at=now,
        )
        self._put_attempt(txn, new)
        self._emit_attempt(txn, new, "attempt.expired", now)
        return new

    # -- events -----------------------------------------------------------------------------

    def _require_events(self) -> None:
        if not self.has_events:
            raise Failed("this store's backend has no event tables", tables=self.EVENT_TABLES)

    def append_event(
        self, session_id: str, kind: str, run_id: str | None, data: dict[str, Any]
    ) -> evlog.StoreEvent:
        _check_id("session_id", session_id)
        self._require_events()

        def fn(txn: Txn) -> evlog.StoreEvent:
            now = self.clock.now()
            return self._outbox.append(txn, session_id, kind, run_id, data, at=now)

        return self.backend.write(fn)

    def replay_events(
        self, session_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[evlog.StoreEvent]:
        if not self.has_events:
            return []
        return self.backend.read(lambda txn: evlog.replay(txn, session_id, after_seq, limit))

    def last_event_seq(self, session_id: str) -> int:
        if not self.has_events:
            return 0
        return self.backend.read(lambda txn: evlog.last_seq(txn, session_id))

    def add_event_listener(self, listener: evlog.EventListener) -> Callable[[], None]:
        return self._outbox.add_listener(listener)

    def next_fencing_generation(self) -> int:
        """The next value of the durable fencing counter (``host_meta``), one write
        transaction: every caller, in every process sharing the store, gets a new one."""
        self._require_events()
        return self.backend.write(evlog.next_generation)

    def drain(self) -> None:
        """Delegate to the backend: return once every accepted write committed or failed."""
        self.backend.drain()

    def counters(self) -> StoreCounters:
        """The backend's own counters (writes, commits, fsyncs; see
        :class:`~storage.StoreCounters`), or zeros with ``counted=False`` from a
        backend that keeps none."""
        counters = getattr(self._raw_backend, "counters", None)
        if not callable(counters):
            return StoreCounters(counted=False)
        counted: StoreCounters = counters()
        return counted

    def close(self) -> None:
        """Close the backend. Idempotent; later operations raise :class:`Failed`."""
        self.backend.close()


# -- validation (pure) ---------------------------------------------------------------------


def _layout_of(txn: Txn) -> tuple[int | None, bool]:
    """The layout version in the raw ``meta`` marker and whether values are sealed.

    Layouts 1 and 2 wrote the marker as 8 plain bytes and values unsealed;
    from layout 3 on the marker is sealed too. No marker: a fresh store (its
    tables must be empty; records without a marker are refused)."""
    raw = txn.get("meta", _META_SCHEMA)
    if raw is None:
        for table in KernelStore.TABLES:
            for k, _value in txn.scan(table):
                raise CorruptRecord(
                    "the store holds records but no layout marker",
                    table="meta",
                    key=_META_SCHEMA,
                    first_record_table=table,
                    first_record_key=k,
                )
        return None, True
    is_sealed = len(raw) == _U64.size + SEAL_BYTES
    if not is_sealed and len(raw) != _U64.size:
        raise CorruptRecord("undecodable schema marker", table="meta", key=_META_SCHEMA)
    (version,) = _U64.unpack(unseal("meta", _META_SCHEMA, raw) if is_sealed else raw)
    if version not in ((1, 2, 3, STORE_SCHEMA_VERSION) if is_sealed else (1, 2)):
        raise CorruptRecord(
            f"store schema_version {version} is not one this code can open"
            f" (expected {STORE_SCHEMA_VERSION})",
            table="meta",
            key=_META_SCHEMA,
            schema_version=version,
            expected_schema_version=STORE_SCHEMA_VERSION,
        )
    return int(version), is_sealed


def _index_agents(view: SealedTxn) -> None:
    """Layouts 1 to 3 to 4: an ``A`` entry for every terminal attempt without an
    ``R`` entry (one pass over the records, in the migration's transaction).

    A record that fails its seal or does not decode is skipped, not fatal: the
    store still opens, and ``storage.admin`` check/repair reports it (its
    repair rebuilds every index entry the readable records call for)."""
    for k, raw in list(view.raw.scan("attempts", b"", codec.RECORDS_START)):
        try:
            record = codec.ATTEMPT.decode(unseal("attempts", k, raw), table="attempts", key=k)
        except CorruptRecord:
            continue
        if record.execution_status in _TERMINAL_EXEC and _retain_key(record) is None:
            _put_agent_entry(view, record)


def _identity_of(txn: Txn) -> StoreIdentity | None:
    """The identity in the raw ``meta`` table (``None``: there is none yet)."""
    raw = txn.get("meta", _META_IDENTITY)
    if raw is None:
        return None
    identity = decode_identity(unseal("meta", _META_IDENTITY, raw))
    if identity is None:
        raise CorruptRecord("undecodable store identity", table="meta", key=_META_IDENTITY)
    return identity


def _expect(identity: StoreIdentity | None, expected: str | None) -> None:
    """:class:`StoreRefused` unless the database holds the identity ``expected``."""
    if expected is None or (identity is not None and identity.store_id == expected):
        return
    if identity is None:
        raise StoreRefused(
            f"the marker says store {expected} was created here,"
            " but the database is empty or holds no store identity",
            reason="identity missing",
            store_id=expected,
            fix=FIX_MOVE_ASIDE,
        )
    raise StoreRefused(
        f"the database holds store {identity.store_id}, but the marker says store {expected}",
        reason="another identity",
        store_id=expected,
        database_store_id=identity.store_id,
        fix=FIX_MOVE_ASIDE,
    )


def _seal_every_value(txn: Txn, tables: Iterable[str]) -> None:
    """Layout 2 to 3: seal every value in place (raw transaction)."""
    for table in tables:
        for k, value in list(txn.scan(table)):
            txn.put(table, k, seal(table, k, value))


def _from_layout_1_track(k: bytes) -> bytes:
    """The layout-2 key of a layout-1 ``T ns\\0session\\0`` + kind + id entry:
    ``G`` and ``C`` move to their namespace-wide ranges, ``R`` and ``P`` stay."""
    ns_end = k.index(codec.SEP, len(codec.TRACK))
    session_end = k.index(codec.SEP, ns_end + 1)
    kind = k[session_end + 1 : session_end + 2]
    if kind == b"G":
        return codec.LIVE + k[len(codec.TRACK) : session_end + 1] + k[session_end + 2 :]
    if kind == b"C":
        return codec.CLAIM + k[len(codec.TRACK) : session_end + 1] + k[session_end + 2 :]
    return k


def _put_agent_entry(txn: Txn, record: AttemptRecord) -> None:
    """Index a terminal attempt that leaves (or never had) its ``R`` entry under ``A``."""
    key = codec.agent_attempt_key(
        record.namespace_id, record.parent_session_id, record.agent_id, record.attempt_id
    )
    txn.put(_IX, key, record.subagent_name.encode("utf-8"))


def _retain_key(record: AttemptRecord) -> bytes | None:
    """Where a terminal record's index entry is: its ``R`` entry while its
    retention runs, ``None`` when it has none (expired, or no deadline): then its
    ``A`` entry holds it, and its ``P`` entry while it is undelivered."""
    deadline = record.retention_expires_at
    if deadline is None or record.retention_status == RetentionStatus.EXPIRED:
        return None
    return codec.retain_key(
        record.namespace_id, record.parent_session_id, deadline, record.attempt_id
    )


def _due(
    txn: Txn, namespace_id: str, now: float, limit: int
) -> list[tuple[bytes, bytes, str, bytes]]:
    """``(key, deadline_key, attempt_id, flag)`` of the ``limit`` earliest ``R``
    entries of a namespace whose deadline is not after ``now``, by deadline.

    Each session's ``R`` entries are in deadline order, so per session only the
    due ones (at most ``limit``) are read; the cost follows the sessions with
    ``T`` entries (retained or pending results) plus the due entries, never the
    results still retained.
    """
    now_key = codec.time_key(now)
    due: list[tuple[bytes, bytes, str, bytes]] = []
    for session in _sessions(txn, namespace_id):
        region = session + b"R"
        cut = len(region)
        for taken, (k, flag) in enumerate(txn.scan(_IX, region)):
            deadline_key = k[cut : cut + 8]
            if taken >= limit or deadline_key > now_key:
                break  # keys sort by deadline: nothing later is due
            due.append((k, deadline_key, k[cut + 8 :].decode("utf-8"), flag))
    due.sort(key=lambda entry: (entry[1], entry[2]))
    return due[:limit]


def _attempt_ids(txn: Txn, namespace_id: str, within: tuple[str, ...]) -> Iterator[str]:
    """Every attempt id of a namespace (``within`` = ``(session_id,)``: of a session)
    in its index ranges; an id may come twice (a ``P`` entry and its ``A`` twin)."""
    for _k, value in txn.scan(_IX, codec.live_prefix(namespace_id, *within)):
        yield value.decode("utf-8")
    track = codec.track_prefix(namespace_id, *within)
    for k, _value in txn.scan(_IX, track):
        kind_at = k.index(codec.SEP, len(track)) + 1 if not within else len(track)
        skip = 9 if k[kind_at : kind_at + 1] == b"R" else 1
        yield k[kind_at + skip :].decode("utf-8")
    for k, _value in txn.scan(_IX, codec.agent_prefix(namespace_id, *within)):
        yield k[k.rindex(codec.SEP) + 1 :].decode("utf-8")


def _sessions(txn: Txn, namespace_id: str) -> Iterator[bytes]:
    """The ``T`` prefix of every session of a namespace holding ``R`` or ``P`` entries,
    seeking from one session to the next (never reading a session's entries)."""
    base = codec.track_prefix(namespace_id)
    start = base
    while True:
        scan = iter(txn.scan(_IX, base, start))
        first = next(scan, None)
        _close(scan)
        if first is None:
            return
        key = first[0]
        cut = key.index(codec.SEP, len(base)) + 1
        yield key[:cut]
        start = key[: cut - 1] + b"\x01"  # past every key of this session


def _session_entries(txn: Txn, session: bytes, *kinds: bytes) -> list[tuple[bytes, str, bytes]]:
    """``(kind, id, value)`` of one session's ``T`` entries of ``kinds`` (``R``
    or ``P``), reading only those regions; the id follows the deadline for ``R``."""
    out: list[tuple[bytes, str, bytes]] = []
    for kind in kinds:
        region = session + kind
        skip = len(region) + (8 if kind == b"R" else 0)
        for k, value in txn.scan(_IX, region):
            ident = k[skip:]
            out.append((kind, ident.decode("utf-8"), value))
    return out


def _close(iterator: object) -> None:
    # Release a backend cursor now rather than at garbage collection.
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _verify_artifact(artifact: Artifact, k: bytes) -> None:
    if result_digest(artifact.content) != artifact.digest:
        raise CorruptRecord(
            "artifact content does not match its digest",
            table="artifacts",
            key=k,
            artifact_ref=artifact.artifact_ref,
        )


def _validate_acceptance(record: AttemptRecord) -> None:
    """Raise :class:`InvalidRecord` unless ``record`` is a canonical fresh acceptance."""
    aid = record.attempt_id
    for name in ("attempt_id", "agent_id", "namespace_id", "parent_session_id", "parent_run_id"):
        _check_id(name, getattr(record, name))
    lease = record.owner_lease
    _times(
        "acceptance times",
        lease.heartbeat_at,
        lease.lease_expires_at,
        record.accepted_at,
        record.updated_at,
    )
    problems = []
    if record.schema_version != SCHEMA_VERSION:
        problems.append("schema_version")
    if not lease.host_instance_id or lease.fencing_generation <= 0:
        problems.append("owner_lease identity")
    if not lease.lease_expires_at > lease.heartbeat_at:
        problems.append("owner_lease expiry")
    if not lease.heartbeat_at == record.accepted_at == record.updated_at:
        problems.append("heartbeat_at == accepted_at == updated_at")
    if record.execution_status != ExecutionStatus.ACCEPTED:
        problems.append("execution_status")
    if record.delivery_status != DeliveryStatus.UNDELIVERED:
        problems.append("delivery_status")
    if record.retention_status != RetentionStatus.INLINE:
        problems.append("retention_status")
    for name in (
        "result_ref",
        "failure_category",
        "cancellation_reason",
        "delivery_claim",
        "delivered_claim_id",
        "automatic_continuation_suppressed_by_run_id",
        "retention_expires_at",
        "terminal_fingerprint",
        "terminal_at",
        "continuation_run_id",
        "delivered_to_run_id",
    ):
        if getattr(record, name) is not None:
            problems.append(name)
    if problems:
        raise InvalidRecord("not a canonical acceptance", attempt_id=aid, problems=problems)


# Fields a terminal commit may set; everything else must equal the stored record.
_TERMINAL_FIELDS = (
    "execution_status",
    "result_ref",
    "failure_category",
    "cancellation_reason",
    "retention_status",
    "retention_expires_at",
    "terminal_at",
    "updated_at",
    "terminal_fingerprint",
    "owner_lease",
    "child_run_id",
)

# Every other field, read as one tuple: comparing these tuples is the same test
# as replacing the terminal fields and comparing whole records, without
# building a record copy on the commit path.
_STABLE_FIELDS = operator.attrgetter(
    *(name for name in AttemptRecord.__struct_fields__ if name not in _TERMINAL_FIELDS)
)


def _validate_terminal(
    stored: AttemptRecord, commit: TerminalCommit, now: float, fingerprint: str
) -> None:
    """Raise :class:`InvalidRecord` unless ``commit`` is a canonical terminal projection
    of ``stored`` (and its artifact binding is consistent)."""
    record = commit.record
    aid = stored.attempt_id

    def bad(why: str, **fields: Any) -> InvalidRecord:
        return InvalidRecord(f"not a canonical terminal commit: {why}", attempt_id=aid, **fields)

    if _STABLE_FIELDS(record) != _STABLE_FIELDS(stored):
        raise bad("only terminal fields may change")
    if record.child_run_id != stored.child_run_id and stored.child_run_id is not None:
        raise bad("child_run_id is already set")
    ref = record.result_ref
    if ref is None:
        raise bad("result_ref is required")
    if record.failure_category is not None and record.failure_category not in FAILURE_CATEGORIES:
        raise bad("unknown failure_category", failure_category=record.failure_category)
    if record.terminal_at is None or record.terminal_at != record.updated_at:
        raise bad("terminal_at must equal updated_at")
    deadline = record.retention_expires_at
    _times("terminal times", record.terminal_at, record.updated_at)
    if deadline is not None:
        _time("retention_expires_at", deadline)
    if deadline is None or deadline <= now:
        raise bad("retention deadline must be after now", retention_expires_at=deadline, now=now)
    if record.terminal_fingerprint is not None and record.terminal_fingerprint != fingerprint:
        raise bad("terminal_fingerprint does not match the commit")
    artifact = commit.artifact
    if record.retention_status == RetentionStatus.INLINE:
        if artifact is not None or ref.artifact_ref is not None:
            raise bad("inline retention carries no artifact")
        if ref.digest != result_digest(ref.content, ref.error):
            raise bad("result digest does not match the inline result")
        return
    if record.retention_status != RetentionStatus.ARTIFACT:
        raise bad("retention must be inline or artifact")
    if artifact is None:
        raise bad("artifact retention needs the artifact")
    _times("artifact times", artifact.created_at, artifact.expires_at)
    limits = commit.artifact_limits
    if limits is None:
        raise bad("an artifact needs artifact_limits")
    if not 0 < limits.max_single_bytes <= limits.max_retained_bytes:
        raise bad("invalid artifact_limits")
    _check_id("artifact_ref", artifact.artifact_ref)
    if (
        artifact.attempt_id != aid
        or artifact.namespace_id != record.namespace_id
        or ref.artifact_ref != artifact.artifact_ref
        or ref.digest != artifact.digest
        or ref.size_bytes != artifact.size_bytes
        or artifact.expires_at != deadline
    ):
        raise bad("artifact binding does not match the record", artifact_ref=artifact.artifact_ref)
    if artifact.digest != result_digest(artifact.content) or artifact.size_bytes != len(
        artifact.content.encode("utf-8")
    ):
        raise bad("artifact digest or size does not match its content")


def _starts(stored: AttemptRecord, commit: TerminalCommit) -> bool:
    """Whether a terminal commit also makes the attempt running first: the statuses
    it passed through (``via``, when the commit carries them) reach ``running`` from
    before it."""
    via: tuple[str, ...] = getattr(commit, "via", ())
    return stored.execution_status in _BEFORE_RUNNING and ExecutionStatus.RUNNING in via


def _receipt_claim_id(receipt: ContinuationReceipt) -> str | None:
    """The claim id a continuation was admitted under (receipts written before
    issue 15 hold the delivered record, later ones the record claimed for the run)."""
    record = receipt.record
    if record.delivery_claim is not None:
        return record.delivery_claim.claim_id
    return record.delivered_claim_id


def _validate_continuation_run(record: AttemptRecord, run: RunRecord, now: float) -> None:
    """Raise :class:`Conflict` unless the run's causal fields match the attempt."""
    expected_meta = {
        _META_ATTEMPT: record.attempt_id,
        _META_AGENT: record.agent_id,
        _META_PARENT_RUN: record.parent_run_id,
    }
    if record.child_run_id is not None:
        expected_meta[_META_CHILD_RUN] = record.child_run_id
    meta_ok = all(run.metadata.get(k) == v for k, v in expected_meta.items()) and (
        record.child_run_id is not None or _META_CHILD_RUN not in run.metadata
    )
    lease = run.admission_lease
    if (
        run.session_id != record.parent_session_id
        or run.parent_run_id != record.parent_run_id
        or run.trigger_type != ASYNC_SUBAGENT_RESULT
        or run.profile != record.profile
        or (run.trace_context or {}) != (record.trace_context or {})
        or run.status != RunStatus.ADMITTED
        or run.schema_version != SCHEMA_VERSION
        or not meta_ok
    ):
        raise Conflict(
            "continuation run's causal fields do not match the attempt",
            attempt_id=record.attempt_id,
            run_id=run.run_id,
        )
    if lease is not None and (
        not lease.admission_id
        or not lease.host_instance_id
        or lease.fencing_generation <= 0
        or lease.lease_expires_at <= now
    ):
        raise Conflict("invalid or expired admission lease", run_id=run.run_id)
