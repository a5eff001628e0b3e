"""``import subagents`` never imports the mcp SDK; without it ``serve --mcp`` is a typed,
fixable error naming the extra; the MCP flags need ``--mcp``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from mcp_helpers import REPO

from subagents._cli import main

WITHOUT_MCP = textwrap.dedent(
    """
    import sys

    class NoMcp:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"mcp", "mcp_types"}:
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoMcp())
    import subagents
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"mcp", "mcp_types"})
    assert loaded == [], loaded
    from subagents._cli import main
    sys.exit(main(["serve", "--mcp", "--memory"]))
    """
)


def test_without_the_sdk_serve_mcp_names_the_extra() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_MCP],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "mcp extra" in proc.stderr and "pip install '.[mcp]'" in proc.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["serve", "--session", "x", "--memory"], "--mcp"),
        (["serve", "--memory"], "--mcp"),
        (["serve", "--mcp", "--profile", "nope", "--memory"], "unknown profile 'nope'"),
    ],
)
def test_the_mcp_flags_need_mcp_and_serve_needs_a_transport(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert says in capsys.readouterr().err
