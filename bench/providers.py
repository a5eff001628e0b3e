"""Per-request overhead of each provider against a raw SDK call to the same loopback server.

Run: ``python bench/providers.py [--rounds N] [--requests N] [--json]``.

llmock (the ``dev`` extra) serves OpenAI chat, OpenAI responses and
Anthropic answers from a subprocess on a free loopback port. For each
provider, every round times ``--requests`` non-streamed turns through the
provider model (conversion, pooled client, retry loop, parsing) and the same
number of turns through the bare SDK client (``AsyncOpenAI`` /
``AsyncAnthropic``, one pooled client, no retries) on the same server; the
two are interleaved round by round, alternating which goes first, so drift
in the machine's load hits both alike. The figure is the ratio
provider / raw per round: its median and its min-max. Target: median at most
1.2x.

Work on both sides: one model request per turn to the same loopback server
(the same request body, the same answer), no message history kept beyond
the turn, usage parsed from the answer by both; durability: none (no store,
0 fsyncs: no attempts).

The machine's load average is printed before and after: every figure is as
measured, on whatever else the machine was doing. This is a benchmark, not a
test: it never asserts timing, and exits 0 whether or not the target is met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from subagents import (  # noqa: E402
    AnthropicModel,
    ModelRequest,
    ModelRequestParameters,
    OpenAIChatModel,
    OpenAIResponsesModel,
    UserPromptPart,
)
from subagents._providers import ProviderModel  # noqa: E402

TARGET = 1.2
MODEL = "gpt-4o"
KEY = "bench-key"
PROMPT = "What is the capital of France?"
PATHS = {"openai-chat": "/v1", "openai-responses": "/v1", "anthropic": "/anthropic"}
CLASSES: dict[str, type[ProviderModel]] = {
    "openai-chat": OpenAIChatModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
}
# llmock's CLI, exiting when its stdin closes (no server outlives the bench).
SERVE = """
import os, sys, threading
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
from llmock.cli import app
app(sys.argv[1:])
"""


def start_llmock() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(transport=httpx.HTTPTransport(retries=10), timeout=10.0) as client:
        client.get(f"{url}/health").raise_for_status()
    return process, url


def raw_call(provider: str, base_url: str) -> tuple[Any, Callable[[], Awaitable[Any]]]:
    """A bare SDK client and one turn through it, as an application would write it."""
    messages = [{"role": "user", "content": PROMPT}]
    if provider == "anthropic":
        import anthropic

        claude = anthropic.AsyncAnthropic(api_key=KEY, base_url=base_url, max_retries=0)
        return claude, lambda: claude.messages.create(
            model=MODEL, max_tokens=256, messages=messages
        )
    import openai

    client = openai.AsyncOpenAI(api_key=KEY, base_url=base_url, max_retries=0)
    if provider == "openai-responses":
        return client, lambda: client.responses.create(model=MODEL, input=messages)
    return client, lambda: client.chat.completions.create(model=MODEL, messages=messages)


async def timed(call: Callable[[], Awaitable[Any]], requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        await call()
    return time.perf_counter() - started


async def measure(provider: str, url: str, rounds: int, requests: int) -> dict[str, Any]:
    base_url = url + PATHS[provider]
    model = CLASSES[provider](MODEL, api_key=KEY, base_url=base_url)
    conversation = [ModelRequest(parts=(UserPromptPart(content=PROMPT),))]
    params = ModelRequestParameters()
    client, raw = raw_call(provider, base_url)

    def ours() -> Awaitable[Any]:
        return model.request(conversation, params)

    try:
        await ours()  # warm both pools and both code paths
        await raw()
        ratios, ours_ms, raw_ms = [], [], []
        for round_ in range(rounds):
            if round_ % 2:
                raw_s, ours_s = await timed(raw, requests), await timed(ours, requests)
            else:
                ours_s, raw_s = await timed(ours, requests), await timed(raw, requests)
            ratios.append(ours_s / raw_s)
            ours_ms.append(1000 * ours_s / requests)
            raw_ms.append(1000 * raw_s / requests)
    finally:
        await model.aclose()
        await client.close()
    median = statistics.median(ratios)
    return {
        "provider": provider,
        "ratio_median": round(median, 3),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        "ours_ms_median": round(statistics.median(ours_ms), 3),
        "raw_ms_median": round(statistics.median(raw_ms), 3),
        "target_max": TARGET,
        "ok": median <= TARGET,
    }


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=40, help="turns per side per round")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    load_before = load()
    process, url = start_llmock()
    try:
        rows = [asyncio.run(measure(p, url, args.rounds, args.requests)) for p in CLASSES]
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(10)
    load_after = load()
    if args.json:
        result = {"providers": rows, "load_before": load_before, "load_after": load_after}
        print(json.dumps(result, indent=2))
        return 0
    print(f"load average before: {load_before}")
    print(f"{'provider':<18}{'ours ms':>9}{'raw ms':>9}{'ratio median':>14}{'min-max':>15}  ok")
    for row in rows:
        spread = f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}"
        print(
            f"{row['provider']:<18}{row['ours_ms_median']:>9.2f}{row['raw_ms_median']:>9.2f}"
            f"{row['ratio_median']:>13.2f}x{spread:>15}  {'yes' if row['ok'] else 'NO'}"
        )
    print(f"target: median ratio <= {TARGET}x; {args.rounds} rounds x {args.requests} requests")
    print(f"load average after: {load_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
