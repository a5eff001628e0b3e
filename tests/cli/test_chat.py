"""``subagents chat`` over a pipe: answers at once, background results when they are delivered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import cli_env

from storage import LmdbSessionStore

pytestmark = pytest.mark.timeout(120)

PROMPTS = "what changed in the release?\nwho owns the lease code?\n"


def chat(*args: str, stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagents._cli", "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**cli_env(), "COLUMNS": "200"},
        cwd=cwd,
        timeout=90,
        check=False,
    )


def test_two_prompts_then_their_background_results(tmp_path: Path) -> None:
    proc = chat(stdin=PROMPTS, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    answers = [line for line in lines if line.startswith("parent> ")]
    assert answers == ["parent> Done: delegate accepted."] * 2  # the parent answers at once
    results = [line for line in lines if line.startswith("↳ background result from researcher")]
    assert len(results) == 2, proc.stdout  # one per delegated prompt, each shown once
    # A result arrives after the parent's answer to the prompt that delegated it.
    assert lines.index(results[-1]) > lines.index(answers[-1])
    # Each result is shown with its content: as a continuation run's answer, or as
    # handed to the parent inside a later run (the store decides which, exactly once).
    for prompt in PROMPTS.splitlines():
        assert sum(f"looked into {prompt!r}" in line for line in results) == 1, proc.stdout


def test_durable_chat_keeps_its_session(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = chat("--data-dir", str(data_dir), stdin="collect facts\n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "background result from researcher" in proc.stdout
    store = LmdbSessionStore(data_dir / "lmdb")
    try:
        (attempt,) = store.list_attempts("default")
    finally:
        store.close()
    assert str(attempt.execution_status) == "completed"
    assert str(attempt.delivery_status) == "delivered"


def test_unknown_profile_is_a_readable_error(tmp_path: Path) -> None:
    proc = chat("--profile", "nope", stdin="hi\n", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and "nope" in lines[0]
    assert lines[1].strip().startswith("fix: ")
