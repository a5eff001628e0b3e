"""The durable RPC host: configuration, JSON-RPC framing, the v1 methods, transports.

``open_host`` wires a :class:`HostService` over a data directory (LMDB), a
PostgreSQL database shared by several hosts, or memory; ``serve_stdio`` /
``serve_http`` run it. See ``openrpc.json`` beside this file for the wire
contract.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage import Clock, IdSource

from ._config import HostConfig, HostConfigError, default_host_config, load_host_config
from ._config import parse_host_config as parse_host_config
from ._datadir import (
    DataDirBusy,
    DataDirCorrupt,
    DataDirError,
    StoreUnreachable,
    StoreUrlError,
    open_host_store,
)
from ._jsonrpc import ERROR_CODES, Connection, Dispatcher, ErrorCode, RpcError
from ._methods import METHOD_NAMES, METHODS
from ._service import HostService
from ._trusted import (
    AmbiguousAttemptId,
    AttemptOwned,
    AttemptView,
    TrustedAttempts,
    cancel_attempt,
    list_attempts,
    show_attempt,
)

OPENRPC_PATH = Path(__file__).with_name("openrpc.json")


def open_host(
    config: HostConfig | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    store: str | None = None,
    memory: bool = False,
    shared: bool = False,
    host_instance_id: str | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    tick_seconds: float = 1.0,
) -> HostService:
    """A host service over ``data_dir`` (default: the config's, else ``.subagents``).

    ``store`` (or the config's ``host.store``) is a PostgreSQL URL instead:
    the host shares that database with every other host using it, its
    ``host_instance_id`` is the lease owner and it takes a new fencing
    generation from the database at start; leases use the database's clock.
    ``memory=True`` keeps everything in process. Raises :class:`HostConfigError`,
    :class:`DataDirError` (busy, corrupt) or :class:`StoreUrlError`. Call
    ``await service.start()`` on the loop that will serve it, and
    ``await service.close()`` at the end.
    """
    config = config or default_host_config()
    opened = open_host_store(config, data_dir=data_dir, store=store, memory=memory, shared=shared)
    try:
        service = HostService(
            config,
            store=opened.store,
            events=opened.events,
            clock=clock if clock is not None else opened.store.clock,
            ids=ids,
            host_instance_id=host_instance_id,
            store_name=opened.name,
            data_dir=opened.data_dir,
            tick_seconds=tick_seconds,
            closers=opened.closers,
        )
    except BaseException:
        opened.close()
        raise
    # What opening the store found (a data directory others can read): diagnostics.get lists it.
    service.warnings.extend(opened.warnings)
    return service


__all__ = [
    "ERROR_CODES",
    "METHODS",
    "METHOD_NAMES",
    "OPENRPC_PATH",
    "AmbiguousAttemptId",
    "AttemptOwned",
    "AttemptView",
    "Connection",
    "DataDirBusy",
    "DataDirCorrupt",
    "DataDirError",
    "Dispatcher",
    "ErrorCode",
    "HostConfig",
    "HostConfigError",
    "HostService",
    "RpcError",
    "StoreUnreachable",
    "StoreUrlError",
    "TrustedAttempts",
    "cancel_attempt",
    "default_host_config",
    "list_attempts",
    "load_host_config",
    "open_host",
    "parse_host_config",
    "show_attempt",
]
