"""Host configuration: TOML loaded into frozen msgspec structs.

Every problem is reported as :class:`HostConfigError` whose message names the
file, the key (a dotted path such as ``profiles.default.model_id``) and the
problem, e.g. ``host.toml: profiles.default.model_id: expected a string, got
an integer``. Unknown keys are rejected, so a typo never silently disables a
setting.

Shape::

    [host]                       # optional
    data_dir = ".subagents"      # relative to the file (LMDB, one machine)
    store = "postgresql://subagents@db.internal:5432/subagents"
                                 # or: a PostgreSQL store shared by several hosts
                                 # (set data_dir or store, not both; keep the
                                 # password in ~/.pgpass or $PGPASSWORD)
    namespace = "default"
    default_profile = "default"
    subagents_dir = "agents"     # optional directory of markdown subagents
    lease_ttl = 30.0             # seconds, at least 0.5; heartbeats every lease_ttl / 3
    max_request_bytes = 1048576
    max_batch = 32
    bind = "127.0.0.1"           # HTTP address; not loopback: refused without an
                                 # operator token ($SUBAGENTS_HOST_TOKEN), warned about
    stream_buffer_events = 256   # live events queued per subscriber before it is cut
    stream_heartbeat = 15.0      # seconds between SSE heartbeat comments
    stream_retry_ms = 3000       # the SSE retry: field sent to clients
    stream_send_timeout = 30.0   # an SSE write blocked this long closes the stream
    http_max_connections = 1024  # open HTTP connections (also kept under the fd limit)
    http_header_timeout = 10.0   # seconds for a request head to arrive
    http_body_timeout = 30.0     # seconds for a request body to arrive
    http_keep_alive_timeout = 5.0
    http_max_header_bytes = 16384
    http_log_interval = 10.0     # at most one log line per interval per kind of refusal
    actor_threads = 4            # threads running every session's supervisor and attempts
    heartbeat_threads = 2        # threads renewing live attempts' leases
    delivery_threads = 2         # threads running completion callbacks
    max_live_attempts = 1024     # background attempts running at once, all sessions;
                                 # one more is refused (HostBusy, retry_after_seconds)
    max_child_histories = 1024   # child conversations kept for continuations, all
                                 # sessions, least recently used evicted (a continuation
                                 # of an evicted agent starts afresh, as after a restart)

    [profiles.NAME]
    model_id = "provider:model"  # e.g. "test:echo", "openai-responses:gpt-5"
    instructions = "..."         # a string or a list of strings
    toolsets = ["filesystem"]
    subagents = ["research"]     # the names this parent exposes
    model_settings = { temperature = 0.2 }
    mcp_servers = ["files"]      # MCP servers whose tools this agent gets

    [mcp_servers.NAME]           # an MCP server (the mcp extra): stdio or HTTP
    command = "uvx"              # stdio: command, args, env, cwd
    args = ["mcp-server-fetch"]
    url = "http://127.0.0.1:9000/mcp"   # or streamable HTTP: url, headers
    timeout_seconds = 30.0       # bounds every exchange; a slow server is a tool error
    tools = ["fetch"]            # optional: only these of its tools

    [subagents.NAME]
    profile = "research"         # required
    description = "..."
    required_tools = ["grep"]
    optional_tools = ["view"]

A child profile never gets nested subagents, whatever its ``subagents`` list
says: the host materializes it with delegation disabled.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from statemachines import SubagentsError

from .._agent._mcp_tools import McpServerConfig
from .._specs._agent_spec import ModelProviderRegistry, default_model_providers

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

DEFAULT_MAX_REQUEST_BYTES = 1 << 20
DEFAULT_MAX_BATCH = 32
LOOPBACK_NAMES = frozenset({"localhost"})


class HostConfigError(SubagentsError):
    """The host configuration is unusable. ``str(err)`` is ``file: key: problem``.

    Fields: ``path`` (the file), ``key`` (dotted, or ``None`` for the whole
    file), ``problem`` and ``fix`` (one line telling the user what to do).
    """

    path: str
    key: str | None
    problem: str
    fix: str

    def __str__(self) -> str:
        return self.message


MIN_LEASE_TTL = 0.5
"""The shortest ``[host] lease_ttl`` accepted, in seconds. Leases are renewed every
``lease_ttl / 3`` (the heartbeat), so a lease is three heartbeats long; at 0.5 s
a heartbeat may run ~170 ms late before the lease lapses (the reliability
harness's SIGSTOP scenario runs at this bound). Shorter leases expire under
ordinary delays (a loaded machine, a GC pause, a slow store write) and every
run would lose its lease."""


def config_error(path: str, key: str | None, problem: str, fix: str) -> HostConfigError:
    where = f"{path}: {key}" if key else path
    return HostConfigError(f"{where}: {problem}", path=path, key=key, problem=problem, fix=fix)


class HostSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[host]``: where data lives and the transport limits.

    ``store`` is a PostgreSQL URL (``postgresql://...``): the host keeps its
    sessions, runs, attempts and events in that database, shared with every
    other host configured with it. ``data_dir`` is the single-machine LMDB
    alternative. The command line's ``--store`` / ``--data-dir`` win over both.
    """

    data_dir: str | None = None
    store: str | None = None
    namespace: str = "default"
    default_profile: str = "default"
    subagents_dir: str | None = None
    lease_ttl: float = 30.0
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_batch: int = DEFAULT_MAX_BATCH
    bind: str = "127.0.0.1"
    stream_buffer_events: int = 256
    stream_heartbeat: float = 15.0
    stream_retry_ms: int = 3000
    stream_send_timeout: float = 30.0
    http_max_connections: int = 1024
    http_header_timeout: float = 10.0
    http_body_timeout: float = 30.0
    http_keep_alive_timeout: float = 5.0
    http_max_header_bytes: int = 16384
    http_log_interval: float = 10.0
    actor_threads: int = 4
    heartbeat_threads: int = 2
    delivery_threads: int = 2
    max_live_attempts: int = 1024
    max_child_histories: int = 1024
    """The host-wide pools every session's supervisor shares (:class:`actors.PoolLimits`):
    the host's thread count is their sum plus the children's loop, whatever the number
    of sessions; an idle session holds no thread. ``max_child_histories`` bounds the
    child conversations kept for continuations across every session."""


class ProfileConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[profiles.NAME]``: one agent the host can run."""

    model_id: str
    instructions: str | list[str] = msgspec.field(default_factory=list)
    toolsets: list[str] = msgspec.field(default_factory=list)
    subagents: list[str] = msgspec.field(default_factory=list)
    model_settings: dict[str, Any] = msgspec.field(default_factory=dict)
    description: str | None = None
    mcp_servers: list[str] = msgspec.field(default_factory=list)
    continuation_profile: str | None = None
    """The profile an automatic continuation of this profile's runs uses (default:
    this one). A coordinator forced to delegate hands its results to a profile that
    answers, so a continuation does not delegate again."""

    def instruction_list(self) -> list[str]:
        if isinstance(self.instructions, str):
            return [self.instructions] if self.instructions else []
        return [text for text in self.instructions if text]


class SubagentEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[subagents.NAME]``: a named child that runs with ``profile``."""

    profile: str
    description: str = ""
    required_tools: list[str] = msgspec.field(default_factory=list)
    optional_tools: list[str] = msgspec.field(default_factory=list)


class _RawConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: HostSection = msgspec.field(default_factory=HostSection)
    profiles: dict[str, Any] = msgspec.field(default_factory=dict)
    subagents: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp_servers: dict[str, Any] = msgspec.field(default_factory=dict)


class HostConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A validated host configuration.

    ``source`` is the file it came from (``"<memory>"`` for
    :func:`parse_host_config` without a path); ``base_dir`` resolves the
    relative paths in it. Markdown subagents from ``host.subagents_dir`` are
    loaded by the service, not here.
    """

    host: HostSection
    profiles: dict[str, ProfileConfig]
    subagents: dict[str, SubagentEntry]
    source: str = "<memory>"
    base_dir: str = "."
    mcp_servers: dict[str, McpServerConfig] = msgspec.field(default_factory=dict)

    def resolve_path(self, value: str) -> Path:
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else Path(self.base_dir) / path

    def data_dir(self) -> Path | None:
        return None if self.host.data_dir is None else self.resolve_path(self.host.data_dir)

    def subagents_dir(self) -> Path | None:
        value = self.host.subagents_dir
        return None if value is None else self.resolve_path(value)

    def child_profiles(self) -> set[str]:
        """Profiles some subagent runs with (their own ``subagents`` are ignored)."""
        return {entry.profile for entry in self.subagents.values()}


def _key_from_path(path: str) -> str | None:
    """msgspec's ``$.profiles.default.model_id`` / ``$.a[0]`` → ``profiles.default.model_id``."""
    if not path or path == "$":
        return None
    key = path[2:] if path.startswith("$.") else path.lstrip("$")
    return key or None


_AT = re.compile(r" - at `(\$[^`]*)`$")


def _validation_error(
    source: str, exc: msgspec.ValidationError, prefix: str | None = None
) -> HostConfigError:
    text = str(exc)
    match = _AT.search(text)
    key = _key_from_path(match.group(1)) if match else None
    if prefix is not None:
        key = (
            prefix
            if key is None
            else f"{prefix}.{key}"
            if not key.startswith("[")
            else prefix + key
        )
    problem = text[: match.start()] if match else text
    problem = problem[0].lower() + problem[1:] if problem else "invalid value"
    if problem.startswith("object contains unknown field"):
        field = problem.split("`")[1] if "`" in problem else "?"
        key = f"{key}.{field}" if key else field
        return config_error(
            source, key, "unknown key", "remove it or check its spelling against examples/host.toml"
        )
    if problem.startswith("object missing required field"):
        field = problem.split("`")[1] if "`" in problem else "?"
        key = f"{key}.{field}" if key else field
        return config_error(source, key, "missing required key", f"add {field} = ...")
    problem = problem.replace("`int`", "an integer").replace("`str`", "a string")
    problem = problem.replace("`float`", "a number").replace("`array`", "a list")
    problem = problem.replace("`object`", "a table").replace("`bool`", "a boolean")
    problem = problem.replace("`str | array`", "a string or a list of strings")
    return config_error(source, key, problem, "fix the value's type (see examples/host.toml)")


def parse_host_config(
    text: str,
    *,
    source: str = "<memory>",
    base_dir: str | os.PathLike[str] = ".",
    providers: ModelProviderRegistry | None = None,
) -> HostConfig:
    """Parse and validate TOML text. Raises :class:`HostConfigError`.

    Model ids are checked against ``providers`` (default: the process-wide
    :func:`~subagents.default_model_providers`).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise config_error(
            source, None, f"not valid TOML: {exc}", "fix the TOML syntax at that line"
        ) from None
    except RecursionError:
        raise config_error(
            source, None, "not valid TOML: nested too deeply", "flatten the nested values"
        ) from None
    except ValueError as exc:  # e.g. an integer longer than Python converts (4300 digits)
        raise config_error(
            source, None, f"not valid TOML: {exc}", "fix the value at that line"
        ) from None
    try:
        raw = msgspec.convert(data, _RawConfig, strict=True)
    except msgspec.ValidationError as exc:
        raise _validation_error(source, exc) from None
    profiles: dict[str, ProfileConfig] = {}
    for name, value in raw.profiles.items():
        try:
            profiles[name] = msgspec.convert(value, ProfileConfig, strict=True)
        except msgspec.ValidationError as exc:
            raise _validation_error(source, exc, f"profiles.{name}") from None
    subagents: dict[str, SubagentEntry] = {}
    for name, value in raw.subagents.items():
        try:
            subagents[name] = msgspec.convert(value, SubagentEntry, strict=True)
        except msgspec.ValidationError as exc:
            raise _validation_error(source, exc, f"subagents.{name}") from None
    servers: dict[str, McpServerConfig] = {}
    for name, value in raw.mcp_servers.items():
        try:
            servers[name] = msgspec.convert(value, McpServerConfig, strict=True)
        except msgspec.ValidationError as exc:
            raise _validation_error(source, exc, f"mcp_servers.{name}") from None
    config = HostConfig(
        host=raw.host,
        profiles=profiles,
        subagents=subagents,
        source=source,
        base_dir=os.fspath(base_dir),
        mcp_servers=servers,
    )
    _check(config, providers or default_model_providers())
    return config


def load_host_config(
    path: str | os.PathLike[str], *, providers: ModelProviderRegistry | None = None
) -> HostConfig:
    """Load ``path``; relative paths inside resolve against its directory."""
    file = Path(path)
    source = os.fspath(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise config_error(
            source, None, "file not found", "pass --config with an existing host TOML file"
        ) from None
    except UnicodeDecodeError:
        raise config_error(source, None, "not UTF-8 text", "save the file as UTF-8") from None
    except OSError as exc:
        raise config_error(
            source, None, f"cannot read: {exc.strerror or exc}", "check the path and permissions"
        ) from None
    return parse_host_config(
        text, source=source, base_dir=file.resolve().parent, providers=providers
    )


def _check(config: HostConfig, providers: ModelProviderRegistry) -> None:
    """Refuse a configuration the host cannot serve: the ``[host]`` keys, then the
    profiles, then the subagents, each refusal a :class:`HostConfigError` naming its key."""
    _check_host(config)
    _check_profiles(config, providers)
    _check_subagents(config)
    _check_mcp_servers(config)


def _check_host(config: HostConfig) -> None:
    src = config.source
    host = config.host
    if not (math.isfinite(host.lease_ttl) and host.lease_ttl >= MIN_LEASE_TTL):
        raise config_error(
            src,
            "host.lease_ttl",
            f"must be a positive number of seconds, at least {MIN_LEASE_TTL:g} (got "
            f"{host.lease_ttl:g}): leases are "
            "renewed every lease_ttl / 3, so a shorter one expires under ordinary delays",
            "e.g. lease_ttl = 30",
        )
    if host.store is not None:
        scheme, sep, _rest = host.store.partition("://")
        if not sep or scheme.lower() not in ("postgresql", "postgres"):
            raise config_error(
                src,
                "host.store",
                "must be a PostgreSQL URL",
                'e.g. store = "postgresql://subagents@127.0.0.1:5432/subagents"',
            )
        if host.data_dir is not None:
            raise config_error(
                src,
                "host.store",
                "host.store and host.data_dir are both set",
                "keep one: store (PostgreSQL, several hosts) or data_dir (LMDB, one machine)",
            )
    if host.max_request_bytes < 1024:
        raise config_error(
            src,
            "host.max_request_bytes",
            "must be at least 1024",
            "e.g. max_request_bytes = 1048576",
        )
    if host.max_batch < 1:
        raise config_error(src, "host.max_batch", "must be at least 1", "e.g. max_batch = 32")
    _check_bounds(src, host)
    if not _NAME.match(host.namespace):
        raise config_error(
            src,
            "host.namespace",
            f"{host.namespace!r} is not a valid name",
            "use letters, digits, '_', '.', '-'",
        )


def _check_profiles(config: HostConfig, providers: ModelProviderRegistry) -> None:
    src = config.source
    if not config.profiles:
        raise config_error(src, "profiles", "no profile defined", "add a [profiles.default] table")
    for name, profile in config.profiles.items():
        key = f"profiles.{name}"
        if not _NAME.match(name):
            raise config_error(
                src, key, "not a valid profile name", "use letters, digits, '_', '.', '-'"
            )
        provider, sep, _model = profile.model_id.partition(":")
        if not sep or not provider:
            raise config_error(
                src,
                f"{key}.model_id",
                f"{profile.model_id!r} is not 'provider:model'",
                'e.g. model_id = "test:echo" or "openai-responses:gpt-5"',
            )
        if provider not in providers:
            known = ", ".join(providers.names())
            raise config_error(
                src,
                f"{key}.model_id",
                f"unknown model provider {provider!r} (known: {known})",
                "use one of the known providers",
            )
        for index, sub in enumerate(profile.subagents):
            if not _NAME.match(sub):
                raise config_error(
                    src,
                    f"{key}.subagents[{index}]",
                    f"{sub!r} is not a valid name",
                    "use a subagent name",
                )
        if len(set(profile.subagents)) != len(profile.subagents):
            raise config_error(
                src, f"{key}.subagents", "lists a name twice", "list each subagent once"
            )


def _check_mcp_servers(config: HostConfig) -> None:
    """Each ``[mcp_servers.NAME]`` is a stdio command or a URL, with a usable timeout;
    each profile names only configured servers."""
    src = config.source
    for name, server in config.mcp_servers.items():
        key = f"mcp_servers.{name}"
        if (server.command is None) == (server.url is None):
            raise config_error(
                src, key, "needs command (stdio) or url (HTTP), not both", "set one of them"
            )
        if not (math.isfinite(server.timeout_seconds) and server.timeout_seconds > 0):
            raise config_error(
                src, f"{key}.timeout_seconds", "must be a positive number", "e.g. 30.0"
            )
    for name, profile in config.profiles.items():
        for index, server_name in enumerate(profile.mcp_servers):
            if server_name not in config.mcp_servers:
                raise config_error(
                    src,
                    f"profiles.{name}.mcp_servers[{index}]",
                    f"unknown MCP server {server_name!r}",
                    f"add an [mcp_servers.{server_name}] table",
                )


def _check_subagents(config: HostConfig) -> None:
    src = config.source
    for name, entry in config.subagents.items():
        key = f"subagents.{name}"
        if not _NAME.match(name):
            raise config_error(
                src, key, "not a valid subagent name", "use letters, digits, '_', '.', '-'"
            )
        if entry.profile not in config.profiles:
            known = ", ".join(sorted(config.profiles))
            raise config_error(
                src,
                f"{key}.profile",
                f"unknown profile {entry.profile!r} (profiles: {known})",
                f"add [profiles.{entry.profile}] or name an existing profile",
            )
    for name, profile in config.profiles.items():
        target = profile.continuation_profile
        if target is not None and target not in config.profiles:
            raise config_error(
                src,
                f"profiles.{name}.continuation_profile",
                f"unknown profile {target!r}",
                "name a profile defined under [profiles]",
            )
    if (
        config.host.default_profile not in config.profiles
        and config.host.default_profile != "default"
    ):
        raise config_error(
            src,
            "host.default_profile",
            f"unknown profile {config.host.default_profile!r}",
            "name a profile defined under [profiles]",
        )
    # Names a profile exposes must be configured here, unless a markdown
    # directory may provide them (checked when the service loads it).
    if config.subagents_dir() is None:
        for name, profile in config.profiles.items():
            for index, sub in enumerate(profile.subagents):
                if sub not in config.subagents:
                    raise config_error(
                        src,
                        f"profiles.{name}.subagents[{index}]",
                        f"unknown subagent {sub!r}",
                        f"add a [subagents.{sub}] table or set host.subagents_dir",
                    )


_POSITIVE_SECONDS = (
    "stream_heartbeat",
    "stream_send_timeout",
    "http_header_timeout",
    "http_body_timeout",
    "http_keep_alive_timeout",
    "http_log_interval",
)
_INT_RANGES = {
    "stream_buffer_events": (1, 10_000),  # under the 10,000 events one subscribe replays
    "stream_retry_ms": (0, 86_400_000),
    "http_max_connections": (1, 1_000_000),
    "http_max_header_bytes": (1024, 1 << 20),
    "actor_threads": (1, 256),
    "heartbeat_threads": (1, 64),
    "delivery_threads": (1, 64),
    "max_live_attempts": (1, 1_000_000),
    "max_child_histories": (0, 1_000_000),
}


def _check_bounds(src: str, host: HostSection) -> None:
    """The stream and HTTP bounds: positive finite seconds, integers in range, a bind address."""
    for name in _POSITIVE_SECONDS:
        value = getattr(host, name)
        if not (math.isfinite(value) and 0 < value <= 86_400):
            raise config_error(
                src,
                f"host.{name}",
                "must be a positive number of seconds, at most 86400",
                f"e.g. {name} = {getattr(HostSection(), name)}",
            )
    for name, (low, high) in _INT_RANGES.items():
        value = getattr(host, name)
        if not low <= value <= high:
            raise config_error(
                src,
                f"host.{name}",
                f"must be in {low}..{high}",
                f"e.g. {name} = {getattr(HostSection(), name)}",
            )
    try:
        is_loopback(host.bind)
    except ValueError:
        raise config_error(
            src,
            "host.bind",
            f"{host.bind[:100]!r} is not an IP address",
            'e.g. bind = "127.0.0.1" (or "0.0.0.0", "::1")',
        ) from None


def is_loopback(address: str) -> bool:
    """Whether ``address`` (an IPv4/IPv6 literal or ``localhost``) is a loopback address.

    Raises ``ValueError`` for anything else (host names are not resolved).
    """
    if address in LOOPBACK_NAMES:
        return True
    return ipaddress.ip_address(address).is_loopback


def resolve_bind(config: HostConfig, override: str | None, *, operator_token: bool) -> str:
    """The HTTP bind address: ``override`` (the CLI's ``--host``) or ``host.bind``.

    A non-loopback address is refused (:class:`HostConfigError`, key ``host.bind``)
    unless the operator supplied the bearer token (``operator_token``: e.g.
    ``$SUBAGENTS_HOST_TOKEN``), since a generated token would have to travel to
    remote clients some other way. The caller warns when it is allowed.
    """
    address = config.host.bind if override is None else override
    source = config.source if override is None else "--host"
    try:
        loopback = is_loopback(address)
    except ValueError:
        raise config_error(
            source,
            "host.bind",
            f"{address[:100]!r} is not an IP address",
            'e.g. bind = "127.0.0.1" (or "0.0.0.0", "::1")',
        ) from None
    if not loopback and not operator_token:
        raise config_error(
            source,
            "host.bind",
            f"binding {address} (not loopback) needs an operator token",
            "set SUBAGENTS_HOST_TOKEN to a secret of your own, or bind 127.0.0.1",
        )
    return address


def default_host_config() -> HostConfig:
    """An offline configuration: profile ``default`` on ``test:echo``, no subagents."""
    return parse_host_config('[profiles.default]\nmodel_id = "test:echo"\n', source="<default>")
