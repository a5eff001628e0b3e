"""Hypothesis stateful conformance suite for :class:`storage.SessionStore` implementations.

Each machine checks a store against an independent reference model of the
contract (:mod:`properties._reference`) and is built per store factory::

    from properties import MEMORY, fencing_machine
    TestFencing = fencing_machine(MEMORY).TestCase

The supervisor machine (:func:`supervisor_machine`) drives the ``actors``
runtime over the same stores. Run everything with
``python -m properties [--store ...] [--profile ci|deep|dev]``.
"""

from . import _guard  # noqa: F401 - first: refuse a foreign layer below (statemachines._guard)

# isort: split

from ._delivery import DeliveryMachine as DeliveryMachine
from ._delivery import delivery_machine as delivery_machine
from ._factories import BUILTIN_FACTORIES as BUILTIN_FACTORIES
from ._factories import LMDB as LMDB
from ._factories import LMDB_JOURNAL as LMDB_JOURNAL
from ._factories import LMDB_REOPEN as LMDB_REOPEN
from ._factories import MEMORY as MEMORY
from ._factories import NamedFactory as NamedFactory
from ._factories import StoreFactory as StoreFactory
from ._factories import StoreHandle as StoreHandle
from ._factories import lmdb_factory as lmdb_factory
from ._factories import resolve_factory as resolve_factory
from ._faults import Fault as Fault
from ._faults import FaultyStore as FaultyStore
from ._fencing import FencingMachine as FencingMachine
from ._fencing import fencing_machine as fencing_machine
from ._gate import Gate as Gate
from ._harness import ContractMachine as ContractMachine
from ._harness import ContractViolation as ContractViolation
from ._harness import Stats as Stats
from ._planted import PLANTED as PLANTED
from ._planted import IgnoresAggregateQuota as IgnoresAggregateQuota
from ._planted import ReplaySkipsFingerprint as ReplaySkipsFingerprint
from ._planted import SecondContinuation as SecondContinuation
from ._planted import StaleHeartbeatRevives as StaleHeartbeatRevives
from ._planted import StoreProxy as StoreProxy
from ._planted import planted as planted
from ._profiles import PROFILES as PROFILES
from ._profiles import Profile as Profile
from ._profiles import current_profile as current_profile
from ._profiles import load_profile as load_profile
from ._profiles import profile_settings as profile_settings
from ._reference import DECISIONS as DECISIONS
from ._reference import Outcome as Outcome
from ._reference import Reference as Reference
from ._replay import ReplayMachine as ReplayMachine
from ._replay import replay_machine as replay_machine
from ._retention import RetentionMachine as RetentionMachine
from ._retention import retention_machine as retention_machine
from ._runner import MACHINES as MACHINES
from ._runner import RunResult as RunResult
from ._runner import main as main
from ._runner import run_machine as run_machine
from ._runner import run_suite as run_suite
from ._skew import ClockReport as ClockReport
from ._skew import run_clock_cases as run_clock_cases
from ._supervisor import SUPERVISOR_PLANTED as SUPERVISOR_PLANTED
from ._supervisor import RedeliversDelivered as RedeliversDelivered
from ._supervisor import SupervisorMachine as SupervisorMachine
from ._supervisor import SupervisorViolation as SupervisorViolation
from ._supervisor import supervisor_machine as supervisor_machine

_SUBAGENTS_LAYER = "properties"
"""Marks this package as subagents' own (checked by ``statemachines._guard``)."""

__all__ = [
    "BUILTIN_FACTORIES",
    "ClockReport",
    "ContractMachine",
    "ContractViolation",
    "DECISIONS",
    "DeliveryMachine",
    "Fault",
    "FaultyStore",
    "FencingMachine",
    "Gate",
    "IgnoresAggregateQuota",
    "LMDB",
    "LMDB_JOURNAL",
    "LMDB_REOPEN",
    "MACHINES",
    "MEMORY",
    "NamedFactory",
    "Outcome",
    "PLANTED",
    "PROFILES",
    "Profile",
    "RedeliversDelivered",
    "Reference",
    "ReplayMachine",
    "ReplaySkipsFingerprint",
    "RetentionMachine",
    "RunResult",
    "SUPERVISOR_PLANTED",
    "SecondContinuation",
    "StaleHeartbeatRevives",
    "Stats",
    "StoreFactory",
    "StoreHandle",
    "StoreProxy",
    "SupervisorMachine",
    "SupervisorViolation",
    "current_profile",
    "delivery_machine",
    "fencing_machine",
    "lmdb_factory",
    "load_profile",
    "main",
    "planted",
    "profile_settings",
    "replay_machine",
    "resolve_factory",
    "retention_machine",
    "run_clock_cases",
    "run_machine",
    "run_suite",
    "supervisor_machine",
]
