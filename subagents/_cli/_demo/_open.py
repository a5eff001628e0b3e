"""``subagents demo --open``: after the story, serve its data directory over HTTP and
print the web console's one-time login link, so the story can be replayed visually.

The host is the demo's own (its config and scripted models, owner
``demo-console``) on 127.0.0.1; it serves until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
from collections.abc import Callable
from pathlib import Path

from ..._host import HostService, load_host_config, open_host
from ..._host._console import ConsoleAuth
from ..._host._http import serve_http
from ._models import DEMO_CONFIG, register_demo_models

CONSOLE_OWNER = "demo-console"


async def _serve(service: HostService, port: int, say: Callable[[str], None]) -> None:
    try:
        await service.start()
    except BaseException:
        await service.close()
        raise
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.shutdown_requested.set)
    token = secrets.token_urlsafe(32)
    auth = ConsoleAuth(token)
    await serve_http(
        service,
        service.dispatcher(),
        token,
        port=port,
        ready=lambda url: say(auth.login_link(url)),
        console=auth,
    )


def serve_console(directory: Path, say: Callable[[str], None], port: int = 0) -> int:
    """Serve ``directory`` with the demo config until interrupted; ``say`` gets the
    one-time console link once the port is bound. Returns 0."""
    register_demo_models()
    service = open_host(
        load_host_config(DEMO_CONFIG),
        data_dir=directory,
        host_instance_id=CONSOLE_OWNER,
        tick_seconds=0.5,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(service, port, say))
    return 0
