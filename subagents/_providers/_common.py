"""What every real provider shares: settings, secrets, pooled clients, retries, safe errors.

A provider model (:class:`ProviderModel`) turns one agent turn into one SDK
call. Around that call it guarantees:

- **One pooled client.** Requests reuse one SDK client (and its HTTP
  connections) per event loop; :meth:`ProviderModel.aclose` /
  :meth:`ProviderModel.close` release it (see ``_pool``).
- **Retries by error class, within a bound.** Rate limits (429), server
  errors (5xx, Anthropic's 529), timeouts, unreachable servers and streams
  cut before their terminal event are retried with exponential backoff
  (:class:`RetryPolicy`): at most ``max_retries`` more attempts, never
  sleeping past ``max_elapsed`` seconds since the first one, honouring
  ``Retry-After`` (seconds or an HTTP date). A deterministic 4xx is never
  retried, nor a 5xx that repeats the same validation error. The SDKs' own
  retries are off (``max_retries=0``): there is one retry loop. ``sleep``,
  ``clock``, ``wall_clock`` and ``random`` are injectable, so tests never
  wait. A streamed turn is retried only until its first event was yielded.
- **Typed outcomes.** Every failure is a :class:`ProviderError` subclass
  with a safe ``category`` and the HTTP ``status``; a stream cut short is
  :class:`ProviderStreamIncomplete`, an output at its token limit
  :class:`OutputTruncated`, a refusal or content filter
  :class:`ContentRefused`: never a clean success.
- **Safe text.** An error's ``str()``/``repr`` and the WARNING retry lines
  are built only from the category, status, provider and model. The
  provider's own text (which may echo request headers) is logged at DEBUG
  only, with the API key and every configured header value redacted. The
  SDK exception (which holds the request and its ``Authorization`` header)
  is neither chained nor kept as context.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import random as _random
import re
import shlex
import threading
import time
import tomllib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from .._agent._models import (
    Model,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    ModelStreamEvent,
)
from .._errors import (
    AgentConfigError,
    MissingApiKey,
    ProviderError,
    ProviderNotInstalled,
    ProviderRateLimited,
    ProviderServerError,
)
from ._failures import Failure, StreamError, classify, get, http_library
from ._pool import ClientPool

logger = logging.getLogger("subagents.providers")

#: The protocol hooks' argument types.
Messages = Sequence[ModelMessage]
Params = ModelRequestParameters
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


# ---------------------------------------------------------------- the base model


_SOURCE_ROOT = Path(__file__).resolve().parents[2]
_EXTRA_MARKER = re.compile(r"""^(?P<req>[^;]+);\s*extra\s*==\s*["'](?P<extra>[^"']+)["']\s*$""")


def extra_requirements(extra: str) -> list[str]:
    """The requirements of the distribution's ``extra``, as declared: the source
    tree's ``pyproject.toml`` when this code runs from one, else the installed
    metadata (``[]``: no such extra)."""
    pyproject = _SOURCE_ROOT / "pyproject.toml"
    if pyproject.is_file():
        with contextlib.suppress(OSError, ValueError):
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
            if project.get("name") == "subagents":
                found = project.get("optional-dependencies", {}).get(extra, [])
                return [str(requirement) for requirement in found]
    try:
        declared = metadata.requires("subagents") or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for line in declared:
        marked = _EXTRA_MARKER.match(line)
        if marked is not None and marked["extra"] == extra:
            out.append(marked["req"].strip())
    return out


def install_command(extra: str) -> str:
    """The exact command that installs what the ``extra`` adds, whether subagents
    came from a clone (editable or not) or a package index: ``pip install`` of the
    extra's own requirements (so the installed subagents is left as it is)."""
    requirements = extra_requirements(extra)
    if not requirements:
        return f"pip install {shlex.quote(f'subagents[{extra}]')}"
    return "pip install " + " ".join(shlex.quote(r) for r in requirements)


def import_sdk(module: str, *, provider: str, extra: str) -> Any:
    """Import a provider SDK, or raise :class:`ProviderNotInstalled` naming the extra
    and the exact command that installs it (:func:`install_command`)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ProviderNotInstalled(
            f"the {provider} provider needs the {module!r} package ({extra} extra): "
            f"{install_command(extra)}",
            provider=provider,
            model="",
            extra=extra,
            category="not_installed",
        ) from None


class ProviderModel(Model, abc.ABC):
    """A :class:`Model` backed by a provider SDK; subclasses speak one protocol.

    Safe to share between agents, runs, threads and event loops: the pooled
    SDK client is per loop. Whoever builds the model owns it and calls
    :meth:`aclose` (or :meth:`close`) when done with it, e.g. at host
    shutdown; a loop that ends first closes its client itself. A closed
    model still works: the next request opens a new client.
    The API key is read from the constructor, else from ``env_var`` at each
    request, so a rotated key is picked up; when neither is set the request
    raises :class:`MissingApiKey`. Every failure is a :class:`ProviderError`
    subclass (see the module doc).
    """

    provider: ClassVar[str]
    env_var: ClassVar[str]
    base_url_env_var: ClassVar[str | None] = None
    sdk_module: ClassVar[str]
    #: The SDK's async client class (``AsyncOpenAI``, ``AsyncAnthropic``).
    sdk_client: ClassVar[str]
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
        wall_clock: Clock = time.time,
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
        self._wall_clock = wall_clock
        self._random = random
        self._pool = ClientPool(self._new_client)

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
        own -= {"settings", "retry", "sleep", "clock", "wall_clock", "random"}
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

    def _new_client(self, api_key: str) -> Any:
        """A new pooled SDK client (built by the pool, once per event loop and key)."""
        factory = getattr(self._sdk, self.sdk_client)
        return factory(
            api_key=api_key,
            base_url=self._resolve_base_url(),
            timeout=self.timeout,
            max_retries=0,
            default_headers=self._headers or None,
            http_client=http_client(self._sdk),
        )

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
        attempts = _Attempts(self, self._resolve_key())
        while True:
            try:
                client = await self._pool.client(attempts.api_key)
                return await self._request_once(client, messages, params)
            except Exception as error:
                failure = self._classify(error)
            await attempts.back_off(failure)

    async def request_stream(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> AsyncIterator[ModelStreamEvent]:
        """Stream one turn: text and tool-call deltas, then the full response.

        Retried like :meth:`request` until the first event is yielded; a
        failure after that raises at once (the consumer already saw part of
        the turn). Closing the iterator early closes the response.
        """
        attempts = _Attempts(self, self._resolve_key())
        while True:
            yielded = False
            try:
                client = await self._pool.client(attempts.api_key)
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
                raise attempts.error(failure)
            await attempts.back_off(failure)

    async def aclose(self) -> None:
        """Close the pooled clients (idempotent; the model stays usable)."""
        await self._pool.aclose()

    def close(self) -> None:
        """:meth:`aclose` for synchronous code (see :meth:`ClientPool.close`)."""
        self._pool.close()

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
                category="missing_api_key",
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
        failure = classify(self._sdk, error, self._wall_clock())
        if failure is None:
            raise error
        return failure

    def secrets(self, api_key: str) -> tuple[str, ...]:
        """Every configured secret: the key and each header value (for redaction)."""
        return (api_key, *self._headers.values())

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


class _Attempts:
    """The retry state of one turn: attempts made, when they began, the last failure."""

    def __init__(self, model: ProviderModel, api_key: str) -> None:
        self.model = model
        self.api_key = api_key
        self.started = model._clock()
        self.retry = 0
        self.previous: Failure | None = None

    def safe_text(self, failure: Failure) -> str:
        status = "" if failure.status is None else f" (HTTP {failure.status})"
        return f"{self.model.name} request failed: {failure.category}{status}"

    def error(self, failure: Failure) -> ProviderError:
        """The typed error for a final ``failure``; its raw text goes to DEBUG, redacted."""
        model = self.model
        fields: dict[str, Any] = {
            "provider": model.provider,
            "model": model.model_name,
            "category": failure.category,
        }
        if failure.status is not None:
            fields["status"] = failure.status
        kind = failure.kind
        if kind in (ProviderRateLimited, ProviderServerError):
            fields["attempts"] = self.retry + 1
        fields.update(failure.fields)
        logger.debug(
            "%s: %s; provider said: %s",
            model.name,
            failure.category,
            redact(failure.detail, model.secrets(self.api_key)),
        )
        return kind(self.safe_text(failure), **fields)

    async def back_off(self, failure: Failure) -> None:
        """Sleep before the next attempt, or raise the typed error when it must not be retried."""
        policy = self.model.retry
        if failure.repeats_validation_error(self.previous):
            # The server rejects this request itself: a third try would too.
            failure = Failure("invalid_request", failure.status, detail=failure.detail)
        delay = policy.delay(self.retry, failure.retry_after, self.model._random())
        if (
            not failure.retryable
            or self.retry >= policy.max_retries
            or self.model._clock() - self.started + delay > policy.max_elapsed
        ):
            raise self.error(failure)
        logger.warning(
            "%s, retrying in %.2fs (retry %d of %d)",
            self.safe_text(failure),
            delay,
            self.retry + 1,
            policy.max_retries,
        )
        logger.debug(
            "%s: provider said: %s",
            self.model.name,
            redact(failure.detail, self.model.secrets(self.api_key)),
        )
        self.previous = failure
        self.retry += 1
        await self.model._sleep(delay)


_TLS_CONTEXTS: dict[str, Any] = {}
_TLS_LOCK = threading.Lock()


def http_client(sdk: Any) -> Any | None:
    """A new HTTP client for ``sdk`` that shares one TLS context per process, or ``None``.

    Building a TLS context loads the CA bundle (about 50 ms); the context is
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


async def open_stream(create: Any, body: dict[str, Any]) -> Any:
    """The SDK stream of ``create`` called with ``body`` and ``stream=True``."""
    return await create(**create_kwargs(create, {**body, "stream": True}))


async def stream_events(stream: Any) -> AsyncGenerator[tuple[Any, Any], None]:
    """``(type, event)`` for each event of a typed SDK stream, closing it however
    iteration ends (use it under ``contextlib.aclosing``). An ``error`` event
    raises :class:`StreamError`.
    """
    try:
        async for event in stream:
            kind = get(event, "type")
            if kind == "error":
                raise StreamError.from_body(event)
            yield kind, event
    finally:
        await stream.close()


# The keyword parameters of each SDK ``create`` function (``None``: it takes
# ``**kwargs``): reading a signature costs about 0.3 ms, a tenth of a loopback turn.
_PARAMETERS: dict[Any, frozenset[str] | None] = {}


def _parameters(create: Any) -> frozenset[str] | None:
    function = getattr(create, "__func__", create)
    try:
        return _PARAMETERS[function]
    except KeyError:
        pass
    try:
        known = inspect.signature(create).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins have no signature
        names = None
    else:
        variadic = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in known.values())
        names = None if variadic else frozenset(known)
    _PARAMETERS[function] = names
    return names


def create_kwargs(create: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as keyword arguments for the SDK's ``create``.

    Keys the installed SDK version does not know as parameters (a sampling
    setting it dropped or never had) travel in ``extra_body``, so the wire
    request is the same on every SDK version.
    """
    known = _parameters(create)
    if known is None:
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
