"""The projection of a markdown subagent onto the ``AgentSpec`` path, with its policies.

It sits with delegation (not with the specs) because what it returns
besides the child ``AgentSpec`` are the delegation's inheritance policies.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._errors import MissingInheritedModel
from .._specs._agent_spec import (
    ENVIRONMENT_KEY,
    INSTRUCTION_KEY,
    AgentSpec,
    ModelPreset,
    _is_inherit,
)
from .._specs._markdown import SubagentSpec
from ._inheritance import (
    CAPABILITY_POLICY_KEY,
    SubagentCapabilityInheritancePolicy,
    SubagentToolInheritancePolicy,
)


class SubagentSpecProjection(NamedTuple):
    """What ``project_subagent_spec`` returns; unpacks as ``(agent_spec, tools, capabilities)``."""

    agent_spec: AgentSpec
    tool_inheritance: SubagentToolInheritancePolicy
    capability_inheritance: SubagentCapabilityInheritancePolicy


def _preset_value(value: dict[str, Any] | str | None) -> tuple[dict[str, Any], str | None]:
    if value is None:
        return {}, None
    if isinstance(value, str):
        return {}, (None if _is_inherit(value) or not value.strip() else value.strip())
    return dict(value), None


def project_subagent_spec(
    spec: SubagentSpec, inherited_model_id: str | None = None
) -> SubagentSpecProjection:
    """Map a markdown subagent onto the ``AgentSpec`` path.

    - model: ``spec.model`` unless it is missing, empty or ``inherit`` (any
      case), in which case ``inherited_model_id``; when that is missing or
      empty too, raises :class:`MissingInheritedModel`.
    - ``model_settings`` / ``model_config``: a mapping is inline settings, a
      string a preset name (``inherit`` means none).
    - instructions: the system prompt (when not empty); ``instruction`` is
      kept in metadata as ``subagent_instruction``; ``metadata["environment"]``
      (a string) becomes ``AgentSpec.environment``.
    - tool policy: ``tools`` are required, ``optional_tools`` optional,
      ``metadata["denied_tools"]`` denied, and with both lists empty it
      inherits every parent tool (except denied and main-agent-only ones).
    - capability policy: from ``inherit_hooks``, ``inherit_capabilities`` and
      ``denied_capabilities``; also stored in the projected metadata under
      ``subagent_capability_inheritance``, which is where
      ``SubagentConfig.from_agent_spec`` reads it.
    """
    model = (spec.model or "").strip()
    if not model or _is_inherit(model):
        inherited = (inherited_model_id or "").strip()
        if not inherited:
            raise MissingInheritedModel(
                f"subagent {spec.name!r} inherits its model "
                f"({'model: ' + repr(spec.model) if spec.model is not None else 'no model key'}) "
                "but no inherited model id was supplied",
                agent=spec.name,
            )
        model = inherited
    settings, settings_preset = _preset_value(spec.model_settings)
    config, config_preset = _preset_value(spec.model_config)
    capability = SubagentCapabilityInheritancePolicy.from_metadata(
        {key: value for key, value in spec.metadata.items() if key != CAPABILITY_POLICY_KEY}
    )
    metadata = dict(spec.metadata)
    if spec.instruction is not None:
        metadata[INSTRUCTION_KEY] = spec.instruction
    metadata[CAPABILITY_POLICY_KEY] = capability.to_value()
    environment = spec.metadata.get(ENVIRONMENT_KEY)
    agent_spec = AgentSpec(
        name=spec.name,
        description=spec.description,
        instructions=[spec.system_prompt] if spec.system_prompt else [],
        model=ModelPreset(
            model_id=model,
            settings=settings,
            settings_preset=settings_preset,
            config=config,
            config_preset=config_preset,
        ),
        environment=environment if isinstance(environment, str) and environment.strip() else None,
        metadata=metadata,
    )
    tools = (
        SubagentToolInheritancePolicy(spec.tools, spec.optional_tools)
        .with_denied_tools(spec.denied_tools())
        .with_inherit_all_when_empty(not spec.tools and not spec.optional_tools)
    )
    return SubagentSpecProjection(agent_spec, tools, capability)
