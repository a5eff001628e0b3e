"""What the demo's modules share: its error, its session and how long a step may take."""

from __future__ import annotations

from .._common import CliError

SESSION = "demo"
STEP_TIMEOUT = 20.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class DemoError(CliError):
    """The demo could not finish: ``message`` and a ``fix``, printed as one line each."""

    def __init__(self, message: str, fix: str = "rerun with a fresh --data-dir") -> None:
        super().__init__(message, fix)
