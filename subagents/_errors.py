"""The errors the ``subagents`` SDK defines for runs, models, tools and delegation.

All derive from :class:`statemachines.SubagentsError` (exported as
``subagents.SubagentsError``), which stores keyword fields as attributes
(``ToolArgumentError(..., tool="delegate", path="$.name")`` has ``.tool`` and
``.path``). Where each one sits, with every other error of the project, is
drawn once in :mod:`statemachines._errors`.
"""

from __future__ import annotations

from typing import Any

from statemachines import SubagentsError


class AgentError(SubagentsError):
    """An agent run or a delegation did not complete.

    Raised by ``Agent.run``/``run_stream``/``run_sync`` and by the subagent
    registry. The message says what failed; keyword fields say where.
    """


class AgentConfigError(AgentError):
    """A builder, registry, tool set or schema cannot be used as configured.

    Raised at build/registration time, never in the middle of a run.
    """


class ToolSchemaError(AgentConfigError):
    """A tool's ``parameters_schema`` uses JSON-schema features the validator cannot enforce.

    Fields: ``tool`` and ``path`` (a JSON pointer into the schema). Raised when
    the tool is constructed, so a schema is never silently half-enforced.
    """

    tool: str
    path: str


class AdapterNotInstalled(AgentConfigError):
    """An adapter's framework is not installed.

    Fields: ``adapter`` (e.g. ``subagents.adapters.pydantic_ai``), ``extra``
    (the pip extra to install) and ``module`` (the missing import).
    """

    adapter: str
    extra: str


class UnsupportedAgent(AgentConfigError):
    """``SubagentConfig`` got an object it cannot run as a child.

    Fields: ``name`` (the subagent), ``agent_type`` (the object's qualified
    type name) and ``adapter`` (the adapter that runs such objects, or ``None``).
    """

    agent_type: str
    adapter: str | None


class ModelError(AgentError):
    """The model raised, returned an unusable response, or ran out of script.

    Fields: ``model`` and, when known, ``run_id``.
    """

    model: str


class ProviderError(ModelError):
    """A real model provider (OpenAI-compatible, Anthropic) failed a request.

    Fields: ``provider`` (``openai-chat``, ``openai-responses``, ``anthropic``),
    ``model`` and, when the server answered, ``status`` (else ``None``).
    Messages and fields never contain an API key (keys are redacted before
    the error is built), and the SDK's own exception is not chained, since
    it holds the request with its credentials.
    """

    provider: str
    status: int | None = None
    #: A safe public reason (``authentication``, ``rate_limited``, ...).
    category: str = "provider_error"


class ProviderNotInstalled(ProviderError):
    """The provider's SDK is not installed. Field: ``extra`` (the pip extra to install)."""

    extra: str


class MissingApiKey(ProviderError):
    """No API key in the model settings nor in the environment. Field: ``env_var``."""

    env_var: str


class ProviderAuthenticationError(ProviderError):
    """The provider refused the credentials (HTTP 401/403). Never retried."""


class ProviderRateLimited(ProviderError):
    """HTTP 429 on every attempt within the retry bound. Field: ``attempts``."""

    attempts: int


class ProviderServerError(ProviderError):
    """HTTP 5xx (or overloaded) on every attempt within the retry bound. Field: ``attempts``."""

    attempts: int


class ProviderConnectionError(ProviderError):
    """The server could not be reached on any attempt within the retry bound."""


class ProviderTimeout(ProviderError):
    """The provider did not answer within the configured ``timeout``, on every attempt."""


class ContentRefused(ProviderError):
    """The provider refused to produce the content (refusal or content filter).

    Field: ``reason`` (the refusal text or the stop reason).
    """

    reason: str


class UsageLimitExceeded(AgentError):
    """The run reached its request limit before the model produced text output.

    Fields: ``limit``, ``requests`` and ``run_id``.
    """

    limit: int
    requests: int
    run_id: str


class ToolRetriesExceeded(AgentError):
    """A tool failed (bad arguments or ``ToolError``) more often than the retry limit allows.

    Fields: ``tool``, ``retries`` and ``run_id``; ``__cause__`` is the last ``ToolError``.
    """

    tool: str
    retries: int
    run_id: str


class SubagentError(AgentError):
    """A delegation to a named subagent failed. Fields: ``name`` and ``task_id``.

    A ``subagent_failed`` lifecycle event was published on the parent context
    before this was raised.
    """

    name: str
    task_id: str


class MissingSubagent(SubagentError):
    """No subagent is registered under the requested name. Field: ``registered``."""

    registered: list[str]


class RecursiveSubagentDelegation(SubagentError):
    """A subagent tried to delegate again without ``with_nested_delegation(True)``.

    Field: ``stack`` (the names of the subagents already running, outermost first).
    """

    stack: list[str]


class SubagentHookError(SubagentError):
    """A :class:`SubagentExecutionHook` raised. Field: ``hook`` (the method name).

    ``__cause__`` is the hook's exception.
    """

    hook: str


class SubagentRunFailed(SubagentError):
    """The child agent's run raised. Field: ``child_run_id``; ``__cause__`` is the child error."""

    child_run_id: str


class ToolError(SubagentsError):
    """A tool call failed.

    Inside a run, the loop sends the message back to the model as a retry
    prompt (bounded by the agent's retry limit); called directly, it propagates.
    Fields: ``tool`` and whatever the tool adds.
    """

    tool: str | None

    def __init__(self, message: str = "", *, tool: str | None = None, **fields: Any) -> None:
        if tool is not None:
            fields["tool"] = tool
        super().__init__(message, **fields)
        self.tool = tool


class ToolArgumentError(ToolError):
    """Model-supplied tool arguments did not match the tool's schema.

    Fields: ``tool`` and ``path`` (a JSON path such as ``$.prompt``; ``$`` for
    the whole object).
    """

    path: str


class PayloadError(SubagentsError):
    """A value given to ``T.from_value(...)`` does not decode into ``T``.

    Fields: ``type`` (the record type name) and ``detail`` (msgspec's message,
    which names the offending path such as ``$.task_id``).
    """

    type: str
    detail: str


class SubagentSpecError(AgentConfigError):
    """A subagent markdown file (or text) cannot be turned into a ``SubagentSpec``.

    Fields: ``path`` (the file, or ``None`` for bare text), ``line`` (1-based,
    in the original text, or ``None`` when no line applies, such as a file over
    the size limit), ``key`` (the frontmatter key at fault, or ``None``) and
    ``reason`` (the message without the location). ``str(error)`` starts with
    ``path:line:`` so an editor can jump to it; ``spec_error_diagnostic(error)``
    returns the same facts as a ``SubagentSpecDiagnostic`` record.
    """

    path: str | None
    line: int | None
    key: str | None
    reason: str

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        where = ":".join(
            part for part in (path or "<text>", None if line is None else str(line)) if part
        )
        prefix = f"{where}: " + (f"key {key!r}: " if key is not None else "")
        super().__init__(prefix + reason, path=path, line=line, key=key, reason=reason)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_spec_error, (self.reason, self.path, self.line, self.key))


def _rebuild_spec_error(
    reason: str, path: str | None, line: int | None, key: str | None
) -> SubagentSpecError:
    return SubagentSpecError(reason, path=path, line=line, key=key)


class AgentSpecError(AgentConfigError):
    """An ``AgentSpec`` cannot be materialized into an agent. Field: ``agent`` (its name)."""


class MissingInheritedModel(AgentSpecError):
    """A subagent spec's model is missing, empty or ``inherit`` and no inherited model id was given.

    Raised by ``project_subagent_spec``. Field: ``agent``.
    """

    agent: str


class ModelResolutionError(AgentSpecError):
    """A model id (``provider:model``) cannot be resolved to a ``Model``.

    Fields: ``model_id``, ``provider`` and ``known`` (what would have been
    accepted: the registered provider names; for an unknown preset, the
    preset names; for the ``test`` provider, its model grammar). Raised for an
    unknown provider, a malformed id, an unknown preset, or when the
    provider's factory raises (``__cause__`` is its error) or returns
    something that is not a ``Model``.
    """

    model_id: str
    provider: str
    known: list[str]


class UnknownEnvironmentProvider(AgentSpecError):
    """An ``AgentSpec`` names an environment provider the registry does not know.

    Fields: ``agent``, ``environment`` and ``known``.
    """

    environment: str
    known: list[str]


class SubagentToolInheritanceError(SubagentError):
    """A child's tool inheritance policy cannot be satisfied by the parent's tools.

    Fields: ``tool_name``, ``error_kind`` (``"missing_required_tool"`` or
    ``"denied_required_tool"``) and, when raised by a delegation, ``name`` and
    ``task_id`` (a ``subagent_failed`` event carrying ``error_kind``,
    ``tool_name`` and ``message`` was published first). Raised directly by
    ``SubagentToolInheritancePolicy.resolve``, ``name`` and ``task_id`` are
    ``None``.
    """

    tool_name: str
    error_kind: str

    def __init__(
        self,
        message: str = "",
        *,
        tool_name: str,
        name: str | None = None,
        task_id: str | None = None,
        **fields: Any,
    ) -> None:
        fields.setdefault("error_kind", self.kind)
        super().__init__(message, tool_name=tool_name, name=name, task_id=task_id, **fields)

    kind = "tool_inheritance"

    def diagnostic(self) -> dict[str, Any]:
        """The JSON diagnostic reported by ``subagent_info`` and ``subagent_failed``."""
        return {
            "error": self.error_kind,
            "error_kind": self.error_kind,
            "tool_name": self.tool_name,
            "message": self.message,
        }


class MissingRequiredTool(SubagentToolInheritanceError):
    """A required tool is not in the parent's tools (``error_kind = "missing_required_tool"``)."""

    kind = "missing_required_tool"


class DeniedRequiredTool(SubagentToolInheritanceError):
    """A required tool is denied by the policy or is main-agent-only.

    ``error_kind = "denied_required_tool"``; main-agent-only tools are
    ``delegate``, ``subagent_info``, ``steer_subagent``, ``cancel_subagent``,
    ``wait_subagent``, any hidden delegation backend and ``ask_user_question``.
    """

    kind = "denied_required_tool"


class ProviderStreamIncomplete(ProviderError):
    """A streamed response ended without its terminal event (a cut connection or a
    server that gave up): the answer may be missing its end. Retryable: the provider
    retries it until the first event was yielded; after that it is raised at once.
    """

    retryable = True


class OutputTruncated(ProviderError):
    """The model stopped at its output-token limit (``length``/``max_tokens``).

    Never a clean success: the text may be cut mid-sentence and tool-call
    arguments mid-JSON, so no tool runs. Field ``partial_text`` keeps the text
    received (left out of ``str()``, which is safe to store and log).
    """

    partial_text: str = ""

    def __str__(self) -> str:
        shown = {k: v for k, v in self.fields.items() if k != "partial_text"}
        detail = ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))
        return f"{self.message} ({detail})" if detail else self.message


class McpNotInstalled(SubagentsError):
    """The ``mcp`` SDK is not installed. Field: ``extra`` (``"mcp"``: ``pip install
    'subagents[mcp]'``)."""

    extra: str

    def __init__(self, message: str = "", **fields: Any) -> None:
        fields.setdefault("extra", "mcp")
        super().__init__(message, **fields)


class McpToolError(ToolError):
    """An MCP server a profile names failed, timed out or refused a call.

    Fields: ``tool``, ``server`` (its name in the profile) and ``reason``
    (``timeout``, ``unreachable``, ``protocol`` or ``tool_error``). The run goes on:
    the model sees the message as a tool error.
    """

    server: str
    reason: str
