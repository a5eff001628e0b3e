"""``subagents demo --open``: the story, then its data served with the console link."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from console_fixtures import REPO

pytestmark = pytest.mark.timeout(120)


def test_demo_open_prints_a_console_link_to_the_story(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("SUBAGENTS_CONFIG", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "subagents._cli",
            "demo",
            "--open",
            "--data-dir",
            str(tmp_path / "demo"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=90)
            seen.append(line)
            if line.startswith("console "):
                break
        assert any("demo finished" in x for x in seen), "".join(seen)
        link = line.split(" ", 1)[1].strip()
        base, code = link.split("/login#")
        with httpx.Client(base_url=base, timeout=30) as web:
            reply = web.post("/login", json={"code": code}, headers={"origin": base})
            assert reply.status_code == 204
            sessions = web.get("/console/api/sessions").json()["sessions"]
            # two parent runs, and a continuation run per result that did not reach its
            # parent in-band (the cancelled reviewer's may)
            assert [(s["session_id"], s["attempts"]) for s in sessions] == [("demo", 3)]
            assert sessions[0]["runs"] in {4, 5}
            view = web.get("/console/api/session", params={"session_id": "demo"}).json()
            assert view["summary"]["phases"] == {"delivered": 3}
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        reader.join(timeout=30)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    assert code == 0, err
