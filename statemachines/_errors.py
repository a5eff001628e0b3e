"""The roots of every error this project raises, and the one drawing of the whole tree.

The tree is drawn here, beside its roots, because this is the one module every
layer's errors import (``storage``, ``actors`` and ``subagents`` all derive
from these roots), so a reader who follows any error's base class lands on the
full picture. ``tests/test_error_tree.py`` walks ``__subclasses__()`` from both
roots and fails when the drawing and the classes differ in a name or a nesting.

Recoverable errors derive from :class:`SubagentsError` (an ``Exception``);
control-flow signals that ``except Exception`` must never swallow derive from
:class:`SubagentsSignal` (a ``BaseException``). Every error carries its context
as keyword fields (``ToolArgumentError(..., tool="delegate", path="$.name")``
has ``.tool`` and ``.path``). The second column says where to import the class
from (``-``: raised inside the SDK and not exported; catch a base instead). A
name starting with ``.`` is an attribute of its parent
(``BackgroundSubagentError.Closing``)::

    SubagentsError                               statemachines  root of every recoverable error
    ├── InvalidTransition                        statemachines  a move the lifecycle tables forbid
    ├── StoreError                               storage        a store operation failed
    │   ├── NotFound                             storage        no such session, run, attempt...
    │   ├── AlreadyExists                        storage        another record holds that id
    │   ├── Conflict                             storage        contradicts committed state
    │   │   ├── StaleFence                       storage        not the live owner (fence, lease)
    │   │   ├── IllegalTransition                storage        a move the tables do not allow
    │   │   ├── InvalidRecord                    storage        malformed or non-canonical record
    │   │   ├── IdempotencyConflict              storage        same key, different request
    │   │   ├── RunConflict                      storage        another run of the session is live
    │   │   ├── DeliveryClaimed                  storage        another consumer holds the claim
    │   │   └── Delivered                        storage        the result was already delivered
    │   ├── QuotaExceeded                        storage        a byte or count limit
    │   ├── RetryableStorage                     storage        transient: nothing written, retry
    │   ├── StorageFull                          storage        the map is full: nothing written
    │   ├── CorruptRecord                        storage        bytes on disk do not decode
    │   │   └── StoreRefused                     storage        files contradict identity or size
    │   └── Failed                               storage        any other store failure
    │       └── DriverMissing                    storage        the postgres extra is missing
    ├── FaultSpecError                           storage.faults a malformed fault spec (ValueError)
    ├── BackgroundSubagentError                  actors         a background operation was refused
    │   ├── .Closing                             actors         admission is closed (shutdown)
    │   ├── .QuotaExceeded                       actors         too many attempts or results
    │   ├── .ActiveConversation                  actors         the agent_id has an active attempt
    │   ├── .NotFound                            actors         unknown attempt, agent or subagent
    │   ├── .Terminal                            actors         the attempt ended: no steering
    │   ├── .PromptTooLarge                      actors         over the prompt byte limit
    │   ├── .SteeringTooLarge                    actors         over the steering byte limit
    │   ├── .SteeringQueueFull                   actors         too much steering queued
    │   ├── .CancellationReasonTooLarge          actors         over the reason byte limit
    │   ├── .IdempotencyConflict                 actors         same id, different request
    │   ├── .DeliveryClaimed                     actors         another consumer holds the claim
    │   ├── .Delivered                           actors         the result was already delivered
    │   ├── .Durability                          actors         the store did not confirm a write
    │   ├── .ShutdownDeadline                    actors         checked shutdown ran out of time
    │   └── .HostBusy                            actors         a host-wide bound: retry later
    ├── AgentError                               subagents      a run or delegation did not complete
    │   ├── AgentConfigError                     subagents      a builder, registry or schema
    │   │   ├── ToolSchemaError                  subagents      an unusable tool JSON Schema
    │   │   ├── SubagentSpecError                subagents      an unusable markdown subagent file
    │   │   ├── AdapterNotInstalled              subagents      an adapter's framework is missing
    │   │   ├── UnsupportedAgent                 subagents      SubagentConfig cannot run the object
    │   │   └── AgentSpecError                   subagents      an AgentSpec cannot be built
    │   │       ├── MissingInheritedModel        subagents      model `inherit`, none inherited
    │   │       ├── ModelResolutionError         subagents      no provider builds that model id
    │   │       ├── UnknownEnvironmentProvider   subagents      an unregistered provider
    │   │       ├── UnknownProfile               -              host: no profile of that name
    │   │       └── UnknownSubagent              -              host: a profile's unknown subagent
    │   ├── ModelError                           subagents      the model failed or broke protocol
    │   │   └── ProviderError                    subagents      a real provider failed
    │   │       ├── ProviderNotInstalled         subagents      its SDK extra is missing
    │   │       ├── MissingApiKey                subagents      no key in settings or env
    │   │       ├── ProviderAuthenticationError  subagents      401/403: the key was refused
    │   │       ├── ProviderRateLimited          subagents      429 past the retry bound
    │   │       ├── ProviderServerError          subagents      5xx past the retry bound
    │   │       ├── ProviderConnectionError      subagents      unreachable past the retry bound
    │   │       ├── ProviderTimeout              subagents      no answer within the timeout
    │   │       ├── ContentRefused               subagents      the provider refused the content
    │   │       ├── ProviderStreamIncomplete     subagents      a stream ended before its end event
    │   │       └── OutputTruncated              subagents      the output hit its token limit
    │   ├── UsageLimitExceeded                   subagents      the run's request limit
    │   ├── ToolRetriesExceeded                  subagents      a tool failed past the retry limit
    │   └── SubagentError                        subagents      a delegation failed
    │       ├── MissingSubagent                  subagents      no subagent of that name
    │       ├── RecursiveSubagentDelegation      subagents      nested delegation refused
    │       ├── SubagentHookError                subagents      an execution hook raised
    │       ├── SubagentRunFailed                subagents      the child run raised
    │       └── SubagentToolInheritanceError     subagents      a required tool is unavailable
    │           ├── MissingRequiredTool          subagents      the parent has no such tool
    │           └── DeniedRequiredTool           subagents      denied, or main-agent-only
    ├── ToolError                                subagents      a tool call failed (a retry prompt)
    │   ├── ToolArgumentError                    subagents      arguments broke the tool's schema
    │   └── McpToolError                         -              a profile's MCP server failed
    ├── PayloadError                             subagents      a value did not decode into a record
    ├── HostConfigError                          subagents      an unusable host configuration
    ├── DataDirError                             subagents      the data directory is unusable
    │   ├── DataDirBusy                          subagents      another live host serves it
    │   └── DataDirCorrupt                       subagents      its files are not a valid store
    ├── StoreUrlError                            subagents      an unusable store URL
    │   └── StoreUnreachable                     subagents      the database did not answer
    ├── AttemptOwned                             -              operator: the attempt is live-owned
    ├── AmbiguousAttemptId                       -              operator: prefix matches several ids
    ├── RpcError                                 subagents      a JSON-RPC error of a host method
    ├── McpNotInstalled                          -              the mcp extra is missing
    ├── StreamError                              -              provider: an error inside a response
    └── CliError                                 -              a command's fixable error (+ fix)
        └── DemoError                            -              `subagents demo` could not finish

    SubagentsSignal                              statemachines  control flow: never swallowed
    └── LeaseLost                                actors         an attempt's owner lease is lost
"""

from __future__ import annotations

from typing import Any


class SubagentsError(Exception):
    """Root of every recoverable error raised by ``subagents``.

    Structured context travels as keyword fields (``attempt_id``, ``owner``,
    ``fencing_generation``, ...), readable as attributes and as ``fields``.
    """

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = dict(fields)
        for key, value in fields.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        if not self.fields:
            return self.message
        detail = ", ".join(f"{k}={v!r}" for k, v in sorted(self.fields.items()))
        return f"{self.message} ({detail})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields))


def _rebuild(cls: type[SubagentsError], message: str, fields: dict[str, Any]) -> SubagentsError:
    return cls(message, **fields)


class SubagentsSignal(BaseException):
    """Root of control-flow signals that must not be swallowed by ``except Exception``.

    Lease loss and cancellation derive from it: code that catches
    ``Exception`` to turn a crash into failed evidence must still let these
    through.
    """

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = dict(fields)
        for key, value in fields.items():
            setattr(self, key, value)


class InvalidTransition(SubagentsError):
    """A lifecycle transition that the transition tables do not allow.

    Fields: ``machine``, ``source``, ``dest`` and, when known, ``trigger``
    and ``attempt_id``.
    """
