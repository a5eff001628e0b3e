"""The demo's host process: ``subagents serve --stdio`` on the demo config, plus the
scripted ``demo:`` models and seeded ids (each host its own seed: reproducible ids).

``python -m subagents._cli._demo._host DATA_DIR OWNER SEED`` is that process;
:class:`~._process.HostProcess` starts it. Nothing imports this module: it is
only ever run as ``__main__``.
"""

from __future__ import annotations

import logging
import sys

from storage import SeededIds

from ..._host import load_host_config, open_host
from .._serve import serve_host
from ._models import DEMO_CONFIG, register_demo_models


def serve_demo_host(data_dir: str, owner: str, seed: int) -> int:
    """Serve the demo config on stdio over ``data_dir`` as ``owner`` until shutdown."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    register_demo_models()
    service = open_host(
        load_host_config(DEMO_CONFIG),
        data_dir=data_dir,
        host_instance_id=owner,
        ids=SeededIds(seed),
        tick_seconds=0.1,
    )
    serve_host(service, transport="stdio")
    return 0


if __name__ == "__main__":
    sys.exit(serve_demo_host(sys.argv[1], sys.argv[2], int(sys.argv[3])))
