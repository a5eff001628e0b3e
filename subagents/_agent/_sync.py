"""The ``*_sync`` twins' shared helper: run one coroutine on a fresh event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from .._errors import AgentError

T = TypeVar("T")


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a new event loop in this thread.

    Refused with :class:`AgentError` when this thread already runs a loop
    (blocking it would deadlock); the coroutine is closed, never started.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise AgentError("a *_sync method was called from a running event loop; await the async one")
