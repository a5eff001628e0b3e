"""The commit this copy of subagents was built from, for ``--version`` and diagnostics.

A wheel built from a checkout carries ``subagents/_build_commit.txt``, written by
the build (``setup.py``'s ``build_py``), so a non-editable install still names
its commit. Code run from a checkout (editable install, ``PYTHONPATH``) asks git
instead, so the answer follows the checkout; anything else is ``unknown``.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

COMMIT_FILE = "_build_commit.txt"
_PACKAGE = Path(__file__).resolve().parents[1]


def _recorded(package: Path) -> str | None:
    try:
        text = (package / COMMIT_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _from_git(root: Path) -> str | None:
    if not (root / ".git").exists():
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def commit_of(package: Path) -> str:
    """The commit of the ``subagents`` package at ``package``: its checkout's, else
    the one recorded at build time, else ``unknown``."""
    return _from_git(package.parent) or _recorded(package) or "unknown"


@cache
def build_commit() -> str:
    """This process's :func:`commit_of` (asked once)."""
    return commit_of(_PACKAGE)
