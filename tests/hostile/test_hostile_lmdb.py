"""A full LMDB map and a full reader table under a running host: a typed, retryable
JSON-RPC error (STORAGE_UNAVAILABLE), nothing partially written, the host still
serving, and work resuming once the map grows (in place or on reopen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.reliability._hostile import LMDB_CASES, check_lmdb


@pytest.mark.parametrize("case", LMDB_CASES)
async def test_a_full_store_is_a_retryable_refusal_and_work_resumes_after_growth(
    case: str, tmp_path: Path
) -> None:
    assert await check_lmdb(case, tmp_path) == []
