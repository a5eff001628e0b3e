"""A foreign module named like one of our packages fails the import clearly.

Each case runs a fresh interpreter whose ``sys.path`` starts with a directory
holding a fake ``storage.py`` (or ``statemachines.py``, ``actors.py``,
``properties.py``), as a user's script directory would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import actors
import properties
import statemachines
import storage
import subagents
from statemachines._guard import MARKER, ShadowedPackageError, require_ours

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, fake: str, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / f"{fake}.py").write_text("SHADOW = True\n")
    # The fake's directory first, then this checkout (so the real packages are ours).
    script = f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(ROOT)!r}]\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    ("fake", "importer"),
    [
        ("storage", "actors"),
        ("storage", "subagents"),
        ("actors", "subagents"),
        ("statemachines", "actors"),
        ("actors", "properties"),
    ],
)
def test_importing_over_a_fake_package_fails_naming_the_file_and_the_fix(
    tmp_path: Path, fake: str, importer: str
) -> None:
    done = _run(tmp_path, fake, f"import {importer}")

    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(("statemachines._guard.ShadowedPackageError:", "ImportError:"))
    assert str(tmp_path / f"{fake}.py") in last
    assert f"'import {fake}' found" in last
    assert "Rename that file or folder" in last


def test_the_error_is_an_import_error_subclass_with_name_and_path(tmp_path: Path) -> None:
    code = (
        "from statemachines._guard import ShadowedPackageError\n"
        "try:\n"
        "    import actors\n"
        "except ShadowedPackageError as exc:\n"
        "    print(isinstance(exc, ImportError), exc.name, exc.path, exc.importer)\n"
    )
    done = _run(tmp_path, "storage", code)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "storage", str(tmp_path / "storage.py"), "actors"]


def test_subagents_verify_refuses_a_fake_properties(tmp_path: Path) -> None:
    code = "from subagents._cli import main\nraise SystemExit(main(['verify']))\n"
    done = _run(tmp_path, "properties", code)

    assert done.returncode == 1
    assert str(tmp_path / "properties.py") in done.stderr
    assert "ShadowedPackageError" in done.stderr


def test_without_a_fake_everything_imports(tmp_path: Path) -> None:
    done = _run(tmp_path, "unrelated", "import subagents, properties; print('ok')")

    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_every_package_carries_its_marker() -> None:
    for module in (statemachines, storage, actors, subagents, properties):
        assert getattr(module, MARKER) == module.__name__


def test_require_ours_refuses_a_module_without_the_marker() -> None:
    with pytest.raises(ShadowedPackageError) as caught:
        require_ours("tests", "json")
    assert caught.value.name == "json"
    assert "'import json' found" in str(caught.value)
