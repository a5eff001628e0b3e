"""Crash runs: SIGKILL real host processes on one LMDB data directory, restart, check.

:func:`run_crash_cycles` starts a host life (:mod:`._crash_host`, forked from
one zygote process), asks it for background work (``run.start`` with
idempotency keys; the scripted planner delegates two background attempts per
run), and ends the life with SIGKILL: at a named fault point
(``SUBAGENTS_FAULTS="<point>=sigkill@<nth>"``, counted from
``SUBAGENTS_FAULTS_LOG``), right after a chosen store commit whose response it
then never sees (``CRASH_PAUSE``), inside a consumer run (``CRASH_CONSUMER``:
mid continuation run, or after the hand-off right before the run's terminal
commit, which is the delivery's acknowledgement), or after a seeded random delay. Between
lives it opens the store itself, replays the requests whose responses were
lost (an acceptance retry, an exact continuation replay; a lost ``run.start``
is re-sent to the next life with the same key) and checks the invariants of
:func:`._oracle.check_snapshot`, the consumer invariant among them (counted:
``consumer_rounds`` must equal kills plus settles). Every ``settle_every`` cycles and at the end
a life runs without faults until all work is terminal and delivered, and the
final invariants are checked.

Every ``epoch_cycles`` cycles (after that settle and its final checks) the run
moves to a fresh data directory, keeping every counter: each cycle checks the
whole store and each host start scans every run, so without epochs the cost
of a cycle grows with the store; with them it stays flat (the deep profile's
10,000 cycles are 50 epochs of 200).

A run is green only if nothing was violated *and* every kill kind and
replay path happened at least its minimum number of times.
"""

from __future__ import annotations

import queue
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from storage import (
    AcquireContinuation,
    AttemptRecord,
    LmdbSessionStore,
    NotFound,
    StoreError,
)
from storage.faults import FAULT_POINTS

from ._crash_host import CONSUMER_POINTS, decode_request
from ._lives import HostLife, LifeFailed, Zygote
from ._oracle import Ledger, Life, OracleLog, check_snapshot, take_snapshot

RANDOM_DELAY = "random-delay"
CONSUMER_KILLS = tuple(f"consumer:{point}" for point in CONSUMER_POINTS)
"""Kills inside a consumer run: mid continuation run; after the hand-off, before the
consumer's terminal commit (``CRASH_CONSUMER`` in :mod:`._crash_host`)."""
PAUSES = ("admit_run", "accept_attempt", "acquire_continuation")
REPLAYS = (
    "lost-response-replay",
    "idempotent-acceptance-retry",
    "continuation-exact-replay",
    "reconcile-host-process-lost",
)
NAMESPACE = "default"
SESSIONS = ("s1", "s2", "s3")
DELEGATIONS_PER_RUN = 2
LIFE_DEADLINE = 3.0
"""Seconds a life waits for its fault point or pause before a fallback kill."""
SETTLE_DEADLINE = 60.0
EPOCH_CYCLES = 200
"""Cycles per data directory (the ci run's 200 cycles are one epoch)."""


class CrashReport(msgspec.Struct, frozen=True, kw_only=True):
    """The figures of one crash run; green when ``violations`` is empty."""

    cycles: int
    kills: int
    kills_by_point: dict[str, int]
    restarts: int
    attempts_accepted: int
    invariants_checked: int
    faults_fired: dict[str, int]
    replays: dict[str, int]
    violations: tuple[str, ...]
    seconds: float
    seed: int = 0
    seconds_per_cycle: float = 0.0
    fallback_kills: int = 0
    settles: int = 0
    epochs: int = 1
    epoch_seconds_per_cycle: tuple[float, ...] = ()
    """Seconds per cycle of each epoch, in order (flat when the cost does not grow)."""
    consumer_checks: int = 0
    """Attempts the consumer invariant was checked on, over every snapshot."""
    consumer_rounds: int = 0
    """Snapshots (one after every kill, before the restart, and one per settle) the
    consumer invariant was checked on: it must equal ``kills + settles``."""


@dataclass
class _Run:
    """The parent's side of one crash run."""

    workdir: Path
    seed: int
    progress: Callable[[str], None] | None
    rng: random.Random
    log: OracleLog
    ledger: Ledger = field(default_factory=Ledger)
    kills_by_point: dict[str, int] = field(default_factory=dict)
    faults_fired: dict[str, int] = field(default_factory=dict)
    replays: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REPLAYS, 0))
    violations: list[str] = field(default_factory=list)
    invariants: int = 0
    consumer_checks: int = 0
    consumer_rounds: int = 0
    restarts: int = 0
    lives: int = 0
    kills: int = 0
    fallbacks: int = 0
    settles: int = 0
    sessions_ready: set[str] = field(default_factory=set)
    pending_keys: dict[str, str] = field(default_factory=dict)
    """Run requests sent but not answered yet: idempotency key -> session."""
    lost_keys: set[str] = field(default_factory=set)
    """Keys whose request reached a life that died before answering."""
    next_key: int = 0
    fault_log_offset: int = 0
    last_generation: int = 0
    epoch: int = 1
    accepted_before: int = 0
    """Attempts accepted in earlier epochs (the ledger holds only this epoch's)."""
    epoch_started: float = 0.0
    epoch_first_cycle: int = 0
    epoch_violations: int = 0
    """Violations found before this epoch began (a clean epoch's directory is removed)."""
    epoch_rates: list[float] = field(default_factory=list)

    @property
    def fault_log(self) -> Path:
        return self.workdir / "faults.log"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def attempts_accepted(self) -> int:
        return self.accepted_before + len(self.ledger.committed_attempts)

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)


def _kind(name: str) -> tuple[str, str]:
    if name == RANDOM_DELAY:
        return ("random", RANDOM_DELAY)
    if name.startswith("pause:"):
        return ("pause", name.removeprefix("pause:"))
    if name in CONSUMER_KILLS:
        return ("consumer", name.removeprefix("consumer:"))
    if name not in FAULT_POINTS:
        raise ValueError(f"unknown kill kind {name!r}")
    return ("point", name)


def _schedule(
    cycles: int, rng: random.Random, kinds: Sequence[str] | None = None
) -> list[tuple[str, str]]:
    """The kill kind of each cycle: ``("point", name)``, ``("pause", method)``,
    ``("consumer", point)`` or random.

    The three pauses come first (so even a short run sees every replay path),
    then shuffled blocks of every point, every consumer point, two random delays
    and one pause.
    """
    if kinds is not None:
        chosen = [_kind(name) for name in kinds]
        return [chosen[index % len(chosen)] for index in range(cycles)]
    plan: list[tuple[str, str]] = [("pause", method) for method in PAUSES]
    block_index = 0
    while len(plan) < cycles:
        block = [("point", point) for point in FAULT_POINTS]
        block += [("consumer", point) for point in CONSUMER_POINTS]
        block += [("random", RANDOM_DELAY), ("random", RANDOM_DELAY)]
        block.append(("pause", PAUSES[block_index % len(PAUSES)]))
        block_index += 1
        rng.shuffle(block)
        plan.extend(block)
    return plan[:cycles]


def minimums(cycles: int) -> tuple[int, int, int]:
    """(kills per named point, random-delay kills, each replay path) a run must reach.

    200 cycles need 5 kills per point and 20 random-delay kills; both scale
    linearly. Replay paths need one each once there are enough cycles for the
    three pauses and a kill while children run.
    """
    return cycles * 5 // 200, cycles * 20 // 200, 1 if cycles >= 6 else 0


def consumer_minimum(cycles: int) -> int:
    """Kills each consumer point needs: 10 in 200 cycles, scaling linearly."""
    return cycles * 10 // 200


def run_crash_cycles(
    *,
    cycles: int,
    seed: int,
    workdir: Path,
    progress: Callable[[str], None] | None = None,
    settle_every: int = 50,
    kinds: Sequence[str] | None = None,
    epoch_cycles: int = EPOCH_CYCLES,
) -> CrashReport:
    """Run ``cycles`` SIGKILL cycles in ``workdir`` (created; a fresh data dir per epoch).

    Each ``epoch_cycles`` cycles end with a settle and its final checks; the
    next cycle starts on a fresh data directory (the previous one is removed,
    or kept as ``data-epoch<N>`` when that epoch found a violation). Counters
    and minimums are over the whole run.

    ``kinds`` restricts the kills to some of the named points, ``"random-delay"``
    and ``"pause:<store method>"`` (cycling through them in order); the
    minimums are then not enforced (the caller asserts what it needs).

    ``progress`` is called on the calling thread with one line per settle and
    every 10 cycles; if it raises, the run stops and the exception propagates
    (after the host processes are gone).
    """
    start = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    # A fresh data directory and logs: the oracle must know every generation in the store.
    shutil.rmtree(workdir / "data", ignore_errors=True)
    for name in ("faults.log", "oracle.log", "host.err", "zygote.err"):
        (workdir / name).unlink(missing_ok=True)
    run = _Run(
        workdir=workdir,
        seed=seed,
        progress=progress,
        rng=random.Random(seed),
        log=OracleLog(workdir / "oracle.log"),
    )
    run.kills_by_point = dict.fromkeys(FAULT_POINTS, 0)
    run.kills_by_point[RANDOM_DELAY] = 0
    for method in PAUSES:
        run.kills_by_point[f"pause:{method}"] = 0
    for point in CONSUMER_KILLS:
        run.kills_by_point[point] = 0
    run.log.note("start", seed=seed, cycles=cycles)
    run.log.sync()
    if epoch_cycles < 1:
        raise ValueError("epoch_cycles must be at least 1")
    zygote = Zygote(workdir)
    run.epoch_started = time.monotonic()
    try:
        for cycle, (kind, name) in enumerate(_schedule(cycles, run.rng, kinds)):
            _cycle(run, zygote, cycle, kind, name)
            done = cycle + 1
            if done < cycles and done % epoch_cycles == 0:
                _settle(run, zygote)
                _next_epoch(run, done)
            elif settle_every and done % settle_every == 0 and done < cycles:
                _settle(run, zygote)
            if (cycle + 1) % 10 == 0:
                run.say(
                    f"crash: {cycle + 1}/{cycles} cycles, {run.kills} kills, "
                    f"{len(run.violations)} violations"
                )
        _settle(run, zygote)
    finally:
        zygote.close()
        run.log.close()
    run.epoch_rates.append(_epoch_rate(run, cycles))
    if run.consumer_rounds != run.kills + run.settles:
        run.violations.append(
            f"the consumer invariant was checked {run.consumer_rounds} times, "
            f"not after each of {run.kills} kills and {run.settles} settles"
        )
    if kinds is None:
        run.violations.extend(shortfalls(cycles, run.kills_by_point, run.replays))
    seconds = time.monotonic() - start
    return CrashReport(
        cycles=cycles,
        kills=run.kills,
        kills_by_point=run.kills_by_point,
        restarts=run.restarts,
        attempts_accepted=run.attempts_accepted,
        invariants_checked=run.invariants,
        faults_fired=run.faults_fired,
        replays=run.replays,
        violations=tuple(run.violations),
        seconds=round(seconds, 3),
        seed=seed,
        seconds_per_cycle=round(seconds / cycles, 3) if cycles else 0.0,
        fallback_kills=run.fallbacks,
        settles=run.settles,
        epochs=run.epoch,
        epoch_seconds_per_cycle=tuple(run.epoch_rates),
        consumer_checks=run.consumer_checks,
        consumer_rounds=run.consumer_rounds,
    )


def _epoch_rate(run: _Run, cycle: int) -> float:
    count = cycle - run.epoch_first_cycle
    return round((time.monotonic() - run.epoch_started) / count, 3) if count else 0.0


def _next_epoch(run: _Run, cycle: int) -> None:
    """Start a fresh data directory after a settled epoch; counters carry over.

    The ledger (generations, acceptances, fingerprints) describes one store, so
    it starts empty with it; nothing is pending after a settle, so no request
    crosses the boundary.
    """
    run.epoch_rates.append(_epoch_rate(run, cycle))
    if len(run.violations) == run.epoch_violations:
        shutil.rmtree(run.data_dir)
    else:
        run.data_dir.rename(run.workdir / f"data-epoch{run.epoch}")
    run.accepted_before += len(run.ledger.committed_attempts)
    run.ledger = Ledger()
    run.last_generation = 0
    run.sessions_ready.clear()
    run.pending_keys.clear()
    run.lost_keys.clear()
    run.epoch += 1
    run.epoch_first_cycle = cycle
    run.epoch_started = time.monotonic()
    run.epoch_violations = len(run.violations)
    run.log.note("epoch", n=run.epoch, cycle=cycle)
    run.log.sync()
    run.say(f"crash: epoch {run.epoch} starts at cycle {cycle} on a fresh data directory")


def shortfalls(cycles: int, kills_by_point: dict[str, int], replays: dict[str, int]) -> list[str]:
    """The "it really happened" violations: kinds and paths below their :func:`minimums`."""
    per_point, per_random, per_replay = minimums(cycles)
    out = []
    for point in FAULT_POINTS:
        count = kills_by_point.get(point, 0)
        if count < per_point:
            out.append(f"fault point {point} fired {count} times (minimum {per_point})")
    for point in CONSUMER_KILLS:
        count = kills_by_point.get(point, 0)
        if count < consumer_minimum(cycles):
            out.append(
                f"consumer kill {point} fired {count} times (minimum {consumer_minimum(cycles)})"
            )
    count = kills_by_point.get(RANDOM_DELAY, 0)
    if count < per_random:
        out.append(f"random-delay kills: {count} (minimum {per_random})")
    for path in REPLAYS:
        count = replays.get(path, 0)
        if count < per_replay:
            out.append(f"replay path {path} seen {count} times (minimum {per_replay})")
    return out


def _start_life(run: _Run, zygote: Zygote, env: dict[str, str]) -> HostLife:
    args = {"data_dir": str(run.data_dir), "seed": run.rng.randrange(1 << 30)}
    life = zygote.spawn(args, env, run.log)
    if run.lives:
        run.restarts += 1
    run.lives += 1
    return life


def _on_hello(run: _Run, life: HostLife, message: dict[str, Any]) -> None:
    life.generation = int(message["gen"])
    life.host = str(message["host"])
    if life.generation <= run.last_generation:
        run.violations.append(
            f"generation {life.generation} granted after {run.last_generation} (not increasing)"
        )
    run.invariants += 1
    run.last_generation = max(run.last_generation, life.generation)
    run.ledger.lives[life.generation] = Life(
        generation=life.generation, pid=life.pid, started=life.started
    )


@dataclass
class _Calls:
    """The tapped store calls of one life: submitted, committed, raised."""

    submitted: dict[tuple[str, str], str] = field(default_factory=dict)
    finished: set[tuple[str, str]] = field(default_factory=set)
    paused: bool = False


def _handle(run: _Run, life: HostLife, calls: _Calls, message: dict[str, Any]) -> None:
    ev = message.get("ev")
    if ev == "hello":
        _on_hello(run, life, message)
    elif ev == "session":
        run.sessions_ready.add(message["sid"])
    elif ev == "run":
        key = message["key"]
        run.pending_keys.pop(key, None)
        run.ledger.admitted_runs[message["run_id"]] = key
        if message.get("replay") and key in run.lost_keys:
            run.replays["lost-response-replay"] += 1
        run.lost_keys.discard(key)
    elif ev == "error":
        key = message.get("key")
        if key is not None:
            run.lost_keys.discard(key)  # answered (refused); re-sent later with the same key
    elif ev == "submit":
        calls.submitted[(message["m"], message["id"])] = message["b"]
    elif ev in {"committed", "raised"}:
        calls.finished.add((message["m"], message["id"]))
        if ev == "committed" and message["m"] == "accept_attempt":
            run.ledger.committed_attempts.add(message["id"])
    elif ev == "paused":
        calls.paused = True
    elif ev == "delegated":
        run.ledger.committed_attempts.add(message["attempt"])


def _ask_for_work(run: _Run, life: HostLife, new_runs: int) -> None:
    for sid in SESSIONS:
        if sid not in run.sessions_ready:
            life.send(op="session", sid=sid)
    for key, sid in list(run.pending_keys.items()):
        life.send(op="run", sid=sid, key=key, k=DELEGATIONS_PER_RUN)
        run.lost_keys.add(key)
    for _ in range(new_runs):
        key = f"k{run.next_key}"
        sid = SESSIONS[run.next_key % len(SESSIONS)]
        run.next_key += 1
        run.pending_keys[key] = sid
        run.lost_keys.add(key)
        life.send(op="run", sid=sid, key=key, k=DELEGATIONS_PER_RUN)
    run.log.sync()  # what was asked is durable before anything can be seen


def _pump(run: _Run, life: HostLife, calls: _Calls, until: float, stop: Callable[[], bool]) -> None:
    """Handle the life's messages until ``stop()``, EOF or the monotonic deadline."""
    asked = False
    while not stop():
        remaining = until - time.monotonic()
        if remaining <= 0:
            return
        try:
            message = life.next(remaining)
        except queue.Empty:
            return
        if message is None:
            return
        _handle(run, life, calls, message)
        if message.get("ev") == "ready" and not asked:
            asked = True
            _ask_for_work(run, life, new_runs=1)
        elif message.get("ev") == "event" and message.get("kind") in {
            "run.completed",
            "run.failed",
            "run.cancelled",
        }:
            # The session may be free now: re-send its refused requests.
            for key, sid in list(run.pending_keys.items()):
                if sid == message.get("sid") and key not in run.lost_keys:
                    life.send(op="run", sid=sid, key=key, k=DELEGATIONS_PER_RUN)
                    run.lost_keys.add(key)


def _cycle(run: _Run, zygote: Zygote, cycle: int, kind: str, name: str) -> None:
    env: dict[str, str] = {}
    if kind == "point":
        # The store points are reached on every commit; the others once or twice a life.
        nth = run.rng.randint(1, 3) if name.startswith("store.") else 1
        env = {
            "SUBAGENTS_FAULTS": f"{name}=sigkill@{nth}",
            "SUBAGENTS_FAULTS_LOG": str(run.fault_log),
        }
    elif kind == "pause":
        nth = 1 if name != "accept_attempt" else run.rng.randint(1, 2)
        env = {"CRASH_PAUSE": f"{name}:{nth}"}
    elif kind == "consumer":
        env = {"CRASH_CONSUMER": name}
    run.log.note("cycle", cycle=cycle, kind=kind, name=name, env=env)
    try:
        life = _start_life(run, zygote, env)
    except LifeFailed as exc:
        run.violations.append(f"cycle {cycle}: {exc}")
        return
    calls = _Calls()
    delay = run.rng.uniform(0.0, 1.2) if kind == "random" else LIFE_DEADLINE
    deadline = time.monotonic() + delay
    if kind in {"pause", "consumer"}:
        _pump(run, life, calls, deadline, lambda: calls.paused)
    else:
        _pump(run, life, calls, deadline, lambda: False)
    life.kill()
    for message in life.drain():
        _handle(run, life, calls, message)
    _note_death(run, life, killed=kind == "random")
    run.kills += 1
    fired = _fired_points(run, life.pid)
    if kind == "random":
        run.kills_by_point[RANDOM_DELAY] += 1
    elif kind == "pause" and calls.paused:
        run.kills_by_point[f"pause:{name}"] += 1
    elif kind == "consumer" and calls.paused:
        run.kills_by_point[f"consumer:{name}"] += 1
    elif kind == "point" and name in fired:
        run.kills_by_point[name] += 1
    else:
        run.fallbacks += 1
    for key in list(run.lost_keys):
        if key not in run.pending_keys:
            run.lost_keys.discard(key)
    run.log.note("died", pid=life.pid, gen=life.generation, at=life.died, fired=sorted(fired))
    run.log.sync()
    _after_death(run, calls, cycle)


def _note_death(run: _Run, life: HostLife, *, killed: bool = False) -> None:
    """Record when a life's generation died; a life that never said hello is a
    violation, unless ``killed`` before it could (a random delay shorter than its
    start-up): a life says hello before it starts serving, so nothing can carry
    its generation, and one that did would be reported as never granted."""
    known = run.ledger.lives.get(life.generation)
    if known is not None:
        known.died = life.died
    elif killed and life.generation == 0:
        run.log.note("killed-before-hello", pid=life.pid)
    else:
        run.violations.append(f"host life {life.pid} never said hello")


def _fired_points(run: _Run, pid: int) -> set[str]:
    """The points that fired in process ``pid`` (from the faults log), counted per action."""
    fired: set[str] = set()
    path = run.fault_log
    if not path.exists():
        return fired
    with path.open("r", encoding="utf-8") as stream:
        stream.seek(run.fault_log_offset)
        text = stream.read()
        run.fault_log_offset = stream.tell()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        point, action, who = parts
        run.faults_fired[point] = run.faults_fired.get(point, 0) + 1
        if who == str(pid) and action == "sigkill":
            fired.add(point)
    return fired


def _after_death(run: _Run, calls: _Calls, cycle: int) -> None:
    """Open the store in the parent, replay lost responses, check the invariants."""
    try:
        store = LmdbSessionStore(run.data_dir / "lmdb")
    except StoreError as exc:
        run.violations.append(f"cycle {cycle}: the environment did not open cleanly: {exc}")
        return
    try:
        run.invariants += 1
        _replay_lost(run, store, calls, cycle)
        before = len(run.ledger.lost)
        snapshot = take_snapshot(store, NAMESPACE)
        result = check_snapshot(snapshot, run.ledger)
        run.replays["reconcile-host-process-lost"] += len(run.ledger.lost) - before
        run.invariants += result.checks
        run.consumer_checks += result.consumer_checks
        run.consumer_rounds += 1
        run.violations.extend(f"cycle {cycle}: {v}" for v in result.violations)
    except StoreError as exc:
        run.violations.append(f"cycle {cycle}: reading the store failed: {exc!r}")
    finally:
        store.close()


def _replay_lost(run: _Run, store: LmdbSessionStore, calls: _Calls, cycle: int) -> None:
    """Retry, exactly, every acceptance and continuation whose response the kill swallowed."""
    for (method, ident), blob in calls.submitted.items():
        if (method, ident) in calls.finished:
            continue
        if method == "accept_attempt":
            record = decode_request(blob, AttemptRecord)
            try:
                stored = store.load_attempt(ident)
            except NotFound:
                continue  # the kill came before the commit: nothing to retry
            run.invariants += 1
            if stored != record:
                run.violations.append(
                    f"cycle {cycle}: attempt {ident} changed though its acceptance never answered"
                )
                continue
            run.ledger.committed_attempts.add(ident)
            again = store.accept_attempt(record)
            after = store.load_attempt(ident)
            run.invariants += 1
            if again != stored or after != stored:
                run.violations.append(f"cycle {cycle}: acceptance retry of {ident} changed it")
            else:
                run.replays["idempotent-acceptance-retry"] += 1
        elif method == "acquire_continuation":
            request = decode_request(blob, AcquireContinuation)
            try:
                record = store.load_attempt(ident)
            except NotFound:
                run.violations.append(f"cycle {cycle}: attempt {ident} vanished")
                continue
            if record.continuation_run_id != request.run.run_id:
                continue  # not applied (or another consumer won): a retry would be new work
            run.invariants += 1
            try:
                receipt = store.acquire_continuation(request)
            except StoreError as exc:
                run.violations.append(
                    f"cycle {cycle}: exact continuation replay of {ident} refused: {exc!r}"
                )
                continue
            if receipt.idempotent_replay and receipt.run.run_id == request.run.run_id:
                run.replays["continuation-exact-replay"] += 1
            else:
                run.violations.append(
                    f"cycle {cycle}: continuation replay of {ident} admitted new work"
                )


def _settle(run: _Run, zygote: Zygote) -> None:
    """A life without faults until everything is terminal and delivered; final checks."""
    run.settles += 1
    run.log.note("settle", n=run.settles)
    try:
        life = _start_life(run, zygote, {})
    except LifeFailed as exc:
        run.violations.append(f"settle {run.settles}: {exc}")
        return
    calls = _Calls()
    deadline = time.monotonic() + SETTLE_DEADLINE
    settled = False
    last_probe = 0.0
    refused: set[str] = set()
    while time.monotonic() < deadline and not settled:
        try:
            message = life.next(0.1)
        except queue.Empty:
            message = {}
        if message is None:
            break
        if message:
            _handle(run, life, calls, message)
            if message.get("ev") == "ready":
                _ask_for_work(run, life, new_runs=0)
            elif message.get("ev") == "status":
                settled = (
                    message.get("active") == 0
                    and message.get("undelivered") == 0
                    and message.get("live") == 0
                    and message.get("local") == 0
                    and not run.pending_keys
                )
            elif message.get("ev") == "error" and message.get("key") is not None:
                refused.add(message["key"])  # the session was busy: ask again at the next probe
        if life.generation and time.monotonic() - last_probe > 0.1:
            last_probe = time.monotonic()
            for key in sorted(refused & set(run.pending_keys)):
                life.send(op="run", sid=run.pending_keys[key], key=key, k=DELEGATIONS_PER_RUN)
            refused.clear()
            life.send(op="status")
    if not settled:
        run.violations.append(f"settle {run.settles}: work did not settle in {SETTLE_DEADLINE} s")
    status = life.close(10.0)
    for message in life.drain():
        _handle(run, life, calls, message)
    _note_death(run, life)
    if status != 0:
        run.violations.append(f"settle {run.settles}: the host exited with status {status}")
    run.log.note("settled", ok=settled, status=status)
    run.log.sync()
    try:
        store = LmdbSessionStore(run.data_dir / "lmdb")
    except StoreError as exc:
        run.violations.append(f"settle {run.settles}: the environment did not open: {exc}")
        return
    try:
        run.invariants += 1
        before = len(run.ledger.lost)
        result = check_snapshot(take_snapshot(store, NAMESPACE), run.ledger, final=settled)
        run.replays["reconcile-host-process-lost"] += len(run.ledger.lost) - before
        run.invariants += result.checks
        run.consumer_checks += result.consumer_checks
        run.consumer_rounds += 1
        run.violations.extend(f"settle {run.settles}: {v}" for v in result.violations)
    finally:
        store.close()
    run.say(f"crash: settle {run.settles} {'ok' if settled else 'FAILED'}")
