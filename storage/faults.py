"""Fault injection: arm the kernel's named fault points, count what fired.

For tests, the verification harness and hosts started in crash-test mode
(``HostService(..., crash_test=True)``) only: a production host never reads
``SUBAGENTS_FAULTS``. A fault point is one kernel call,
``fault_point("store.after_commit")``, at a place where a real failure could
strike; with nothing armed it costs one flag check. A test (:func:`arm`) or a
crash-test host (:func:`arm_from_env`, reading ``SUBAGENTS_FAULTS``) arms a
point with an action; the point then fires on its ``nth`` reach after arming,
``times`` times in a row.

Points (:data:`FAULT_POINTS`):

``store.before_commit``
    a store write is about to run (nothing of it is visible yet).
``store.after_commit``
    the write committed (durably, when the backend is durable); the kernel has
    not looked at the result yet.
``store.after_commit_before_response``
    the kernel is about to hand the committed result back to its caller.
``actor.mid_heartbeat``
    an attempt's owner is between lease renewals: it has decided to renew and
    has not called the store yet.
``actor.after_terminal_commit_before_callback``
    an attempt's terminal record is committed; the supervisor has not yet
    completed the caller's future or run the completion callbacks.
``delivery.after_continuation_admitted_before_ack``
    a continuation run was admitted for a completed result; the delivery has
    not been acknowledged to the consumer yet.
``actor.inside_finalizer``
    a finalizer (attempt or supervisor shutdown clean-up) is running.

Actions (:data:`FAULT_ACTIONS`):

``raise_transient``
    raise :class:`~storage.RetryableStorage` (the store's transient error), so
    the caller's retry path runs. At a point before a commit nothing was
    written; at a point after a commit the error is indistinguishable from a
    lost response.
``lose_response``
    let the operation complete, then raise :class:`~storage.RetryableStorage`
    with ``lost_response=True``: the write happened but the caller does not
    know, so its exact-replay path runs. At ``store.before_commit`` the write
    runs first and the error follows it; elsewhere the point already follows
    the commit it belongs to.
``sleep_past_ttl``
    call the configured sleeper (default :func:`time.sleep`; tests pass a
    :class:`~storage.ManualClock`'s ``advance``) with the configured number of
    seconds, chosen longer than the lease TTL, then continue: the caller's
    lease is lost while it is paused and its next fenced write is refused.
``sigkill``
    append the log line, then ``os.kill(os.getpid(), SIGKILL)``.

Before any action fires, when a log file is configured (``SUBAGENTS_FAULTS_LOG``
or :func:`configure`), the process appends ``"<point> <action> <pid>\\n"`` to it
and fsyncs, so a parent can count what fired in a child it then finds killed.

Threads: every function is safe to call from any thread; an action runs on the
thread that reached the point. Arming changes take effect for the next reach.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import statemachines

from . import _faultpoints as _points
from ._faultpoints import DEFAULT_SLEEP_SECONDS, FAULT_ACTIONS, FAULT_POINTS

ENV_FAULTS: Final[str] = "SUBAGENTS_FAULTS"
ENV_FAULTS_LOG: Final[str] = "SUBAGENTS_FAULTS_LOG"
ENV_FAULTS_SLEEP: Final[str] = "SUBAGENTS_FAULTS_SLEEP_SECONDS"

__all__ = [
    "DEFAULT_SLEEP_SECONDS",
    "ENV_FAULTS",
    "ENV_FAULTS_LOG",
    "ENV_FAULTS_SLEEP",
    "FAULT_ACTIONS",
    "FAULT_POINTS",
    "FaultSpecError",
    "arm",
    "arm_from_env",
    "configure",
    "disarm_all",
    "fault_counts",
    "parse_spec",
    "reached_counts",
    "reset_fault_counts",
    "reset_faults",
    "wait_fired",
]


class FaultSpecError(statemachines.SubagentsError, ValueError):
    """A fault specification is malformed (unknown point or action, bad ``nth``/``times``).

    Fields: ``spec`` (the whole text, when armed from text) and ``part`` (the
    offending piece), plus ``reason``.
    """


def _check(name: str, action: str, nth: int, times: int, spec: str | None = None) -> None:
    part = f"{name}={action}@{nth}" if spec is not None else name
    fields: dict[str, Any] = {"part": part}
    if spec is not None:
        fields["spec"] = spec
    if name not in FAULT_POINTS:
        raise FaultSpecError(f"unknown fault point {name!r}", reason="point", **fields)
    if action not in FAULT_ACTIONS:
        raise FaultSpecError(f"unknown fault action {action!r}", reason="action", **fields)
    if isinstance(nth, bool) or not isinstance(nth, int) or nth < 1:
        raise FaultSpecError(f"nth must be an integer >= 1, not {nth!r}", reason="nth", **fields)
    if isinstance(times, bool) or not isinstance(times, int) or times < 1:
        raise FaultSpecError(
            f"times must be an integer >= 1, not {times!r}", reason="times", **fields
        )


def arm(name: str, action: str, *, nth: int = 1, times: int = 1) -> None:
    """Arm point ``name`` to perform ``action`` on its ``nth`` reach after this call,
    and on the ``times - 1`` reaches that follow.

    Arming the same point again adds another independent arm. Raises
    :class:`FaultSpecError` for an unknown point or action or a bad count.
    """
    _check(name, action, nth, times)
    with _points.REGISTRY.lock:
        _points.REGISTRY.arms.setdefault(name, []).append(_points.Arm(action, nth, times))
        _points.REGISTRY.active = True


def disarm_all() -> None:
    """Remove every arm and restore the default sleeper, sleep length and log.

    Counts are kept (see :func:`reset_fault_counts`); after this call
    ``fault_point`` is a no-op again and reaches are no longer counted.
    """
    with _points.REGISTRY.lock:
        _points.REGISTRY.active = False
        _points.REGISTRY.arms.clear()
        _points.REGISTRY.sleeper = time.sleep
        _points.REGISTRY.sleep_seconds = DEFAULT_SLEEP_SECONDS
        _points.REGISTRY.log_path = None


def configure(
    *,
    sleeper: Callable[[float], object] | None = None,
    sleep_seconds: float | None = None,
    log_path: str | os.PathLike[str] | None = None,
) -> None:
    """Set how ``sleep_past_ttl`` sleeps (``sleeper(sleep_seconds)``) and where fired
    actions are logged. Arguments left ``None`` keep their current value."""
    with _points.REGISTRY.lock:
        if sleeper is not None:
            _points.REGISTRY.sleeper = sleeper
        if sleep_seconds is not None:
            if not sleep_seconds > 0:
                raise FaultSpecError(
                    "sleep_seconds must be positive", part=str(sleep_seconds), reason="sleep"
                )
            _points.REGISTRY.sleep_seconds = float(sleep_seconds)
        if log_path is not None:
            _points.REGISTRY.log_path = os.fspath(log_path)


def fault_counts() -> dict[str, int]:
    """How many times each point fired an action in this process (points that never
    fired are absent)."""
    with _points.REGISTRY.lock:
        return dict(_points.REGISTRY.fired)


def reached_counts() -> dict[str, int]:
    """How many times each point was reached while something was armed."""
    with _points.REGISTRY.lock:
        return dict(_points.REGISTRY.reached)


def wait_fired(name: str, count: int, timeout: float) -> bool:
    """Block until point ``name`` fired at least ``count`` times (since the last reset)
    or ``timeout`` seconds passed; return whether it did. For tests and harnesses
    that must not poll or sleep."""
    with _points.REGISTRY.changed:
        return _points.REGISTRY.changed.wait_for(
            lambda: _points.REGISTRY.fired.get(name, 0) >= count, timeout
        )


def reset_fault_counts() -> None:
    """Zero :func:`fault_counts` and :func:`reached_counts`."""
    with _points.REGISTRY.lock:
        _points.REGISTRY.fired.clear()
        _points.REGISTRY.reached.clear()


def reset_faults() -> None:
    """:func:`disarm_all` and :func:`reset_fault_counts` in one call: the registry as
    a fresh process has it (for test fixtures and harnesses between runs)."""
    disarm_all()
    reset_fault_counts()


def parse_spec(spec: str) -> list[tuple[str, str, int]]:
    """Parse ``"point=action@nth[,point=action@nth...]"`` (``@nth`` optional, default 1).

    Raises :class:`FaultSpecError` naming the first malformed part.
    """
    out: list[tuple[str, str, int]] = []
    for raw in spec.split(","):
        part = raw.strip()
        if not part:
            continue
        name, eq, rest = part.partition("=")
        if not eq or not name.strip() or not rest.strip():
            raise FaultSpecError(
                "expected point=action[@nth]", spec=spec, part=part, reason="syntax"
            )
        action, at, nth_text = rest.partition("@")
        nth: int
        if at:
            try:
                nth = int(nth_text.strip())
            except ValueError:
                raise FaultSpecError(
                    f"nth must be an integer >= 1, not {nth_text!r}",
                    spec=spec,
                    part=part,
                    reason="nth",
                ) from None
        else:
            nth = 1
        name, action = name.strip(), action.strip()
        _check(name, action, nth, 1, spec=spec)
        out.append((name, action, nth))
    return out


def arm_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    sleeper: Callable[[float], object] | None = None,
    sleep_seconds: float | None = None,
    default_sleep_seconds: float | None = None,
) -> int:
    """Arm the points named in ``SUBAGENTS_FAULTS`` and log to ``SUBAGENTS_FAULTS_LOG``.

    ``environ`` defaults to :data:`os.environ`. How long ``sleep_past_ttl``
    sleeps: ``sleep_seconds`` if given, else ``SUBAGENTS_FAULTS_SLEEP_SECONDS``,
    else ``default_sleep_seconds`` (a host passes twice its lease TTL), else
    :data:`DEFAULT_SLEEP_SECONDS`.
    Returns how many arms were added (0 when the variable is unset or empty: a
    production host pays nothing). A malformed spec raises
    :class:`FaultSpecError` before anything is armed.
    """
    env = os.environ if environ is None else environ
    spec = env.get(ENV_FAULTS, "")
    log_path = env.get(ENV_FAULTS_LOG) or None
    sleep_text = env.get(ENV_FAULTS_SLEEP)
    if sleep_seconds is None and sleep_text:
        try:
            sleep_seconds = float(sleep_text)
        except ValueError:
            raise FaultSpecError(
                f"{ENV_FAULTS_SLEEP} must be a number", part=sleep_text, reason="sleep"
            ) from None
    if sleep_seconds is None:
        sleep_seconds = default_sleep_seconds
    arms = parse_spec(spec)
    if not arms:
        return 0
    configure(sleeper=sleeper, sleep_seconds=sleep_seconds, log_path=log_path)
    for name, action, nth in arms:
        arm(name, action, nth=nth)
    return len(arms)
