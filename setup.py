"""Build hook: record the commit a wheel is built from (metadata lives in pyproject.toml).

``build_py`` writes ``_build_commit.txt`` (the checkout's ``git rev-parse HEAD``,
``+dirty`` when tracked files changed) into the built ``subagents`` and
``properties.reliability`` packages, so ``subagents --version``,
``diagnostics.get`` and ``subagents verify --report`` name the commit after a
non-editable install too, where no git checkout is left to ask.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import setup  # type: ignore[import-untyped]
from setuptools.command.build_py import build_py  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent
COMMIT_FILE = "_build_commit.txt"
PACKAGES = ("subagents", "properties/reliability")


def checkout_commit() -> str | None:
    """HEAD of the checkout beside this file (``+dirty`` with changes), else ``None``."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


class BuildPyWithCommit(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        commit = checkout_commit()
        if commit is None:  # an sdist build: keep the file the sdist carries, if any
            return
        for package in PACKAGES:
            target = Path(self.build_lib) / package / COMMIT_FILE
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildPyWithCommit})
