"""Every example under examples/adapters/ runs offline and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "adapters").glob("*.py"))
EXPECTED = {
    "langgraph_child_and_parent.py": ["our parent: done", "langgraph parent: the child said"],
    "openai_agents_child_and_parent.py": ["our parent: done", "openai-agents parent: the child"],
    "opentelemetry_spans.py": ["invoke_agent lead", "invoke_agent research"],
    "pydantic_ai_child_and_parent.py": [
        "our parent: done",
        "pydantic-ai parent: the child said: three facts\n",
    ],
}


def test_every_example_is_checked() -> None:
    assert sorted(path.name for path in EXAMPLES) == sorted(EXPECTED)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_adapter_example_runs(example: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(example)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    for expected in EXPECTED[example.name]:
        assert expected in done.stdout, done.stdout
