"""The README's install lines work on a clone: extras are installed as ``'.[extra]'``
(the package is not published, so ``'subagents[extra]'`` fails), and every extra named
exists in ``pyproject.toml``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_installs_extras_from_the_clone() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "subagents[" not in text
    extras = set(re.findall(r"pip install (?:-e )?'\.\[([a-z0-9_,-]+)\]'", text))
    assert {"postgres", "openai", "anthropic"} <= extras
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for group in extras:
        for extra in group.split(","):
            assert extra in declared, f"README installs unknown extra {extra!r}"
