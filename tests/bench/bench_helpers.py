"""Running a bench script the way its user does, for the benches' smoke tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(
    script: str, *args: str, timeout: float = 240, expect: int | None = 0
) -> subprocess.CompletedProcess[str]:
    """``python bench/<script> <args>``, its output captured as text. With ``expect``
    (the default: 0), asserts that exit status, showing the bench's stderr if not."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if expect is not None:
        assert done.returncode == expect, done.stderr
    return done
