"""The ``subagents`` command line, one module per command group.

Subcommands: ``serve --stdio | --http`` (the durable RPC host, on a data
directory or, with ``--store postgresql://...``, on a database shared by
several hosts; :mod:`._serve`), ``db migrate | status`` (the PostgreSQL
schema; :mod:`._db`), ``run`` (one-shot, blocking delegation) and ``worker``
(delegation disabled; :mod:`._run`), ``diagram`` (mermaid of the lifecycles;
:mod:`._diagram`), ``verify`` (the properties suite and, with ``--report``,
the reliability harness; :mod:`._verify`), ``attempts list|show|cancel``
(trusted operations on a data directory or a PostgreSQL store;
:mod:`._attempts`), ``chat`` (interactive, background delegation;
:mod:`._chat`) and ``demo`` (the offline end-to-end story: delegate, steer,
cancel, kill, restart, reconcile; :mod:`._demo`). :mod:`._main` builds the
parser and dispatches to the handler each group registers.

Errors a user can fix (bad config, a busy or corrupt data directory, an
unknown profile, a model that cannot be resolved) print one readable line and
the fix on stderr, never a traceback, and exit with status 2.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
