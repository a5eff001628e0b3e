"""The README's Quick start promises and CI's entry point stay in step."""

from __future__ import annotations

import re
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
