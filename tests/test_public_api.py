"""Each package exports exactly the names pinned here, and its ``__init__`` only re-exports.

The pinned lists (as temporalio's export tests do) make every change of a
public surface a visible edit of this file: adding, removing or renaming an
exported name fails until the list says so, and so does a public name bound in
the module but missing from ``__all__``. ``__all__`` is sorted (plain
code-point order), every listed name resolves, and no ``_private`` name leaks.
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("statemachines", "storage", "actors", "subagents", "properties")


def _init(package: str) -> Path:
    path = ROOT / package / "__init__.py"
    if not path.exists():
        pytest.skip(f"{package}/__init__.py does not exist yet")
    return path


def _reexports(tree: ast.Module) -> list[str]:
    """Names bound by ``from ._x import Name as Name`` at module level."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            for alias in node.names:
                if alias.asname is not None and alias.asname == alias.name:
                    names.append(alias.name)
    return names


def _declared_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            names = ast.literal_eval(value)
            assert isinstance(names, list | tuple)
            return [str(name) for name in names]
    raise AssertionError("__init__ declares no __all__")


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_sorted_without_duplicates(package: str) -> None:
    names = _declared_all(ast.parse(_init(package).read_text()))
    assert names == sorted(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_reexported_name_is_in_all(package: str) -> None:
    tree = ast.parse(_init(package).read_text())
    missing = sorted(set(_reexports(tree)) - set(_declared_all(tree)))
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_resolves(package: str) -> None:
    names = _declared_all(ast.parse(_init(package).read_text()))
    module = importlib.import_module(package)
    # A test directory with an ``__init__.py`` named like a layer shadows it.
    assert Path(str(module.__file__)) == _init(package), f"{package} resolves to {module.__file__}"
    unresolved = [name for name in names if not hasattr(module, name)]
    assert unresolved == []
    assert list(module.__all__) == names


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_leaks_into_all(package: str) -> None:
    names = _declared_all(ast.parse(_init(package).read_text()))
    assert [name for name in names if name.startswith("_")] == []


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_come_from_private_modules(package: str) -> None:
    """Implementation lives in ``_private`` modules; ``__init__`` only re-exports."""
    tree = ast.parse(_init(package).read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            if node.module is None:  # ``from . import _guard``: a private module, run first
                assert all(a.name.startswith("_") for a in node.names), ast.unparse(node)
                continue
            assert node.module.startswith("_"), ast.unparse(node)


PUBLIC: dict[str, list[str]] = {
    "statemachines": [
        "AttemptPhase",
        "DELIVERY",
        "DeliveryStatus",
        "EXECUTION",
        "ExecutionStatus",
        "InvalidTransition",
        "MACHINES",
        "MachineSpec",
        "PHASE",
        "RETENTION",
        "RUN",
        "RetentionStatus",
        "RunStatus",
        "SESSION",
        "SessionStatus",
        "SubagentsError",
        "SubagentsSignal",
        "Transition",
        "all_mermaid",
        "build_machine",
        "derive_phase",
        "is_active_execution",
        "to_mermaid",
    ],
    "storage": [
        "ASYNC_SUBAGENT_RESULT",
        "AcquireContinuation",
        "AdmissionLease",
        "AlreadyExists",
        "AnchoredClock",
        "Artifact",
        "ArtifactLimits",
        "AttemptRecord",
        "Backend",
        "Clock",
        "Conflict",
        "ConsumerTerminated",
        "ContinuationCause",
        "ContinuationReceipt",
        "CorruptRecord",
        "Delivered",
        "DeliveryClaim",
        "DeliveryClaimed",
        "DeliveryRelease",
        "DriverMissing",
        "Failed",
        "IdSource",
        "IdempotencyConflict",
        "IllegalTransition",
        "InputPart",
        "InvalidRecord",
        "KernelStore",
        "LmdbBackend",
        "LmdbSessionStore",
        "ManualClock",
        "MemorySessionStore",
        "NotFound",
        "OwnerLease",
        "PostgresBackend",
        "PostgresClock",
        "PostgresSessionStore",
        "QuotaExceeded",
        "RandomIds",
        "ResultRef",
        "Retryable",
        "RetryableStorage",
        "RunAdmissionReceipt",
        "RunConflict",
        "RunRecord",
        "SCHEMA_VERSION",
        "SeededIds",
        "SessionRecord",
        "SessionStore",
        "SkewedClock",
        "StaleFence",
        "StorageFull",
        "StoreCounters",
        "StoreError",
        "StoreEvent",
        "StoreIdentity",
        "StoreRefused",
        "SystemClock",
        "TerminalCommit",
        "Txn",
        "continuation_cause",
        "continuation_input",
        "continuation_outcome",
        "input_digest",
        "request_digest",
        "result_digest",
        "retained_view",
        "terminal_fingerprint",
    ],
    "storage.faults": [
        "DEFAULT_SLEEP_SECONDS",
        "ENV_FAULTS",
        "ENV_FAULTS_LOG",
        "ENV_FAULTS_SLEEP",
        "FAULT_ACTIONS",
        "FAULT_POINTS",
        "FaultSpecError",
        "arm",
        "arm_from_env",
        "configure",
        "disarm_all",
        "fault_counts",
        "parse_spec",
        "reached_counts",
        "reset_fault_counts",
        "reset_faults",
        "wait_fired",
    ],
    "actors": [
        "AttemptSummary",
        "BackgroundResult",
        "BackgroundSubagentError",
        "BackgroundSubagentSupervisor",
        "CancelResult",
        "ChildControl",
        "ChildOutcome",
        "ChildRequest",
        "ChildRunner",
        "CompletionCallback",
        "DelegateResult",
        "Deliverer",
        "InfoResult",
        "LeaseLost",
        "OwnerIdentity",
        "PoolLimits",
        "SteerReceipt",
        "SupervisorLimits",
        "SupervisorPools",
        "WaitResult",
    ],
    "subagents": [
        "AdapterNotInstalled",
        "Agent",
        "AgentApp",
        "AgentBuilder",
        "AgentConfigError",
        "AgentContext",
        "AgentContextHandle",
        "AgentError",
        "AgentEvent",
        "AgentHook",
        "AgentResult",
        "AgentSpec",
        "AgentSpecError",
        "AgentSpecRegistry",
        "AgentStream",
        "AgentStreamRecord",
        "AgentStreamSink",
        "AgentStreamSource",
        "AgentStreamSourceKind",
        "AnthropicModel",
        "AsyncDelegateTool",
        "BackgroundSubagentError",
        "BackgroundSubagentInfoTool",
        "BackgroundSubagentRunner",
        "BackgroundSubagentSupervisor",
        "CancelSubagentTool",
        "CapabilityBundle",
        "ContentRefused",
        "ConversationId",
        "DataDirBusy",
        "DataDirCorrupt",
        "DataDirError",
        "DelegateTool",
        "DeniedRequiredTool",
        "Dependencies",
        "EnvironmentProvider",
        "EventBus",
        "FunctionModel",
        "FunctionTool",
        "HostConfig",
        "HostConfigError",
        "HostService",
        "MissingApiKey",
        "MissingInheritedModel",
        "MissingRequiredTool",
        "MissingSubagent",
        "Model",
        "ModelError",
        "ModelMessage",
        "ModelPreset",
        "ModelProviderRegistry",
        "ModelRequest",
        "ModelRequestInfo",
        "ModelRequestParameters",
        "ModelResolutionError",
        "ModelResponse",
        "ModelSettings",
        "ModelStreamEvent",
        "OpenAIChatModel",
        "OpenAIResponsesModel",
        "OutputTruncated",
        "OwnerIdentity",
        "PayloadError",
        "ProviderAuthenticationError",
        "ProviderConnectionError",
        "ProviderError",
        "ProviderModel",
        "ProviderNotInstalled",
        "ProviderRateLimited",
        "ProviderServerError",
        "ProviderStreamIncomplete",
        "ProviderTimeout",
        "Record",
        "RecursiveSubagentDelegation",
        "RequestUsage",
        "RetryPolicy",
        "RetryPromptPart",
        "RpcError",
        "RunId",
        "StaticCapabilityBundle",
        "SteerSubagentTool",
        "StoreUnreachable",
        "StoreUrlError",
        "SubagentCapabilityInheritancePolicy",
        "SubagentConfig",
        "SubagentContextDelta",
        "SubagentDelegationMode",
        "SubagentDirectory",
        "SubagentError",
        "SubagentExecutionHook",
        "SubagentExecutionMetadata",
        "SubagentExecutionOutcome",
        "SubagentHookError",
        "SubagentInfoTool",
        "SubagentLifecycleEvent",
        "SubagentLifecycleKind",
        "SubagentParentTools",
        "SubagentRegistry",
        "SubagentResult",
        "SubagentRunFailed",
        "SubagentSpec",
        "SubagentSpecDiagnostic",
        "SubagentSpecError",
        "SubagentSpecProjection",
        "SubagentTask",
        "SubagentToolInheritanceError",
        "SubagentToolInheritancePolicy",
        "SubagentsError",
        "SubagentsSignal",
        "SupervisorLimits",
        "SystemPromptPart",
        "TaskId",
        "TestModel",
        "TextDelta",
        "TextPart",
        "Tool",
        "ToolArgumentError",
        "ToolCallDelta",
        "ToolCallPart",
        "ToolContext",
        "ToolDefinition",
        "ToolError",
        "ToolRegistry",
        "ToolResult",
        "ToolRetriesExceeded",
        "ToolReturnPart",
        "ToolSchemaError",
        "UnknownEnvironmentProvider",
        "UnsupportedAgent",
        "Usage",
        "UsageLimitExceeded",
        "UserPromptPart",
        "WaitSubagentTool",
        "compact_preview",
        "convert_arguments",
        "default_model_providers",
        "delegation_tools",
        "is_main_agent_only_tool",
        "load_host_config",
        "load_subagent_dir",
        "load_subagent_file",
        "make_test_model",
        "model_from_id",
        "open_host",
        "parse_host_config",
        "parse_subagent_markdown",
        "project_subagent_spec",
        "register_providers",
        "spec_error_diagnostic",
        "struct_schema",
        "tool",
    ],
    "subagents.adapters": [],
    "subagents.adapters.langgraph": [
        "LangGraphChild",
        "delegation_tools",
    ],
    "subagents.adapters.openai_agents": [
        "OpenAIAgentsChild",
        "delegation_tools",
    ],
    "subagents.adapters.opentelemetry": [
        "OpenTelemetryHook",
        "trace_context_store",
    ],
    "subagents.adapters.pydantic_ai": [
        "PydanticAIChild",
        "delegation_toolset",
    ],
    "properties": [
        "BUILTIN_FACTORIES",
        "ClockReport",
        "ContractMachine",
        "ContractViolation",
        "DECISIONS",
        "DeliveryMachine",
        "Fault",
        "FaultyStore",
        "FencingMachine",
        "Gate",
        "IgnoresAggregateQuota",
        "LMDB",
        "LMDB_JOURNAL",
        "LMDB_REOPEN",
        "MACHINES",
        "MEMORY",
        "NamedFactory",
        "Outcome",
        "PLANTED",
        "PROFILES",
        "Profile",
        "RedeliversDelivered",
        "Reference",
        "ReplayMachine",
        "ReplaySkipsFingerprint",
        "RetentionMachine",
        "RunResult",
        "SUPERVISOR_PLANTED",
        "SecondContinuation",
        "StaleHeartbeatRevives",
        "Stats",
        "StoreFactory",
        "StoreHandle",
        "StoreProxy",
        "SupervisorMachine",
        "SupervisorViolation",
        "current_profile",
        "delivery_machine",
        "fencing_machine",
        "lmdb_factory",
        "load_profile",
        "main",
        "planted",
        "profile_settings",
        "replay_machine",
        "resolve_factory",
        "retention_machine",
        "run_clock_cases",
        "run_machine",
        "run_suite",
        "supervisor_machine",
    ],
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_the_exported_names_are_exactly_the_pinned_ones(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert sorted(set(exported) - set(PUBLIC[module_name])) == [], "exported, not pinned"
    assert sorted(set(PUBLIC[module_name]) - set(exported)) == [], "pinned, not exported"
    assert exported == PUBLIC[module_name]


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_every_public_name_bound_in_the_module_is_exported(module_name: str) -> None:
    module = importlib.import_module(module_name)
    # Names bound to our own objects; typing helpers and the like are not surface.
    bound = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", module_name).split(".")[0] in PUBLIC
    }
    assert sorted(bound - set(module.__all__)) == []


def test_every_package_is_pinned() -> None:
    assert set(PACKAGES) <= set(PUBLIC)
