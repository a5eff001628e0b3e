"""``serve --http --host ADDR``: the bind address is checked before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from subagents._cli import main
from subagents._cli._common import EXIT_USAGE


@pytest.mark.parametrize(
    ("address", "reason"),
    [("0.0.0.0", "SUBAGENTS_HOST_TOKEN"), ("not-an-address", "is not an IP address")],
)
def test_a_refused_bind_address_is_one_error_line_and_no_token_file(
    address: str,
    reason: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("SUBAGENTS_HOST_TOKEN", raising=False)
    token_file = tmp_path / "http.token"
    status = main(
        ["serve", "--http", "--memory", "--host", address, "--token-file", str(token_file)]
    )
    err = capsys.readouterr().err
    assert status == EXIT_USAGE
    assert err.startswith("error: ")
    assert "host.bind" in err
    assert reason in err
    assert "fix: " in err
    assert "Traceback" not in err
    assert not token_file.exists()


def test_a_port_in_use_is_one_error_line_and_no_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        data = tmp_path / "data"
        status = main(["serve", "--http", "--data-dir", str(data), "--port", port])
        err = capsys.readouterr().err
        assert status == EXIT_USAGE
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}"), err
        assert lines[1].strip().startswith("fix: ")
        assert "--port" in lines[1]
        assert "Traceback" not in err
        assert not (data / "http.token").exists()
    finally:
        taken.close()
