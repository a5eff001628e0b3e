"""``subagents chat`` over a pipe: answers at once, background results when they are delivered."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from host_helpers import cli_env

from storage import LmdbSessionStore
from subagents._cli._demo import CHAT_CONFIG

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
    # The shipped chat config with a researcher that answers once released, after
    # both of the parent's answers: a result that arrived while a parent run was live
    # would be handed over in-band (" Meanwhile a result arrived: ...") instead.
    config = CHAT_CONFIG.read_text()
    gated = config.replace('"demo:worker=researcher"', '"demo:gated=researcher"')
    assert gated != config
    (tmp_path / "chat.toml").write_text(gated)
    gates = tmp_path / "gates"
    gates.mkdir()
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "subagents._cli", "chat", "--config", "chat.toml"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**cli_env(), "COLUMNS": "200", "SUBAGENTS_DEMO_GATES": str(gates)},
            cwd=tmp_path,
        )
    assert proc.stdin is not None and proc.stdout is not None
    lines: list[str] = []
    try:
        proc.stdin.write(PROMPTS)
        proc.stdin.close()
        for line in proc.stdout:  # until both answers; the researchers wait for their gate
            lines.append(line.rstrip("\n"))
            if sum(seen.startswith("parent> ") for seen in lines) == 2:
                break
        (gates / "researcher.release").touch()
        lines += proc.stdout.read().splitlines()
        returncode = proc.wait(90)
    finally:
        (gates / "researcher.release").touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    out = "\n".join(lines)
    assert returncode == 0, out + errors.read_text()[-3000:]
    assert "Traceback" not in errors.read_text()
    answers = [line for line in lines if line.startswith("parent> ")]
    assert answers == ["parent> Done: delegate accepted."] * 2  # the parent answers at once
    results = [line for line in lines if line.startswith("↳ background result from researcher")]
    assert len(results) == 2, out  # one per delegated prompt, each shown once
    shown = {attempt for line in results for attempt in re.findall(r"\((subattempt_[^)]+)\)", line)}
    assert len(shown) == 2, out
    # Both arrive after the parent's answers, each with its content: as a continuation
    # run's answer, or (the second) handed to the parent inside the first one's
    # continuation run (the store decides which, exactly once).
    assert all(lines.index(line) > lines.index(answers[-1]) for line in results), out
    assert all("researcher: findings ready" in line for line in results), out


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
