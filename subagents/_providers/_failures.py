"""SDK failures, classified: a safe category, an HTTP status, whether to retry, how long to wait.

A :class:`Failure` is what one attempt ended with. Only its ``category``,
``status``, provider and model ever reach an error's ``str()``, a WARNING log
line or a durable record; ``detail`` (the provider's own text, which may echo
request headers) is logged at DEBUG only, redacted.
"""

from __future__ import annotations

import email.utils
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachines import SubagentsError

from .._errors import (
    ContentRefused,
    OutputTruncated,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimited,
    ProviderServerError,
    ProviderStreamIncomplete,
    ProviderTimeout,
)

#: Categories a later attempt may cure; every other one is final at once.
RETRYABLE = frozenset(
    {"rate_limited", "server_error", "timeout", "connection", "stream_incomplete"}
)

# Error ``type``/``code`` strings in bodies and stream error events -> category.
_BODY_CATEGORIES: dict[str, str] = {
    "authentication_error": "authentication",
    "permission_error": "authentication",
    "invalid_api_key": "authentication",
    "rate_limit_error": "rate_limited",
    "rate_limit_exceeded": "rate_limited",
    "overloaded_error": "server_error",
    "api_error": "server_error",
    "server_error": "server_error",
    "model_not_found": "model_not_found",
    "not_found_error": "not_found",
    "invalid_request_error": "invalid_request",
    "invalid_request": "invalid_request",
    "BadRequestError": "invalid_request",
}

_CLASSES: dict[str, type[ProviderError]] = {
    "authentication": ProviderAuthenticationError,
    "rate_limited": ProviderRateLimited,
    "server_error": ProviderServerError,
    "timeout": ProviderTimeout,
    "connection": ProviderConnectionError,
    "stream_incomplete": ProviderStreamIncomplete,
    "output_truncated": OutputTruncated,
    "content_refused": ContentRefused,
}

# What a server's message says when it rejects the request itself (a chat
# template or schema check), as llama.cpp does with HTTP 500: the same
# answer twice means a third try is pointless.
_VALIDATION = re.compile(
    r"(?i)invalid|validat|expected|must be|required|unsupported|not supported|parse|template"
)


@dataclass(frozen=True)
class Failure:
    """One attempt's failure. ``detail`` is raw provider text: DEBUG logs only."""

    category: str
    status: int | None = None
    retry_after: float | None = None
    detail: str = ""
    #: Extra error fields (``reason``, ``partial_text``): never secrets.
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> type[ProviderError]:
        return _CLASSES.get(self.category, ProviderError)

    @property
    def retryable(self) -> bool:
        return self.category in RETRYABLE

    def repeats_validation_error(self, previous: Failure | None) -> bool:
        """Whether this 5xx repeats ``previous`` word for word and reads as a request check."""
        return (
            previous is not None
            and self.category == "server_error"
            and previous.category == "server_error"
            and bool(self.detail)
            and self.detail == previous.detail
            and _VALIDATION.search(self.detail) is not None
        )


class StreamError(SubagentsError):
    """An attempt's failure found by a protocol's parser (a stream error event, a
    failed status, a stream cut short, a truncated output).

    Classified like an SDK error, so it is retried when its category allows
    and nothing was yielded yet, and reported with the same safe text.
    """

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"provider stream failed: {failure.category}", category=failure.category)
        self.failure = failure

    @classmethod
    def from_body(cls, body: Any) -> StreamError:
        """From an error body or event (``{"error": {...}}``, or the error itself)."""
        kind, message = body_error(body)
        category = _BODY_CATEGORIES.get(kind or "", "provider_error")
        return cls(Failure(category, detail=message or kind or "unknown error"))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.failure,))


def get(obj: Any, name: str, default: Any = None) -> Any:
    """``obj[name]`` for mappings, ``obj.name`` for SDK objects; ``default`` when absent/None."""
    value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return default if value is None else value


def body_error(body: Any) -> tuple[str | None, str | None]:
    """``(code or type, message)`` of an error body (a mapping or an SDK object)."""
    if body is None or isinstance(body, str | bytes | int | float):
        return None, None if body is None else str(body)
    error = get(body, "error", body)
    if isinstance(error, str):
        return None, error
    kind = get(error, "code") or get(error, "type")
    message = get(error, "message")
    return (
        None if kind is None or isinstance(kind, int) else str(kind),
        None if message is None else str(message),
    )


def retry_after(headers: Any, now: float) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, or ``Retry-After`` as
    seconds or as an HTTP date (measured against the response's ``Date`` header
    when there is one, else ``now``, a wall-clock timestamp). Never negative.
    """
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    when = _http_date(raw)
    if when is None:
        return None
    reference = _http_date(headers.get("date"))
    return max(0.0, when - (now if reference is None else reference))


def _http_date(raw: str | None) -> float | None:
    if not raw:
        return None
    try:
        return email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _status_category(status: int, kind: str | None, message: str) -> str:
    if status in (401, 403):
        return "authentication"
    if status == 404:
        is_model = kind == "model_not_found" or "model" in message.lower()
        return "model_not_found" if is_model else "not_found"
    if status == 408:
        return "timeout"
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "server_error"
    return "invalid_request"


def classify(sdk: Any, error: BaseException, now: float) -> Failure | None:
    """Classify an exception raised by an OpenAI or Anthropic SDK (``None``: not an SDK error).

    Both SDKs share the same exception tree (``APITimeoutError``,
    ``APIConnectionError``, ``APIStatusError`` with ``status_code`` and
    ``body``, ``APIError``); while a stream is read, their HTTP library's
    own errors come through as they are. ``now`` is the wall clock, for a
    ``Retry-After`` given as a date.
    """
    if isinstance(error, sdk.APITimeoutError):
        return Failure("timeout", detail="the request timed out")
    if isinstance(error, sdk.APIConnectionError):
        return Failure("connection", detail="could not connect to the server")
    library = http_library(sdk)
    if library is not None:
        if isinstance(error, library.TimeoutException):
            return Failure("timeout", detail="the response stream timed out")
        if isinstance(error, library.TransportError):
            return Failure("connection", detail="the connection broke mid-response")
    if not isinstance(error, sdk.APIError):
        return None
    kind, body_message = body_error(getattr(error, "body", None))
    detail = body_message or str(getattr(error, "message", "") or error)
    status = getattr(error, "status_code", None)
    if isinstance(error, sdk.APIStatusError) and isinstance(status, int) and status >= 400:
        response = getattr(error, "response", None)
        return Failure(
            _status_category(status, kind, detail),
            status,
            retry_after(getattr(response, "headers", None), now),
            detail,
        )
    # An error delivered inside a 200 response (a stream error event).
    return Failure(_BODY_CATEGORIES.get(kind or "", "provider_error"), detail=detail)


def http_library(sdk: Any) -> Any | None:
    """The HTTP library module (``httpx`` or ``httpx2``) the SDK's async client is built on."""
    factory = getattr(sdk, "DefaultAsyncHttpxClient", None)
    if factory is None:
        return None
    for klass in factory.__mro__:
        if klass.__name__ == "AsyncClient":
            return importlib.import_module(klass.__module__.split(".")[0])
    return None
