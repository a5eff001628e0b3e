"""The commit a copy of subagents was built from: recorded in the wheel by the
build (``setup.py``'s ``build_py``), read back by ``--version``, ``diagnostics.get``
and the reliability report when there is no checkout to ask."""

from __future__ import annotations

import runpy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import setuptools
from host_helpers import REPO, Client, memory_service, run_cli
from setuptools.command.build_py import build_py

from properties.reliability import _report
from subagents._host._buildinfo import COMMIT_FILE, build_commit, commit_of

HEAD = subprocess.run(
    ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
).stdout.strip()


def _setup_module(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    return runpy.run_path(str(REPO / "setup.py"))


def test_the_build_records_the_checkout_commit_in_both_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _setup_module(monkeypatch)["BuildPyWithCommit"]
    monkeypatch.setattr(build_py, "run", lambda self: None)  # only the hook's own part
    command = hook.__new__(hook)
    command.build_lib = str(tmp_path)
    command.run()
    for package in ("subagents", "properties/reliability"):
        recorded = (tmp_path / package / COMMIT_FILE).read_text().strip()
        assert recorded.removesuffix("+dirty") == HEAD


def test_an_install_without_a_checkout_reads_the_recorded_commit(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "subagents"
    package.mkdir(parents=True)
    assert commit_of(package) == "unknown"
    (package / COMMIT_FILE).write_text("0123abcd\n")
    assert commit_of(package) == "0123abcd"


def test_the_report_falls_back_to_the_recorded_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "reliability" / "_report.py"
    fake.parent.mkdir()
    (fake.parent / COMMIT_FILE).write_text("feedbeef\n")
    monkeypatch.setattr(_report, "__file__", str(fake))
    assert _report.current_commit(root=tmp_path) == "feedbeef"  # tmp_path is no checkout


def test_version_names_the_commit() -> None:
    assert build_commit().removesuffix("+dirty") == HEAD
    done = run_cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip().endswith(f"(commit {build_commit()})")


async def test_diagnostics_names_the_commit() -> None:
    from host_helpers import CONFIG

    service = memory_service(CONFIG)
    await service.start()
    try:
        diagnostics = await Client(service.dispatcher()).result("diagnostics.get")
    finally:
        await service.close()
    assert diagnostics["build_commit"] == build_commit()
