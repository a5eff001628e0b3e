"""``scripted_host.py`` in crash-test mode: the named fault points in
``SUBAGENTS_FAULTS`` are armed before the host starts (the production CLI never
reads that variable), so a test can SIGKILL a real host right after its nth
store commit (``store.after_commit=sigkill@N``)."""

from __future__ import annotations

import sys

import scripted_host

from storage.faults import arm_from_env

if __name__ == "__main__":
    arm_from_env()
    sys.exit(scripted_host.main(sys.argv[1:]))
