"""The demo's timeline puts "host restarted" before the reconciliation the new host
does while it starts: the note is stamped before the process is launched."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console

from subagents._cli._demo import _story


class _StartedHost:
    pid = 4242
    events: ClassVar[list[Any]] = []

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}


def test_host_restarted_is_stamped_before_the_host_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = _story.Demo(Console(file=io.StringIO()), tmp_path, tmp_path)
    demo.hosts.append(_StartedHost())  # type: ignore[arg-type]
    reconciled: list[float] = []

    def start_host(owner: str) -> _StartedHost:
        reconciled.append(time.time())  # the new host reconciles while it starts
        return _StartedHost()

    monkeypatch.setattr(demo, "start_host", start_host)
    demo.restart()
    (note,) = [n for n in demo.notes if n[2] == "host restarted"]
    assert note[0] <= reconciled[0]
