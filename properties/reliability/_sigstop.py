"""SIGSTOP runs: a real host process paused for twice its lease TTL, then resumed.

:func:`run_sigstop_cases` forks a host life (:mod:`._crash_host`, through a
:class:`~._lives.Zygote`) on an LMDB data directory with a short lease TTL and
a background attempt whose child is in flight, then freezes the whole process
with SIGSTOP for ``pause_factor`` (2) TTLs of real time, measured with
:func:`time.monotonic`, and resumes it with SIGCONT. It checks, each round:

- while the owner is frozen, the parent (its own LMDB environment on the same
  directory) finds the owner's lease expired by store time: the lease expiry
  the store holds is not after the store clock's now, and the owner is still
  the paused life's host id and fencing generation; a takeover under that same
  generation is refused (only a newer generation could take it over);
- on even rounds the parent then reconciles the store itself (a rival
  reconciling the lost work while the owner sleeps); on odd rounds nobody
  does, and the resumed host's own maintenance reconciles it;
- after SIGCONT the paused owner's late fenced writes for that attempt (its
  heartbeat, an execution update, its terminal commit) are refused by the
  store: the life reports each refusal (``args.refusals``) and a round needs
  at least one ("it really happened");
- the attempt ends with exactly one terminal record, ``host_process_lost``;
  once the host has settled, its result is delivered by exactly one
  continuation run (or retained), and the whole store passes
  :func:`._oracle.check_snapshot` with ``final=True``.

The pause is real time on purpose: the point is a process that is alive but
not running while the store's clock moves on.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from storage import (
    ASYNC_SUBAGENT_RESULT,
    AttemptRecord,
    LmdbSessionStore,
    StaleFence,
    StoreError,
)

from ._lives import HostLife, LifeFailed, Zygote
from ._oracle import (
    HOST_PROCESS_LOST,
    Ledger,
    Life,
    OracleLog,
    check_snapshot,
    take_snapshot,
)

NAMESPACE = "default"
LEASE_TTL = 0.5
PAUSE_FACTOR = 2.0
STEP_DEADLINE = 30.0
"""Seconds a round waits for one step of the host (a bound, never a pace)."""
MIN_REFUSED_PER_ROUND = 1


class SigstopReport(msgspec.Struct, frozen=True, kw_only=True):
    """The figures of one SIGSTOP run; green when ``violations`` is empty."""

    rounds: int
    paused_seconds_total: float
    refused_writes: int
    reconciled: int
    invariants_checked: int
    violations: tuple[str, ...]
    seconds: float
    seed: int = 0
    lease_ttl: float = LEASE_TTL
    rival_reconciles: int = 0
    """Rounds in which the parent reconciled the lost attempt while the owner was frozen."""


class _RoundFailed(Exception):
    pass


@dataclass
class _Sigstop:
    workdir: Path
    rng: random.Random
    lease_ttl: float
    pause_factor: float
    log: OracleLog
    ledger: Ledger = field(default_factory=Ledger)
    violations: list[str] = field(default_factory=list)
    checks: int = 0
    paused: float = 0.0
    refused: int = 0
    reconciled: int = 0
    rivals: int = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    def expect(self, ok: bool, message: str) -> None:
        self.checks += 1
        if not ok:
            self.violations.append(message)


@dataclass
class _Round:
    index: int
    life: HostLife
    session: str
    attempt: str = ""
    running: bool = False
    parent_done: bool = False
    resumed: bool = False
    resumed_at: float = 0.0
    """``time.monotonic()`` just before SIGCONT: refusals from then on are the late writes."""
    refused: int = 0
    refused_kinds: set[str] = field(default_factory=set)
    status: dict[str, Any] = field(default_factory=dict)


def run_sigstop_cases(
    *,
    seed: int,
    workdir: Path,
    rounds: int = 3,
    lease_ttl: float = LEASE_TTL,
    pause_factor: float = PAUSE_FACTOR,
) -> SigstopReport:
    """Run ``rounds`` SIGSTOP rounds in ``workdir`` (created; a fresh data dir inside).

    ``pause_factor`` is the pause in TTLs (2 for the issue's case); a pause
    shorter than a TTL is how a test plants a run that must be reported (the
    lease never expires, nothing is refused). Takes about ``rounds`` times
    (2 TTLs + a few seconds) of real time; never raises for a failed round,
    which becomes a violation.
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "data", ignore_errors=True)
    for name in ("oracle.log", "host.err", "zygote.err"):
        (workdir / name).unlink(missing_ok=True)
    (workdir / "data").mkdir()
    state = _Sigstop(
        workdir=workdir,
        rng=random.Random(seed),
        lease_ttl=lease_ttl,
        pause_factor=pause_factor,
        log=OracleLog(workdir / "oracle.log"),
    )
    zygote = Zygote(workdir)
    try:
        for index in range(rounds):
            try:
                _round(state, zygote, index)
            except (_RoundFailed, LifeFailed, StoreError) as exc:
                state.violations.append(f"round {index}: {exc}")
    finally:
        zygote.close()
        state.log.close()
    return SigstopReport(
        rounds=rounds,
        paused_seconds_total=round(state.paused, 3),
        refused_writes=state.refused,
        reconciled=state.reconciled,
        invariants_checked=state.checks,
        violations=tuple(state.violations),
        seconds=round(time.monotonic() - started, 3),
        seed=seed,
        lease_ttl=lease_ttl,
        rival_reconciles=state.rivals,
    )


def _round(state: _Sigstop, zygote: Zygote, index: int) -> None:
    child = state.lease_ttl * (state.pause_factor + 4)  # still in flight when resumed
    args = {
        "data_dir": str(state.data_dir),
        "seed": state.rng.randrange(1 << 30),
        "lease_ttl": state.lease_ttl,
        "child_seconds": (child, child),
        "refusals": True,
    }
    state.log.note("round", n=index)
    life = zygote.spawn(args, {}, state.log)
    one = _Round(index=index, life=life, session=f"sig{index}")
    try:
        _wait(one, state, lambda: life.generation > 0, "the host never said hello")
        state.ledger.lives[life.generation] = Life(
            generation=life.generation, pid=life.pid, started=life.started
        )
        store = LmdbSessionStore(state.data_dir / "lmdb")  # opened before anything is paused
        try:
            _pause_and_resume(state, one, store)
            _settle(state, one)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(life.pid, signal.SIGCONT)  # never leave a stopped process behind
            _close(state, one)
        try:
            _check_outcome(state, one, store)
        finally:
            store.close()
    finally:
        life.kill()


def _on(one: _Round, message: dict[str, Any]) -> None:
    ev = message.get("ev")
    life = one.life
    if ev == "hello":
        life.generation = int(message["gen"])
        life.host = str(message["host"])
    elif ev == "committed" and message.get("m") == "accept_attempt":
        one.attempt = one.attempt or str(message["id"])
    elif ev == "wrote" and message.get("id") == one.attempt:
        # ``running`` rides the next lease renewal (docs/durability.md).
        progress = ("advance_attempt", "update_attempt_execution")
        if message.get("m") in progress and message.get("status") == "running":
            one.running = True
    elif (
        ev == "refused"
        and message.get("id") == one.attempt
        and float(message.get("t", 0.0)) >= one.resumed_at > 0
    ):
        one.refused += 1
        one.refused_kinds.add(f"{message.get('m')}:{message.get('kind')}")
    elif ev == "event" and message.get("kind") == "run.completed":
        # The delegating turn ended (a continuation's completion comes later).
        one.parent_done = one.parent_done or message.get("trigger") != ASYNC_SUBAGENT_RESULT
    elif ev == "status":
        one.status = message
    elif ev == "error":
        raise _RoundFailed(f"the host refused {message.get('op')}: {message.get('kind')}")


def _wait(
    one: _Round,
    state: _Sigstop,
    until: Callable[[], bool],
    what: str,
    within: float = STEP_DEADLINE,
) -> None:
    deadline = time.monotonic() + within
    while not until():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _RoundFailed(f"{what} within {within:g}s")
        try:
            message = one.life.next(remaining)
        except queue.Empty:
            continue
        if message is None:
            raise _RoundFailed(f"{what}: the host exited ({one.life.reap()})")
        _on(one, message)


def _pause_and_resume(state: _Sigstop, one: _Round, store: LmdbSessionStore) -> None:
    life = one.life
    life.send(op="session", sid=one.session)
    life.send(op="run", sid=one.session, key=f"sigstop-{one.index}", k=1)
    _wait(
        one,
        state,
        lambda: bool(one.attempt) and one.running and one.parent_done,
        "no background attempt with its child in flight",
    )
    rival = one.index % 2 == 0
    pause = state.pause_factor * state.lease_ttl
    judged: dict[str, Any] = {}
    os.kill(life.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    state.log.note("sigstop", pid=life.pid, attempt=one.attempt, rival=rival)
    worker = threading.Thread(
        target=_judge,
        args=(state, one),
        kwargs={
            "store": store,
            "at": stopped + min(pause, state.lease_ttl * 1.1),
            "rival": rival,
            "out": judged,
        },
        daemon=True,
    )
    worker.start()
    time.sleep(max(0.0, stopped + pause - time.monotonic()))  # the pause itself is the test
    one.resumed_at = time.monotonic()
    os.kill(life.pid, signal.SIGCONT)
    paused = time.monotonic() - stopped
    one.resumed = True
    state.paused += paused
    state.log.note("sigcont", pid=life.pid, paused=paused)
    worker.join(timeout=STEP_DEADLINE)
    state.expect(
        paused >= pause,
        f"round {one.index}: paused {paused:.3f}s, wanted {pause:.3f}s",
    )
    if "error" in judged:
        raise _RoundFailed(f"judging the paused owner failed: {judged['error']}")
    state.expect(
        judged.get("expired") is True,
        f"round {one.index}: the paused owner's lease is still live by store time "
        f"after {paused:.3f}s ({judged.get('remaining', '?')}s left of a "
        f"{state.lease_ttl:g}s TTL)",
    )
    state.expect(
        judged.get("same_generation_refused") is True,
        f"round {one.index}: a takeover under the paused owner's own generation was accepted",
    )
    if rival and judged.get("during_pause"):
        state.expect(
            judged.get("reconciled") is True,
            f"round {one.index}: reconcile during the pause left the expired attempt alone",
        )
        state.rivals += 1 if judged.get("reconciled") else 0
    _wait(
        one,
        state,
        lambda: one.refused >= MIN_REFUSED_PER_ROUND,
        f"the paused owner's late writes were never refused ({one.refused}, "
        f"minimum {MIN_REFUSED_PER_ROUND})",
        # The owner renews every TTL/3 and its child is still running: a refusal comes
        # within a TTL of the resume, or the owner never noticed it was paused.
        within=5.0 + 4 * state.lease_ttl,
    )


def _judge(
    state: _Sigstop,
    one: _Round,
    *,
    store: LmdbSessionStore,
    at: float,
    rival: bool,
    out: dict[str, Any],
) -> None:
    """Judge the paused owner's lease from the store (runs on a worker thread).

    A write may wait for LMDB's writer lock if the host was frozen inside a
    commit; then it finishes after SIGCONT and ``during_pause`` says so.
    """
    try:
        time.sleep(max(0.0, at - time.monotonic()))  # the lease must age in real time
        record = store.load_attempt(one.attempt)
        now = store.clock.now()
        lease = record.owner_lease
        out["remaining"] = round(lease.lease_expires_at - now, 3)
        owner = (lease.host_instance_id, lease.fencing_generation)
        out["expired"] = (
            lease.lease_expires_at <= now
            and owner == (one.life.host, one.life.generation)
            and not _terminal(record)
        )
        try:
            store.take_over_attempt(
                one.attempt, "sigstop-rival", lease.fencing_generation, now + state.lease_ttl
            )
            out["same_generation_refused"] = False
        except StaleFence:
            out["same_generation_refused"] = True
        except StoreError:
            # Only when the writer lock held us past SIGCONT and the host reconciled
            # first: the attempt is terminal, and the takeover was still refused.
            out["same_generation_refused"] = True
        if rival:
            changed = store.reconcile(NAMESPACE)
            out["reconciled"] = any(
                r.attempt_id == one.attempt and r.failure_category == HOST_PROCESS_LOST
                for r in changed
            )
        out["during_pause"] = not one.resumed
    except Exception as exc:  # reported by the round, never lost on this thread
        out["error"] = repr(exc)


def _terminal(record: AttemptRecord) -> bool:
    return record.terminal_fingerprint is not None


def _settle(state: _Sigstop, one: _Round) -> None:
    """Wait until the resumed host has nothing active, undelivered or live."""
    deadline = time.monotonic() + STEP_DEADLINE
    while True:
        status = one.status
        if (
            status
            and status.get("active") == 0
            and status.get("undelivered") == 0
            and status.get("live") == 0
            and status.get("local") == 0
        ):
            return
        if time.monotonic() > deadline:
            raise _RoundFailed(f"the host did not settle within {STEP_DEADLINE:g}s ({status})")
        one.status = {}
        one.life.send(op="status")
        _wait(one, state, lambda: bool(one.status), "no status answer")
        if one.status.get("active") or one.status.get("undelivered") or one.status.get("live"):
            with contextlib.suppress(queue.Empty):
                message = one.life.next(0.1)  # let the host work before asking again
                if message is not None:
                    _on(one, message)


def _close(state: _Sigstop, one: _Round) -> None:
    life = one.life
    status = life.close(10.0, lambda message: _on(one, message))
    for message in life.drain():
        _on(one, message)
    known = state.ledger.lives.get(life.generation)
    if known is not None:
        known.died = life.died
    state.expect(status == 0, f"round {one.index}: the host exited with status {status}")


def _check_outcome(state: _Sigstop, one: _Round, store: LmdbSessionStore) -> None:
    state.refused += one.refused
    state.log.note("refused", n=one.refused, kinds=sorted(one.refused_kinds))
    state.log.sync()
    record = store.load_attempt(one.attempt)
    lost = record.failure_category == HOST_PROCESS_LOST and _terminal(record)
    state.reconciled += 1 if lost else 0
    state.expect(
        lost,
        f"round {one.index}: the paused attempt ended {record.execution_status} "
        f"({record.failure_category}), not {HOST_PROCESS_LOST}",
    )
    continuations = [
        run
        for run in store.list_runs(one.session)
        if run.trigger_type == ASYNC_SUBAGENT_RESULT
        and run.metadata.get("async_subagent.attempt_id") == one.attempt
    ]
    delivered = str(record.delivery_status) == "delivered"
    state.expect(
        (delivered and len(continuations) == 1)
        or (not delivered and not continuations and record.result_ref is not None),
        f"round {one.index}: the lost result was delivered by {len(continuations)} "
        f"continuation runs (delivery {record.delivery_status})",
    )
    result = check_snapshot(take_snapshot(store, NAMESPACE), state.ledger, final=True)
    state.checks += result.checks
    state.violations.extend(f"round {one.index}: {v}" for v in result.violations)
