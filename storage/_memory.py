"""STUB: replaced by MemoryBackend and MemorySessionStore."""

from __future__ import annotations

from ._kernel import KernelStore


class MemorySessionStore(KernelStore):  # pragma: no cover - stub
    pass
