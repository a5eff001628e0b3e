"""What a delegated child inherits from its parent: tools, hooks and capability bundles.

:class:`SubagentToolInheritancePolicy` picks parent tools for the child at
delegation time; :class:`SubagentCapabilityInheritancePolicy` picks parent
hooks and capability bundles when the parent agent is built. Both are
immutable values (``with_*`` returns a new policy) with ``to_value()`` /
``from_value()``, so a projected spec can carry them as JSON.

Main-agent-only tools are never inherited, whatever the policy says:
``delegate``, ``subagent_info``, ``steer_subagent``, ``cancel_subagent``,
``wait_subagent``, ``spawn_delegate``, any hidden delegation backend (a name
starting with ``__delegate`` or a tool whose metadata says ``kind:
"delegation"`` or ``main_agent_only: true``) and ``ask_user_question`` (a
subagent has no human to ask).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from .._agent._hooks import AgentHook, CapabilityBundle
from .._agent._records import Record
from .._agent._tools import Tool, ToolRegistry
from .._errors import AgentConfigError, DeniedRequiredTool, MissingRequiredTool, PayloadError

MAIN_AGENT_ONLY_TOOLS = frozenset(
    {
        "delegate",
        "subagent_info",
        "steer_subagent",
        "cancel_subagent",
        "wait_subagent",
        "spawn_delegate",
        "__delegate_backend",
        "ask_user_question",
    }
)
_HIDDEN_BACKEND_PREFIX = "__delegate"
_R = TypeVar("_R", bound=Record)


def is_main_agent_only_tool(tool: Tool | str) -> bool:
    """Whether ``tool`` (a tool or a bare name) may only ever belong to the main agent."""
    name = tool if isinstance(tool, str) else tool.name
    if name in MAIN_AGENT_ONLY_TOOLS or name.startswith(_HIDDEN_BACKEND_PREFIX):
        return True
    if isinstance(tool, str):
        return False
    metadata = getattr(tool, "metadata", None) or {}
    return metadata.get("kind") == "delegation" or metadata.get("main_agent_only") is True


def _names(values: Iterable[str], what: str) -> tuple[str, ...]:
    """Unique non-empty names in order; :class:`AgentConfigError` for anything else."""
    if isinstance(values, str):
        raise AgentConfigError(f"{what} must be a list of names, not one string")
    names: dict[str, None] = {}
    for value in values:
        if not isinstance(value, str):
            raise AgentConfigError(f"{what} must hold strings, got {type(value).__name__}")
        if value:
            names.setdefault(value, None)
    return tuple(names)


class _ToolPolicyValue(Record, frozen=True, kw_only=True):
    required_tools: list[str] = msgspec.field(default_factory=list)
    optional_tools: list[str] = msgspec.field(default_factory=list)
    denied_tools: list[str] = msgspec.field(default_factory=list)
    auto_inherit: bool = True
    inherit_all_when_empty: bool = False


class SubagentToolInheritancePolicy:
    """Which parent tools a child receives when it is delegated to.

    ``SubagentToolInheritancePolicy(required, optional)``; then
    ``with_denied_tools``, ``with_inherit_all_when_empty``,
    ``without_auto_inherit``. :meth:`resolve` builds the child's inherited
    tools from a parent registry in five steps:

    1. start from every parent tool when ``inherit_all_when_empty`` is set and
       both lists are empty, else from the parent tools whose metadata says
       ``auto_inherit: true`` (unless ``auto_inherit`` is off);
    2. add each optional tool the parent has;
    3. add each required tool: a denied or main-agent-only one raises
       :class:`DeniedRequiredTool`, a missing one :class:`MissingRequiredTool`;
    4. remove denied tools;
    5. strip main-agent-only tools (see the module docs), always.

    The default policy (what a ``SubagentConfig`` without one uses) inherits
    only ``auto_inherit`` tools.
    """

    __slots__ = (
        "auto_inherit",
        "denied_tools",
        "inherit_all_when_empty",
        "optional_tools",
        "required_tools",
    )

    required_tools: tuple[str, ...]
    optional_tools: tuple[str, ...]
    denied_tools: tuple[str, ...]
    auto_inherit: bool
    inherit_all_when_empty: bool

    def __init__(
        self,
        required: Iterable[str] = (),
        optional: Iterable[str] = (),
        *,
        denied: Iterable[str] = (),
        auto_inherit: bool = True,
        inherit_all_when_empty: bool = False,
    ) -> None:
        object.__setattr__(self, "required_tools", _names(required, "required tools"))
        object.__setattr__(self, "optional_tools", _names(optional, "optional tools"))
        object.__setattr__(self, "denied_tools", _names(denied, "denied tools"))
        object.__setattr__(self, "auto_inherit", bool(auto_inherit))
        object.__setattr__(self, "inherit_all_when_empty", bool(inherit_all_when_empty))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use its with_* methods")

    def _replace(self, **changes: Any) -> SubagentToolInheritancePolicy:
        fields: dict[str, Any] = {
            "required": self.required_tools,
            "optional": self.optional_tools,
            "denied": self.denied_tools,
            "auto_inherit": self.auto_inherit,
            "inherit_all_when_empty": self.inherit_all_when_empty,
        }
        fields.update(changes)
        return SubagentToolInheritancePolicy(**fields)

    def with_denied_tools(self, denied: Iterable[str]) -> SubagentToolInheritancePolicy:
        """A copy whose denied tools are ``denied`` (replacing the previous list)."""
        return self._replace(denied=denied)

    def with_inherit_all_when_empty(self, enabled: bool) -> SubagentToolInheritancePolicy:
        """A copy that inherits every parent tool when both tool lists are empty."""
        return self._replace(inherit_all_when_empty=enabled)

    def without_auto_inherit(self) -> SubagentToolInheritancePolicy:
        """A copy that ignores the tools' ``auto_inherit`` metadata."""
        return self._replace(auto_inherit=False)

    @property
    def inherits_all(self) -> bool:
        """Whether step 1 starts from every parent tool."""
        return self.inherit_all_when_empty and not self.required_tools and not self.optional_tools

    def resolve(self, parent: ToolRegistry) -> ToolRegistry:
        """The tools the child inherits from ``parent``, in parent order then list order.

        Raises :class:`DeniedRequiredTool` or :class:`MissingRequiredTool`
        (fields ``tool_name`` and ``error_kind``; ``name``/``task_id`` are
        ``None`` here) for the first required tool that cannot be supplied;
        nothing else. ``parent`` is not modified.
        """
        inherited: dict[str, Tool] = {}
        if self.inherits_all:
            inherited = {tool.name: tool for tool in parent}
        elif self.auto_inherit:
            inherited = {
                tool.name: tool for tool in parent if tool.metadata.get("auto_inherit") is True
            }
        for name in self.optional_tools:
            tool = parent.lookup(name)
            if tool is not None:
                inherited.setdefault(name, tool)
        denied = set(self.denied_tools)
        for name in self.required_tools:
            tool = parent.lookup(name)
            if name in denied:
                raise DeniedRequiredTool(
                    f"required inherited tool {name!r} is denied by the subagent's policy",
                    tool_name=name,
                )
            if is_main_agent_only_tool(name) or (
                tool is not None and is_main_agent_only_tool(tool)
            ):
                raise DeniedRequiredTool(
                    f"required inherited tool {name!r} is main-agent-only and is never "
                    "inherited by a subagent",
                    tool_name=name,
                )
            if tool is None:
                raise MissingRequiredTool(
                    f"required inherited tool {name!r} is missing from the parent's tools "
                    f"(parent has: {', '.join(parent.names()) or 'no tools'})",
                    tool_name=name,
                )
            inherited.setdefault(name, tool)
        return ToolRegistry(
            tool
            for name, tool in inherited.items()
            if name not in denied and not is_main_agent_only_tool(tool)
        )

    def to_value(self) -> dict[str, Any]:
        """Plain JSON (lists and booleans)."""
        value: dict[str, Any] = _ToolPolicyValue(
            required_tools=list(self.required_tools),
            optional_tools=list(self.optional_tools),
            denied_tools=list(self.denied_tools),
            auto_inherit=self.auto_inherit,
            inherit_all_when_empty=self.inherit_all_when_empty,
        ).to_value()
        return value

    @classmethod
    def from_value(cls, value: Any) -> SubagentToolInheritancePolicy:
        """Decode ``to_value()`` output; :class:`PayloadError` when it does not fit."""
        decoded = _decode(_ToolPolicyValue, cls.__name__, value)
        return cls(
            decoded.required_tools,
            decoded.optional_tools,
            denied=decoded.denied_tools,
            auto_inherit=decoded.auto_inherit,
            inherit_all_when_empty=decoded.inherit_all_when_empty,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubagentToolInheritancePolicy):
            return NotImplemented
        return self.to_value() == other.to_value()

    def __hash__(self) -> int:
        return hash(
            (
                self.required_tools,
                self.optional_tools,
                self.denied_tools,
                self.auto_inherit,
                self.inherit_all_when_empty,
            )
        )

    def __repr__(self) -> str:
        return (
            f"SubagentToolInheritancePolicy({list(self.required_tools)!r}, "
            f"{list(self.optional_tools)!r}, denied={list(self.denied_tools)!r}, "
            f"auto_inherit={self.auto_inherit}, "
            f"inherit_all_when_empty={self.inherit_all_when_empty})"
        )


class _CapabilityPolicyValue(Record, frozen=True, kw_only=True):
    hooks: bool = False
    capability_bundles: bool = False
    denied_capabilities: list[str] = msgspec.field(default_factory=list)


def _decode(kind: type[_R], name: str, value: Any) -> _R:
    try:
        return kind.from_value(value)
    except PayloadError as error:
        raise PayloadError(
            f"value does not decode into {name}: {error.detail}", type=name, detail=error.detail
        ) from error


class SubagentCapabilityInheritancePolicy:
    """Whether a child receives the parent builder's hooks and capability bundles.

    Nothing is inherited unless enabled: ``with_hooks(True)`` inherits the
    parent's hooks (those added with ``AgentBuilder.hook``),
    ``with_capability_bundles(True)`` its bundles (hooks and tools). A hook is
    withheld when its ``capability_id`` is denied; a bundle when its
    ``capability_id`` or its ``name`` is. The parent's hooks and bundles are
    chosen once, when the parent agent is built, and added to the child for
    each delegation (the child's own tools win a name clash).

    The two policies are independent: a bundle's tools are also ordinary
    parent tools, so a tool policy that inherits them (by name, by
    ``auto_inherit`` or inherit-all) still does so when the bundle itself is
    not inherited; deny such tools in the tool policy too.
    """

    __slots__ = ("capability_bundles", "denied_capabilities", "hooks")

    hooks: bool
    capability_bundles: bool
    denied_capabilities: tuple[str, ...]

    def __init__(
        self,
        *,
        hooks: bool = False,
        capability_bundles: bool = False,
        denied_capabilities: Iterable[str] = (),
    ) -> None:
        object.__setattr__(self, "hooks", bool(hooks))
        object.__setattr__(self, "capability_bundles", bool(capability_bundles))
        object.__setattr__(
            self, "denied_capabilities", _names(denied_capabilities, "denied capabilities")
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use its with_* methods")

    def _replace(self, **changes: Any) -> SubagentCapabilityInheritancePolicy:
        fields: dict[str, Any] = {
            "hooks": self.hooks,
            "capability_bundles": self.capability_bundles,
            "denied_capabilities": self.denied_capabilities,
        }
        fields.update(changes)
        return SubagentCapabilityInheritancePolicy(**fields)

    def with_hooks(self, enabled: bool) -> SubagentCapabilityInheritancePolicy:
        return self._replace(hooks=enabled)

    def with_capability_bundles(self, enabled: bool) -> SubagentCapabilityInheritancePolicy:
        return self._replace(capability_bundles=enabled)

    def with_denied_capabilities(
        self, denied: Iterable[str]
    ) -> SubagentCapabilityInheritancePolicy:
        """A copy denying ``denied`` (capability ids or bundle names), replacing the list."""
        return self._replace(denied_capabilities=denied)

    def allows_hook(self, hook: AgentHook) -> bool:
        return getattr(hook, "capability_id", None) not in self.denied_capabilities

    def allows_bundle(self, bundle: CapabilityBundle) -> bool:
        denied = self.denied_capabilities
        return (
            getattr(bundle, "capability_id", None) not in denied
            and getattr(bundle, "name", None) not in denied
        )

    def inherited_hooks(self, parent_hooks: Sequence[AgentHook]) -> tuple[AgentHook, ...]:
        """The parent hooks a child gets (none unless ``hooks`` is enabled)."""
        if not self.hooks:
            return ()
        return tuple(hook for hook in parent_hooks if self.allows_hook(hook))

    def inherited_bundles(
        self, parent_bundles: Sequence[CapabilityBundle]
    ) -> tuple[CapabilityBundle, ...]:
        """The parent bundles a child gets (none unless ``capability_bundles`` is enabled)."""
        if not self.capability_bundles:
            return ()
        return tuple(bundle for bundle in parent_bundles if self.allows_bundle(bundle))

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = _CapabilityPolicyValue(
            hooks=self.hooks,
            capability_bundles=self.capability_bundles,
            denied_capabilities=list(self.denied_capabilities),
        ).to_value()
        return value

    @classmethod
    def from_value(cls, value: Any) -> SubagentCapabilityInheritancePolicy:
        """Decode ``to_value()`` output; :class:`PayloadError` when it does not fit."""
        decoded = _decode(_CapabilityPolicyValue, cls.__name__, value)
        return cls(
            hooks=decoded.hooks,
            capability_bundles=decoded.capability_bundles,
            denied_capabilities=decoded.denied_capabilities,
        )

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> SubagentCapabilityInheritancePolicy:
        """The policy a spec's metadata declares.

        Uses ``metadata["subagent_capability_inheritance"]`` when present (as
        written by ``project_subagent_spec``), else the markdown keys
        ``inherit_hooks``, ``inherit_capabilities`` and ``denied_capabilities``.
        Malformed values count as absent: the result never inherits more than
        what is explicitly, well-formedly enabled.
        """
        stored = metadata.get(CAPABILITY_POLICY_KEY)
        if stored is not None:
            try:
                return cls.from_value(stored)
            except PayloadError:
                pass
        denied = metadata.get("denied_capabilities")
        if isinstance(denied, str):
            denied_names = [part.strip() for part in denied.split(",")]
        elif isinstance(denied, list):
            denied_names = [item for item in denied if isinstance(item, str)]
        else:
            denied_names = []
        return cls(
            hooks=metadata.get("inherit_hooks") is True,
            capability_bundles=metadata.get("inherit_capabilities") is True,
            denied_capabilities=denied_names,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubagentCapabilityInheritancePolicy):
            return NotImplemented
        return self.to_value() == other.to_value()

    def __hash__(self) -> int:
        return hash((self.hooks, self.capability_bundles, self.denied_capabilities))

    def __repr__(self) -> str:
        return (
            f"SubagentCapabilityInheritancePolicy(hooks={self.hooks}, "
            f"capability_bundles={self.capability_bundles}, "
            f"denied_capabilities={list(self.denied_capabilities)!r})"
        )


CAPABILITY_POLICY_KEY = "subagent_capability_inheritance"
