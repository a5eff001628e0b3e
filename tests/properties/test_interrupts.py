"""A stop signal whose first :class:`KeyboardInterrupt` is swallowed still stops the run.

Python drops an exception raised inside a ``gc.callbacks`` entry (Hypothesis keeps
one), so a SIGTERM that arrived during a collection used to leave ``subagents verify``
running past its caller's deadline. Run in a child process: pytest replaces
:func:`sys.unraisablehook` around each test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent(
    """
    import gc, signal, sys, threading
    from properties._interrupts import termination_interrupts

    sig = getattr(signal, sys.argv[1])
    fired = []

    def during_collection(phase, info):
        if phase == "start" and not fired:
            fired.append(True)
            signal.raise_signal(sig)  # its handler runs here, inside the callback

    gc.callbacks.append(during_collection)
    try:
        with termination_interrupts():
            gc.collect()
            assert fired
            threading.Event().wait(30)  # blocked on a lock, as a run waiting on a future is
        print("not interrupted")
    except KeyboardInterrupt as exc:
        print("interrupted by", exc)
        sys.exit(130)
    """
)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupt_swallowed_by_a_gc_callback_is_delivered_again(sig: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, sig], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stdout.strip() == f"interrupted by {sig}"


def test_the_old_handlers_and_unraisable_hook_come_back() -> None:
    script = textwrap.dedent(
        """
        import signal, sys
        from properties._interrupts import termination_interrupts
        before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        hook = sys.unraisablehook
        with termination_interrupts():
            assert signal.getsignal(signal.SIGTERM) is not before[1]
        after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        assert after == before and sys.unraisablehook is hook
        print("restored")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "restored", done.stderr
