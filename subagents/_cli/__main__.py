"""``python -m subagents._cli ARGS`` is the ``subagents`` console script."""

from __future__ import annotations

import sys

from ._main import main

sys.exit(main())
