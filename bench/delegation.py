"""Blocking delegation: this SDK against pydantic-ai, measured side by side in one run.

Scenarios (both frameworks on test models, no network):
- ``delegation``: a parent run whose model calls the delegation tool once; the
  tool runs a child agent (sharing usage with the parent) and the parent then
  answers with text. Ours: ``AgentBuilder(...).subagent(SubagentConfig(...))``
  with the built-in ``delegate`` tool. pydantic-ai: the usual agent-in-a-tool
  pattern (``await child.run(prompt, usage=ctx.usage)`` inside ``@parent.tool``).
- ``bare``: one child run with no tools.
- ``adapter``: the ``delegation`` scenario with a pydantic-ai child on both
  sides: ours delegates to it through ``subagents.adapters.pydantic_ai``
  (``SubagentConfig("research", PydanticAIChild(child))``), pydantic-ai runs it
  in a tool as above. No target: both sides pay for the pydantic-ai run.
- ``adapter_bare``: the overhead the adapter itself adds: one run of the
  pydantic-ai child through ``PydanticAIChild`` against ``child.run`` directly
  (``overhead_ms`` is the difference per run).

Work on both sides: the same model requests (test models, one per turn: the
parent's two, the child's one), the same message history kept by each
framework for its own runs, usage shared from child to parent on both sides;
durability: none on either side (no store, nothing fsync'd: 0 fsyncs per
attempt). The load average is printed before and after.

Prints ``ours / pydantic-ai`` per scenario against the target (<= 0.2), the
median of the per-batch-pair ratios with their min and max; with
``--json``, one JSON object with every figure and its target. Each figure is
the median over several batches of the mean time per run. This is a benchmark,
not a test: nothing here asserts timings.

Run: ``python bench/delegation.py [--json] [--runs N] [--batches B]``
(needs the ``bench`` extra: ``pydantic-ai-slim``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_RATIO = 0.2
PROMPT = "collect facts"


def _ours() -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]:
    from subagents import AgentBuilder, SubagentConfig, TestModel

    child = AgentBuilder(TestModel.with_text("child")).build()
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": PROMPT})], then="parent"
            )
        )
        .subagent(SubagentConfig("research", child))
        .build()
    )

    async def delegation() -> Any:
        result = await parent.run("plan")
        assert result.output == "parent" and result.usage.requests == 3, result
        return result

    async def bare() -> Any:
        result = await child.run(PROMPT)
        assert result.output == "child", result
        return result

    return delegation, bare


def _adapter() -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]:
    """Ours with a pydantic-ai child through the adapter: a delegation, and the bare run."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel as PydanticTestModel

    from subagents import AgentBuilder, SubagentConfig, TestModel
    from subagents.adapters.pydantic_ai import PydanticAIChild

    child = PydanticAIChild(Agent(PydanticTestModel(custom_output_text="child")), name="child")
    parent = (
        AgentBuilder(
            TestModel.with_tool_calls(
                [("delegate", {"name": "research", "prompt": PROMPT})], then="parent"
            )
        )
        .subagent(SubagentConfig("research", child))
        .build()
    )

    async def delegation() -> Any:
        result = await parent.run("plan")
        assert result.output == "parent" and result.usage.requests == 3, result
        return result

    async def bare() -> Any:
        result = await child.run(PROMPT)
        assert result.output == "child", result
        return result

    return delegation, bare


def _theirs() -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    child = Agent(TestModel(custom_output_text="child"))
    # TestModel calls each listed tool once with schema-generated arguments,
    # then answers with text: exactly one delegation per parent run.
    parent = Agent(TestModel(call_tools=["delegate"], custom_output_text="parent"))

    @parent.tool
    async def delegate(ctx: RunContext[None], name: str, prompt: str) -> str:
        """Delegate a task to a registered subagent and wait for its answer."""
        result = await child.run(prompt, usage=ctx.usage)
        return result.output

    async def delegation() -> Any:
        result = await parent.run("plan")
        assert result.output == "parent" and result.usage.requests == 3, result
        return result

    async def bare() -> Any:
        result = await child.run(PROMPT)
        assert result.output == "child", result
        return result

    return delegation, bare


async def _batch(fn: Callable[[], Awaitable[Any]], runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        await fn()
    return (time.perf_counter() - start) / runs


async def _measure_pair(
    ours: Callable[[], Awaitable[Any]],
    theirs: Callable[[], Awaitable[Any]],
    runs: int,
    batches: int,
    their_share: int = 4,
) -> tuple[float, float, list[float]]:
    """Median over ``batches`` of the mean seconds per run, for each side, and the
    ours / theirs ratio of each pair of batches.

    Batches alternate between the two frameworks (which goes first alternates
    too) so drift (frequency scaling, noisy neighbours) hits both alike.
    pydantic-ai runs ``1 / their_share`` as many iterations per batch: it is
    much slower, and the mean is stable anyway.
    """
    their_runs = max(1, runs // their_share)
    for _ in range(max(10, runs // 10)):
        await ours()
        await theirs()
    ours_means, their_means = [], []
    for n in range(batches):
        if n % 2:
            their_means.append(await _batch(theirs, their_runs))
            ours_means.append(await _batch(ours, runs))
        else:
            ours_means.append(await _batch(ours, runs))
            their_means.append(await _batch(theirs, their_runs))
    ratios = [o / t for o, t in zip(ours_means, their_means, strict=True)]
    return statistics.median(ours_means), statistics.median(their_means), ratios


async def _main(runs: int, batches: int) -> dict[str, Any]:
    import pydantic_ai

    ours_delegation, ours_bare = _ours()
    theirs_delegation, theirs_bare = _theirs()
    figures: dict[str, Any] = {
        "unit": "ms per run",
        "runs_per_batch": runs,
        "batches": batches,
        "python": platform.python_version(),
        "pydantic_ai": pydantic_ai.__version__,
        "scenarios": {},
    }
    adapter_delegation, adapter_bare = _adapter()
    pairs = {
        "delegation": (ours_delegation, theirs_delegation, TARGET_RATIO),
        "bare": (ours_bare, theirs_bare, TARGET_RATIO),
        "adapter": (adapter_delegation, theirs_delegation, None),
        "adapter_bare": (adapter_bare, theirs_bare, None),
    }
    for name, (ours, theirs, target) in pairs.items():
        # The adapter rows run pydantic-ai on both sides: as many runs each.
        their_share = 4 if target is not None else 1
        ours_s, theirs_s, ratios = await _measure_pair(ours, theirs, runs, batches, their_share)
        ratio = statistics.median(ratios)
        figures["scenarios"][name] = {
            "ours_ms": round(ours_s * 1e3, 4),
            "pydantic_ai_ms": round(theirs_s * 1e3, 4),
            "ratio": round(ratio, 4),
            "ratio_min": round(min(ratios), 4),
            "ratio_max": round(max(ratios), 4),
            "target_ratio": target,
            "meets_target": None if target is None else ratio <= target,
            "overhead_ms": round((ours_s - theirs_s) * 1e3, 4),
        }
    return figures


def _table(figures: dict[str, Any]) -> str:
    lines = [
        f"blocking delegation bench (python {figures['python']}, "
        f"pydantic-ai {figures['pydantic_ai']}, median of {figures['batches']} batches)",
        "ratio: the median of the per-batch-pair ratios [min-max]; durability: none (no "
        "store: a blocking delegation keeps no durable record), so 0 fsyncs per attempt",
        f"{'scenario':<13} {'ours ms':>10} {'pydantic-ai ms':>15} {'ratio [min-max]':>20} "
        f"{'target':>8} {'ok':>4} {'overhead ms':>12}",
    ]
    for name, row in figures["scenarios"].items():
        target = row["target_ratio"]
        ok = row["meets_target"]
        lines.append(
            f"{name:<13} {row['ours_ms']:>10.4f} {row['pydantic_ai_ms']:>15.4f} "
            f"{row['ratio']:>7.3f} [{row['ratio_min']:.2f}-{row['ratio_max']:.2f}] "
            f"{'-' if target is None else '<= ' + str(target):>8} "
            f"{'-' if ok is None else 'yes' if ok else 'NO':>4} {row['overhead_ms']:>12.4f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=400, help="our runs per batch")
    parser.add_argument("--batches", type=int, default=7)
    args = parser.parse_args(argv)
    from bench._common import load_average

    before = load_average()
    figures = asyncio.run(_main(args.runs, args.batches))
    figures |= {"load_before": before, "load_after": load_average(), "fsyncs_per_attempt": 0}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"load average before: {before}")
    print(_table(figures))
    print(f"load average after: {figures['load_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
