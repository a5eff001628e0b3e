"""The pykka runtime of background subagents: one actor per attempt, a supervisor.

Layering: ``actors`` imports ``storage`` and ``statemachines`` only; the SDK
(``subagents``) plugs its agents in through the child-runner protocol
(:class:`ChildRunner`, :class:`ChildRequest`, :class:`ChildControl`,
:class:`ChildOutcome`). The actors themselves are private: callers hold
:class:`BackgroundSubagentSupervisor`, which talks to them in typed messages; a host
shares one :class:`SupervisorPools` (sized by :class:`PoolLimits`) between its
supervisors, so its thread count does not grow with its sessions.
"""

import logging

from . import _guard  # noqa: F401 - first: refuse a foreign layer below (statemachines._guard)

# isort: split

from ._child import ChildControl as ChildControl
from ._child import ChildOutcome as ChildOutcome
from ._child import ChildRequest as ChildRequest
from ._child import ChildRunner as ChildRunner
from ._config import OwnerIdentity as OwnerIdentity
from ._config import PoolLimits as PoolLimits
from ._config import SupervisorLimits as SupervisorLimits
from ._delivery import Deliverer as Deliverer
from ._errors import BackgroundSubagentError as BackgroundSubagentError
from ._errors import LeaseLost as LeaseLost
from ._results import AttemptSummary as AttemptSummary
from ._results import BackgroundResult as BackgroundResult
from ._results import CancelResult as CancelResult
from ._results import DelegateResult as DelegateResult
from ._results import InfoResult as InfoResult
from ._results import SteerReceipt as SteerReceipt
from ._results import WaitResult as WaitResult
from ._runtime import SupervisorPools as SupervisorPools
from ._supervisor import BackgroundSubagentSupervisor as BackgroundSubagentSupervisor
from ._supervisor import CompletionCallback as CompletionCallback

_SUBAGENTS_LAYER = "actors"
"""Marks this package as subagents' own (checked by ``statemachines._guard``)."""

# Every library logger of this distribution sits under ``subagents`` (``subagents.actors``,
# ``subagents.host``, ...). Without a handler there, Python's last-resort handler would
# print their warnings on an embedding application's stderr; the NullHandler leaves
# that to the application's own logging configuration. Installed here, the lowest
# package that logs, so it holds whether or not the SDK is imported.
logging.getLogger("subagents").addHandler(logging.NullHandler())

__all__ = [
    "AttemptSummary",
    "BackgroundResult",
    "BackgroundSubagentError",
    "BackgroundSubagentSupervisor",
    "CancelResult",
    "ChildControl",
    "ChildOutcome",
    "ChildRequest",
    "ChildRunner",
    "CompletionCallback",
    "DelegateResult",
    "Deliverer",
    "InfoResult",
    "LeaseLost",
    "OwnerIdentity",
    "PoolLimits",
    "SteerReceipt",
    "SupervisorLimits",
    "SupervisorPools",
    "WaitResult",
]
