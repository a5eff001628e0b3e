"""``subagents demo``: the offline end-to-end story (see :mod:`._story`), and the
scripted ``demo:`` models and configs that ``subagents chat`` uses too."""

from __future__ import annotations

import argparse

from statemachines import SubagentsError

from .._common import CliError, port
from ._common import DemoError
from ._models import CHAT_CONFIG, DEMO_CONFIG, register_demo_models
from ._story import run_demo

__all__ = [
    "CHAT_CONFIG",
    "DEMO_CONFIG",
    "DemoError",
    "register",
    "register_demo_models",
    "run_demo",
]


def run(args: argparse.Namespace) -> int:
    """The ``demo`` command: the story, or one readable error (never a traceback)."""
    try:
        return run_demo(args.data_dir, open_console=args.open, port=args.port)
    except DemoError:
        raise
    except (SubagentsError, OSError, ValueError, RuntimeError) as exc:
        raise CliError(
            f"the demo failed: {type(exc).__name__}: {exc}",
            "rerun with a fresh --data-dir; if it fails again, please report it",
        ) from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="the offline end-to-end demo (kill, restart, reconcile)")
    demo.add_argument("--data-dir", help="a new or empty directory (default: a temp dir, kept)")
    demo.add_argument(
        "--open",
        action="store_true",
        help="afterwards, serve the data dir over HTTP and print the web console's link",
    )
    demo.add_argument("--port", type=port, default=0, help="the console's port (with --open)")
    demo.set_defaults(handler=run)
