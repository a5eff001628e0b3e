"""STUB: replaced by the contract logic (KernelStore)."""

from __future__ import annotations

from ._contract import SessionStore


class KernelStore(SessionStore):  # pragma: no cover - stub
    TABLES: tuple[str, ...] = ()
