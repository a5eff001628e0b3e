"""``python -m properties``: progress, summary, exit codes, plugged-in stores."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from properties import main
from storage import AttemptRecord, ManualClock, MemorySessionStore, SessionStore

ROOT = Path(__file__).resolve().parents[2]


class _Broken(MemorySessionStore):
    def accept_attempt(self, record: AttemptRecord) -> AttemptRecord:
        raise RuntimeError("disk on fire")


def broken_store(clock: ManualClock) -> SessionStore:
    """A plugged-in factory whose store crashes with an untyped error."""
    return _Broken(clock=clock)


def plain_memory_store(clock: ManualClock) -> SessionStore:
    """A plugged-in factory returning a bare store (no reopen hook)."""
    return MemorySessionStore(clock=clock)


def test_a_passing_run_prints_progress_and_a_summary_and_exits_zero() -> None:
    out = io.StringIO()
    code = main(["--store", "memory", "--machine", "replay", "--paths"], out=out)
    text = out.getvalue()
    assert code == 0
    assert "replay     x memory" in text
    assert "Summary: 1 runs (1 machines x 1 stores)" in text
    assert "0 failures" in text
    assert "commit_terminal: Ok (exact replay" in text


def test_a_user_factory_is_plugged_in_with_module_colon_name() -> None:
    out = io.StringIO()
    code = main(["--store", f"{__name__}:plain_memory_store", "--machine", "retention"], out=out)
    assert code == 0
    assert f"{__name__}:plain_memory_store" in out.getvalue()


def test_a_failing_store_exits_non_zero_with_the_violation_and_its_reproduction() -> None:
    out = io.StringIO()
    code = main(["--store", f"{__name__}:broken_store", "--machine", "fencing"], out=out)
    text = out.getvalue()
    assert code == 1
    assert "FAILURE fencing" in text
    assert "untyped RuntimeError: disk on fire" in text
    assert "state = FencingMachine_" in text
    assert "state.accept_already_expired(" in text  # the shrunk step that crashed it


def test_an_unknown_store_is_a_usage_error() -> None:
    assert main(["--store", "no-such-store"], out=io.StringIO()) == 2


def test_the_module_runs_as_a_program() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "properties", "--decisions"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "<= now" in done.stdout
