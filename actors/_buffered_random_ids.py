"""Random ids for the supervisor's hot path, drawn from the OS in blocks."""

from __future__ import annotations

import os
import threading
import uuid


class BufferedRandomIds:
    """:class:`~storage.RandomIds` drawn from the OS in blocks: the same randomness
    (``os.urandom``), one system call per 4 KiB instead of one per id.

    Every system call on the hot path releases the GIL and, with the supervisor's
    threads busy, waits to get it back; an attempt needs three or four ids.
    Thread-safe.
    """

    BLOCK = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0

    def _take(self, nbytes: int) -> bytes:
        with self._lock:
            if self._offset + nbytes > len(self._buffer):
                self._buffer = os.urandom(max(self.BLOCK, nbytes))
                self._offset = 0
            start = self._offset
            self._offset += nbytes
            return self._buffer[start : start + nbytes]

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16), version=4)

    def token_hex(self, nbytes: int) -> str:
        return self._take(nbytes).hex()

    def __repr__(self) -> str:
        return "BufferedRandomIds()"
