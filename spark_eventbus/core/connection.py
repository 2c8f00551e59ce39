"""Where Redis is: :class:`ConnectionSpec` (picklable) and the one function that builds it from
options or arguments, with the URL and TLS checks. Pure: no redis-py import, so parsing options
stays light; :mod:`.redisio.client` turns a spec into a client where it runs.

Used by the reader and sink options, :class:`~spark_eventbus.AckingBatchWriter`, the CLI
and the pipe job (through the options)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError, redact
from .ids import is_digits

DEFAULT_URL = "redis://localhost:6379/0"
URL_SCHEMES = ("redis://", "rediss://", "unix://")
DEFAULT_FAILOVER_TIMEOUT_MS = 30_000
DEFAULT_WAIT_TIMEOUT_MS = 5_000
MAX_WAIT_TIMEOUT_MS = 50_000  # a WAIT must answer within the client's 60 s socket timeout


@dataclass(frozen=True)
class ConnectionSpec:
    """Where Redis is. Picklable; ``password`` never appears in ``repr`` or messages."""

    url: str
    password: str | None = field(default=None, repr=False)
    # TLS (rediss://): the CA that signed the server's certificate, and for mutual TLS the
    # client's certificate and key (a secret: never in repr or messages).
    tls_ca_cert: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = field(default=None, repr=False)
    # Sentinel: the primary of ``sentinel_master`` is asked of these (host, port) pairs, and
    # ``url`` gives only the scheme (TLS), database, user and password of the data nodes.
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    # How long connection errors and READONLY replies are retried (a promotion, a restart)
    # before the caller gets a retriable error.
    failover_timeout_ms: int = DEFAULT_FAILOVER_TIMEOUT_MS
    # Writes the guarantees rest on wait for this many replicas (WAIT), and with wait_aof for
    # the primary's AOF fsync as well (WAITAOF 1 <wait_replicas>), at most wait_timeout_ms.
    wait_replicas: int = 0
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS
    wait_aof: bool = False
    # How the caller names settings in messages (Spark options, AckingBatchWriter's keyword
    # arguments, the CLI's flags: :func:`spell`); not part of where Redis is.
    style: str = field(default="option", compare=False)
    # Credentials that rotate (docs/security.md): files read at every new connection (their
    # paths are not secrets, their contents are), or "package.module:callable" returning a
    # redis-py CredentialProvider, imported where the client is made.
    password_file: str | None = None
    username_file: str | None = None
    credential_provider: str | None = None
    # Options redis.*: redis-py's own settings of the data nodes' clients, (keyword, value)
    # pairs (option_values.CLIENT_SETTINGS), over the connector's defaults.
    client_settings: tuple[tuple[str, Any], ...] = ()
    # Option readFrom=replica (reads without a consumer group): the client reads replicas —
    # the Sentinel master's, a cluster's (READONLY), or the replica the URL names.
    read_from_replicas: bool = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the cluster nodes this process knows for :attr:`url`
        (:func:`cluster_nodes`): a process that receives the spec (an executor's Python
        worker, a task's partition) can then reach the cluster when the URL's own node is down
        (a master failed over and not back), as this one could."""
        state = dict(self.__dict__)
        state.pop("display", None)  # cached: made again where it is unpickled
        state["_cluster_nodes"] = _CLUSTER_NODES.get(self.url, ())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        remember_cluster_nodes(state["url"], tuple(state.pop("_cluster_nodes", ())))
        self.__dict__.update(state)

    @property
    def rotating(self) -> bool:
        """Whether the credentials may change while a client lives (a file or a provider): a
        refused credential is then retried within ``failoverTimeoutMs`` with fresh ones."""
        return bool(self.password_file or self.username_file or self.credential_provider)

    @property
    def secrets(self) -> tuple[str | None, ...]:
        return (self.password, self.tls_key_file, self.sentinel_password)

    @property
    def waits(self) -> bool:
        """Whether writes wait for replicas or the AOF."""
        return self.wait_replicas > 0 or self.wait_aof

    @cached_property
    def display(self) -> str:
        """Where Redis is, for messages: the URL with any password removed, or the Sentinel
        master name and its sentinels. (Made once: a probe of thousands of streams names the
        server for each.)"""
        where = (f"Sentinel master {self.sentinel_master!r} (sentinels "
                 f"{format_sentinels(self.sentinels)})") if self.sentinels \
            else redact(self.url, self.secrets)
        return f"{where}, read from replicas" if self.read_from_replicas else where


# The nodes of the Redis Cluster each URL names, as this process last saw them (redisio's
# cluster client records them when it is made; a pickled ConnectionSpec carries its URL's
# entry to the process that unpickles it). A client made for a URL found here starts from
# these nodes too, not only from the URL's, and skips the HELLO that asks whether it is a
# cluster.
_CLUSTER_NODES: dict[str, tuple[tuple[str, int], ...]] = {}


def cluster_nodes(url: str) -> tuple[tuple[str, int], ...]:
    """The cluster nodes known in this process for ``url`` (empty: not known to be a
    cluster)."""
    return _CLUSTER_NODES.get(url, ())


def remember_cluster_nodes(url: str, nodes: tuple[tuple[str, int], ...]) -> None:
    """Adds ``nodes`` (host, port) to those known for ``url``, the newest first."""
    if nodes:
        _CLUSTER_NODES[url] = tuple(dict.fromkeys((*nodes, *_CLUSTER_NODES.get(url, ()))))


# The CLI reads the password from here when --password is not given (so that a command printed
# in a message can be pasted as it stands, with no secret in it).
PASSWORD_ENV = "EVENTBUS_PASSWORD"
SENTINEL_PASSWORD_ENV = "EVENTBUS_SENTINEL_PASSWORD"
_URL_CREDENTIALS = re.compile(r"^(\w+://)([^:@/]*):[^@/]*@")


def cli_connection(spec: ConnectionSpec) -> tuple[list[str], list[str]]:
    """The ``eventbus`` CLI's connection flags that reach ``spec``'s Redis, as they can be
    pasted (the URL without its password; TLS files and sentinels are not secrets), and the
    environment variables the command needs for the secrets it cannot print."""
    url = _URL_CREDENTIALS.sub(lambda m: m.group(1) + (m.group(2) + "@" if m.group(2) else ""),
                               spec.url)
    words = ["--url", url]
    for flag, value in (("--tls-ca-cert", spec.tls_ca_cert),
                        ("--tls-cert-file", spec.tls_cert_file),
                        ("--tls-key-file", spec.tls_key_file)):
        if value:
            words += [flag, value]
    if spec.sentinels:
        words += ["--sentinels", format_sentinels(spec.sentinels),
                  "--sentinel-master", str(spec.sentinel_master)]
        if spec.sentinel_username:
            words += ["--sentinel-username", spec.sentinel_username]
    for flag, value in (("--password-file", spec.password_file),
                        ("--username-file", spec.username_file),
                        ("--credential-provider", spec.credential_provider)):
        if value:
            words += [flag, value]
    env = []
    if spec.password or url != spec.url:
        env.append(PASSWORD_ENV)
    if spec.sentinel_password:
        env.append(SENTINEL_PASSWORD_ENV)
    return words, env


def check_url(url: str, password: str | None = None, *, name: str = "option 'url'") -> str:
    """The one URL check (options, AckingBatchWriter, CLI): a redis-py URL scheme."""
    url = url.strip()
    if url.startswith(("redis+sentinel://", "sentinel://", "redis-sentinel://")):
        raise ConfigError(f"{name} = {redact(url, [password])!r} is invalid: Sentinel is not a "
                          "URL scheme here. Give the sentinels in option 'sentinels' "
                          "('host:port,host:port'), the monitored name in option "
                          "'sentinelMaster', and keep 'url' for the data nodes' database and "
                          "credentials (e.g. redis://user@/0, or rediss:// for TLS).")
    if not url.startswith(URL_SCHEMES):
        raise ConfigError(f"{name} = {redact(url, [password])!r} is invalid: use "
                          "redis://host:port/db, rediss://host:port/db for TLS, or "
                          "unix:///path/to/socket.")
    return url


def check_tls(v: Mapping[str, Any]) -> None:
    """TLS files need a ``rediss://`` URL; a client key needs its certificate and back."""
    given = [n for n, a in (("tlsCaCert", "tls_ca_cert"), ("tlsCertFile", "tls_cert_file"),
                            ("tlsSecretKeyFile", "tls_key_file")) if v.get(a)]
    if given and not v["url"].startswith("rediss://"):
        raise ConfigError(f"option '{given[0]}' needs TLS: use a rediss:// URL in option 'url' "
                          "(redis:// connects without TLS).")
    if bool(v.get("tls_cert_file")) != bool(v.get("tls_key_file")):
        raise ConfigError("options 'tlsCertFile' and 'tlsSecretKeyFile' go together (mutual TLS): "
                          "give both the client certificate and its key, or neither.")


def format_sentinels(sentinels: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in sentinels)


def parse_sentinels(raw: str, name: str = "option 'sentinels'") -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (IPv6 as ``[::1]:26379``) into (host, port) pairs."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in raw.split(",")):
        host, sep, port = part.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not part or not sep or not host or not is_digits(port) \
                or not 0 < int(port) < 65536 or any(c.isspace() for c in host):
            raise ConfigError(f"{name} = {raw!r} is invalid: list the sentinels as "
                              "host:port separated by commas, e.g. "
                              "'10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379'.")
        out.append((host, int(port)))
    return tuple(dict.fromkeys(out))


# How a setting is spelled: Spark options (camelCase, in messages as "option 'x'"), keyword
# arguments (snake_case: AckingBatchWriter's, the CLI's parsed arguments), the CLI's flags
# (--kebab-case); derived from the option's name, but for these.
_ODD_SPELLINGS = {"tlsSecretKeyFile": ("tls_key_file", "--tls-key-file")}
_STYLES = ("option", "keyword", "flag")


def spell(setting: str, style: str = "option") -> str:
    """``setting`` (its option name) as ``style`` spells it (``option``: as messages name
    it)."""
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), setting)
    word = (setting, *_ODD_SPELLINGS.get(setting, (snake, "--" + snake.replace("_", "-"))))[
        _STYLES.index(style)]
    return f"option '{word}'" if style == "option" else word


# The connector's defaults of redis-py's client settings for the data nodes (options redis.*
# override them: docs/options.md).
CLIENT_DEFAULTS: dict[str, Any] = {
    "socket_connect_timeout": 5,
    "socket_timeout": 60,
    "socket_keepalive": True,
    "health_check_interval": 30,
    "client_name": "spark-eventbus",
}


# The ranges of the connection's whole-number settings, and why (the option table's parsers and
# connection_spec both read them from here).
RANGES: dict[str, tuple[int, int, str]] = {
    "failoverTimeoutMs": (0, 3_600_000, "it bounds how long a promotion or restart is waited "
                          "out (0: not at all)"),
    "waitReplicas": (0, 100, "it is how many replicas must have each write the guarantees "
                     "rest on; 0 does not wait"),
    "waitTimeoutMs": (1, MAX_WAIT_TIMEOUT_MS, "it bounds how long a write waits for its "
                      "replicas, below the client's 60 s socket timeout"),
}


def _check_range(value: int, setting: str, style: str) -> int:
    lo, hi, fix = RANGES[setting]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{spell(setting, style)} = {value!r} is invalid: expected a whole "
                          f"number from {lo} to {hi}; {fix}.")
    return value


def connection_spec(url: str, password: str | None = None, tls_ca_cert: str | None = None,
                    tls_cert_file: str | None = None, tls_key_file: str | None = None, *,
                    sentinels: str | tuple[tuple[str, int], ...] = (),
                    sentinel_master: str | None = None, sentinel_username: str | None = None,
                    sentinel_password: str | None = None,
                    failover_timeout_ms: int = DEFAULT_FAILOVER_TIMEOUT_MS,
                    wait_replicas: int = 0, wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
                    wait_aof: bool = False, url_name: str | None = None,
                    style: str = "option", password_file: str | None = None,
                    username_file: str | None = None,
                    credential_provider: str | None = None,
                    client_settings: tuple[tuple[str, Any], ...] = ()) -> ConnectionSpec:
    """The :class:`ConnectionSpec` of these settings, checked first (:func:`check_url`,
    :func:`check_tls`, the Sentinel pair, the ranges; ``style`` is how messages name settings:
    ``option`` or ``flag``). Idempotent: options parsed and checked before build
    the same spec again at no risk."""
    check_url(url, password, name=url_name or spell("url", style))
    check_tls({"url": url, "tls_ca_cert": tls_ca_cert, "tls_cert_file": tls_cert_file,
               "tls_key_file": tls_key_file})
    if isinstance(sentinels, str):
        sentinels = parse_sentinels(sentinels, spell("sentinels", style)) \
            if sentinels.strip() else ()
    master = (sentinel_master or "").strip() or None
    if sentinels and master is None:
        raise ConfigError(f"{spell('sentinels', style)} needs {spell('sentinelMaster', style)}: "
                          "the name the sentinels monitor the primary by (their "
                          "'sentinel monitor <name> ...' line).")
    if master is not None and not sentinels:
        raise ConfigError(f"{spell('sentinelMaster', style)} = {master!r} needs "
                          f"{spell('sentinels', style)}: list them as host:port,host:port.")
    if sentinels and url.strip().startswith("unix://"):
        raise ConfigError(f"{spell('url', style)} is a unix socket, which Sentinel cannot "
                          "point at: use redis:// (or rediss://) with the database and "
                          "credentials of the data nodes, e.g. redis://user@/0.")
    _check_range(failover_timeout_ms, "failoverTimeoutMs", style)
    _check_range(wait_replicas, "waitReplicas", style)
    _check_range(wait_timeout_ms, "waitTimeoutMs", style)
    if not isinstance(wait_aof, bool):
        raise ConfigError(f"{spell('waitAof', style)} = {wait_aof!r} is invalid: use true or "
                          "false.")
    password_file, username_file, credential_provider = (
        (v or "").strip() or None for v in (password_file, username_file, credential_provider))
    _check_credentials(url, password, password_file, username_file, credential_provider, style)
    timeout = dict(client_settings).get("socket_timeout")
    if timeout is not None and (wait_replicas or wait_aof) and timeout * 1000 <= wait_timeout_ms:
        raise ConfigError(f"option 'redis.socket_timeout' = {timeout:g} s is not longer than "
                          f"{spell('waitTimeoutMs', style)} = {wait_timeout_ms}: a WAIT for "
                          "replicas would time out at the socket first. Raise it, or lower "
                          f"{spell('waitTimeoutMs', style)}.")
    return ConnectionSpec(url, password, tls_ca_cert, tls_cert_file, tls_key_file,
                          tuple(sentinels), master, sentinel_username or None,
                          sentinel_password or None, failover_timeout_ms, wait_replicas,
                          wait_timeout_ms, wait_aof, style, password_file, username_file,
                          credential_provider, tuple(sorted(client_settings)))


_PROVIDER_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _check_credentials(url: str, password: str | None, password_file: str | None,
                       username_file: str | None, provider: str | None, style: str) -> None:
    """One source of credentials: a password (option or URL), a password file, or a provider
    — and a provider's path spelled ``package.module:callable``."""
    parts = urlsplit(url.strip())
    if provider is not None:
        clash = [spell(n, style) for n, v in (("password", password),
                                             ("passwordFile", password_file),
                                             ("usernameFile", username_file)) if v]
        if parts.username or parts.password:
            clash.append(f"the user or password in {spell('url', style)}")
        if clash:
            raise ConfigError(f"{spell('credentialProvider', style)} gives the credentials, so "
                              f"{' and '.join(clash)} cannot be given with it: leave them out "
                              "(the provider returns the user name too).")
        if not _PROVIDER_PATH.match(provider):
            raise ConfigError(f"{spell('credentialProvider', style)} = {provider!r} is invalid: "
                              "use 'package.module:callable', a callable that returns a redis-py "
                              "CredentialProvider (docs/security.md).")
    if password_file is not None and (password or parts.password):
        raise ConfigError(f"{spell('password', style)} (or a password in {spell('url', style)}) "
                          f"and {spell('passwordFile', style)} cannot both be given: keep the "
                          "file, which is read again at every new connection.")
    if username_file is not None and parts.username:
        raise ConfigError(f"{spell('usernameFile', style)} and the user in "
                          f"{spell('url', style)} cannot both be given: keep one.")
    if username_file is not None and password_file is None:
        raise ConfigError(f"{spell('usernameFile', style)} needs {spell('passwordFile', style)}: "
                          "the user's password is read from a file too.")
