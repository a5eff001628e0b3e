"""``subagents serve ...`` with the demo's scripted ``demo:`` models registered.

``python console_host.py serve --http --config DEMO_CONFIG ...`` is the real CLI
serving the demo configuration (``demo:planner`` delegates, steers and cancels;
``demo:gated=NAME`` children wait for ``$SUBAGENTS_DEMO_GATES/NAME.release``).
"""

from __future__ import annotations

import sys

from subagents._cli import main
from subagents._cli._demo import register_demo_models

if __name__ == "__main__":
    register_demo_models()
    sys.exit(main(sys.argv[1:]))
