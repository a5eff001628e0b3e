"""Connection bounds for the HTTP transport: a head timeout, a connection cap, quiet logs.

uvicorn has a keep-alive timeout but no deadline for a request head and no
cap that spares a well-behaved client: its ``limit_concurrency`` counts
half-open connections too and answers 503 to the real request once they fill
it. :class:`ConnectionGuard` (shared by every connection of one server) adds:

- **a head deadline**: a connection gets ``header_timeout`` seconds from its
  accept (or from the first byte after a finished response) to deliver a
  complete request head, else it is closed, whatever trickles in meanwhile;
- **a connection cap** ``max_connections``, kept under the process's file
  descriptor limit: at the cap, the oldest connection still waiting for its
  head is closed to admit the new one (slow or silent clients churn each other
  out, a client that sends its request at once gets through); only when every
  connection is past its head is the new one refused;
- **quiet logs**: :class:`RateLimitFilter` lets one record per message through
  per ``interval`` and counts the rest into the next one, so a flood of
  refusals, ``Too many open files`` or protocol errors writes one line per
  interval, not a traceback each.

Everything here runs on the server's event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("subagents.host.http")

FD_RESERVE = 64
"""File descriptors left for the store, the event log, logs and child processes."""

_HEAD_END = b"\r\n\r\n"


def fd_budget(max_connections: int) -> tuple[int, int]:
    """``(cap, backlog)`` under the soft ``RLIMIT_NOFILE``.

    asyncio accepts up to ``backlog`` connections per wake-up before any reaches
    the guard, so the cap leaves room for two such bursts plus :data:`FD_RESERVE`:
    accepting never meets ``EMFILE``. ``backlog`` is an eighth of the limit
    (64..1024); ``cap`` is ``max_connections`` or less (at least 1).
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections, 1024
    backlog = max(64, min(1024, soft // 8))
    return max(1, min(max_connections, soft - FD_RESERVE - 2 * backlog)), backlog


class ConnectionGuard:
    """The head deadline and the connection cap of one server (see the module).

    ``counts`` (``evicted``, ``refused``, ``head_timeouts``) accumulate since the
    last report, ``totals`` since the start; :meth:`report` logs ``counts`` at most
    once per ``log_interval``.
    ``now`` is the monotonic time source (injectable for tests).
    """

    def __init__(
        self,
        *,
        max_connections: int,
        header_timeout: float,
        log_interval: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.log_interval = log_interval
        self._now = now
        self._live: set[asyncio.BaseTransport] = set()
        self._waiting: collections.OrderedDict[asyncio.BaseTransport, asyncio.TimerHandle] = (
            collections.OrderedDict()
        )
        self.counts: collections.Counter[str] = collections.Counter()
        self.totals: collections.Counter[str] = collections.Counter()
        self._last_report = float("-inf")  # the first refusal is logged at once

    @property
    def live(self) -> int:
        return len(self._live)

    @property
    def waiting(self) -> int:
        """Connections waiting for (the rest of) a request head."""
        return len(self._waiting)

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Take a new connection; ``False`` (and it is closed) when refused."""
        if len(self._live) >= self.max_connections:
            if self._waiting:
                oldest = next(iter(self._waiting))
                self._drop(oldest, "evicted")
            else:
                self._count("refused")
                transport.close()
                self.report()
                return False
        self._live.add(transport)
        self.await_head(transport)
        return True

    def await_head(self, transport: asyncio.BaseTransport) -> None:
        """Start the head deadline of ``transport`` (a new request begins)."""
        if transport in self._waiting or transport not in self._live:
            return
        loop = asyncio.get_running_loop()
        self._waiting[transport] = loop.call_later(
            self.header_timeout, self._drop, transport, "head_timeouts"
        )

    def is_waiting(self, transport: asyncio.BaseTransport) -> bool:
        return transport in self._waiting

    def head_received(self, transport: asyncio.BaseTransport) -> None:
        handle = self._waiting.pop(transport, None)
        if handle is not None:
            handle.cancel()

    def closed(self, transport: asyncio.BaseTransport) -> None:
        """The connection is gone (idempotent)."""
        self.head_received(transport)
        self._live.discard(transport)

    def _drop(self, transport: asyncio.BaseTransport, why: str) -> None:
        self.closed(transport)
        self._count(why)
        transport.close()
        self.report()

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        self.totals[what] += 1

    def report(self) -> None:
        """One log line with the counts since the last one, at most once per interval."""
        now = self._now()
        if not self.counts or now - self._last_report < self.log_interval:
            return
        summary = ", ".join(f"{name} {count}" for name, count in sorted(self.counts.items()))
        log.warning(
            "HTTP connection bounds: %s since the last report (%d open, cap %d)",
            summary,
            len(self._live),
            self.max_connections,
        )
        self.counts.clear()
        self._last_report = now


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``guard``'s head deadline and connection cap."""

    class GuardedH11Protocol(H11Protocol):
        _head_tail = b""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if guard.admit(transport):
                super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            guard.closed(self.transport)
            if self.transport is not None:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            transport = self.transport
            if not guard.is_waiting(transport) and (
                self.cycle is None or self.cycle.response_complete
            ):
                guard.await_head(transport)  # the next request on a kept-alive connection
                self._head_tail = b""
            if guard.is_waiting(transport):
                window = self._head_tail + data
                if _HEAD_END in window:
                    guard.head_received(transport)
                    self._head_tail = b""
                else:
                    self._head_tail = window[-3:]
            super().data_received(data)

    return GuardedH11Protocol


_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""Resource exhaustion: an expected condition at the limit, told in one line."""


def _one_line_if_exhausted(record: logging.LogRecord) -> None:
    """A record carrying an out-of-descriptors (or buffers, memory) ``OSError``
    becomes one line naming the error, without its traceback: at the limit every
    accept fails the same way, and a traceback says nothing more."""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, OSError) and error.errno in _EXHAUSTED:
        first = record.getMessage().splitlines()[0] if record.getMessage() else ""
        record.msg, record.args = f"{first}: {error.strerror}", ()
        record.exc_info, record.exc_text = None, None


class RateLimitFilter(logging.Filter):
    """Pass one record per message template per ``interval`` seconds; count the rest.

    The next record passed for a template says how many were suppressed. A record
    about exhausted descriptors is one line, never a traceback. Thread-safe
    (logging may run on any thread).
    """

    def __init__(self, interval: float, now: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self._now = now
        self._lock = threading.Lock()
        self._seen: dict[Any, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        _one_line_if_exhausted(record)
        # The first 48 characters: asyncio puts handles and timestamps after them.
        text = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        key = (record.name, text[:48])
        now = self._now()
        with self._lock:
            last, suppressed = self._seen.get(key, (float("-inf"), 0))
            if now - last < self.interval:
                self._seen[key] = (last, suppressed + 1)
                return False
            self._seen[key] = (now, 0)
        if suppressed:
            record.msg = f"{record.msg} ({suppressed} similar suppressed)"
        return True


QUIET_LOGGERS = ("uvicorn.error", "asyncio", "subagents.host.http")
"""Where accept failures, protocol errors and refusals are logged."""


_installed: list[RateLimitFilter] = []
_install_lock = threading.Lock()


def install_quiet_logs(interval: float) -> RateLimitFilter:
    """Rate-limit :data:`QUIET_LOGGERS` for the rest of the process (asyncio may log
    accept retries after the server closed). Idempotent: a second call only sets
    the interval of the filter already installed."""
    with _install_lock:
        if _installed:
            _installed[0].interval = interval
            return _installed[0]
        limiter = RateLimitFilter(interval)
        for name in QUIET_LOGGERS:
            logging.getLogger(name).addFilter(limiter)
        _installed.append(limiter)
        return limiter
