"""Fail at import when the ``storage`` or ``statemachines`` found is not ours.

Imported first by ``actors/__init__.py``; see :mod:`statemachines._guard`.
"""

from __future__ import annotations

import storage as _storage  # noqa: F401 - first, so storage's own check of statemachines runs
from statemachines._guard import require_ours

require_ours("actors", "statemachines", "storage")
