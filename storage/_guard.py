"""Fail at import when the ``statemachines`` found is not ours (see :mod:`statemachines._guard`).

Imported first by ``storage/__init__.py``, so it runs before any module of
``storage`` imports a name from ``statemachines``.
"""

from __future__ import annotations

import sys

try:
    from statemachines._guard import require_ours
except ImportError as exc:
    # A foreign statemachines has no _guard module (so the check that names the
    # shadowing file cannot be imported from it): name that file here.
    found = getattr(sys.modules.get("statemachines"), "__file__", None)
    raise ImportError(
        f"storage needs the 'statemachines' package installed with subagents, but "
        f"'import statemachines' found {found or 'a module that is not ours'}, which shadows "
        f"it. Rename that file or folder (or remove its directory from sys.path, where it "
        f"comes first), then retry.",
        name="statemachines",
        path=found,
    ) from exc

require_ours("storage", "statemachines")
