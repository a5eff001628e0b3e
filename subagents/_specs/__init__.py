"""Specs: markdown subagent files and serializable :class:`AgentSpec`\\ s.

``_markdown`` parses and loads subagent markdown files into
:class:`SubagentSpec` records; ``_agent_spec`` holds :class:`AgentSpec`, the
model-provider registry and :class:`AgentSpecRegistry`, which materializes a
spec into a plain :class:`~subagents.Agent`.
"""

from ._agent_spec import AgentSpec as AgentSpec
from ._agent_spec import AgentSpecRegistry as AgentSpecRegistry
from ._agent_spec import EnvironmentProvider as EnvironmentProvider
from ._agent_spec import ModelPreset as ModelPreset
from ._agent_spec import ModelProviderRegistry as ModelProviderRegistry
from ._agent_spec import default_model_providers as default_model_providers
from ._agent_spec import make_test_model as make_test_model
from ._markdown import SubagentDirectory as SubagentDirectory
from ._markdown import SubagentSpec as SubagentSpec
from ._markdown import SubagentSpecDiagnostic as SubagentSpecDiagnostic
from ._markdown import load_subagent_dir as load_subagent_dir
from ._markdown import load_subagent_file as load_subagent_file
from ._markdown import parse_subagent_markdown as parse_subagent_markdown
from ._markdown import spec_error_diagnostic as spec_error_diagnostic

__all__ = [
    "AgentSpec",
    "AgentSpecRegistry",
    "EnvironmentProvider",
    "ModelPreset",
    "ModelProviderRegistry",
    "SubagentDirectory",
    "SubagentSpec",
    "SubagentSpecDiagnostic",
    "default_model_providers",
    "load_subagent_dir",
    "load_subagent_file",
    "make_test_model",
    "parse_subagent_markdown",
    "spec_error_diagnostic",
]
