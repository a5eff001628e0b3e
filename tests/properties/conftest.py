"""Shared fixtures of the property tests: the four built-in store factories."""

from __future__ import annotations

import pytest

from properties import LMDB, LMDB_JOURNAL, LMDB_REOPEN, MEMORY, NamedFactory

FACTORIES = [MEMORY, LMDB, LMDB_REOPEN, LMDB_JOURNAL]


@pytest.fixture(params=FACTORIES, ids=[f.name for f in FACTORIES])
def factory(request: pytest.FixtureRequest) -> NamedFactory:
    """Each built-in store factory in turn: memory, lmdb, lmdb-reopen, lmdb-journal."""
    made: NamedFactory = request.param
    return made
