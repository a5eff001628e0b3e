"""Fail at import when the ``actors``, ``storage`` or ``statemachines`` found is not ours.

Imported first by ``subagents/__init__.py``; see :mod:`statemachines._guard`.
``properties`` is checked where it is imported (``subagents verify``), since
an embedder's own ``properties`` module never reaches the SDK.
"""

from __future__ import annotations

import actors as _actors  # noqa: F401 - first, so the lower layers' own checks run first
from statemachines._guard import require_ours

require_ours("subagents", "statemachines", "storage", "actors")
