"""The CLI tests share the host tests' helpers (``host_helpers``, ``postgres_db``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))
