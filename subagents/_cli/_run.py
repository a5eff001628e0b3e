"""``subagents run`` (one-shot, blocking delegation) and ``subagents worker`` (delegation
disabled): one run of a profile on a prompt, its output on stdout."""

from __future__ import annotations

import argparse
import sys

from .._delegation._config import SubagentDelegationMode
from .._host._agents import AgentFactory
from ._common import CliError, add_config_option, host_config


def _prompt(text: str | None) -> str:
    """The prompt argument, else stdin (``-`` or omitted); refused from a terminal."""
    if text and text != "-":
        return text
    if sys.stdin.isatty():
        raise CliError("no prompt given", "pass the prompt as an argument, or pipe it on stdin")
    return sys.stdin.read()


def one_shot(
    config_file: str | None, profile: str | None, prompt: str | None, *, worker: bool
) -> int:
    """Run ``profile`` (default: ``host.default_profile``) once and print its output."""
    config = host_config(config_file)
    factory = AgentFactory(config)
    mode = SubagentDelegationMode.DISABLED if worker else SubagentDelegationMode.BLOCKING
    agent, _installed = factory.build(profile or config.host.default_profile, mode)
    result = agent.run_sync(_prompt(prompt))
    sys.stdout.write(result.output + ("\n" if not result.output.endswith("\n") else ""))
    return 0


def _run(args: argparse.Namespace) -> int:
    return one_shot(args.config, args.profile, args.prompt, worker=False)


def _worker(args: argparse.Namespace) -> int:
    return one_shot(args.config, args.profile, args.prompt, worker=True)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, text, handler in (
        ("run", "one-shot run with blocking delegation", _run),
        ("worker", "one-shot run with delegation disabled", _worker),
    ):
        p = sub.add_parser(name, help=text)
        add_config_option(p)
        p.add_argument("--profile", help="profile to run (default: host.default_profile)")
        p.add_argument("prompt", nargs="?", help="the prompt ('-' or omitted: read stdin)")
        p.set_defaults(handler=handler)
