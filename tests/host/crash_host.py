"""The crash tests' host process: the packaged one, run as a script.

``python crash_host.py`` is ``python -m properties.reliability._crash_host``:
a zygote that forks one real host life per ``spawn`` request (see that
module), so the crash tests and ``subagents verify --report`` drive the same
host program.
"""

from __future__ import annotations

import sys

from properties.reliability._crash_host import zygote

if __name__ == "__main__":
    sys.exit(zygote())
