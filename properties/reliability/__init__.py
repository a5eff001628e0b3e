"""The reliability harness behind ``subagents verify --report``.

Crash runs and SIGSTOP runs against real host processes, the load run and the
hostile-input corpus live here, beside the conformance suite they report with,
because they drive the host: unlike the rest of :mod:`properties`, this
subpackage imports ``subagents`` (never ``subagents._cli``).
``import properties`` does not import it, so the conformance suite stays below
the SDK; only the CLI's ``verify`` command and the tests import it.

``python -m properties.reliability._crash_host zygote`` is the host program
the crash, SIGSTOP and load runs fork their host lives from.
"""

from __future__ import annotations

from ._report import (
    BUDGETS,
    Budget,
    PropertyRow,
    Report,
    Section,
    current_commit,
    default_seed,
    harness_runners,
    print_report,
    report_runners,
    run_sections,
)

__all__ = [
    "BUDGETS",
    "Budget",
    "PropertyRow",
    "Report",
    "Section",
    "current_commit",
    "default_seed",
    "harness_runners",
    "print_report",
    "report_runners",
    "run_sections",
]
