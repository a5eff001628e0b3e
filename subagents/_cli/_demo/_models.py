"""Offline scripted models of ``subagents demo`` and ``subagents chat`` (provider ``demo``),
built from the parts of the ``script`` provider (:mod:`subagents._providers._script`).

- ``demo:planner``: the parent. On a background result (a continuation run)
  it answers ``continued after <subagent>: <last line of the result>``. On a
  prompt that mentions ``release`` it delegates to ``researcher`` and
  ``reviewer``, steers the researcher and cancels the reviewer; on one that
  mentions ``crash`` it delegates to ``debugger``; on anything else it hands the
  prompt to ``researcher``. ``demo:assistant`` (the chat's parent) always
  hands the prompt to ``researcher``. Each step is one tool call; the final answer names
  the attempts.
- ``demo:worker=NAME``: ``script:worker=NAME``.
- ``demo:gated=NAME``: ``script:gated=NAME``, gated by ``$SUBAGENTS_DEMO_GATES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..._agent._models import FunctionModel, ModelMessage, ModelRequestParameters, ModelResponse
from ..._providers._script import Step, gated, plan, worker
from ..._specs._agent_spec import ModelProviderRegistry, default_model_providers

ASSETS = Path(__file__).with_name("assets")
DEMO_CONFIG = ASSETS / "demo.toml"
"""The demo host's configuration: the ``demo:`` models, subagents researcher, reviewer, debugger."""
CHAT_CONFIG = ASSETS / "chat.toml"
"""The offline chat's configuration: ``demo:assistant`` hands each prompt to ``researcher``."""

PROVIDER = "demo"
GATES_ENV = "SUBAGENTS_DEMO_GATES"


def _story_steps(prompt: str, params: ModelRequestParameters) -> list[Step]:
    """The tool calls the planner makes for ``prompt`` (``{attempt:N}``: the Nth delegate's)."""
    lowered = prompt.lower()
    if "release" in lowered:
        return [
            (
                "delegate",
                {"subagent_name": "researcher", "prompt": "Collect evidence on the release"},
            ),
            ("delegate", {"subagent_name": "reviewer", "prompt": "Review the release branch"}),
            (
                "steer_subagent",
                {"attempt_id": "{attempt:0}", "message": "Focus on the lease code path"},
            ),
            ("cancel_subagent", {"attempt_id": "{attempt:1}", "reason": "review not needed"}),
        ]
    if "crash" in lowered:
        return [("delegate", {"subagent_name": "debugger", "prompt": "Find the crash"})]
    return _research_steps(prompt, params)


def _research_steps(prompt: str, params: ModelRequestParameters) -> list[Step]:
    return [("delegate", {"subagent_name": "researcher", "prompt": prompt.strip()})]


def planner(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> ModelResponse:
    """The scripted parent of the demo (see the module docstring)."""
    response: ModelResponse = plan(messages, params, _story_steps)
    return response


def assistant(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> ModelResponse:
    """The chat's parent: every prompt goes to ``researcher`` in the background."""
    response: ModelResponse = plan(messages, params, _research_steps)
    return response


def _make(name: str, settings: Any) -> FunctionModel:
    if name == "planner":
        return FunctionModel(planner)
    if name == "assistant":
        return FunctionModel(assistant)
    if name.startswith("worker="):
        return worker(name[len("worker=") :])
    if name.startswith("gated="):
        return gated(name[len("gated=") :], GATES_ENV)
    raise ValueError(f"unknown demo model {name!r}; use demo:planner or demo:gated=NAME")


def register_demo_models(registry: ModelProviderRegistry | None = None) -> ModelProviderRegistry:
    """Register the ``demo`` provider (idempotent) and return the registry."""
    registry = registry or default_model_providers()
    registry.register(PROVIDER, _make, replace=True)
    return registry
