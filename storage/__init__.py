"""Durable records, digests, typed errors and the SessionStore contract with its stores.

Fault injection for tests and crash runs (arming the kernel's named fault
points) is the public submodule :mod:`storage.faults`, imported on its own.
Imports only point down: ``storage`` uses ``statemachines`` and nothing above it.
"""

from . import _guard  # noqa: F401 - first: refuse a foreign layer below (statemachines._guard)

# isort: split

from ._backend import Backend as Backend
from ._backend import StoreCounters as StoreCounters
from ._backend import Txn as Txn
from ._clock import AnchoredClock as AnchoredClock
from ._clock import Clock as Clock
from ._clock import IdSource as IdSource
from ._clock import ManualClock as ManualClock
from ._clock import RandomIds as RandomIds
from ._clock import SeededIds as SeededIds
from ._clock import SkewedClock as SkewedClock
from ._clock import SystemClock as SystemClock
from ._continuation import continuation_cause as continuation_cause
from ._continuation import continuation_input as continuation_input
from ._continuation import continuation_outcome as continuation_outcome
from ._continuation import retained_view as retained_view
from ._contract import SessionStore as SessionStore
from ._digest import input_digest as input_digest
from ._digest import request_digest as request_digest
from ._digest import result_digest as result_digest
from ._digest import terminal_fingerprint as terminal_fingerprint
from ._errors import AlreadyExists as AlreadyExists
from ._errors import Conflict as Conflict
from ._errors import CorruptRecord as CorruptRecord
from ._errors import Delivered as Delivered
from ._errors import DeliveryClaimed as DeliveryClaimed
from ._errors import Failed as Failed
from ._errors import IdempotencyConflict as IdempotencyConflict
from ._errors import IllegalTransition as IllegalTransition
from ._errors import InvalidRecord as InvalidRecord
from ._errors import NotFound as NotFound
from ._errors import QuotaExceeded as QuotaExceeded
from ._errors import RetryableStorage as RetryableStorage
from ._errors import RunConflict as RunConflict
from ._errors import StaleFence as StaleFence
from ._errors import StorageFull as StorageFull
from ._errors import StoreError as StoreError
from ._errors import StoreRefused as StoreRefused
from ._events import StoreEvent as StoreEvent
from ._identity import StoreIdentity as StoreIdentity
from ._kernel import KernelStore as KernelStore
from ._lmdb import LmdbBackend as LmdbBackend
from ._lmdb import LmdbSessionStore as LmdbSessionStore
from ._memory import MemorySessionStore as MemorySessionStore
from ._postgres import DriverMissing as DriverMissing
from ._postgres import PostgresBackend as PostgresBackend
from ._postgres import PostgresClock as PostgresClock
from ._postgres import PostgresSessionStore as PostgresSessionStore
from ._records import ASYNC_SUBAGENT_RESULT as ASYNC_SUBAGENT_RESULT
from ._records import SCHEMA_VERSION as SCHEMA_VERSION
from ._records import AcquireContinuation as AcquireContinuation
from ._records import AdmissionLease as AdmissionLease
from ._records import Artifact as Artifact
from ._records import ArtifactLimits as ArtifactLimits
from ._records import AttemptRecord as AttemptRecord
from ._records import ConsumerTerminated as ConsumerTerminated
from ._records import ContinuationCause as ContinuationCause
from ._records import ContinuationReceipt as ContinuationReceipt
from ._records import DeliveryClaim as DeliveryClaim
from ._records import DeliveryRelease as DeliveryRelease
from ._records import InputPart as InputPart
from ._records import OwnerLease as OwnerLease
from ._records import ResultRef as ResultRef
from ._records import Retryable as Retryable
from ._records import RunAdmissionReceipt as RunAdmissionReceipt
from ._records import RunRecord as RunRecord
from ._records import SessionRecord as SessionRecord
from ._records import TerminalCommit as TerminalCommit

_SUBAGENTS_LAYER = "storage"
"""Marks this package as subagents' own (checked by ``statemachines._guard``)."""

__all__ = [
    "ASYNC_SUBAGENT_RESULT",
    "AcquireContinuation",
    "AdmissionLease",
    "AlreadyExists",
    "AnchoredClock",
    "Artifact",
    "ArtifactLimits",
    "AttemptRecord",
    "Backend",
    "Clock",
    "Conflict",
    "ConsumerTerminated",
    "ContinuationCause",
    "ContinuationReceipt",
    "CorruptRecord",
    "Delivered",
    "DeliveryClaim",
    "DeliveryClaimed",
    "DeliveryRelease",
    "DriverMissing",
    "Failed",
    "IdSource",
    "IdempotencyConflict",
    "IllegalTransition",
    "InputPart",
    "InvalidRecord",
    "KernelStore",
    "LmdbBackend",
    "LmdbSessionStore",
    "ManualClock",
    "MemorySessionStore",
    "NotFound",
    "OwnerLease",
    "PostgresBackend",
    "PostgresClock",
    "PostgresSessionStore",
    "QuotaExceeded",
    "RandomIds",
    "ResultRef",
    "Retryable",
    "RetryableStorage",
    "RunAdmissionReceipt",
    "RunConflict",
    "RunRecord",
    "SCHEMA_VERSION",
    "SeededIds",
    "SessionRecord",
    "SessionStore",
    "SkewedClock",
    "StaleFence",
    "StorageFull",
    "StoreCounters",
    "StoreError",
    "StoreEvent",
    "StoreIdentity",
    "StoreRefused",
    "SystemClock",
    "TerminalCommit",
    "Txn",
    "continuation_cause",
    "continuation_input",
    "continuation_outcome",
    "input_digest",
    "request_digest",
    "result_digest",
    "retained_view",
    "terminal_fingerprint",
]
