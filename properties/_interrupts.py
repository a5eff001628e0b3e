"""Stop signals that end a run as Ctrl-C does, even when the first raise is lost.

Python runs a signal handler in the main thread at the next bytecode boundary.
When that boundary is inside a ``gc.callbacks`` entry (Hypothesis keeps one),
a ``__del__`` method or a weakref callback, the handler's
:class:`KeyboardInterrupt` is reported through :func:`sys.unraisablehook` and
dropped, and the run goes on as if it had never been told to stop. So a lost
interrupt is sent again, from a helper thread, until one lands in ordinary code.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["termination_interrupts"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_NAMES = {sig.name: int(sig) for sig in _STOP_SIGNALS}


class _Redeliverer:
    """Re-sends a lost stop signal to the main thread.

    The unraisable hook runs in whichever thread dropped the exception (the main
    thread for a gc callback), possibly in the middle of that callback, so it only
    queues the signal; the daemon thread delivers it with ``pthread_kill``, which
    also wakes a main thread blocked on a lock.
    """

    def __init__(self) -> None:
        self._pending: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._run, name="interrupt-redeliver", daemon=True)
        self._thread.start()

    def resend(self, signum: int) -> None:
        self._pending.put(signum)

    def close(self) -> None:
        """Stop; a resend still queued is dropped (the run is already ending)."""
        self._closed.set()
        self._pending.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (signum := self._pending.get()) is not None and not self._closed.is_set():
            assert self._main is not None
            signal.pthread_kill(self._main, signum)


@contextlib.contextmanager
def termination_interrupts() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP raise :class:`KeyboardInterrupt` in the main
    thread, as Ctrl-C does, so a run that is told to stop still runs its
    ``atexit`` hooks and drops its scratch databases.

    Guaranteed: a stop signal whose :class:`KeyboardInterrupt` is swallowed (it
    surfaced in a gc callback or a finalizer) is sent again until it interrupts
    the main thread's own code. SIGINT gets the same treatment while it has
    Python's default handler. Off the main thread this is a no-op. The old
    handlers and :func:`sys.unraisablehook` come back on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    redeliver = _Redeliverer()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous_hook = sys.unraisablehook

    def unraisable(info: Any) -> None:
        # Ours carry the signal's name: the lost one is the one to send again.
        exc = info.exc_value
        if isinstance(exc, KeyboardInterrupt) and exc.args and exc.args[0] in _NAMES:
            redeliver.resend(_NAMES[exc.args[0]])
            return
        previous_hook(info)

    signals = [
        sig
        for sig in _STOP_SIGNALS
        if sig is not signal.SIGINT or signal.getsignal(sig) is signal.default_int_handler
    ]
    previous = {sig: signal.signal(sig, interrupt) for sig in signals}
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        redeliver.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_hook
