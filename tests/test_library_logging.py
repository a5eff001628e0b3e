"""Library loggers live under ``subagents`` and stay quiet in an embedding application
that did not configure logging (a NullHandler, not Python's last-resort stderr handler);
a configured application, and the CLI, still see their warnings."""

from __future__ import annotations

import importlib
import logging
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("statemachines", "storage", "actors", "subagents")


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


def module_loggers() -> dict[str, str]:
    """Every module-level Logger of the four packages, by ``module.attribute``."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if ".__main__" in info.name or "._demo._host" in info.name:
                continue
            module = importlib.import_module(info.name)
            for attr, value in vars(module).items():
                if isinstance(value, logging.Logger):
                    found[f"{info.name}.{attr}"] = value.name
    return found


def test_every_library_logger_is_named_under_subagents() -> None:
    loggers = module_loggers()
    assert "actors._supervisor.log" in loggers
    assert loggers["actors._supervisor.log"] == "subagents.actors"
    outside = {where: name for where, name in loggers.items() if not name.startswith("subagents.")}
    assert outside == {}


@pytest.mark.parametrize("package", ["actors", "subagents"])
def test_an_unconfigured_embedding_app_sees_no_library_warning(package: str) -> None:
    proc = python(
        f"import logging, {package}\n"
        "logging.getLogger('subagents.actors').warning('attempt lease lost')\n"
        "logging.getLogger('subagents.host').warning('host warning')\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_a_configured_app_and_the_cli_still_see_them() -> None:
    configured = python(
        "import logging, subagents\nlogging.basicConfig()\n"
        "logging.getLogger('subagents.actors').warning('attempt lease lost')\n"
    )
    assert "attempt lease lost" in configured.stderr
    cli = python(
        "import logging\nfrom subagents._cli._main import show_library_warnings\n"
        "show_library_warnings()\n"
        "logging.getLogger('subagents.actors').warning('attempt lease lost')\n"
    )
    assert cli.stderr == "attempt lease lost\n"


def test_the_property_machines_quiet_the_actors_logger_by_its_name() -> None:
    from properties import _skew, _supervisor

    assert _skew.ACTORS_LOG.name == _supervisor.ACTORS_LOG.name == "subagents.actors"
