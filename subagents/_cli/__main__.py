"""``python -m subagents._cli ARGS`` is the ``subagents`` console script."""

from __future__ import annotations

import sys

from ._main import main

if __name__ == "__main__":  # importing this module (a package walk, say) runs nothing
    sys.exit(main())
