"""Agent specs: serializable agent definitions, the registry that materializes them, model ids.

An :class:`AgentSpec` is what a host stores about an agent (name,
description, instructions, model preset, environment name, metadata); an
:class:`AgentSpecRegistry` turns one into an executable :class:`Agent`,
resolving the model id through a :class:`ModelProviderRegistry` and the
environment name through its registered :class:`EnvironmentProvider`\\ s.
:func:`~subagents.project_subagent_spec` (in ``_delegation``) maps a markdown
:class:`~subagents.SubagentSpec` onto this path.

Model ids are ``provider:model``: the text before the first ``:`` names a
provider registered in the :class:`ModelProviderRegistry`, the rest is
handed to its factory ``factory(model_name, settings) -> Model``. The
built-in ``test`` provider (no network, deterministic) understands:

- ``test:text=<text>``: a :class:`TestModel` that answers ``<text>`` (which
  may contain ``:``) to every request;
- ``test:echo``: a model that answers the latest user prompt, verbatim;
- ``test`` or ``test:``: a :class:`TestModel` that answers ``"test"``.

The built-in ``script`` provider's models delegate offline (``script:parent``,
``script:worker=NAME``, ``script:gated=NAME``; see :mod:`subagents._providers._script`).

Real providers (OpenAI, Anthropic, ...) register themselves into
:func:`default_model_providers`, the process-wide registry every
:class:`AgentSpecRegistry` uses unless given another.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from .._agent._context import AgentContext
from .._agent._models import (
    FunctionModel,
    Model,
    ModelMessage,
    ModelRequest,
    ModelRequestParameters,
    TestModel,
    UserPromptPart,
)
from .._agent._records import Record
from .._agent._run import Agent
from .._errors import (
    AgentSpecError,
    ModelResolutionError,
    UnknownEnvironmentProvider,
)
from .._providers import register_providers
from .._providers._script import PROVIDER as SCRIPT_PROVIDER
from .._providers._script import make_script_model

ModelFactory = Callable[[str, dict[str, Any]], Model]
"""Builds a model from the part of the id after ``provider:`` and the merged settings."""

_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
INHERIT = "inherit"
ENVIRONMENT_KEY = "environment"
INSTRUCTION_KEY = "subagent_instruction"


def _is_inherit(value: str) -> bool:
    return value.strip().lower() == INHERIT


class ModelProviderRegistry:
    """Model providers by name: ``resolve("provider:model", settings) -> Model``.

    Thread-safe: ``register`` may run while other threads resolve. Provider
    names are non-empty and contain no ``:`` (letters, digits, ``_ . + -``).
    """

    __slots__ = ("_factories", "_lock")

    def __init__(self, providers: Mapping[str, ModelFactory] | None = None) -> None:
        self._factories: dict[str, ModelFactory] = {}
        self._lock = threading.Lock()
        for name, factory in (providers or {}).items():
            self.register(name, factory)

    def register(self, name: str, factory: ModelFactory, *, replace: bool = False) -> None:
        """Add provider ``name``. A second registration of a name raises unless ``replace``.

        Raises :class:`ModelResolutionError` for an invalid name, a
        non-callable factory or a duplicate.
        """
        if not isinstance(name, str) or not _PROVIDER_NAME.match(name):
            raise ModelResolutionError(
                f"invalid model provider name {name!r} (letters, digits, '_.+-'; no ':')",
                model_id="",
                provider=str(name),
                known=self.names(),
            )
        if not callable(factory):
            raise ModelResolutionError(
                f"model provider {name!r} needs a callable factory",
                model_id="",
                provider=name,
                known=self.names(),
            )
        with self._lock:
            if name in self._factories and not replace:
                raise ModelResolutionError(
                    f"model provider {name!r} is already registered (pass replace=True)",
                    model_id="",
                    provider=name,
                    known=sorted(self._factories),
                )
            self._factories[name] = factory

    def with_provider(self, name: str, factory: ModelFactory) -> ModelProviderRegistry:
        """A copy with ``name`` registered (replacing one of that name); ``self`` is unchanged."""
        clone = self.copy()
        clone.register(name, factory, replace=True)
        return clone

    def copy(self) -> ModelProviderRegistry:
        with self._lock:
            return ModelProviderRegistry(dict(self._factories))

    def names(self) -> list[str]:
        """Registered provider names, sorted."""
        with self._lock:
            return sorted(self._factories)

    def factory(self, name: str) -> ModelFactory | None:
        with self._lock:
            return self._factories.get(name)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._factories

    @staticmethod
    def split_model_id(model_id: str) -> tuple[str, str]:
        """``"provider:model"`` → ``("provider", "model")``; no ``:`` → ``(model_id, "")``."""
        provider, _, model_name = model_id.strip().partition(":")
        return provider.strip(), model_name.strip()

    def resolve(self, model_id: str, settings: Mapping[str, Any] | None = None) -> Model:
        """Build the model for ``model_id`` with ``settings`` (default empty).

        Raises :class:`ModelResolutionError` for an empty id, an unknown
        provider, a factory that raises (``__cause__``) or returns something
        that is not a :class:`Model`.
        """
        if not isinstance(model_id, str) or not model_id.strip():
            raise ModelResolutionError(
                "empty model id; expected 'provider:model'",
                model_id=str(model_id),
                provider="",
                known=self.names(),
            )
        provider, model_name = self.split_model_id(model_id)
        factory = self.factory(provider)
        if factory is None:
            raise ModelResolutionError(
                f"unknown model provider {provider!r} in model id {model_id!r}; "
                f"registered providers: {', '.join(self.names()) or 'none'}",
                model_id=model_id,
                provider=provider,
                known=self.names(),
            )
        try:
            model = factory(model_name, dict(settings or {}))
        except ModelResolutionError:
            raise
        except Exception as error:
            raise ModelResolutionError(
                f"model provider {provider!r} cannot build {model_id!r}: {error}",
                model_id=model_id,
                provider=provider,
                known=self.names(),
            ) from error
        if not isinstance(model, Model):
            raise ModelResolutionError(
                f"model provider {provider!r} returned {type(model).__name__}, not a Model",
                model_id=model_id,
                provider=provider,
                known=self.names(),
            )
        return model

    def __repr__(self) -> str:
        return f"ModelProviderRegistry({self.names()!r})"


def _latest_prompt(messages: Sequence[ModelMessage], params: ModelRequestParameters) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart):
                    return part.content
    return ""


def make_test_model(model_name: str, settings: dict[str, Any]) -> Model:
    """The built-in ``test`` provider (grammar in the module docs); ``settings`` are ignored."""
    model_id = f"test:{model_name}" if model_name else "test"
    if model_name.startswith("text="):
        return TestModel(text=model_name[len("text=") :], name=model_id)
    if model_name == "echo":
        return FunctionModel(_latest_prompt, name=model_id)
    if model_name == "":
        return TestModel(text="test", name=model_id)
    raise ModelResolutionError(
        f"unknown test model {model_name!r}; use 'test:text=<answer>', 'test:echo' or 'test'",
        model_id=model_id,
        provider="test",
        known=["test:text=<answer>", "test:echo", "test"],
    )


_DEFAULT_PROVIDERS = ModelProviderRegistry(
    {"test": make_test_model, SCRIPT_PROVIDER: make_script_model}
)
# Real providers (openai-chat, openai-responses, anthropic); their SDKs load lazily.
register_providers(_DEFAULT_PROVIDERS.register)


def default_model_providers() -> ModelProviderRegistry:
    """The process-wide provider registry (``test`` built in); register real providers here.

    It is one shared, mutable, thread-safe object: ``register`` on it is seen
    by every :class:`AgentSpecRegistry` created without its own providers.
    """
    return _DEFAULT_PROVIDERS


class EnvironmentProvider:
    """A host environment (workspace, filesystem, shell, sandbox) that tools use.

    Tools find it in their dependencies: ``ctx.dependency(EnvironmentProvider)``.
    Subclass it for a real environment. An agent spec names one by
    ``AgentSpec.environment``; a delegated child whose spec named one gets it
    in its context, replacing the parent's; otherwise the child shares the
    parent's (the child context copies the parent's dependencies).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def attach(self, context: AgentContext) -> None:
        """Make this the only environment provider in ``context``'s dependencies."""
        for value in list(context.dependencies):
            if isinstance(value, EnvironmentProvider):
                context.dependencies.remove(type(value))
        context.dependencies.insert(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ModelPreset(Record, frozen=True, kw_only=True):
    """Which model an agent uses: the id plus settings (inline and/or named presets).

    The factory receives ``{**config_preset, **config, **settings_preset,
    **settings}``: client configuration first, per-request settings on top.
    """

    model_id: str
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    settings_preset: str | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    config_preset: str | None = None


class AgentSpec(Record, frozen=True, kw_only=True):
    """A serializable agent definition: everything but the runtime objects.

    ``instructions`` become the agent's system instructions, in order;
    ``environment`` names an :class:`EnvironmentProvider` registered in the
    :class:`AgentSpecRegistry`; ``metadata`` is free-form JSON (a projected
    subagent keeps its capability policy there).
    """

    name: str
    description: str | None = None
    instructions: list[str] = msgspec.field(default_factory=list)
    model: ModelPreset | None = None
    environment: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class AgentSpecRegistry:
    """Materializes :class:`AgentSpec`\\ s: models, environments, named specs and presets.

    Immutable: every ``with_*`` returns a new registry (the model provider
    registry itself is shared unless replaced). Raises :class:`AgentSpecError`
    subclasses, each naming what was missing.
    """

    __slots__ = ("_config_presets", "_environments", "_providers", "_settings_presets", "_specs")

    def __init__(self, *, model_providers: ModelProviderRegistry | None = None) -> None:
        self._providers = default_model_providers() if model_providers is None else model_providers
        self._environments: dict[str, EnvironmentProvider] = {}
        self._specs: dict[str, AgentSpec] = {}
        self._settings_presets: dict[str, dict[str, Any]] = {}
        self._config_presets: dict[str, dict[str, Any]] = {}

    def _clone(self) -> AgentSpecRegistry:
        clone = AgentSpecRegistry(model_providers=self._providers)
        clone._environments = dict(self._environments)
        clone._specs = dict(self._specs)
        clone._settings_presets = dict(self._settings_presets)
        clone._config_presets = dict(self._config_presets)
        return clone

    def model_providers(self) -> ModelProviderRegistry:
        return self._providers

    def with_model_providers(self, providers: ModelProviderRegistry) -> AgentSpecRegistry:
        clone = self._clone()
        clone._providers = providers
        return clone

    def with_model_provider(self, name: str, factory: ModelFactory) -> AgentSpecRegistry:
        """A registry whose providers are a copy of these plus ``name``."""
        return self.with_model_providers(self._providers.with_provider(name, factory))

    def with_environment_provider(
        self, name: str, provider: EnvironmentProvider
    ) -> AgentSpecRegistry:
        if not isinstance(provider, EnvironmentProvider):
            raise AgentSpecError(
                f"environment provider {name!r} must be an EnvironmentProvider, "
                f"got {type(provider).__name__}",
                environment=name,
            )
        clone = self._clone()
        clone._environments[name] = provider
        return clone

    def with_model_settings_preset(
        self, name: str, settings: Mapping[str, Any]
    ) -> AgentSpecRegistry:
        clone = self._clone()
        clone._settings_presets[name] = dict(settings)
        return clone

    def with_model_config_preset(self, name: str, config: Mapping[str, Any]) -> AgentSpecRegistry:
        clone = self._clone()
        clone._config_presets[name] = dict(config)
        return clone

    def with_agent_spec(self, spec: AgentSpec) -> AgentSpecRegistry:
        """A registry that also holds ``spec`` under its name (replacing a same-named one)."""
        clone = self._clone()
        clone._specs[spec.name] = spec
        return clone

    def with_agent_specs(self, specs: Iterable[AgentSpec]) -> AgentSpecRegistry:
        clone = self._clone()
        for spec in specs:
            clone._specs[spec.name] = spec
        return clone

    def agent_spec(self, name: str) -> AgentSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        """Names of the registered agent specs, in registration order."""
        return list(self._specs)

    def environment_names(self) -> list[str]:
        return sorted(self._environments)

    def environment_provider(self, name: str) -> EnvironmentProvider | None:
        return self._environments.get(name)

    def resolve_environment(self, spec: AgentSpec) -> EnvironmentProvider | None:
        """The provider ``spec`` names, or ``None`` when it names none.

        Raises :class:`UnknownEnvironmentProvider` when the name is not registered.
        """
        if spec.environment is None or not spec.environment.strip():
            return None
        provider = self._environments.get(spec.environment.strip())
        if provider is None:
            raise UnknownEnvironmentProvider(
                f"agent {spec.name!r} names environment provider {spec.environment!r}, "
                "which is not registered "
                f"(registered: {', '.join(self.environment_names()) or 'none'})",
                agent=spec.name,
                environment=spec.environment,
                known=self.environment_names(),
            )
        return provider

    def model_settings(self, preset: ModelPreset) -> dict[str, Any]:
        """The settings the factory receives for ``preset`` (presets resolved, then merged)."""
        merged: dict[str, Any] = {}
        for kind, name, table in (
            ("config", preset.config_preset, self._config_presets),
            ("settings", preset.settings_preset, self._settings_presets),
        ):
            if name is not None:
                if name not in table:
                    raise ModelResolutionError(
                        f"unknown model {kind} preset {name!r} for model {preset.model_id!r}",
                        model_id=preset.model_id,
                        provider=ModelProviderRegistry.split_model_id(preset.model_id)[0],
                        known=sorted(table),
                    )
                merged.update(table[name])
            merged.update(preset.config if kind == "config" else preset.settings)
        return merged

    def resolve_model(self, model: ModelPreset | str) -> Model:
        """The :class:`Model` for a preset or a bare model id; :class:`ModelResolutionError`."""
        preset = ModelPreset(model_id=model) if isinstance(model, str) else model
        return self._providers.resolve(preset.model_id, self.model_settings(preset))

    def build_agent(self, spec: AgentSpec | str) -> Agent:
        """An executable :class:`Agent` for ``spec`` (or the registered spec of that name).

        Raises :class:`AgentSpecError` when the name is unknown or the spec
        has no model, :class:`ModelResolutionError` when the model cannot be
        built.
        """
        if isinstance(spec, str):
            found = self._specs.get(spec)
            if found is None:
                raise AgentSpecError(
                    f"no agent spec named {spec!r} "
                    f"(registered: {', '.join(self.names()) or 'none'})",
                    agent=spec,
                )
            spec = found
        if spec.model is None:
            raise AgentSpecError(
                f"agent spec {spec.name!r} has no model; set AgentSpec.model", agent=spec.name
            )
        return Agent(
            model=self.resolve_model(spec.model),
            name=spec.name,
            instructions=[text for text in spec.instructions if text],
        )

    def __repr__(self) -> str:
        return (
            f"AgentSpecRegistry(specs={self.names()!r}, providers={self._providers.names()!r}, "
            f"environments={self.environment_names()!r})"
        )
