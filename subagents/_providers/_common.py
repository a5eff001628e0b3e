"""What every real provider shares: settings, secrets, retries with backoff, error mapping.

A provider model (:class:`ProviderModel`) turns one agent turn into one SDK
call. Around that call it guarantees:

- **Retries within a bound.** Rate limits (429), server errors (5xx,
  Anthropic's 529 "overloaded") and unreachable servers are retried with
  exponential backoff (:class:`RetryPolicy`): at most ``max_retries`` more
  attempts, never sleeping past ``max_elapsed`` seconds since the first one,
  honouring a ``Retry-After`` header. The SDKs' own retries are disabled
  (``max_retries=0``) so there is exactly one retry loop. ``sleep``,
  ``clock`` and ``random`` are injectable, so tests never wait. A streamed
  turn is retried only until its first event was yielded.
- **Typed errors.** Every SDK failure becomes a :class:`ProviderError`
  subclass; authentication errors, timeouts, refused content and other 4xx
  are never retried.
- **No leaked keys.** The key lives in a :class:`Secret` (masked in
  ``repr``/``str``); every message that reaches an error or a log line is
  passed through :func:`redact`; the SDK exception (which holds the request
  and its ``Authorization`` header) is neither chained nor kept as context.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import inspect
import json
import logging
import os
import random as _random
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec

from statemachines import SubagentsError

from .._errors import (
    AgentConfigError,
    MissingApiKey,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderNotInstalled,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
)
from .._models import (
    Model,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    ModelStreamEvent,
)

logger = logging.getLogger("subagents.providers")

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]

DEFAULT_TIMEOUT = 120.0


# ---------------------------------------------------------------- secrets


class Secret:
    """An API key that never shows itself: ``repr`` and ``str`` are masked.

    Only :meth:`reveal` returns the value (used when building the SDK client).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not picklable")


# Key shapes redacted even when we do not know the key (a server echoing
# another credential, a proxy adding one): OpenAI/Anthropic style ``sk-...``
# and bearer tokens.
_KEY_PATTERNS = re.compile(r"(sk-[A-Za-z0-9_\-*]{6,}|(?i:bearer)\s+[A-Za-z0-9_\-.~+/=*]{6,})")
REDACTED = "[redacted]"


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with every secret in ``secrets`` and every key-shaped token replaced.

    Secrets shorter than 4 characters (placeholders such as ``"x"`` that
    local servers accept) are left alone: replacing them would garble the
    message and protect nothing.
    """
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return _KEY_PATTERNS.sub(REDACTED, text)


# ---------------------------------------------------------------- settings


class ModelSettings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, repr_omit_defaults=True
):
    """Sampling settings sent with every request; ``None`` means the provider's default.

    Not every provider supports every setting: constructing a provider model
    with one it does not support raises :class:`AgentConfigError` naming it,
    instead of silently dropping it. ``extra_body`` is merged into the JSON
    body as is (for server-specific knobs of vLLM, Ollama, llama.cpp...).
    """

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    parallel_tool_calls: bool | None = None
    extra_body: dict[str, Any] | None = None

    def given(self) -> dict[str, Any]:
        """The settings that were set (not ``None``), by name."""
        return {
            name: getattr(self, name)
            for name in self.__struct_fields__
            if getattr(self, name) is not None
        }


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Exponential backoff for rate limits, server errors and unreachable servers.

    Attempt ``n`` (0-based) waits ``min(max_delay, initial_delay * multiplier**n)``,
    shortened by up to ``jitter`` (a fraction) at random, or longer when the
    server's ``Retry-After`` asks for more. The loop gives up after
    ``max_retries`` retries, or earlier when the next wait would end more than
    ``max_elapsed`` seconds after the first attempt started.
    """

    max_retries: int = 3
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 8.0
    max_elapsed: float = 60.0
    jitter: float = 0.2

    def delay(self, retry: int, retry_after: float | None, rand: float) -> float:
        backoff = min(self.max_delay, self.initial_delay * self.multiplier**retry)
        backoff *= 1.0 - self.jitter * rand
        return backoff if retry_after is None else max(backoff, retry_after)


def _check_policy(policy: RetryPolicy) -> None:
    if policy.max_retries < 0 or policy.initial_delay < 0 or policy.max_elapsed < 0:
        raise AgentConfigError(f"retry policy values must be non-negative: {policy!r}")
    if not 0.0 <= policy.jitter <= 1.0:
        raise AgentConfigError(f"retry jitter must be within [0, 1], got {policy.jitter!r}")


# ---------------------------------------------------------------- SDK failures


@dataclass(frozen=True)
class Failure:
    """A classified SDK failure, turned into a typed error only when it is final."""

    kind: type[ProviderError]
    message: str
    status: int | None = None
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind in (ProviderRateLimited, ProviderServerError, ProviderConnectionError)


_ERROR_TYPES: dict[str, type[ProviderError]] = {
    # Error ``type`` strings in bodies and stream error events.
    "authentication_error": ProviderAuthenticationError,
    "permission_error": ProviderAuthenticationError,
    "invalid_api_key": ProviderAuthenticationError,
    "rate_limit_error": ProviderRateLimited,
    "rate_limit_exceeded": ProviderRateLimited,
    "overloaded_error": ProviderServerError,
    "api_error": ProviderServerError,
    "server_error": ProviderServerError,
}


def _body_error(body: Any) -> tuple[str | None, str | None]:
    """``(code or type, message)`` of an error body (``{"error": {...}}`` or the error itself).

    ``body`` may be a mapping or an SDK object (a stream event).
    """
    if body is None or isinstance(body, str | bytes | int | float):
        return None, None if body is None else str(body)
    error = get(body, "error", body)
    if isinstance(error, str):
        return None, error
    kind = get(error, "code") or get(error, "type")
    message = get(error, "message")
    return (
        None if kind is None else str(kind),
        None if message is None else str(message),
    )


def _retry_after(response: Any) -> float | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name in ("retry-after-ms", "retry-after"):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw)
        except ValueError:
            return None  # an HTTP date: use our own backoff
        return seconds / 1000.0 if name.endswith("-ms") else seconds
    return None


class StreamError(SubagentsError):
    """An error reported inside a successful response (a stream error event, a failed status).

    Raised by a protocol's parser and classified like an SDK error, so it is
    retried (before the first streamed event) and redacted the same way.
    """

    def __init__(self, body: Any) -> None:
        kind, message = _body_error(body)
        self.failure = Failure(
            _ERROR_TYPES.get(kind or "", ProviderError), message or kind or "unknown error"
        )
        super().__init__(self.failure.message)


def classify(sdk: Any, error: BaseException) -> Failure | None:
    """Classify an exception raised by an OpenAI or Anthropic SDK (``None``: not an SDK error).

    Both SDKs share the same exception tree (``APITimeoutError``,
    ``APIConnectionError``, ``APIStatusError`` with ``status_code`` and
    ``body``, ``APIError``). Messages are not redacted here.
    """
    if isinstance(error, sdk.APITimeoutError):
        return Failure(ProviderTimeout, "the request timed out")
    if isinstance(error, sdk.APIConnectionError):
        return Failure(ProviderConnectionError, "could not connect to the server")
    # While a stream is read, the SDK lets its HTTP library's errors through.
    library = http_library(sdk)
    if library is not None:
        if isinstance(error, library.TimeoutException):
            return Failure(ProviderTimeout, "the response stream timed out")
        if isinstance(error, library.TransportError):
            return Failure(ProviderConnectionError, "the connection broke mid-response")
    if not isinstance(error, sdk.APIError):
        return None
    kind, body_message = _body_error(getattr(error, "body", None))
    message = body_message or str(getattr(error, "message", "") or error)
    status = getattr(error, "status_code", None)
    if isinstance(error, sdk.APIStatusError) and isinstance(status, int) and status >= 400:
        retry_after = _retry_after(getattr(error, "response", None))
        if status in (401, 403):
            return Failure(ProviderAuthenticationError, message, status)
        if status == 429:
            return Failure(ProviderRateLimited, message, status, retry_after)
        if status == 408:
            return Failure(ProviderTimeout, message, status)
        if status >= 500:
            return Failure(ProviderServerError, message, status, retry_after)
        return Failure(_ERROR_TYPES.get(kind or "", ProviderError), message, status)
    # An error delivered inside a 200 response (a stream error event).
    return Failure(_ERROR_TYPES.get(kind or "", ProviderError), message)


# ---------------------------------------------------------------- the base model


def import_sdk(module: str, *, provider: str, extra: str) -> Any:
    """Import a provider SDK, or raise :class:`ProviderNotInstalled` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ProviderNotInstalled(
            f"the {provider} provider needs the {module!r} package: "
            f"pip install 'subagents[{extra}]'",
            provider=provider,
            model="",
            extra=extra,
        ) from None


def dumps(value: Any) -> str:
    """Compact JSON text of a tool argument or return value (strings stay as they are)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class ProviderModel(Model, abc.ABC):
    """A :class:`Model` backed by a provider SDK; subclasses speak one protocol.

    Safe to share between agents, runs and event loops: it keeps no
    connection, and each request opens its own SDK client and closes it
    before returning (or raising). The API key is read from the constructor,
    else from ``env_var`` at each request, so a rotated key is picked up;
    when neither is set the request raises :class:`MissingApiKey`.
    Every failure is a :class:`ProviderError` subclass (see the module doc).
    """

    provider: ClassVar[str]
    env_var: ClassVar[str]
    base_url_env_var: ClassVar[str | None] = None
    sdk_module: ClassVar[str]
    extra: ClassVar[str]
    #: Settings this protocol cannot send; giving one raises AgentConfigError.
    unsupported_settings: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | Secret | None = None,
        base_url: str | None = None,
        settings: ModelSettings | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        sleep: Sleep | None = None,
        clock: Clock = time.monotonic,
        random: Callable[[], float] = _random.random,
    ) -> None:
        if not model_name:
            raise AgentConfigError(f"{self.provider} needs a model name", provider=self.provider)
        self._sdk = import_sdk(self.sdk_module, provider=self.provider, extra=self.extra)
        self.model_name = model_name
        self.name = f"{self.provider}:{model_name}"
        self._api_key = Secret(api_key) if isinstance(api_key, str) else api_key
        self.base_url = base_url
        self.settings = ModelSettings() if settings is None else settings
        unsupported = sorted(set(self.settings.given()) & self.unsupported_settings)
        if unsupported:
            raise AgentConfigError(
                f"{self.provider} does not support the setting(s) {unsupported}",
                provider=self.provider,
                settings=unsupported,
            )
        self.retry = RetryPolicy() if retry is None else retry
        _check_policy(self.retry)
        if timeout <= 0:
            raise AgentConfigError(f"timeout must be positive, got {timeout!r}")
        self.timeout = timeout
        self._headers = dict(headers or {})
        self._sleep: Sleep = asyncio.sleep if sleep is None else sleep
        self._clock = clock
        self._random = random

    # ------------------------------------------------------------ construction

    @classmethod
    def from_settings(cls, model_name: str, settings: Mapping[str, Any]) -> ProviderModel:
        """Build from a flat settings mapping (a profile's or a markdown spec's).

        Keys: ``api_key``, ``base_url``, ``timeout``, ``headers`` (and the
        subclass's own keyword options, e.g. ``stream_usage``), every
        :class:`ModelSettings` field, and every :class:`RetryPolicy` field
        (``max_retries``, ``initial_delay``, ...). An unknown key or a value
        of the wrong type raises :class:`AgentConfigError`.
        """
        remaining = dict(settings)
        own: set[str] = set()
        for klass in cls.__mro__:
            if issubclass(klass, ProviderModel) and "__init__" in vars(klass):
                own.update(
                    name
                    for name, parameter in inspect.signature(klass.__init__).parameters.items()
                    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
                )
        own -= {"settings", "retry", "sleep", "clock", "random"}
        connection = {key: remaining.pop(key) for key in sorted(own) if key in remaining}
        sampling = {k: remaining.pop(k) for k in ModelSettings.__struct_fields__ if k in remaining}
        retry = {k: remaining.pop(k) for k in RetryPolicy.__struct_fields__ if k in remaining}
        if remaining:
            raise AgentConfigError(
                f"unknown {cls.provider} model setting(s) {sorted(remaining)}",
                provider=cls.provider,
                settings=sorted(remaining),
            )
        try:
            model_settings = msgspec.convert(sampling, ModelSettings)
            retry_policy = msgspec.convert(retry, RetryPolicy)
        except msgspec.ValidationError as error:
            raise AgentConfigError(
                f"invalid {cls.provider} model setting: {error}", provider=cls.provider
            ) from None
        return cls(model_name, settings=model_settings, retry=retry_policy, **connection)

    # ------------------------------------------------------------ the protocol hooks

    @abc.abstractmethod
    def _client(self, api_key: str) -> Any:
        """A fresh SDK client (an async context manager that closes it)."""

    @abc.abstractmethod
    async def _request_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        """One attempt at a non-streamed turn."""

    @abc.abstractmethod
    def _stream_once(
        self, client: Any, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncGenerator[ModelStreamEvent, None]:
        """One attempt at a streamed turn, ending with the full response."""

    # ------------------------------------------------------------ Model

    async def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        """One turn, retried within :attr:`retry`. Raises a :class:`ProviderError` subclass."""
        api_key = self._resolve_key()
        started = self._clock()
        retry = 0
        while True:
            try:
                async with self._client(api_key) as client:
                    return await self._request_once(client, messages, params)
            except Exception as error:
                failure = self._classify(error)
            await self._back_off(failure, retry, started, api_key)
            retry += 1

    async def request_stream(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncIterator[ModelStreamEvent]:
        """Stream one turn: text deltas, then the full response.

        Retried like :meth:`request` until the first event is yielded; a
        failure after that raises at once (the consumer already saw part of
        the turn). Closing the iterator early closes the connection.
        """
        api_key = self._resolve_key()
        started = self._clock()
        retry = 0
        while True:
            yielded = False
            try:
                async with self._client(api_key) as client:
                    events = self._stream_once(client, messages, params)
                    try:
                        async for event in events:
                            yielded = True
                            yield event
                    finally:
                        await events.aclose()
                return
            except Exception as error:
                failure = self._classify(error)
            if yielded:
                raise self._error(failure, retry + 1, api_key)
            await self._back_off(failure, retry, started, api_key)
            retry += 1

    # ------------------------------------------------------------ helpers

    def _resolve_key(self) -> str:
        if self._api_key is not None:
            return self._api_key.reveal()
        key = os.environ.get(self.env_var)
        if not key:
            raise MissingApiKey(
                f"no API key for {self.name}: set the {self.env_var} environment variable "
                "or pass api_key in the model settings",
                provider=self.provider,
                model=self.model_name,
                env_var=self.env_var,
            )
        return key

    def _resolve_base_url(self) -> str | None:
        if self.base_url is not None:
            return self.base_url
        if self.base_url_env_var is not None:
            return os.environ.get(self.base_url_env_var) or None
        return None

    def _classify(self, error: Exception) -> Failure:
        """Classify ``error``, re-raising it when it is not an SDK failure."""
        if isinstance(error, ProviderError):
            raise error
        if isinstance(error, StreamError):
            return error.failure
        failure = classify(self._sdk, error)
        if failure is None:
            raise error
        return failure

    def _error(self, failure: Failure, attempts: int, api_key: str) -> ProviderError:
        fields: dict[str, Any] = {"provider": self.provider, "model": self.model_name}
        if failure.status is not None:
            fields["status"] = failure.status
        if failure.kind in (ProviderRateLimited, ProviderServerError):
            fields["attempts"] = attempts
        message = redact(failure.message, (api_key,))
        status = "" if failure.status is None else f" (HTTP {failure.status})"
        return failure.kind(f"{self.name} request failed{status}: {message}", **fields)

    async def _back_off(self, failure: Failure, retry: int, started: float, api_key: str) -> None:
        """Sleep before the next attempt, or raise the typed error when it must not be retried."""
        delay = self.retry.delay(retry, failure.retry_after, self._random())
        if (
            not failure.retryable
            or retry >= self.retry.max_retries
            or self._clock() - started + delay > self.retry.max_elapsed
        ):
            raise self._error(failure, retry + 1, api_key)
        logger.warning(
            "%s: %s, retrying in %.2fs (retry %d of %d)",
            self.name,
            redact(failure.message, (api_key,)),
            delay,
            retry + 1,
            self.retry.max_retries,
        )
        await self._sleep(delay)

    def _sampling(self, renames: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The given settings as request keyword arguments (``extra_body`` apart)."""
        given = self.settings.given()
        given.pop("extra_body", None)
        renames = renames or {}
        out: dict[str, Any] = {}
        for key, value in given.items():
            out[renames.get(key, key)] = list(value) if isinstance(value, tuple) else value
        if self.settings.extra_body:
            out["extra_body"] = dict(self.settings.extra_body)
        return out

    def __repr__(self) -> str:
        key = "None" if self._api_key is None else repr(self._api_key)
        return (
            f"{type(self).__name__}({self.model_name!r}, base_url={self.base_url!r}, "
            f"api_key={key}, settings={self.settings!r})"
        )


def http_library(sdk: Any) -> Any | None:
    """The HTTP library module (``httpx`` or ``httpx2``) the SDK's async client is built on."""
    factory = getattr(sdk, "DefaultAsyncHttpxClient", None)
    if factory is None:
        return None
    for klass in factory.__mro__:
        if klass.__name__ == "AsyncClient":
            return importlib.import_module(klass.__module__.split(".")[0])
    return None


_TLS_CONTEXTS: dict[str, Any] = {}
_TLS_LOCK = threading.Lock()


def http_client(sdk: Any) -> Any | None:
    """A new HTTP client for ``sdk`` that shares one TLS context per process, or ``None``.

    Building a TLS context parses the whole CA bundle; the SDK would
    do it for every client, that is for every request here. The context is
    built once, by the SDK's own HTTP library (``create_ssl_context``, which
    honours ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as read at first use), and
    shared: contexts are safe to share between threads and loops. ``None``
    (let the SDK build its own) when the SDK or its HTTP library lacks the
    hooks this needs.
    """
    factory = getattr(sdk, "DefaultAsyncHttpxClient", None)
    library = http_library(sdk)
    if factory is None or library is None:
        return None
    try:
        with _TLS_LOCK:
            context = _TLS_CONTEXTS.get(library.__name__)
            if context is None:
                context = _TLS_CONTEXTS[library.__name__] = library.create_ssl_context()
        return factory(verify=context)
    except Exception:  # an HTTP library without these hooks: the SDK's default
        return None


@contextlib.asynccontextmanager
async def closing_client(client: Any) -> AsyncIterator[Any]:
    """Yield ``client`` and close it (its HTTP pool) however the block ends."""
    try:
        yield client
    finally:
        await client.close()


def create_kwargs(create: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as keyword arguments for the SDK's ``create``.

    Keys the installed SDK version does not know as parameters (a sampling
    setting it dropped or never had) travel in ``extra_body``, so the wire
    request is the same on every SDK version.
    """
    try:
        known = inspect.signature(create).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins have no signature
        return body
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in known.values()):
        return body
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in body.items():
        if key in known or key == "extra_body":
            kwargs[key] = value
        else:
            extra[key] = value
    if extra:
        kwargs["extra_body"] = {**extra, **kwargs.get("extra_body", {})}
    return kwargs


def retry_text(content: str) -> str:
    """What a retry prompt tells the model."""
    return f"{content}\n\nFix the errors and try again."


def get(obj: Any, name: str, default: Any = None) -> Any:
    """``obj[name]`` for mappings, ``obj.name`` for SDK objects; ``default`` when absent/None."""
    value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return default if value is None else value
