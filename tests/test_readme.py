"""The README's Quick start promises and CI's entry point stay in step."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quick_start_has_exactly_two_commands() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)


def test_the_main_job_command_installs_and_runs_something() -> None:
    main_job = quick_start_commands()[0]
    assert main_job.startswith("pip install ")
    assert "&& python -m " in main_job or "&& subagents " in main_job


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    test_command = quick_start_commands()[1]
    assert "pytest" in test_command
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci_lines


def test_the_python_examples_in_the_readme_run(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        # Each ``print(...)  # shown`` line says what the block prints.
        expected = re.findall(r"^print\(.*\)  # (.+)$", block, re.M)
        assert expected, block
        exec(compile(block, "README.md", "exec"), {})
        assert capsys.readouterr().out.splitlines() == expected


def command_table() -> list[tuple[str, str]]:
    """``(command cell, description cell)`` of each row of the README's command table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The command line", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `subagents")]
    out = []
    for row in rows:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
        out.append((cells[0].replace("\\|", "|"), cells[1]))
    return out


def _subcommand(command: str) -> list[str]:
    """The subcommand path of a table command (``db check``), up to its first option."""
    words = command.split()[1:]
    path = []
    for word in words:
        if word.startswith(("-", '"')) or word.isupper():
            break
        path.append(word)
    return path


def _help(path: list[str]) -> str:
    from subagents._cli._main import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        build_parser().parse_args([*path, "--help"])
    assert done.value.code == 0, path
    return out.getvalue()


def test_the_command_table_lists_every_command_and_each_help_works() -> None:
    from subagents._cli._main import COMMAND_GROUPS

    table = command_table()
    assert len(table) >= 12
    listed = {tuple(_subcommand(re.findall(r"`([^`]+)`", cell)[0])[:1]) for cell, _ in table}
    registered = {name for group in COMMAND_GROUPS for name in _registered_names(group)}
    assert registered <= {path[0] for path in listed if path}, "a command is missing from the table"
    for cell, _ in table:
        command = re.findall(r"`([^`]+)`", cell)[0]
        path = _subcommand(command)
        if not path:  # subagents --version
            continue
        text = _help(path)
        for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", command):
            assert option in text, f"{command}: {option} is not an option of {' '.join(path)}"


def _registered_names(group: object) -> list[str]:
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    group.register(sub)  # type: ignore[attr-defined]
    return list(sub.choices)


def test_the_table_uses_the_delegating_example_and_it_exists() -> None:
    commands = [re.findall(r"`([^`]+)`", cell)[0] for cell, _ in command_table()]
    uses = [c for c in commands if "--config examples/delegating.toml" in c]
    assert {_subcommand(c)[0] for c in uses} == {"run", "chat", "worker", "serve"}
    assert (ROOT / "examples" / "delegating.toml").is_file()


def _run(command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    args = shlex.split(command)
    assert args[0] == "subagents"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SUBAGENTS_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "subagents._cli", *args[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_offline_commands_of_the_table_do_what_it_says() -> None:
    rows = {re.findall(r"`([^`]+)`", cell)[0]: text for cell, text in command_table()}
    by_name = {_subcommand(c)[0] if _subcommand(c) else c: c for c in rows}
    ran = _run(by_name["run"])
    assert ran.returncode == 0 and ran.stdout.startswith('Done: researcher answered "'), ran
    worker = _run(by_name["worker"])
    assert worker.returncode == 0 and worker.stdout.startswith("no subagents to delegate to: ")
    chat = _run(by_name["chat"], stdin="collect facts\n")
    assert chat.returncode == 0 and "background result from researcher" in chat.stdout
    diagram = _run(by_name["diagram"])
    assert diagram.returncode == 0 and "stateDiagram-v2" in diagram.stdout
    version = _run(by_name["subagents --version"])
    assert version.returncode == 0 and version.stdout.startswith("subagents ")
