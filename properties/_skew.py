"""Clock-skew cases: lease expiry is decided by store time and fencing generation only.

Each case runs a real :class:`~actors.BackgroundSubagentSupervisor` (host
``host-a``, generation 1) whose own clock is a :class:`~storage.SkewedClock`
over the store's :class:`~storage.ManualClock`, with one background attempt
whose child waits on a gate. Step by step, store time moves on by
:data:`STEP_SECONDS` (well within the lease) and the host's wall clock takes
the case's offset; the case then waits for the owner's next lease renewal and
checks it:

- the renewal is stamped with store time and its expiry is exactly store time
  plus the TTL: a host clock ahead never extends a lease, one behind (or a
  backwards step during the renewal) never shortens or refuses it;
- a lease never gets shorter from one renewal to the next;
- a competing host (``host-b``, generation 2, skewed the other way) cannot
  take the live lease over, whatever its clock says;
- once per case a non-transient heartbeat error makes the owner check its
  ownership against the store: a skewed host clock must not make its live
  lease look expired, so the attempt later completes under ``host-a``.

``sigstop-2x-ttl`` freezes the owner instead (its heartbeat held, as a host
under SIGSTOP; properties never start host processes) while store time moves
two TTLs: the lease has expired, ``host-b`` takes over with a newer generation
whatever its clock says, every write of the stale owner is refused (its frozen
renewal, a heartbeat, an execution update, its terminal commit), the owner
confirms the loss, and the attempt is never terminalized by ``host-a``.

Every case must run at least :data:`MIN_CHECKS_PER_CASE` checks, or the report
carries a violation (a green run that checked nothing proves nothing).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from actors import (
    BackgroundSubagentSupervisor,
    ChildControl,
    ChildOutcome,
    ChildRequest,
    OwnerIdentity,
    SupervisorLimits,
)
from actors._messages import WatchRequest
from statemachines import ExecutionStatus
from storage import (
    AttemptRecord,
    ManualClock,
    MemorySessionStore,
    SeededIds,
    SessionStore,
    SkewedClock,
    StaleFence,
    StoreError,
)

from ._faults import Fault, FaultyStore
from ._gate import Gate

CASES: tuple[str, ...] = (
    "jump-262",
    "jump-30",
    "jump-1",
    "jump+1",
    "jump+30",
    "jump+262",
    "oscillating",
    "backwards-during-renewal",
    "sigstop-2x-ttl",
)
LEASE_TTL = 30.0
STEP_SECONDS = 2.0
"""Store seconds between checked renewals (well within the lease)."""
DEFAULT_STEPS = 24
MIN_CHECKS_PER_CASE = 10
SETTLE = 5.0
"""Real seconds to wait for the supervisor to act (a bound, never a pace)."""
START = 1_700_000_000.0
HOST_A = "host-a"
HOST_B = "host-b"
ACTORS_LOG = logging.getLogger("subagents.actors")
LIMITS = SupervisorLimits(
    lease_ttl=LEASE_TTL,
    heartbeat_interval=0.003,
    retry_interval=0.002,
    cancellation_grace=0.05,
    shutdown_grace=5.0,
)


class ClockReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`run_clock_cases` ran: checks per case, and every violation found."""

    seed: int
    steps: int
    cases: dict[str, int]
    invariants_checked: int
    violations: tuple[str, ...]
    seconds: float


class _Violation(Exception):
    pass


class _Probe(FaultyStore):
    """A FaultyStore that records every successful renewal and can act during one."""

    def __init__(self, inner: SessionStore, clock: ManualClock) -> None:
        super().__init__(inner, clock=clock)
        self.renewed = threading.Condition()
        self.renewals: list[AttemptRecord] = []
        self.during_renewal: Callable[[], None] | None = None

    def _invoke(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if op == "heartbeat_attempt" and self.during_renewal is not None:
            self.during_renewal()
        result = super()._invoke(op, *args, **kwargs)
        if op == "heartbeat_attempt":
            with self.renewed:
                self.renewals.append(result)
                self.renewed.notify_all()
        return result


def _offset(case: str, step: int, steps: int, rng: random.Random) -> float:
    """The host's wall-clock offset at ``step`` of ``case`` (seconds ahead of store time)."""
    if case.startswith("jump"):
        return float(case[4:]) if step >= steps // 3 else 0.0
    if case == "oscillating":
        return 262.0 * math.sin(step * 1.3 + rng.random())
    return 0.0


class _Case:
    def __init__(self, name: str, *, seed: int, steps: int, lease_clock: str) -> None:
        self.name = name
        self.steps = steps
        self.rng = random.Random(f"{seed}:{name}")
        self.store_clock = ManualClock(START)
        self.host_clock = SkewedClock(self.store_clock)
        self.rival_clock = SkewedClock(self.store_clock)
        self.inner = MemorySessionStore(clock=self.store_clock)
        self.probe = _Probe(self.inner, self.store_clock)
        if lease_clock == "host":
            # The planted bug: the runtime reads "store time" from the host's own clock.
            self.probe.clock = self.host_clock
        self.steps_back = 0
        self.gate = Gate()
        self.checks = 0
        self.supervisor = BackgroundSubagentSupervisor(
            runner=self._runner,
            store=self.probe,
            owner=OwnerIdentity(host_instance_id=HOST_A, fencing_generation=1),
            namespace_id="ns-skew",
            session_id=f"session-{name}",
            clock=self.host_clock,
            ids=SeededIds(seed),
            limits=LIMITS,
        )

    async def _runner(self, request: ChildRequest, control: ChildControl) -> ChildOutcome:
        await self.gate.wait()
        return ChildOutcome.completed(f"done:{request.prompt}")

    def check(self, ok: bool, message: str) -> None:
        self.checks += 1
        if not ok:
            raise _Violation(f"clock case {self.name}: {message}")

    # -- the run -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            attempt = self.supervisor.delegate_sync("skew", self.name).attempt_id
            self.check(self.gate.entered.wait(SETTLE), "the child never started")
            if self.name == "sigstop-2x-ttl":
                self._renewals(attempt, self.steps // 2)
                self._paused_owner(attempt)
            else:
                if self.name == "backwards-during-renewal":
                    self.probe.during_renewal = self._step_back
                self._renewals(attempt, self.steps)
                self.check(
                    self.probe.failures["heartbeat_attempt"] >= 1,
                    "the ownership probe (a refused renewal) never fired",
                )
                if self.name == "backwards-during-renewal":
                    self.check(
                        self.steps_back >= self.steps,
                        f"{self.steps_back} backwards steps during renewals (minimum {self.steps})",
                    )
                self._finishes_under_its_owner(attempt)
        finally:
            self.gate.open()
            try:
                self.supervisor.shutdown_checked_sync(SETTLE)
            finally:
                self.inner.close()

    def _step_back(self) -> None:
        # A backwards wall-clock step while the renewal is on its way to the store.
        self.host_clock.step(-self.rng.choice((1.0, 30.0, 262.0)))
        self.steps_back += 1

    def _renewals(self, attempt: str, steps: int) -> None:
        previous = self.inner.load_attempt(attempt).owner_lease.lease_expires_at
        for step in range(steps):
            offset = _offset(self.name, step, self.steps, self.rng)
            self.host_clock.set_offset(offset)
            self.rival_clock.set_offset(-offset)
            if step == steps // 2:
                # A refusal that is not transient: the owner checks its lease against the
                # store; a host clock ahead must not make the live lease look expired.
                self.probe.plan("heartbeat_attempt", Fault(1, error=lambda: StaleFence("probe")))
            now = self.store_clock.advance(STEP_SECONDS)
            renewal = self._renewal_at(now)
            lease = renewal.owner_lease
            self.check(
                lease.heartbeat_at == now,
                f"a renewal was stamped {lease.heartbeat_at}, not store time {now}",
            )
            self.check(
                lease.lease_expires_at == now + LEASE_TTL,
                f"host offset {offset:+g}s: renewal expires at store time "
                f"{lease.lease_expires_at - now:+g}s, the TTL is {LEASE_TTL:g}s",
            )
            self.check(
                lease.lease_expires_at >= previous,
                f"host offset {offset:+g}s: a renewal shortened the lease",
            )
            previous = lease.lease_expires_at
            self._rival_is_refused(attempt)

    def _renewal_at(self, now: float) -> AttemptRecord:
        """The first renewal stamped at store time ``now`` whose expiry was computed at it."""

        def found() -> AttemptRecord | None:
            for record in reversed(self.probe.renewals):
                lease = record.owner_lease
                if lease.heartbeat_at >= now and lease.lease_expires_at >= now + LEASE_TTL:
                    return record
                if lease.heartbeat_at < now:
                    return None
            return None

        with self.probe.renewed:
            self.probe.renewed.wait_for(lambda: found() is not None, SETTLE)
            record = found()
        if record is None:
            last = self.inner.load_attempt(record_id := self._only_attempt())
            raise _Violation(
                f"clock case {self.name}: no full renewal at store time {now} within "
                f"{SETTLE:g}s (host offset {self.host_clock.offset:+g}s; attempt {record_id} "
                f"lease expires {last.owner_lease.lease_expires_at - now:+g}s from now)"
            )
        return record

    def _only_attempt(self) -> str:
        (record,) = self.inner.list_attempts("ns-skew", f"session-{self.name}")
        return record.attempt_id

    def _rival_is_refused(self, attempt: str) -> None:
        try:
            self.inner.take_over_attempt(attempt, HOST_B, 2, self.rival_clock.now() + LEASE_TTL)
        except StaleFence:
            self.check(True, "")
            return
        except StoreError as exc:
            self.check(False, f"a takeover of a live lease failed with {exc!r}, not StaleFence")
        self.check(False, f"host-b (offset {self.rival_clock.offset:+g}s) took a live lease")

    def _finishes_under_its_owner(self, attempt: str) -> None:
        # The terminal commit is made under the case's final host offset too.
        self.probe.during_renewal = None
        self.gate.open()
        waited = self.supervisor.wait_sync(attempt, SETTLE)
        self.check(
            waited.status == "completed",
            f"the owner's live attempt ended {waited.status!r} "
            f"(owned elsewhere: {waited.owned_elsewhere})",
        )
        record = self.inner.load_attempt(attempt)
        self.check(
            (record.owner_lease.host_instance_id, record.owner_lease.fencing_generation)
            == (HOST_A, 1),
            f"the attempt ended under {record.owner_lease.host_instance_id}",
        )

    def _paused_owner(self, attempt: str) -> None:
        before = self.inner.load_attempt(attempt)
        frozen = Fault(1, mode="block")
        self.probe.plan("heartbeat_attempt", frozen)
        self.check(frozen.entered.wait(SETTLE), "the owner's next renewal never started")
        self.store_clock.advance(2 * LEASE_TTL)
        now = self.store_clock.now()
        self.check(
            before.owner_lease.lease_expires_at <= now, "the paused owner's lease is still live"
        )
        for offset in (-262.0, 0.0, 262.0):
            self.rival_clock.set_offset(offset)
            try:
                self.inner.take_over_attempt(attempt, HOST_B, 1, self.rival_clock.now() + LEASE_TTL)
            except StaleFence:
                self.check(True, "")
            else:
                self.check(False, "a takeover without a newer generation was accepted")
        self.rival_clock.set_offset(-262.0)
        taken = self.inner.take_over_attempt(attempt, HOST_B, 2, now + LEASE_TTL)
        self.check(taken.owner_lease.host_instance_id == HOST_B, "the takeover did not apply")
        self._stale_writes_refused(before, now)
        frozen.release.set()
        self.gate.open()
        state = self._ended(attempt)
        self.check(state == "lost", f"the paused owner ended {state!r}, not lost")
        record = self.inner.load_attempt(attempt)
        self.check(
            record.owner_lease.host_instance_id == HOST_B and record.terminal_fingerprint is None,
            "the stale owner's outcome reached the store",
        )
        for _ in range(self.steps // 2):
            self.check(
                self._refused(
                    lambda: self.inner.heartbeat_attempt(
                        attempt, HOST_A, 1, self.store_clock.now() + LEASE_TTL
                    )
                ),
                "the stale owner renewed after a takeover",
            )
            self.store_clock.advance(STEP_SECONDS)

    def _stale_writes_refused(self, before: AttemptRecord, now: float) -> None:
        attempt = before.attempt_id
        for offset in (-262.0, 262.0):
            self.host_clock.set_offset(offset)
            self.check(
                self._refused(
                    lambda: self.inner.heartbeat_attempt(
                        attempt, HOST_A, 1, self.host_clock.now() + LEASE_TTL
                    )
                ),
                f"the stale owner renewed (host offset {offset:+g}s)",
            )
        moved = msgspec.structs.replace(
            before, execution_status=ExecutionStatus.WAITING, updated_at=now
        )
        self.check(
            self._refused(lambda: self.inner.update_attempt_execution(moved)),
            "the stale owner's execution update applied",
        )

    @staticmethod
    def _refused(write: Callable[[], object]) -> bool:
        try:
            write()
        except StaleFence:
            return True
        except StoreError:
            return True  # refused as a conflict: still nothing written by the stale owner
        return False

    def _ended(self, attempt: str) -> str:
        state, _, done = self.supervisor._ask(WatchRequest(attempt_id=attempt)).result(
            timeout=SETTLE
        )
        if state == "not_found":
            return "not_found"
        return str(done.result(timeout=SETTLE))


def run_clock_cases(
    *,
    seed: int,
    steps: int = DEFAULT_STEPS,
    only: Sequence[str] | None = None,
    lease_clock: str = "store",
) -> ClockReport:
    """Run every skew case of :data:`CASES` (or the ``only`` ones) and report checks
    per case and violations.

    ``steps`` is the number of checked renewals per case (at least
    :data:`MIN_CHECKS_PER_CASE` checks each). ``lease_clock="host"`` plants the
    bug the cases exist to catch (the runtime taking its host's clock for store
    time), so tests can see them fail. Runs in about a second; uses the
    supervisor's real threads but never sleeps as synchronization.
    """
    if steps < 4:
        raise ValueError("steps must be at least 4")
    if lease_clock not in ("store", "host"):
        raise ValueError(f"lease_clock must be 'store' or 'host', not {lease_clock!r}")
    names = CASES if only is None else tuple(only)
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        raise ValueError(f"unknown clock cases {unknown}")
    started = time.monotonic()
    cases: dict[str, int] = {}
    violations: list[str] = []
    level = ACTORS_LOG.level
    ACTORS_LOG.setLevel(logging.CRITICAL)  # lost leases and refused commits are planned
    try:
        for name in names:
            _run_case(
                name,
                seed=seed,
                steps=steps,
                lease_clock=lease_clock,
                cases=cases,
                violations=violations,
            )
    finally:
        ACTORS_LOG.setLevel(level)
    return ClockReport(
        seed=seed,
        steps=steps,
        cases=cases,
        invariants_checked=sum(cases.values()),
        violations=tuple(violations),
        seconds=time.monotonic() - started,
    )


def _run_case(
    name: str,
    *,
    seed: int,
    steps: int,
    lease_clock: str,
    cases: dict[str, int],
    violations: list[str],
) -> None:
    case = _Case(name, seed=seed, steps=steps, lease_clock=lease_clock)
    try:
        case.run()
    except _Violation as exc:
        violations.append(str(exc))
    except Exception as exc:
        violations.append(f"clock case {name}: raised {type(exc).__name__}: {exc}")
    cases[name] = case.checks
    if case.checks < MIN_CHECKS_PER_CASE:
        violations.append(
            f"clock case {name} ran {case.checks} checks (minimum {MIN_CHECKS_PER_CASE})"
        )
