"""``python -m properties``: run the conformance suite and print a summary."""

from __future__ import annotations

import sys

from ._interrupts import termination_interrupts
from ._runner import main

if __name__ == "__main__":
    try:
        with termination_interrupts():  # SIGTERM/SIGHUP end it as Ctrl-C does: databases dropped
            code = main()
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
