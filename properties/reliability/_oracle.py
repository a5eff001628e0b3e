"""The crash runs' oracle: what the parent asked for and saw, and the store invariants.

The oracle lives in the parent process, never in a host that gets killed. It
keeps an append-only JSON-lines log (:class:`OracleLog`, fsynced before every
irreversible step) and a :class:`Ledger` of the facts the invariants need:
the fencing generations it saw granted and when each of their processes was
confirmed dead, the attempts whose acceptance it saw committed, the runs whose
admission it saw answered, and the first terminal fingerprint of every attempt.

:func:`check_snapshot` is a pure function of a :class:`Snapshot` (every
attempt and run of a store, read in one go by :func:`take_snapshot`) and the
ledger, so a test can doctor a snapshot and watch a violation be reported.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage import ASYNC_SUBAGENT_RESULT, AttemptRecord, RunRecord, SessionStore

HOST_PROCESS_LOST = "host_process_lost"
TERMINAL_EXECUTION = frozenset({"completed", "failed", "cancelled"})
TERMINAL_RUN = frozenset({"completed", "failed", "cancelled"})


class OracleLog:
    """An append-only JSON-lines file; :meth:`sync` flushes and fsyncs it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")
        self.lines = 0

    def note(self, entry: str, /, **data: Any) -> None:
        """Append one entry (buffered until :meth:`sync`)."""
        self._file.write(json.dumps({"k": entry, **data}, separators=(",", ":")) + "\n")
        self.lines += 1

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()


@dataclass
class Life:
    """One host process as the parent saw it (wall-clock seconds, the store's clock too)."""

    generation: int
    pid: int
    started: float
    died: float | None = None


@dataclass
class Ledger:
    """What the parent knows independently of the store."""

    lives: dict[int, Life] = field(default_factory=dict)
    committed_attempts: set[str] = field(default_factory=set)
    admitted_runs: dict[str, str] = field(default_factory=dict)
    """run_id -> session_id of every run whose admission the parent saw answered."""
    fingerprints: dict[str, str] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    """Attempts seen reconciled as ``host_process_lost``."""


@dataclass
class Snapshot:
    """Every attempt of a namespace and every run of its sessions, read at one moment."""

    attempts: list[AttemptRecord]
    runs: list[RunRecord]


def take_snapshot(store: SessionStore, namespace_id: str) -> Snapshot:
    """Read the whole store; any decode or storage error propagates (the env must open clean)."""
    attempts = store.list_attempts(namespace_id)
    runs: list[RunRecord] = []
    for session in store.list_sessions(namespace_id):
        runs.extend(store.list_runs(session.session_id))
    return Snapshot(attempts=attempts, runs=runs)


@dataclass
class CheckResult:
    checks: int = 0
    consumer_checks: int = 0
    """Terminal-or-not attempts the consumer invariant was checked on."""
    violations: list[str] = field(default_factory=list)

    def expect(self, ok: bool, message: str) -> None:
        self.checks += 1
        if not ok:
            self.violations.append(message)


def _died(ledger: Ledger, generation: int) -> float | None:
    life = ledger.lives.get(generation)
    return None if life is None else life.died


def check_snapshot(snapshot: Snapshot, ledger: Ledger, *, final: bool = False) -> CheckResult:
    """Check the crash invariants on ``snapshot``; record first fingerprints in ``ledger``.

    Always: every acceptance and admission the parent saw is still there; every
    owner and admission generation is one the parent saw granted, and nothing
    of a dead generation's own writes (heartbeat, terminal commit, run
    transition) is dated after its death; a terminal attempt has exactly one
    terminal record (its fingerprint never changes and it never leaves
    terminal); and the consumer invariant (:func:`_check_consumer`): a
    delivered result names the one consumer run, which completed; any other
    result is retained and offered, never held by a consumer that ended. With
    ``final``: every attempt is terminal and consumed (or suppressed and
    retained), and every run is terminal.
    """
    result = CheckResult()
    expect = result.expect
    by_attempt: dict[str, list[RunRecord]] = {}
    runs_by_id = {run.run_id: run for run in snapshot.runs}
    for run in snapshot.runs:
        if run.trigger_type == ASYNC_SUBAGENT_RESULT:
            attempt_id = run.metadata.get("async_subagent.attempt_id", "")
            by_attempt.setdefault(attempt_id, []).append(run)
        lease = run.admission_lease
        if lease is not None:
            generation = lease.fencing_generation
            expect(
                generation in ledger.lives,
                f"run {run.run_id} admitted under generation {generation} never granted",
            )
            died = _died(ledger, generation)
            status = str(run.status)
            own_write = status in {"running", "completed", "cancelled"} or (
                status == "failed" and run.output_preview != HOST_PROCESS_LOST
            )
            if died is not None and own_write:
                expect(
                    run.updated_at <= died,
                    f"run {run.run_id} moved to {status} by generation {generation} "
                    f"after that owner was fenced out (dead)",
                )
        if final:
            expect(str(run.status) in TERMINAL_RUN, f"run {run.run_id} is not terminal at the end")
    attempts = {record.attempt_id: record for record in snapshot.attempts}
    for attempt_id in sorted(ledger.committed_attempts):
        expect(attempt_id in attempts, f"accepted attempt {attempt_id} is missing from the store")
    for run_id in sorted(ledger.admitted_runs):
        expect(run_id in runs_by_id, f"admitted run {run_id} is missing from the store")
    for attempt_id in sorted(by_attempt):
        expect(
            attempt_id in attempts,
            f"continuation run for unknown attempt {attempt_id}",
        )
    for record in snapshot.attempts:
        _check_attempt(
            record,
            by_attempt.get(record.attempt_id, []),
            runs_by_id,
            ledger=ledger,
            result=result,
            final=final,
        )
    return result


def _check_attempt(
    record: AttemptRecord,
    continuations: list[RunRecord],
    runs_by_id: dict[str, RunRecord],
    *,
    ledger: Ledger,
    result: CheckResult,
    final: bool,
) -> None:
    expect = result.expect
    aid = record.attempt_id
    lease = record.owner_lease
    generation = lease.fencing_generation
    expect(
        generation in ledger.lives, f"attempt {aid} owned by generation {generation} never granted"
    )
    died = _died(ledger, generation)
    if died is not None:
        expect(
            lease.heartbeat_at <= died,
            f"attempt {aid}: heartbeat by generation {generation} after it was fenced out",
        )
    status = str(record.execution_status)
    terminal = status in TERMINAL_EXECUTION
    known = ledger.fingerprints.get(aid)
    if known is not None:
        expect(terminal, f"attempt {aid} left its terminal state ({status})")
    if terminal:
        fingerprint = record.terminal_fingerprint
        expect(fingerprint is not None, f"terminal attempt {aid} has no fingerprint")
        expect(
            record.result_ref is not None and bool(record.result_ref.digest),
            f"terminal attempt {aid} has no result digest",
        )
        if fingerprint is not None:
            if known is None:
                ledger.fingerprints[aid] = fingerprint
            else:
                expect(
                    fingerprint == known,
                    f"attempt {aid} has a second terminal record "
                    f"({known[:12]} -> {fingerprint[:12]})",
                )
        if record.failure_category == HOST_PROCESS_LOST:
            ledger.lost.add(aid)
        elif died is not None and record.terminal_at is not None:
            expect(
                record.terminal_at <= died,
                f"attempt {aid}: terminal commit by generation {generation} "
                "after it was fenced out",
            )
    elif final:
        expect(False, f"attempt {aid} is not terminal at the end ({status})")
    _check_consumer(record, continuations, runs_by_id, ledger, result, final)


def consumer_of(record: AttemptRecord) -> str | None:
    """The run the store says consumed ``record``'s result (``delivered_to_run_id``; a
    continuation's own run id as a fallback), or ``None`` when it names none."""
    named = record.delivered_to_run_id
    return named if named is not None else record.continuation_run_id


def _carries(run: RunRecord, content: str | None) -> bool:
    return content is None or content in "".join(part.text for part in run.input)


def _alive(run: RunRecord, ledger: Ledger) -> bool:
    """Whether ``run`` may still be running: not terminal, and its admitting host
    process is not one the parent saw die (a dead host's run only waits for the
    reconciler to fail it)."""
    if str(run.status) in TERMINAL_RUN:
        return False
    lease = run.admission_lease
    return lease is None or _died(ledger, lease.fencing_generation) is None


def _check_consumer(  # noqa: PLR0917 - one attempt's evidence, all of it needed
    record: AttemptRecord,
    continuations: list[RunRecord],
    runs_by_id: dict[str, RunRecord],
    ledger: Ledger,
    result: CheckResult,
    final: bool,
) -> None:
    """The consumer invariant: delivered means consumed by a run that completed.

    A terminal result is either delivered, naming the one run that consumed it,
    which exists and *completed*; or it is still retained and offered: undelivered,
    or claimed by a consumer that has not ended (a claim linked to an ended run
    was released with it; one of a dead host's run waits for the reconciler).
    At most one run that carries the result ever completes and at most one is
    alive (a consumer that died leaves a failed run, or a running one of a dead
    host, never a second completed consumer). With ``final``: every result
    ended consumed, or its automatic continuation was suppressed and it waits,
    retained, for an explicit run.
    """
    expect = result.expect
    result.consumer_checks += 1
    aid = record.attempt_id
    status = str(record.execution_status)
    if status not in TERMINAL_EXECUTION:
        return
    completed = [run for run in continuations if str(run.status) == "completed"]
    live = [run for run in continuations if _alive(run, ledger)]
    expect(
        len(completed) <= 1,
        f"attempt {aid}: {len(completed)} continuation runs completed: "
        + ", ".join(run.run_id for run in completed),
    )
    expect(
        len(live) <= 1,
        f"attempt {aid}: {len(live)} continuation runs of live hosts at once",
    )
    ref = record.result_ref
    content = ref.content if ref is not None and status == "completed" else None
    delivered = str(record.delivery_status) == "delivered"
    if delivered:
        consumer_id = consumer_of(record)
        consumer = runs_by_id.get(consumer_id) if consumer_id is not None else None
        expect(
            consumer is not None,
            f"attempt {aid} is delivered but names no consumer run"
            if consumer_id is None
            else f"attempt {aid} is delivered to run {consumer_id}, which does not exist",
        )
        if consumer is None:
            return
        expect(
            str(consumer.status) == "completed",
            f"attempt {aid} is delivered to run {consumer.run_id}, which is "
            f"{consumer.status}: a dead consumer took the result with it",
        )
        expect(
            all(run.run_id == consumer.run_id for run in completed),
            f"attempt {aid} is delivered to {consumer.run_id} but another continuation completed",
        )
        if consumer.metadata.get("async_subagent.attempt_id") == aid:
            # Its own continuation run carries it in the input; any other run took
            # it in-band (a wait, or its turn's pending results).
            expect(
                _carries(consumer, content),
                f"attempt {aid}: the continuation input does not carry the result",
            )
        return
    expect(
        not completed,
        f"attempt {aid}: a continuation run completed but the result is {record.delivery_status}",
    )
    expect(
        content is not None or str(record.retention_status) != "inline" or status != "completed",
        f"attempt {aid}: completed result neither delivered nor retained",
    )
    claim = record.delivery_claim
    linked = claim.continuation_run_id if claim is not None else None
    if str(record.delivery_status) == "claimed" and linked is not None:
        holder = runs_by_id.get(linked)
        expect(
            holder is not None and str(holder.status) not in TERMINAL_RUN,
            f"attempt {aid} is still claimed by run {linked}, which "
            + ("does not exist" if holder is None else f"is {holder.status}")
            + ": an ended consumer's claim was not released",
        )
    if final:
        expect(
            record.automatic_continuation_suppressed_by_run_id is not None,
            f"attempt {aid} ended {status} but its result was never consumed",
        )
