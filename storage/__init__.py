"""Durable records, digests, typed errors and the SessionStore contract with its stores."""

from ._clock import Clock as Clock
from ._clock import IdSource as IdSource
from ._clock import ManualClock as ManualClock
from ._clock import RandomIds as RandomIds
from ._clock import SeededIds as SeededIds
from ._clock import SystemClock as SystemClock

__all__ = [
    "Clock",
    "IdSource",
    "ManualClock",
    "RandomIds",
    "SeededIds",
    "SystemClock",
]
