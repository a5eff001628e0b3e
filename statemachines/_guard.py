"""Refuse to run on top of a foreign ``statemachines``, ``storage``, ``actors`` or ``properties``.

The distribution installs its layers as the top-level packages
``statemachines``, ``storage``, ``actors``, ``subagents`` and ``properties``
(the design's folders). Generic names collide: a ``storage.py`` beside a
user's script, or another distribution's ``actors`` package earlier on
``sys.path``, is imported in place of ours, and the failure would surface far
away (an ``ImportError`` of some name, or worse, wrong behaviour). So each of
our packages carries the marker :data:`MARKER` set to its own name, and every
package checks the ones it imports with :func:`require_ours` before using
them: a stranger fails at import with :class:`ShadowedPackageError`, naming
the file that shadows ours and the fix.

No dependency beyond the standard library: this runs before anything else of
``subagents`` is imported.
"""

from __future__ import annotations

import importlib
from typing import Final

MARKER: Final[str] = "_SUBAGENTS_LAYER"
"""The attribute each of our packages sets to its own name."""


def shadow_message(package: str, found: str | None, importer: str) -> str:
    """The one-paragraph explanation and fix for a shadowed ``package``."""
    where = found or "a module that is not subagents' own"
    return (
        f"{importer} needs the {package!r} package installed with subagents, but "
        f"'import {package}' found {where}, which shadows it. Rename that file or folder "
        f"(or remove its directory from sys.path, where it comes first), then retry."
    )


class ShadowedPackageError(ImportError):
    """Another module named like one of our packages was imported in its place.

    ``name`` is the package (``"storage"``), ``path`` the file that shadows it
    (``None`` when the module has no file), ``importer`` the package that
    needed it. Derives from ``ImportError`` only, not ``SubagentsError``: the
    package that defines the root may be the one shadowed.
    """

    def __init__(self, package: str, found: str | None, importer: str) -> None:
        super().__init__(shadow_message(package, found, importer), name=package, path=found)
        self.importer = importer


def require_ours(importer: str, *packages: str) -> None:
    """Import each of ``packages`` and raise :class:`ShadowedPackageError` unless it is ours.

    Called at import time by ``importer`` (a package name, or a command such
    as ``"subagents verify"``), on the importing thread.
    """
    for package in packages:
        module = importlib.import_module(package)
        if getattr(module, MARKER, None) != package:
            raise ShadowedPackageError(package, getattr(module, "__file__", None), importer)
