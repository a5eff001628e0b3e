"""STUB: replaced by LmdbBackend and LmdbSessionStore."""

from __future__ import annotations

from ._kernel import KernelStore


class LmdbBackend:  # pragma: no cover - stub
    pass


class LmdbSessionStore(KernelStore):  # pragma: no cover - stub
    pass
