"""Real model providers, selected by model id ``PROVIDER:MODEL``.

``openai-chat`` (Chat Completions) and ``openai-responses`` (Responses API)
use the ``openai`` SDK (extra ``openai``) and any OpenAI-compatible server
through ``base_url``; ``anthropic`` uses the ``anthropic`` SDK (extra
``anthropic``). The SDKs are imported when a model is constructed, never at
``import subagents``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._agent._models import Model
from .._errors import AgentConfigError
from ._anthropic import AnthropicModel
from ._common import ModelSettings, ProviderModel, RetryPolicy, Secret
from ._openai_chat import OpenAIChatModel
from ._openai_responses import OpenAIResponsesModel

#: Provider name -> model class; each class's ``from_settings`` is the factory.
PROVIDERS: dict[str, type[ProviderModel]] = {
    OpenAIChatModel.provider: OpenAIChatModel,
    OpenAIResponsesModel.provider: OpenAIResponsesModel,
    AnthropicModel.provider: AnthropicModel,
}


def model_from_id(model_id: str, **settings: Any) -> Model:
    """The provider model for ``"provider:model"`` (e.g. ``"openai-chat:gpt-4o-mini"``).

    ``settings`` are those of :meth:`ProviderModel.from_settings` (``api_key``,
    ``base_url``, ``temperature``, ``max_retries``, ...). Raises
    :class:`AgentConfigError` for a malformed id, an unknown provider or an
    unknown setting, and :class:`ProviderNotInstalled` when the provider's
    SDK extra is missing. A missing key is only detected at the first
    request (:class:`MissingApiKey`), so models can be built before keys are set.
    """
    provider, sep, model_name = model_id.partition(":")
    if not sep or not provider or not model_name:
        raise AgentConfigError(
            f"model id {model_id!r} is not 'provider:model' (providers: {sorted(PROVIDERS)})",
            model_id=model_id,
        )
    cls = PROVIDERS.get(provider)
    if cls is None:
        raise AgentConfigError(
            f"unknown model provider {provider!r} in {model_id!r}; known: {sorted(PROVIDERS)}",
            model_id=model_id,
        )
    return cls.from_settings(model_name, settings)


ModelFactory = Callable[[str, Mapping[str, Any]], Model]


def register_providers(register: Callable[[str, ModelFactory], Any]) -> None:
    """Call ``register(name, factory)`` for every provider (for a model-provider registry)."""
    for name, cls in PROVIDERS.items():
        register(name, cls.from_settings)


__all__ = [
    "PROVIDERS",
    "AnthropicModel",
    "ModelSettings",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ProviderModel",
    "RetryPolicy",
    "Secret",
    "model_from_id",
    "register_providers",
]
