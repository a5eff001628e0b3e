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
