"""``python -m properties``: run the conformance suite and print a summary."""

from __future__ import annotations

import sys

from ._runner import main

if __name__ == "__main__":
    sys.exit(main())
