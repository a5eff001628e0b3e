"""End to end: ``python -m subagents._cli serve --stdio`` as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from host_helpers import ASYNC_CONFIG, CONFIG, StdioHost, run_cli

pytestmark = pytest.mark.timeout(120)

SMALL = CONFIG.replace("[host]\n", "[host]\nmax_request_bytes = 4096\nmax_batch = 4\n")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(SMALL)
    return path


def test_stdio_session_run_events_and_restart(tmp_path: Path, config_file: Path) -> None:
    data = tmp_path / "data"
    host = StdioHost("--config", str(config_file), "--data-dir", str(data))
    try:
        init = host.result("initialize", {"protocol_version": "1"})
        assert init["protocol"] == "subagents.host"
        assert "events.subscribe" in init["features"]
        host.result("session.create", {"session_id": "s1"})
        sub = host.result("events.subscribe", {"session_id": "s1"})
        run = host.result("run.start", {"session_id": "s1", "input": "hello over stdio"})
        assert run["status"] == "admitted"
        done = host.wait_notification(
            lambda f: (
                f["params"]["event"]["kind"] == "run.completed"
                and f["params"]["event"]["run_id"] == run["run_id"]
            )
        )
        assert done["method"] == "events.event"
        assert done["params"]["subscription_id"] == sub["subscription_id"]
        status = host.result("run.status", {"session_id": "s1", "run_id": run["run_id"]})
        assert status["status"] == "completed"
        assert status["output_preview"] == "hello over stdio"
        replay = host.result("events.replay", {"session_id": "s1"})
        kinds = [e["kind"] for e in replay["events"]]
        assert kinds == ["session.created", "run.admitted", "run.started", "run.completed"]
        first_generation = host.result("diagnostics.get")["fencing_generation"]
        assert host.result("shutdown") == {"status": "shutting_down"}
    finally:
        code = host.close()
    assert code == 0
    # A restart over the same data directory sees everything, under a newer generation.
    again = StdioHost("--config", str(config_file), "--data-dir", str(data))
    try:
        replay = again.result("events.replay", {"session_id": "s1"})
        assert len(replay["events"]) == 4
        runs = again.result("run.list", {"session_id": "s1"})["runs"]
        assert [r["status"] for r in runs] == ["completed"]
        diagnostics = again.result("diagnostics.get")
        assert diagnostics["fencing_generation"] > first_generation
        assert diagnostics["store"] == "lmdb"
    finally:
        assert again.close() == 0


def test_stdio_bad_input_gets_errors_and_the_host_keeps_serving(
    tmp_path: Path, config_file: Path
) -> None:
    host = StdioHost("--config", str(config_file), "--memory")
    try:
        host.send_raw(b"{not json\n")
        assert host.next_frame()["error"]["code"] == -32700
        host.send_raw(b"\xff\xfe\n")
        assert host.next_frame()["error"]["code"] == -32700
        host.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"' + b"x" * 10_000 + b'"}\n')
        big = host.next_frame()
        assert big["error"]["code"] == -32003
        assert big["error"]["data"]["limit"] == 4096
        host.send_raw(b"[" + b",".join([b'{"jsonrpc":"2.0","id":1,"method":"x"}'] * 5) + b"]\n")
        assert host.next_frame()["error"]["code"] == -32600
        assert host.call("no.such.method")["error"]["code"] == -32601
        assert host.call("session.get", {"session_id": 5})["error"]["code"] == -32602
        assert host.call("session.get", {"session_id": "s", "x": 1})["error"]["code"] == -32602
        host.send_raw(b"\n   \n")  # blank lines are ignored
        host.send_raw(b'{"jsonrpc":"2.0","method":"diagnostics.get"}\n')  # no reply
        assert host.result("diagnostics.get")["accepting"] is True
    finally:
        assert host.close() == 0  # end of input: a clean exit


def test_stdout_carries_frames_only(tmp_path: Path, config_file: Path) -> None:
    proc = run_cli(
        "serve",
        "--stdio",
        "--memory",
        "--config",
        str(config_file),
        "-v",
        stdin='{"jsonrpc":"2.0","id":1,"method":"initialize"}\nnot json\n',
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    assert [json.loads(line).get("id") for line in lines] == [1, None]


def test_busy_data_dir_is_one_line_and_a_fix(tmp_path: Path, config_file: Path) -> None:
    data = tmp_path / "data"
    host = StdioHost("--config", str(config_file), "--data-dir", str(data))
    try:
        host.result("initialize")
        second = run_cli("serve", "--stdio", "--config", str(config_file), "--data-dir", str(data))
        assert second.returncode == 2
        assert "in use by another host" in second.stderr
        assert "fix:" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        assert host.close() == 0


def test_corrupt_data_dir_is_one_line_and_a_fix(tmp_path: Path, config_file: Path) -> None:
    data = tmp_path / "data"
    (data / "lmdb").mkdir(parents=True)
    (data / "lmdb" / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    proc = run_cli("serve", "--stdio", "--config", str(config_file), "--data-dir", str(data))
    assert proc.returncode == 2
    assert "does not hold a valid store" in proc.stderr
    assert "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sigterm_closes_the_host_cleanly(tmp_path: Path, config_file: Path) -> None:
    import signal

    data = tmp_path / "data"
    host = StdioHost("--config", str(config_file), "--data-dir", str(data))
    try:
        host.result("session.create", {"session_id": "s1"})
        host.proc.send_signal(signal.SIGTERM)
        assert host.proc.wait(timeout=30) == 0
    finally:
        host.close()
    # The lock is released and the session persisted: a new host serves the directory.
    again = StdioHost("--config", str(config_file), "--data-dir", str(data))
    try:
        assert again.result("session.get", {"session_id": "s1"})["status"] == "active"
    finally:
        assert again.close() == 0


def test_stdio_background_delegation_becomes_one_continuation(tmp_path: Path) -> None:
    config = tmp_path / "async.toml"
    config.write_text(ASYNC_CONFIG)
    release = tmp_path / "release"
    host = StdioHost(
        "--config",
        str(config),
        "--data-dir",
        str(tmp_path / "data"),
        "--tick",
        "0.05",
        scripted=True,
        env={"SUBAGENTS_TEST_RELEASE": str(release)},
    )

    def event(kind: str, **match: object) -> dict[str, object]:
        frame = host.wait_notification(
            lambda f: (
                f["params"]["event"]["kind"] == kind
                and all(f["params"]["event"].get(k) == v for k, v in match.items())
            )
        )
        return dict(frame["params"]["event"])

    try:
        assert host.result("diagnostics.get")["warnings"] == []
        host.result("session.create", {"session_id": "s1"})
        host.result("events.subscribe", {"session_id": "s1"})
        parent = host.result("run.start", {"session_id": "s1", "input": "plan the release"})
        done = event("run.completed", run_id=parent["run_id"])
        assert done["data"] == {"output": "delegated; carrying on"}
        assert host.result("diagnostics.get")["delegation"] == "async"
        release.touch()  # the child ends only now, after its parent run
        admitted = event("run.admitted")
        while admitted["run_id"] == parent["run_id"]:
            admitted = event("run.admitted")
        assert admitted["data"]["trigger_type"] == "async_subagent_result"  # type: ignore[index]
        finished = event("run.completed", run_id=admitted["run_id"])
        assert finished["data"] == {"output": "continued: three facts from the child"}
        run = host.result("run.status", {"session_id": "s1", "run_id": admitted["run_id"]})
        assert run["trigger_type"] == "async_subagent_result"
        assert run["parent_run_id"]
        assert "three facts from the child" in run["input"]  # the full result is the input
        replay = host.result("events.replay", {"session_id": "s1"})
        kinds = [e["kind"] for e in replay["events"]]
        assert [k for k in kinds if not k.startswith("attempt.")] == [
            "session.created",
            "run.admitted",
            "run.started",
            "run.completed",
            "run.admitted",
            "run.started",
            "run.completed",
        ]
        # The attempt's life, committed by the store with each change (issue 15).
        assert [k for k in kinds if k.startswith("attempt.")] == [
            "attempt.accepted",
            "attempt.started",
            "attempt.terminal",
            "attempt.claimed",
            "attempt.delivered",
        ]
        assert [e["seq"] for e in replay["events"]] == list(range(1, len(kinds) + 1))
        runs = host.result("run.list", {"session_id": "s1"})["runs"]
        assert [r["trigger_type"] for r in runs] == ["rpc", "async_subagent_result"]
    finally:
        code = host.close()
    assert code == 0, b"".join(host.stderr).decode()[-3000:]
