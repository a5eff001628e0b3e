"""Shared pytest set-up: Hypothesis profiles come from ``HYPOTHESIS_PROFILE``, and a
run that leaks actors fails fast instead of hanging at exit.

The leak guard: pykka actor threads are not daemons, so an actor nobody stopped
(a stateful or skew test that failed mid-shutdown, say) keeps the interpreter
alive after pytest reported its result, until CI times out. At session end the
guard stops every actor still in ``pykka.ActorRegistry``, names them, and fails
the run (exit status 1, even when every test passed). When a thread that
would block the interpreter's exit is still alive after that (an actor stuck
in a handler, a supervisor's loop thread nobody shut down), it names those too
and ends the process with ``os._exit`` as pytest's very last step, after every
report is written.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pykka
import pytest

from properties import load_profile

load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

LEAK_GRACE_SECONDS = 5.0
"""How long the guard waits for leaked actors to stop and their threads to end."""
EXITING_THREAD_PREFIXES = ("ThreadPoolExecutor-", "asyncio_")
"""Non-daemon threads that end by themselves at interpreter exit (executor workers)."""
OUR_THREADS = "subagents-"
"""The supervisor's own threads (loop, heartbeats, delivery, attempts, shutdown)."""
_HARD_EXIT = pytest.StashKey[bool]()


def _blocking_threads() -> list[threading.Thread]:
    """Live non-daemon threads that would keep the interpreter from exiting."""
    return [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread()
        and t is not threading.current_thread()
        and not t.daemon
        and not t.name.startswith(EXITING_THREAD_PREFIXES)
    ]


def _stop_leaked_actors(deadline: float) -> tuple[list[str], list[str]]:
    """Stop every registered actor; ``(leaked, still_running)`` by class and urn."""
    refs = pykka.ActorRegistry.get_all()
    leaked = [f"{ref.actor_class.__name__} ({ref.actor_urn})" for ref in refs]
    stops = []
    for ref in reversed(refs):
        try:
            stops.append((ref, ref.stop(block=False)))
        except pykka.ActorDeadError:
            continue
    still_running = []
    for ref, stop in stops:
        try:
            stop.get(timeout=max(0.0, deadline - time.monotonic()))
        except pykka.Timeout:
            still_running.append(f"{ref.actor_class.__name__} ({ref.actor_urn})")
        except pykka.ActorDeadError:
            continue
    return leaked, still_running


def _report(session: pytest.Session, title: str, lines: list[str]) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        print(f"{title}:", *lines, sep="\n  ", file=sys.stderr)
        return
    reporter.write_sep("!", title, red=True)
    for line in lines:
        reporter.write_line(f"  {line}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    deadline = time.monotonic() + LEAK_GRACE_SECONDS
    leaked, still_running = _stop_leaked_actors(deadline)
    # With leaked actors any blocking thread is suspect; otherwise only ours, which
    # end only when their supervisor is shut down.
    suspects = [t for t in _blocking_threads() if leaked or t.name.startswith(OUR_THREADS)]
    for thread in suspects:
        thread.join(max(0.0, deadline - time.monotonic()))
    hanging = [t.name for t in suspects if t.is_alive()]
    if leaked:
        _report(session, "pykka actors leaked by the tests (stopped at session end)", leaked)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if still_running:
        _report(session, "leaked actors that did not stop", still_running)
    if hanging:
        _report(session, "threads that would hang the exit (the process ends hard)", hanging)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.stash[_HARD_EXIT] = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_HARD_EXIT, False):
        # Every report is written; a normal exit would wait on the threads forever.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(pytest.ExitCode.TESTS_FAILED))
