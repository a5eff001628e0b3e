"""A run that leaks actors fails fast: the session-end guard of ``tests/conftest.py``
stops them, names them and fails the run, and when a leaked thread would still
hang the interpreter's exit, the process ends anyway once the reports are out.

Each case runs the real guard (a copy of ``tests/conftest.py``) in a pytest
subprocess, since the guard may end its process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

GUARD = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()

LEAKS_AN_ACTOR = """
import pykka

class Leaker(pykka.ThreadingActor):
    pass

def test_passes_but_leaks_an_actor():
    Leaker.start()
"""

FAILS_MID_SHUTDOWN = """
import threading

import pykka

never = threading.Event()

class Stuck(pykka.ThreadingActor):
    def on_receive(self, message):
        never.wait()  # busy for ever: it never gets to handle its stop

def test_fails_mid_shutdown():
    Stuck.start().tell("work")
    raise AssertionError("failed before shutting its actor down")
"""


def _run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeconftest(GUARD)
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)


def test_a_leaked_actor_fails_a_run_whose_tests_passed_and_is_named(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, LEAKS_AN_ACTOR)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*pykka actors leaked by the tests*", "*Leaker (urn:*"])
    result.stdout.no_fnmatch_line("*would hang the exit*")  # stopping it was enough


def test_a_run_failing_mid_shutdown_finishes_and_names_what_it_left(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, FAILS_MID_SHUTDOWN)
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*pykka actors leaked by the tests*",
            "*Stuck (urn:*",
            "*leaked actors that did not stop*",
            "*threads that would hang the exit*",
            "*Stuck-*",
        ]
    )
