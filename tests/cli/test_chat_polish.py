"""``subagents chat`` as a finished tool: ``/help``, ``/attempts`` and ``/quit``
are commands (never prompts), a late result moves the waiting prompt below it,
Ctrl-C says what it cancelled, and ``--session ID`` resumes a durable session
with its pending results delivered."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from host_helpers import REPO, cli_env, gated_config, run_cli

from subagents._cli._chat import run_chat

pytestmark = pytest.mark.timeout(120)

EXAMPLE = REPO / "examples" / "delegating.toml"


def _chat(*args: str) -> list[str]:
    return [sys.executable, "-m", "subagents._cli", "chat", *args]


# A runner started in the background (``cmd &`` without job control, nohup) ignores
# SIGINT, and a child inherits that: Ctrl-C would never reach the chat. The child
# takes Python's own SIGINT handler back first, as it has when started from a terminal.
_WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
    " sys.argv[0] = 'subagents'; runpy.run_module('subagents._cli', run_name='__main__')"
)


def _chat_with_ctrl_c(*args: str) -> list[str]:
    return [sys.executable, "-c", _WITH_CTRL_C, "chat", *args]


def test_slash_commands_are_not_prompts() -> None:
    done = run_cli("chat", "--config", str(EXAMPLE), stdin="/help\n/attempts\n/bogus\n/quit\nx\n")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "/attempts this session's background attempts" in out
    assert "no background attempts in this session yet" in out
    assert "unknown command /bogus" in out
    assert "parent>" not in out  # nothing reached the parent, not even the line after /quit


class _Screen(io.StringIO):
    """A console file that says when the parent's answer was followed by a fresh
    prompt, and when a background result has been drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.prompting_again = threading.Event()
        self.result_shown = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        value = self.getvalue()
        answer = value.find("parent> ")
        if answer >= 0 and "you> " in value[answer:]:
            self.prompting_again.set()
        if "background result" in value:
            self.result_shown.set()
        return written


def test_a_late_result_moves_the_prompt_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    # The researcher answers once released, while "you> " waits: ended while the
    # parent's run was live, its result would be handed over in-band, above the answer.
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("SUBAGENTS_SCRIPT_GATES", str(gates))
    screen = _Screen()
    read, write = os.pipe()
    stdin = os.fdopen(read, "r")
    writer = os.fdopen(write, "w")
    status: list[int] = []
    thread = threading.Thread(
        target=lambda: status.append(
            run_chat(
                config=str(gated_config(tmp_path)),
                stdin=stdin,
                console=Console(file=screen, width=200, highlight=False),
                interactive=True,
            )
        )
    )
    thread.start()
    try:
        writer.write("collect facts\n")
        writer.flush()
        assert screen.prompting_again.wait(60), screen.getvalue()
        assert not screen.result_shown.is_set(), screen.getvalue()
        (gates / "researcher.release").touch()
        assert screen.result_shown.wait(60), screen.getvalue()
    finally:
        (gates / "researcher.release").touch()
        writer.close()
        thread.join(60)
    stdin.close()
    assert status == [0]
    lines = screen.getvalue().splitlines()
    result = next(i for i, line in enumerate(lines) if "background result" in line)
    assert lines[result - 1] == "you> "  # the prompt the result landed on, ended
    assert lines[result + 1].startswith("you> ")  # and drawn again below it


def test_ctrl_c_says_what_it_cancelled(tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    data = tmp_path / "data"
    chat = subprocess.Popen(
        _chat_with_ctrl_c("--config", str(gated_config(tmp_path)), "--data-dir", str(data)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli_env(), "SUBAGENTS_SCRIPT_GATES": str(gates), "COLUMNS": "300"},
    )
    assert chat.stdin is not None and chat.stdout is not None
    try:
        chat.stdin.write("collect facts\n")
        chat.stdin.flush()
        seen = []
        for line in chat.stdout:  # the parent answered; its attempt waits for its gate
            seen.append(line)
            if line.startswith("parent> "):
                break
        chat.send_signal(signal.SIGINT)
        out, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
    assert chat.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted: no run was live" in out
    assert "cancelled 1 background attempt(s) with the chat: subattempt_" in out
    assert f"--data-dir {data} --session session_" in out


def test_session_resumes_and_delivers_pending_results(tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    data, config = str(tmp_path / "data"), str(gated_config(tmp_path))
    env_gates = {"SUBAGENTS_SCRIPT_GATES": str(gates)}
    first = subprocess.run(
        _chat("--config", config, "--data-dir", data, "--wait", "0.2"),
        input="collect facts\n",
        capture_output=True,
        text=True,
        env={**cli_env(), **env_gates, "COLUMNS": "300"},
        timeout=90,
        check=False,
    )
    assert first.returncode == 1, first.stderr  # a result still pending at the end
    session = first.stdout.split()[1].rstrip(",")
    assert session.startswith("session_")
    again = subprocess.run(
        _chat("--config", config, "--data-dir", data, "--session", session),
        input="/attempts\n",
        capture_output=True,
        text=True,
        env={**cli_env(), **env_gates, "COLUMNS": "300"},
        timeout=90,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert f"resumed session {session}" in again.stdout
    assert "↳ background result from researcher" in again.stdout  # delivered on resume
    assert " delivered" in again.stdout.splitlines()[-1]
    missing = run_cli("chat", "--config", config, "--session", session, stdin="")
    assert missing.returncode == 2 and "needs the --data-dir" in missing.stderr
    unknown = run_cli("chat", "--config", config, "--data-dir", data, "--session", "nope", stdin="")
    assert unknown.returncode == 2, unknown.stderr
    assert unknown.stderr.startswith("error: no session 'nope' in ")
    assert "Traceback" not in unknown.stderr
