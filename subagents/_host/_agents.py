"""Materializing agents from a host configuration.

:class:`AgentFactory` turns a profile into an executable agent: its model
(through the :class:`~subagents.ModelProviderRegistry`), its instructions and,
for a parent, its subagents (``[subagents.NAME]`` entries, whose child
profile never gets nested subagents, and markdown subagents from
``host.subagents_dir``). Which delegation tools the parent gets is the
caller's choice: the RPC host asks for the async-only topology, one-shot
``subagents run`` for blocking, ``subagents worker`` for none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from .._agent import Agent
from .._agent._mcp_tools import load_mcp_toolset
from .._agent._models import Model
from .._agent._tools import Tool
from .._builder import AgentBuilder
from .._delegation._config import SubagentConfig, SubagentDelegationMode
from .._delegation._inheritance import SubagentToolInheritancePolicy
from .._delegation._projection import project_subagent_spec
from .._errors import AgentSpecError, McpNotInstalled, McpToolError, ToolSchemaError
from .._specs._agent_spec import (
    AgentSpecRegistry,
    ModelProviderRegistry,
    default_model_providers,
)
from .._specs._markdown import SubagentSpec, load_subagent_dir
from ._config import HostConfig, ProfileConfig, config_error
from ._delegation import DISABLED, build_parent_agent


class UnknownProfile(AgentSpecError):
    """No profile of that name. Fields: ``profile``, ``known``, ``fix``."""

    def __str__(self) -> str:
        return self.message


class UnknownSubagent(AgentSpecError):
    """A profile names a subagent nobody configured. Fields: ``subagent``, ``fix``."""

    def __str__(self) -> str:
        return self.message


class AgentFactory:
    """Profiles → agents. ``warnings`` lists markdown files that were skipped.

    Raises :class:`~subagents.HostConfigError` when a profile names a subagent
    that is neither configured nor a markdown file in ``host.subagents_dir``.
    """

    def __init__(self, config: HostConfig, providers: ModelProviderRegistry | None = None) -> None:
        self.config = config
        self.providers = providers or default_model_providers()
        self.spec_registry = AgentSpecRegistry(model_providers=self.providers)
        self.warnings: list[str] = []
        self.markdown: dict[str, SubagentSpec] = {}
        directory = config.subagents_dir()
        if directory is not None:
            self._load_markdown(directory)
        self.mcp_tools = self._load_mcp_servers()

    def _load_mcp_servers(self) -> dict[str, list[Tool]]:
        """Each MCP server a profile names, asked for its tools once (bounded by its
        timeout). One that cannot be reached gives no tools and a warning: the host
        starts, and a subagent that requires one of its tools is refused by name."""
        used = {name for profile in self.config.profiles.values() for name in profile.mcp_servers}
        found: dict[str, list[Tool]] = {}
        for name in sorted(used):
            try:
                found[name] = list(load_mcp_toolset(name, self.config.mcp_servers[name]))
            except (McpToolError, McpNotInstalled, ToolSchemaError) as exc:
                self.warnings.append(f"MCP server {name!r} gives no tools: {exc.message}")
                found[name] = []
        return found

    def _load_markdown(self, directory: Path) -> None:
        loaded = load_subagent_dir(directory)
        for diagnostic in loaded.diagnostics:
            self.warnings.append(f"subagent file skipped: {diagnostic.message}")
        self.markdown = {spec.name: spec for spec in loaded.specs}
        for name, profile in self.config.profiles.items():
            for index, sub in enumerate(profile.subagents):
                if sub not in self.config.subagents and sub not in self.markdown:
                    raise config_error(
                        self.config.source,
                        f"profiles.{name}.subagents[{index}]",
                        f"unknown subagent {sub!r} (not configured and not in {directory})",
                        f"add a [subagents.{sub}] table or a {sub}.md file to {directory}",
                    )

    def profile(self, name: str) -> ProfileConfig:
        found = self.config.profiles.get(name)
        if found is None:
            known = ", ".join(sorted(self.config.profiles))
            raise UnknownProfile(
                f"unknown profile {name!r} (profiles: {known})",
                profile=name,
                known=sorted(self.config.profiles),
                fix=f"use one of: {known}, or add [profiles.{name}] to the config",
            )
        return found

    def _builder(
        self, name: str, profile: ProfileConfig, wrap_model: Callable[[Model], Model] | None = None
    ) -> AgentBuilder:
        model = self.providers.resolve(profile.model_id, profile.model_settings)
        builder = AgentBuilder(model if wrap_model is None else wrap_model(model))
        builder.name(name)
        for text in profile.instruction_list():
            builder.instructions(text)
        for server in profile.mcp_servers:
            builder.tools(self.mcp_tools.get(server, []))
        return builder

    def _inherited_model(self) -> str | None:
        default = self.config.profiles.get(self.config.host.default_profile)
        return default.model_id if default is not None else None

    def profile_mcp_tools(self, profile_name: str) -> list[Tool]:
        """The MCP servers' tools a profile names (what its children may inherit)."""
        profile = self.config.profiles.get(profile_name)
        servers = profile.mcp_servers if profile is not None else []
        return [tool for server in servers for tool in self.mcp_tools.get(server, [])]

    def child_agent(self, name: str, parent_mcp_tools: Sequence[Tool] = ()) -> Agent:
        """The executable child behind subagent ``name`` (never with nested subagents).

        ``parent_mcp_tools`` are the delegating parent's MCP tools: the child gets
        those its ``required_tools`` / ``optional_tools`` name (besides its own
        profile's), as a blocking child gets them through its inheritance policy.
        """
        entry = self.config.subagents.get(name)
        if entry is not None:
            builder = self._builder(name, self.config.profiles[entry.profile])
            wanted = {*entry.required_tools, *entry.optional_tools}
            own = {tool.name for tool in self.profile_mcp_tools(entry.profile)}
            builder.tools(
                tool for tool in parent_mcp_tools if tool.name in wanted and tool.name not in own
            )
            return builder.build()
        spec = self.markdown.get(name)
        if spec is None:
            raise UnknownSubagent(
                f"unknown subagent {name!r}",
                subagent=name,
                fix=f"add [subagents.{name}] or a markdown file to host.subagents_dir",
            )
        projection = project_subagent_spec(spec, self._inherited_model())
        return self.spec_registry.build_agent(projection.agent_spec)

    def subagent_config(self, name: str) -> SubagentConfig:
        entry = self.config.subagents.get(name)
        if entry is not None:
            config = SubagentConfig(name, self.child_agent(name), entry.description or None)
            return config.with_tool_inheritance(
                SubagentToolInheritancePolicy(entry.required_tools, entry.optional_tools)
            )
        spec = self.markdown.get(name)
        if spec is None:
            raise UnknownSubagent(
                f"unknown subagent {name!r}",
                subagent=name,
                fix=f"add [subagents.{name}] or a markdown file to host.subagents_dir",
            )
        projection = project_subagent_spec(spec, self._inherited_model())
        return SubagentConfig.from_agent_spec(
            projection.agent_spec, projection.tool_inheritance, self.spec_registry
        )

    def subagent_names(self, profile_name: str) -> list[str]:
        """The subagents a profile exposes as a parent (none for a pure child profile)."""
        profile = self.profile(profile_name)
        return list(profile.subagents)

    def build(
        self,
        profile_name: str,
        mode: SubagentDelegationMode,
        supervisor: object | None = None,
        *,
        wrap_model: Callable[[Model], Model] | None = None,
    ) -> tuple[Agent, str]:
        """The agent of ``profile_name`` and the delegation mode actually installed.

        ``ASYNC`` asks for the async-only topology (see
        :func:`~subagents._host._delegation.build_parent_agent`); ``BLOCKING``
        installs ``delegate``; ``DISABLED`` installs no delegation tool.
        ``wrap_model`` wraps the parent's model (the host's run steering).
        """
        profile = self.profile(profile_name)
        builder = self._builder(profile_name, profile, wrap_model)
        if mode is SubagentDelegationMode.DISABLED or not profile.subagents:
            return builder.build(), DISABLED
        configs = [self.subagent_config(name) for name in profile.subagents]
        if mode is SubagentDelegationMode.BLOCKING:
            for config in configs:
                builder.subagent(config)
            builder.subagent_delegation_mode(SubagentDelegationMode.BLOCKING)
            return builder.build(), SubagentDelegationMode.BLOCKING.value
        return build_parent_agent(builder, configs, supervisor)
