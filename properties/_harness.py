"""The shared harness of every property machine.

:class:`ContractMachine` owns one store (from its factory), one
:class:`~storage.ManualClock` shared with the store, and one
:class:`~properties._reference.Reference` model. Every store call goes
through :meth:`ContractMachine.expect`, which compares the store's answer with
the model's :class:`~properties._reference.Outcome` (Ok with the expected
fields, or the error class) and, when the store refuses, checks that the
attempt it touched did not change. After every step the invariant reopens the
store (for the ``lmdb-reopen`` factory) and compares the whole store with the
model. Any disagreement raises :class:`ContractViolation` naming the
operation, the model's reason and the store's answer.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgspec
from hypothesis.stateful import RuleBasedStateMachine, invariant

from statemachines import RunStatus, is_active_execution
from storage import (
    ASYNC_SUBAGENT_RESULT,
    AdmissionLease,
    Artifact,
    ArtifactLimits,
    AttemptRecord,
    ManualClock,
    NotFound,
    OwnerLease,
    ResultRef,
    RunRecord,
    SessionRecord,
    SessionStore,
    StoreError,
    TerminalCommit,
    result_digest,
)

from ._factories import StoreFactory, StoreHandle
from ._reference import Outcome, Reference, diff_attempt

T = TypeVar("T")
_LIVE = frozenset({RunStatus.ADMITTED, RunStatus.RUNNING})
_IDS = re.compile(r"subattempt_[0-9a-f-]+|\b[a-z]+-[a-z]*-?\d+\b|\d+(?:\.\d+)?")

START = 1_700_000_000.0
LEASE_TTL = 30.0
RUN_TTL = 30.0
RETENTION = 3600.0


class ContractViolation(AssertionError):
    """The store's answer contradicts the contract (as the reference model predicts it)."""


@dataclass
class Stats:
    """Counters one machine class accumulates over a run (read by the runner)."""

    examples: int = 0
    steps: int = 0
    invariants: int = 0
    operations: int = 0
    refusals: int = 0
    consumer_deaths: int = 0
    """How often a consumer run holding results failed, was cancelled or lost its
    admission lease (the consumer-death rules), with the store agreeing."""
    paths: Counter[str] = field(default_factory=Counter)
    """How often each (operation, predicted outcome, reason) was exercised: the coverage."""

    def reset(self) -> None:
        self.examples = self.steps = self.invariants = self.operations = self.refusals = 0
        self.consumer_deaths = 0
        self.paths.clear()

    def path(self, op: str, answer: str, why: str) -> None:
        # Ids and numbers are stripped so the same path counts once across examples.
        self.paths[f"{op.split('(', maxsplit=1)[0]}: {answer} ({_IDS.sub('*', why)})"] += 1


def attempt_id_for(n: int) -> str:
    return f"subattempt_{uuid.UUID(int=n + 1, version=4)}"


def agent_id_for(n: int) -> str:
    return f"worker-bg-{n:08x}"


class ContractMachine(RuleBasedStateMachine):
    """Base of every property machine; subclasses add rules. Built per factory."""

    factory: ClassVar[StoreFactory]
    stats: ClassVar[Stats] = Stats()
    NAMESPACES: ClassVar[tuple[str, ...]] = ("ns-a",)

    def __init__(self) -> None:
        super().__init__()
        type(self).stats.examples += 1
        self.clock = ManualClock(START)
        self.handle: StoreHandle = type(self).factory(self.clock)
        self.model = Reference(self.clock.now)
        self._checks = 0
        self._deaths_seen = 0
        self._seq = 0
        self.sessions: dict[str, str] = {}
        """namespace -> its session id."""
        self.parent_runs: dict[str, str] = {}
        """session -> its (completed) parent run id."""
        try:
            for ns in self.NAMESPACES:
                self._setup_namespace(ns)
        except BaseException:
            # Hypothesis only tears down machines that were built: clean up here.
            self.handle.close()
            raise

    @property
    def store(self) -> SessionStore:
        return self.handle.store

    def teardown(self) -> None:
        self.handle.close()

    # -- plumbing ---------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-{self._seq}"

    def violation(self, message: str) -> ContractViolation:
        return ContractViolation(f"[{self.factory.name}] {message}")

    def expect(
        self,
        op: str,
        call: Callable[[], T],
        outcome: Outcome,
        *,
        attempt_id: str | None = None,
        check: Callable[[T], None] | None = None,
    ) -> T | None:
        """Run one store call and compare it with ``outcome``.

        On a predicted refusal the store must raise an instance of
        ``outcome.error`` and (unless the contract says the refusal commits a
        release first) leave ``attempt_id``'s record unchanged. On Ok the
        model change is applied and ``check`` compares the returned value.
        """
        stats = type(self).stats
        stats.operations += 1
        before = self._load_raw(attempt_id) if attempt_id is not None else None
        try:
            result = call()
        except StoreError as exc:
            if outcome.error is None or not isinstance(exc, outcome.error):
                want = "Ok" if outcome.error is None else outcome.error.__name__
                raise self.violation(
                    f"{op}: expected {want} ({outcome.why}), store raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            stats.refusals += 1
            stats.path(op, type(exc).__name__, outcome.why)
            if outcome.apply_on_error is not None:
                outcome.apply_on_error()
            elif attempt_id is not None:
                after = self._load_raw(attempt_id)
                if after != before:
                    raise self.violation(
                        f"{op}: refused with {type(exc).__name__} but changed the attempt:\n"
                        f"  before {before!r}\n  after  {after!r}"
                    ) from exc
            return None
        except Exception as exc:
            raise self.violation(
                f"{op}: store raised an untyped {type(exc).__name__}: {exc} "
                f"(model: {outcome.error.__name__ if outcome.error else 'Ok'}, {outcome.why})"
            ) from exc
        if not outcome.ok_allowed:
            assert outcome.error is not None
            raise self.violation(
                f"{op}: expected {outcome.error.__name__} ({outcome.why}), store returned Ok: "
                f"{result!r}"
            )
        outcome.apply()
        stats.path(op, "Ok", outcome.why)
        if check is not None:
            check(result)
        return result

    def _load_raw(self, attempt_id: str) -> AttemptRecord | None:
        try:
            return self.store.load_attempt(attempt_id)
        except NotFound:
            return None

    def check_record(self, op: str, got: AttemptRecord) -> None:
        want = self.model.attempts[got.attempt_id]
        diffs = diff_attempt(want, got)
        if diffs:
            raise self.violation(f"{op}: returned record differs from model: " + "; ".join(diffs))

    def record_checker(self, op: str) -> Callable[[AttemptRecord], None]:
        return lambda got: self.check_record(op, got)

    # -- set-up -----------------------------------------------------------------------------

    def _setup_namespace(self, ns: str) -> None:
        now = self.clock.now()
        sid = f"session-{ns}"
        session = SessionRecord(session_id=sid, namespace_id=ns, created_at=now, updated_at=now)
        self.expect(
            "create_session",
            lambda: self.store.create_session(session),
            self.model.create_session(sid, ns),
        )
        self.sessions[ns] = sid
        parent = self.admit_plain_run(sid, "parent")
        assert parent is not None, "setup: the parent run must be admitted"
        self.move_run(sid, parent, "running")
        self.move_run(sid, parent, "completed")
        self.parent_runs[sid] = parent

    def admit_plain_run(self, session_id: str, prefix: str = "run") -> str | None:
        """Admit a user-triggered run with a fresh admission lease; its id on Ok."""
        now = self.clock.now()
        run_id = self.fresh(prefix)
        run = RunRecord(
            session_id=session_id,
            run_id=run_id,
            created_at=now,
            updated_at=now,
            input=(),
            trigger_type="user",
            admission_lease=AdmissionLease(
                admission_id=f"adm-{run_id}",
                host_instance_id="host-runs",
                fencing_generation=1,
                lease_expires_at=now + RUN_TTL,
            ),
        )

        def check(receipt: Any) -> None:
            if receipt.run.run_id != run_id or receipt.run.status != "admitted":
                raise self.violation(f"admit_run: unexpected receipt {receipt!r}")

        got = self.expect(
            "admit_run", lambda: self.store.admit_run(run), self.model.admit_run(run), check=check
        )
        return run_id if got is not None else None

    def move_run(self, session_id: str, run_id: str, status: str) -> None:
        mrun = self.model.runs[(session_id, run_id)]
        adm = mrun.admission_id

        def check(got: RunRecord) -> None:
            if got.status != status:
                raise self.violation(f"transition_run: status {got.status} != {status}")

        self.expect(
            f"transition_run({run_id} -> {status})",
            lambda: self.store.transition_run(
                session_id, run_id, RunStatus(status), admission_id=adm
            ),
            self.model.transition_run(session_id, run_id, status, adm),
            check=check,
        )

    # -- attempts ---------------------------------------------------------------------------

    def acceptance(
        self, n: int, ns: str, agent: int, host: str = "host-a", ttl: float = LEASE_TTL
    ) -> AttemptRecord:
        now = self.clock.now()
        sid = self.sessions[ns]
        return AttemptRecord(
            attempt_id=attempt_id_for(n),
            agent_id=agent_id_for(agent),
            subagent_name="worker",
            namespace_id=ns,
            parent_session_id=sid,
            parent_run_id=self.parent_runs[sid],
            owner_lease=OwnerLease(
                host_instance_id=host,
                fencing_generation=1,
                heartbeat_at=now,
                lease_expires_at=now + ttl,
            ),
            accepted_at=now,
            updated_at=now,
            profile="default",
            trace_context={"traceparent": f"00-{n:032x}-{n:016x}-01"},
        )

    def accept(self, record: AttemptRecord) -> bool:
        got = self.expect(
            "accept_attempt",
            lambda: self.store.accept_attempt(record),
            self.model.accept(record),
            attempt_id=record.attempt_id,
            check=self.record_checker("accept_attempt"),
        )
        return got is not None

    def update_execution(self, view: AttemptRecord, status: str, child: str | None = None) -> None:
        # The writer leaves updated_at as it was: the store must stamp its own now.
        record = msgspec.structs.replace(
            view,
            execution_status=status,
            child_run_id=child if child is not None else view.child_run_id,
        )
        before = self.model.attempts.get(record.attempt_id)
        now = self.clock.now()

        def check(got: AttemptRecord) -> None:
            self.check_record("update_attempt_execution", got)
            moved = before is not None and (
                before.execution_status != got.execution_status
                or before.child_run_id != got.child_run_id
            )
            if moved and got.updated_at != now:
                raise self.violation(
                    f"update_attempt_execution: updated_at {got.updated_at} is not store now {now}"
                )

        self.expect(
            f"update_attempt_execution(-> {status})",
            lambda: self.store.update_attempt_execution(record),
            self.model.update_execution(record),
            attempt_id=record.attempt_id,
            check=check,
        )

    def terminal_commit(
        self,
        view: AttemptRecord,
        outcome: str,
        text: str,
        *,
        retention: float = RETENTION,
        artifact_text: str | None = None,
        limits: ArtifactLimits | None = None,
        artifact_ref: str | None = None,
        deliver_claim_id: str | None = None,
    ) -> TerminalCommit:
        """A canonical terminal commit built from the writer's ``view`` of the record
        (with ``deliver_claim_id``: delivered to an in-process consumer in the same
        transaction)."""
        now = self.clock.now()
        deadline = now + retention
        artifact: Artifact | None = None
        if outcome == "completed" and artifact_text is not None:
            size = len(artifact_text.encode("utf-8"))
            ref = artifact_ref or f"artifact-{view.attempt_id}"
            artifact = Artifact(
                artifact_ref=ref,
                namespace_id=view.namespace_id,
                attempt_id=view.attempt_id,
                content=artifact_text,
                digest=result_digest(artifact_text),
                size_bytes=size,
                created_at=now,
                expires_at=deadline,
            )
            result = ResultRef(
                content=artifact_text[:8],
                artifact_ref=ref,
                digest=result_digest(artifact_text),
                size_bytes=size,
            )
        elif outcome == "completed":
            result = ResultRef(
                content=text, digest=result_digest(text), size_bytes=len(text.encode("utf-8"))
            )
        else:
            result = ResultRef(
                error=text,
                digest=result_digest(None, text),
                size_bytes=len(text.encode("utf-8")),
            )
        record = msgspec.structs.replace(
            view,
            execution_status=outcome,
            result_ref=result,
            failure_category={"failed": "execution_error", "cancelled": "cancelled"}.get(outcome),
            cancellation_reason="cancelled by the parent" if outcome == "cancelled" else None,
            retention_status="artifact" if artifact is not None else "inline",
            retention_expires_at=deadline,
            terminal_at=now,
            updated_at=now,
            terminal_fingerprint=None,
            delivery_status="undelivered",
            delivery_claim=None,
        )
        return TerminalCommit(
            record=record,
            artifact=artifact,
            artifact_limits=limits,
            deliver_claim_id=deliver_claim_id,
        )

    def commit(self, commit: TerminalCommit, op: str = "commit_terminal") -> bool:
        got = self.expect(
            op,
            lambda: self.store.commit_terminal(commit),
            self.model.commit_terminal(commit),
            attempt_id=commit.record.attempt_id,
            check=self.record_checker(op),
        )
        return got is not None

    def drive_to_terminal(
        self,
        record: AttemptRecord,
        outcome: str,
        text: str,
        **kwargs: Any,
    ) -> TerminalCommit | None:
        """Accept ``record``, run it as its owner and commit ``outcome``; the commit on Ok."""
        if not self.accept(record):
            return None
        aid = record.attempt_id
        if outcome == "completed":
            for status, child in (("starting", None), ("running", f"child-{aid[-6:]}")):
                self.update_execution(self.model.attempts[aid], status, child)
        commit = self.terminal_commit(self.model.attempts[aid], outcome, text, **kwargs)
        return commit if self.commit(commit) else None

    # -- maintenance ------------------------------------------------------------------------

    def reconcile(self, ns: str) -> None:
        """reconcile(ns): exactly the model's lost attempts and expired claims change."""
        model = self.model
        lost, claim_changes, fates = model.reconcile_plan(ns)
        type(self).stats.operations += 1
        try:
            changed = self.store.reconcile(ns)
        except Exception as exc:
            raise self.violation(
                f"reconcile({ns}): store raised {type(exc).__name__}: {exc}"
            ) from exc
        ids = {r.attempt_id for r in changed}
        if ids != lost | claim_changes:
            raise self.violation(
                f"reconcile({ns}) changed {sorted(ids)}, model expects lost {sorted(lost)} "
                f"and claims {sorted(claim_changes)}"
            )
        now = self.clock.now()
        for fate in fates.values():
            type(self).stats.path("reconcile", "expired claim", fate)
        for aid in claim_changes:
            model.apply_claim_fate(aid)
        for _ in lost:
            type(self).stats.path("reconcile", "lost", "expired lease -> failed/host_process_lost")
        for got in changed:
            if got.attempt_id in claim_changes:
                self.check_record("reconcile", got)
                continue
            before = model.attempts[got.attempt_id]
            ref = got.result_ref
            problems = []
            if got.execution_status != "failed":
                problems.append(f"execution {got.execution_status}")
            if got.failure_category != "host_process_lost":
                problems.append(f"failure_category {got.failure_category}")
            if ref is None or ref.error is None:
                problems.append("no result error")
            elif ref.digest != result_digest(None, ref.error) or ref.size_bytes != len(
                ref.error.encode("utf-8")
            ):
                problems.append("result digest/size not the canonical result digest")
            if got.retention_expires_at is None or got.retention_expires_at <= now:
                problems.append(f"retention deadline {got.retention_expires_at}")
            if got.terminal_fingerprint is None:
                problems.append("no terminal fingerprint")
            if got.delivery_status != "undelivered" or got.retention_status != "inline":
                problems.append(f"delivery/retention {got.delivery_status}/{got.retention_status}")
            same = msgspec.structs.replace(
                got,
                execution_status=before.execution_status,
                result_ref=before.result_ref,
                failure_category=before.failure_category,
                cancellation_reason=before.cancellation_reason,
                retention_expires_at=before.retention_expires_at,
                terminal_fingerprint=before.terminal_fingerprint,
                terminal_at=before.terminal_at,
                updated_at=before.updated_at,
            )
            if same != before:
                problems.append(
                    "identity or lease fields changed: " + "; ".join(diff_attempt(before, same))
                )
            if problems:
                raise self.violation(
                    f"reconcile({ns}) synthesized a bad failure for {got.attempt_id}: "
                    + ", ".join(problems)
                )
            # The store chose the error text and retention deadline: adopt them. An exact
            # replay of the synthesized terminal must then be Ok.
            model.attempts[got.attempt_id] = got
            model.commits[got.attempt_id] = TerminalCommit(
                record=msgspec.structs.replace(got, terminal_fingerprint=None)
            )

    def expire(self, ns: str, limit: int) -> None:
        """expire_retention(ns, limit): exactly min(limit, due) due results expire."""
        due = self.model.expirable(ns)
        type(self).stats.operations += 1
        try:
            changed = self.store.expire_retention(ns, limit)
        except Exception as exc:
            raise self.violation(
                f"expire_retention({ns}): store raised {type(exc).__name__}: {exc}"
            ) from exc
        ids = {r.attempt_id for r in changed}
        if not ids <= due or len(ids) != min(limit, len(due)) or len(changed) != len(ids):
            raise self.violation(
                f"expire_retention({ns}, {limit}) expired {sorted(ids)}, due {sorted(due)}"
            )
        for got in changed:
            type(self).stats.path("expire_retention", "expired", "deadline passed")
            self.model.apply_expiry(got.attempt_id)
            self.check_record("expire_retention", got)

    def fence(self, ns: str) -> None:
        sid = self.sessions[ns]

        def check(got: SessionRecord) -> None:
            if got.status != "deleting":
                raise self.violation(f"fence_session_deletion returned status {got.status}")

        self.expect(
            "fence_session_deletion",
            lambda: self.store.fence_session_deletion(sid),
            self.model.fence_session(sid),
            check=check,
        )

    # -- the whole-store invariant ----------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        """Reopen (persistence factories), then compare every record with the model."""
        stats = type(self).stats
        if self._checks > 0:
            stats.steps += 1
        self._checks += 1
        self.handle.step_boundary()
        for ns in self.NAMESPACES:
            self._check_namespace(ns)
            stats.invariants += 4
        self._check_runs()
        self._check_artifacts()
        self._check_continuations()
        self._check_consumers()
        stats.invariants += 4
        deaths = sum(self.model.consumer_deaths.values())
        stats.consumer_deaths += deaths - self._deaths_seen
        self._deaths_seen = deaths
        self.extra_invariants()

    def extra_invariants(self) -> None:
        """Machine-specific invariants (counted by the machine)."""

    def _check_namespace(self, ns: str) -> None:
        model = {a: r for a, r in self.model.attempts.items() if r.namespace_id == ns}
        listed = self.store.list_attempts(ns)
        order = [
            r.attempt_id
            for r in sorted(model.values(), key=lambda r: (r.accepted_at, r.attempt_id))
        ]
        if [r.attempt_id for r in listed] != order:
            raise self.violation(
                f"list_attempts({ns}) {[r.attempt_id for r in listed]} != model, ordered by "
                f"accepted_at then id, {order}"
            )
        for got in listed:
            diffs = diff_attempt(model[got.attempt_id], got)
            if diffs:
                raise self.violation(
                    f"store state of {got.attempt_id} differs from model: " + "; ".join(diffs)
                )
            loaded = self.store.load_attempt(got.attempt_id)
            if loaded != got:
                raise self.violation(f"load_attempt != list_attempts for {got.attempt_id}")
        active = sorted(r.attempt_id for r in self.store.list_active_attempts(ns))
        want_active = sorted(a for a, r in model.items() if is_active_execution(r.execution_status))
        if active != want_active:
            raise self.violation(f"list_active_attempts({ns}) {active} != model {want_active}")
        pending = sorted(r.attempt_id for r in self.store.list_pending_attempts(ns))
        want_pending = sorted(
            a
            for a, r in model.items()
            if not is_active_execution(r.execution_status) and r.delivery_status != "delivered"
        )
        if pending != want_pending:
            raise self.violation(f"list_pending_attempts({ns}) {pending} != model {want_pending}")
        sid = self.sessions[ns]
        status = self.store.load_session(sid).status
        if status != self.model.sessions[sid].status:
            raise self.violation(
                f"session {sid} is {status}, model {self.model.sessions[sid].status}"
            )
        if [s.session_id for s in self.store.list_sessions(ns)] != [sid]:
            raise self.violation(f"list_sessions({ns}) does not list exactly {sid}")
        by_session = [r.attempt_id for r in self.store.list_attempts(ns, sid)]
        if by_session != order:
            raise self.violation(f"list_attempts({ns}, {sid}) {by_session} != {order}")
        pending_in_session = sorted(r.attempt_id for r in self.store.list_pending_attempts(ns, sid))
        if pending_in_session != want_pending:
            raise self.violation(
                f"list_pending_attempts({ns}, {sid}) {pending_in_session} != {want_pending}"
            )

    def _check_runs(self) -> None:
        for sid in self.sessions.values():
            runs = self.store.list_runs(sid)
            model = self.model.session_runs(sid)
            if [r.run_id for r in runs] != [m.run_id for m in model]:
                raise self.violation(
                    f"list_runs({sid}) order {[r.run_id for r in runs]} != admission order "
                    f"{[m.run_id for m in model]}"
                )
            seqs = [r.sequence_no for r in runs]
            if seqs != sorted(set(seqs)):
                raise self.violation(f"list_runs({sid}) sequence numbers not increasing: {seqs}")
            for got, want in zip(runs, model, strict=True):
                if self.store.load_run(sid, got.run_id) != got:
                    raise self.violation(f"load_run({sid}, {got.run_id}) != list_runs entry")
                lease = got.admission_lease
                facts = (
                    str(got.status),
                    got.trigger_type,
                    msgspec.json.encode(list(got.input)),
                    lease.admission_id if lease else None,
                    lease.lease_expires_at if lease else None,
                )
                expected = (
                    want.status,
                    want.trigger_type,
                    msgspec.json.encode(list(want.input)),
                    want.admission_id,
                    want.lease_expires_at,
                )
                if facts != expected:
                    raise self.violation(f"run {got.run_id}: store {facts!r} != model {expected!r}")

    def _check_artifacts(self) -> None:
        now = self.clock.now()
        for ref, art in self.model.artifacts.items():
            gone = art.deleted or art.expires_at <= now
            try:
                got = self.store.load_artifact(ref)
            except NotFound:
                if not gone:
                    raise self.violation(
                        f"load_artifact({ref}) NotFound, model retains it"
                    ) from None
                continue
            if gone:
                raise self.violation(
                    f"load_artifact({ref}) returned content after expiry/deletion "
                    f"(expires_at {art.expires_at}, now {now}, deleted {art.deleted})"
                )
            if got.content != art.content or got.size_bytes != art.size_bytes:
                raise self.violation(f"load_artifact({ref}) content differs from the commit")

    def _check_continuations(self) -> None:
        """Every continuation run has the canonical input and restores from the session
        head it was admitted after. (A second continuation of one attempt is admitted only
        after the first lost its claim; that no two runs consume one result is the
        consumer invariant, :meth:`_check_consumers`.)"""
        for sid in self.sessions.values():
            runs = self.store.list_runs(sid)
            for before, run in zip([None, *runs], runs, strict=False):
                if run.trigger_type != ASYNC_SUBAGENT_RESULT:
                    continue
                aid = run.metadata.get("async_subagent.attempt_id", "?")
                head = before.run_id if before is not None else None
                if run.restore_from_run_id != head:
                    raise self.violation(
                        f"continuation run {run.run_id} restores from "
                        f"{run.restore_from_run_id}, not the session head {head}"
                    )
                want = self.model.canonical_inputs.get(run.run_id)
                got = msgspec.json.encode(list(run.input), order="deterministic")
                if want is None or got != want:
                    raise self.violation(
                        f"continuation run {run.run_id} of {aid}: input is not the canonical "
                        f"form the model derived ({got!r} vs {want!r})"
                    )

    def _check_consumers(self) -> None:
        """The consumer invariant: a delivered result names at most one consumer run, and
        that run completed; a claimed result's consumer run is not terminal (a run's
        terminal commit settles its claims); a result no completed run consumed is still
        offered (list_pending_attempts, checked with the namespace)."""
        for sid in self.sessions.values():
            runs = {r.run_id: r for r in self.store.list_runs(sid)}
            for rec in self.store.list_attempts(self.model.sessions[sid].namespace_id, sid):
                consumed = self.model.consumed.get(rec.attempt_id, [])
                if len(consumed) > 1:
                    raise self.violation(
                        f"{rec.attempt_id} was consumed by {len(consumed)} completed runs: "
                        f"{consumed}"
                    )
                if rec.delivery_status == "delivered" and rec.delivered_to_run_id is not None:
                    run = runs.get(rec.delivered_to_run_id)
                    if run is None or run.status != RunStatus.COMPLETED:
                        raise self.violation(
                            f"{rec.attempt_id} is delivered to run {rec.delivered_to_run_id}, "
                            f"which is {run.status if run else 'missing'}, not completed"
                        )
                claim = rec.delivery_claim
                if rec.delivery_status == "claimed" and claim is not None:
                    consumer = claim.continuation_run_id
                    run = runs.get(consumer) if consumer is not None else None
                    if consumer is not None and (run is None or run.status not in _LIVE):
                        raise self.violation(
                            f"{rec.attempt_id} is still claimed for run {consumer}, which is "
                            f"{run.status if run else 'missing'}: its terminal commit must "
                            "acknowledge or release the claim"
                        )


M = TypeVar("M", bound=ContractMachine)


def build_for(base: type[M], factory: StoreFactory) -> type[M]:
    """A subclass of ``base`` bound to ``factory`` with its own counters."""
    safe = "".join(c if c.isalnum() else "_" for c in factory.name)
    return type(
        f"{base.__name__}_{safe}",
        (base,),
        {"factory": factory, "stats": Stats(), "__module__": base.__module__},
    )
