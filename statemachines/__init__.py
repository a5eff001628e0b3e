"""The formal lifecycles of ``subagents`` as ``transitions`` tables.

Pure: no I/O, no clock, no threads. Everything above builds on these tables.
"""

from ._errors import InvalidTransition as InvalidTransition
from ._errors import SubagentsError as SubagentsError
from ._errors import SubagentsSignal as SubagentsSignal
from ._factory import all_mermaid as all_mermaid
from ._factory import build_machine as build_machine
from ._factory import to_mermaid as to_mermaid
from ._tables import DELIVERY as DELIVERY
from ._tables import EXECUTION as EXECUTION
from ._tables import MACHINES as MACHINES
from ._tables import PHASE as PHASE
from ._tables import RETENTION as RETENTION
from ._tables import RUN as RUN
from ._tables import SESSION as SESSION
from ._tables import AttemptPhase as AttemptPhase
from ._tables import DeliveryStatus as DeliveryStatus
from ._tables import ExecutionStatus as ExecutionStatus
from ._tables import MachineSpec as MachineSpec
from ._tables import RetentionStatus as RetentionStatus
from ._tables import RunStatus as RunStatus
from ._tables import SessionStatus as SessionStatus
from ._tables import Transition as Transition
from ._tables import derive_phase as derive_phase
from ._tables import is_active_execution as is_active_execution

_SUBAGENTS_LAYER = "statemachines"
"""Marks this package as subagents' own (checked by ``statemachines._guard``)."""

__all__ = [
    "AttemptPhase",
    "DELIVERY",
    "DeliveryStatus",
    "EXECUTION",
    "ExecutionStatus",
    "InvalidTransition",
    "MACHINES",
    "MachineSpec",
    "PHASE",
    "RETENTION",
    "RUN",
    "RetentionStatus",
    "RunStatus",
    "SESSION",
    "SessionStatus",
    "SubagentsError",
    "SubagentsSignal",
    "Transition",
    "all_mermaid",
    "build_machine",
    "derive_phase",
    "is_active_execution",
    "to_mermaid",
]
