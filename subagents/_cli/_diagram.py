"""``subagents diagram``: the mermaid diagrams of every lifecycle, on stdout."""

from __future__ import annotations

import argparse
import sys

from statemachines import all_mermaid


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(all_mermaid())
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("diagram", help="mermaid diagrams of every lifecycle").set_defaults(handler=run)
