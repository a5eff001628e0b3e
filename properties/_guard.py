"""Fail at import when the ``actors``, ``storage`` or ``statemachines`` found is not ours.

Imported first by ``properties/__init__.py``; see :mod:`statemachines._guard`.
"""

from __future__ import annotations

import actors as _actors  # noqa: F401 - first, so the lower layers' own checks run first
from statemachines._guard import require_ours

require_ours("properties", "statemachines", "storage", "actors")
