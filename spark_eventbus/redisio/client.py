"""Redis clients: the one place they are made. Built from a picklable :class:`ConnectionSpec`,
cached per process, retried with capped exponential backoff and jitter (redis-py ``Retry``).

A redis client does not pickle, so Spark-side objects carry a :class:`ConnectionSpec` (plain
strings) and call :func:`client` where they run; each Python process keeps one client per spec.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, LoadBalancingStrategy, RedisCluster
from redis.connection import SSLConnection, parse_url
from redis.credentials import StreamingCredentialProvider
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from ..core.connection import (
    CLIENT_DEFAULTS,
    ConnectionSpec,
    cluster_nodes,
    format_sentinels,
    remember_cluster_nodes,
    spell,
)
from ..errors import ConfigError, EventBusConnectionError, redact
from .base import Redis
from .boundary import translate
from .credentials import provider_for, url_user
from .retry import RETRY_ON, WindowRetry, cluster_in_flux, ttl_exhausted
from .wire import REPLICA_MAP_LACKING_SECONDS, read_slot_map

log = logging.getLogger("spark_eventbus")

# The cluster client's own immediate tries (it re-reads the slot map between them); the
# waiting between tries is the client's window (``failoverTimeoutMs``), :class:`_Cluster`.
_RETRIES = 1


def _driver_info() -> dict[str, Any]:
    """redis-py >= 8 looks its own version up in the installed packages' metadata for every
    new connection unless told (a scan of ``sys.path``: ~0.1 s in a Spark Python worker, whose
    path is long); tell it once."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py < 8: nothing to tell
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


_DRIVER_INFO = _driver_info()


def _node_kwargs(spec: ConnectionSpec) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        **_DRIVER_INFO,
        **CLIENT_DEFAULTS,
        # Pinned: reply shapes (XRANGE parsed raw on executors) must not change with the
        # redis-py version's default protocol. RESP3 needs Redis >= 6.0.
        "protocol": 3,
    }
    kwargs.update(spec.client_settings)  # options redis.*: redis-py's names, over ours
    if spec.password:
        kwargs["password"] = spec.password
    provider = provider_for(spec)
    if provider is not None:  # a file or a provider: asked at every new connection
        kwargs["credential_provider"] = provider
    for option, value in (("ssl_ca_certs", spec.tls_ca_cert), ("ssl_certfile", spec.tls_cert_file),
                          ("ssl_keyfile", spec.tls_key_file)):
        if value:
            kwargs[option] = value
    return kwargs


def _retry(spec: ConnectionSpec) -> Retry:
    return WindowRetry(spec.failover_timeout_ms / 1000, retry_auth=spec.rotating)


def _url(spec: ConnectionSpec) -> str:
    """The URL clients are made from: without its user when the credentials come from a file
    or a provider (which give the user; redis-py takes one or the other)."""
    return url_user(spec.url)[0] if spec.rotating else spec.url


class _Cluster(RedisCluster):
    """redis-py's cluster client, its commands retried within ``failoverTimeoutMs`` like a
    single node's: while the cluster is changing hands (:func:`.retry.cluster_in_flux`: a master
    failed and its replica not yet promoted, a slot on the move), with backoff, the slot map
    read again between tries, until the window has passed since the first failure.

    redis-py's own loop stays underneath: it follows ``MOVED``/``ASK`` and retries ``TRYAGAIN``
    on each hop of the request TTL (48 hops here, not 16: a slot split mid-reshard is often
    healed within them), and its count-based tries (:data:`_RETRIES`, no sleep between them)
    are one immediate retry after it re-read the slot map. ``window``: the time window, also
    used by :func:`.wire.pipeline`'s per-node path."""

    RedisClusterRequestTTL = 48
    window: WindowRetry | None = None  # set once made (redis-py runs commands while making it)
    # option readFrom=replica: :func:`.wire.pipeline` reads replicas (.wire.replica_or_master)
    reads_replicas = False
    map_read_at = 0.0  # when its slot map was last read
    # a slot without a replica: the map read again when older than this (.wire.replica_or_master)
    lacking_wait = REPLICA_MAP_LACKING_SECONDS
    read_masters: set[str]  # the masters read for want of a replica (each said once)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        # a node named by the caller: no re-routing, so nothing to wait for
        if self.window is None or kwargs.get("target_nodes") is not None:
            return super().execute_command(*args, **kwargs)
        return self.window.call_with_retry(
            lambda: RedisCluster.execute_command(self, *args, **kwargs), self.after_failure)

    def after_failure(self, error: BaseException) -> None:
        """Before the next try: read the slot map again (a promotion shows there), unless the
        error was a slot split that only needs time (``TRYAGAIN``)."""
        if not (isinstance(error, redis.exceptions.TryAgainError) or ttl_exhausted(error)):
            read_slot_map(self)


def _cluster_client(spec: ConnectionSpec) -> _Cluster:
    inner = Retry(ExponentialWithJitterBackoff(cap=2.0, base=0.05), _RETRIES)
    replicas: dict[str, Any] = {}
    if spec.read_from_replicas:  # connections in READONLY mode, reads sent to replicas
        replicas["load_balancing_strategy"] = LoadBalancingStrategy.ROUND_ROBIN_REPLICAS
    # every node this process knows for the URL (maybe from the process that sent the spec:
    # core.connection.cluster_nodes), so that the URL's own node being down is no obstacle
    known = [ClusterNode(host, port) for host, port in cluster_nodes(spec.url)]
    c: _Cluster = _Cluster.from_url(  # type: ignore[assignment]
        _url(spec), retry=inner, startup_nodes=known, **_node_kwargs(spec), **replicas)
    remember_cluster_nodes(spec.url, tuple((n.host, int(n.port)) for n in c.get_nodes()))
    c.reads_replicas = spec.read_from_replicas
    c.map_read_at = time.monotonic()  # readFrom=replica: wire.fresh_replica_map
    c.read_masters = set()
    window = WindowRetry(spec.failover_timeout_ms / 1000, (
        redis.RedisError, redis.exceptions.RedisClusterException), cluster_in_flux,
        retry_auth=spec.rotating)
    window.answered = True  # the cluster did: a master being failed over is waited for
    c.window = window
    return c


def _hello(r: redis.Redis, field: str) -> str | None:
    """A field of ``HELLO 3``'s reply (every user may run HELLO: clients authenticate with it)."""
    hello = r.execute_command("HELLO", "3")
    value = hello.get(field.encode(), hello.get(field)) if isinstance(hello, dict) else None
    return value.decode() if isinstance(value, bytes) else value


def is_cluster_node(r: redis.Redis) -> bool:
    """Whether ``r`` talks to a Redis Cluster node: the ``mode`` field of ``HELLO 3``."""
    return _hello(r, "mode") == "cluster"


def _check_replica(node: redis.Redis, spec: ConnectionSpec) -> None:
    """readFrom=replica with the URL of one node: that node must be a replica (``HELLO``'s
    ``role``), or the option would read the primary it is meant to spare."""
    role = _hello(node, "role")
    if role not in ("replica", "slave"):
        raise ConfigError(
            f"{spell('readFrom', spec.style)} = 'replica', but "
            f"{redact(spec.url, spec.secrets)} is a {role}: "
            "give the URL of one of its replicas, or its sentinels (options 'sentinels' and "
            "'sentinelMaster': their replicas are read), or any node of a cluster (its "
            "replicas are read).")


class _AuthRetry:
    """A pool whose ``get_connection`` (which connects and authenticates a new connection
    outside the command's retry) is retried within the window when the credentials rotate: a
    refused or unavailable credential on a new connection asks again (a file being rewritten,
    a token service's hiccup). Only those errors: a server that is down is already retried
    inside ``connect()``."""

    connection_kwargs: dict[str, Any]

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        retry = self.connection_kwargs.get("retry")
        get = super().get_connection  # type: ignore[misc]
        if not (isinstance(retry, WindowRetry) and retry.retry_auth):
            return get(*args, **kwargs)
        return retry.call_with_retry(lambda: get(*args, **kwargs), lambda _error: None,
                                     lambda e: isinstance(e, redis.AuthenticationError))


class _Pool(_AuthRetry, redis.ConnectionPool):
    pass


class _SentinelPool(_AuthRetry, SentinelConnectionPool):
    pass


class _SentinelConnection(SentinelManagedConnection):
    """Asks the sentinels for the primary on every socket connect. redis-py's own asks in
    ``connect()``, but ``send_packed_command`` reconnects a broken connection through
    ``connect_check_health`` (redis-py >= 7), to the old address: a retry after a broken
    connection (a command in flight when the primary died) would spend the whole failover
    window there. Both are public methods; a redis-py without ``connect_check_health``
    reconnects through ``connect()``, which asks."""

    def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
        if self.connection_pool.is_master and not getattr(self, "is_connected", False):
            self.host, self.port = self.connection_pool.get_master_address()
        return super().connect_check_health(*args, **kwargs)


class _SentinelSSLConnection(_SentinelConnection, SSLConnection):
    pass


def _sentinel_client(spec: ConnectionSpec) -> redis.Redis:
    """The primary of ``spec.sentinel_master``, as the sentinels say (asked again on every new
    connection, and after a READONLY reply: redis-py's ``SentinelConnectionPool``)."""
    url = parse_url(spec.url)
    tls = spec.url.startswith("rediss://")
    node = _node_kwargs(spec)
    node.update({k: url[k] for k in ("db", "username", "password") if url.get(k) is not None
                 and not (spec.rotating and k != "db")})
    if spec.password:
        node["password"] = spec.password
    # Sentinels: their own credentials, the same TLS files; RESP2 (SENTINEL replies).
    sentinel_kwargs: dict[str, Any] = {"socket_connect_timeout": 2, "socket_timeout": 5,
                                       "client_name": "spark-eventbus", **_DRIVER_INFO}
    if spec.sentinel_username:
        sentinel_kwargs["username"] = spec.sentinel_username
    if spec.sentinel_password:
        sentinel_kwargs["password"] = spec.sentinel_password
    if tls:
        sentinel_kwargs["ssl"] = True
        sentinel_kwargs.update({k: v for k, v in node.items() if k.startswith("ssl_")})
    sentinel = Sentinel(list(spec.sentinels), sentinel_kwargs=sentinel_kwargs)
    _find_master(spec, sentinel)
    if spec.read_from_replicas:
        _check_replicas_named(spec, sentinel)
    retry = WindowRetry(spec.failover_timeout_ms / 1000, retry_auth=spec.rotating)
    retry.answered = True  # the sentinels did: a primary being failed over is waited for
    assert spec.sentinel_master is not None
    # readFrom=replica: the master's replicas, in turn (its primary when it has none)
    made = sentinel.slave_for if spec.read_from_replicas else sentinel.master_for
    primary = made(
        spec.sentinel_master, redis_class=redis.Redis, connection_pool_class=_SentinelPool,
        retry=retry, retry_on_error=list(RETRY_ON),
        connection_class=_SentinelSSLConnection if tls else _SentinelConnection, **node)
    provider = node.get("credential_provider")
    if isinstance(provider, StreamingCredentialProvider):  # as redis-py does for its own pools
        provider.on_next(primary.connection_pool.re_auth_callback)
    return primary


def _check_replicas_named(spec: ConnectionSpec, sentinel: Sentinel) -> None:
    """readFrom=replica through Sentinel: redis-py asks the sentinels for the master's replicas
    (``SENTINEL SLAVES``) at every new connection, and connects to the primary when none
    answers with one. A sentinel user not allowed to ask is a configuration error (every read
    would go to the primary, unsaid); no replica up is said in a warning."""
    denied: list[str] = []
    for (host, port), s in zip(spec.sentinels, sentinel.sentinels, strict=True):
        try:
            replicas = s.sentinel_slaves(spec.sentinel_master)
        except redis.exceptions.NoPermissionError:
            denied.append(f"{host}:{port}")
            continue
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            continue
        if sentinel.filter_slaves(replicas):
            return
    if denied:
        raise ConfigError(
            f"{spell('readFrom', spec.style)} = 'replica', but the sentinel(s) at "
            f"{', '.join(denied)} refused this user SENTINEL SLAVES (NOPERM), which names the "
            "master's replicas: every read would go to the primary. Add +sentinel|slaves to "
            "the sentinels' ACL rule for the user "
            f"({spell('sentinelUsername', spec.style)}; docs/high-availability.md, ACL), or "
            f"read the primary ({spell('readFrom', spec.style)} = 'primary').")
    log.warning("spark-eventbus: readFrom=replica: the sentinels name no replica of %r that is "
                "up; its primary is read until they do.", spec.sentinel_master)


def _find_master(spec: ConnectionSpec, sentinel: Sentinel) -> None:
    """Before the first connection: some sentinel answers and knows ``sentinelMaster`` (a
    master that is down or being failed over is the client's to wait for, within
    ``failoverTimeoutMs``). Clear errors otherwise, listing the sentinels tried."""
    tried: list[str] = []
    known: set[str] = set()
    for (host, port), s in zip(spec.sentinels, sentinel.sentinels, strict=True):
        try:
            masters = s.sentinel_masters()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            tried.append(f"{host}:{port} ({type(exc).__name__}: {exc})")
            continue
        except redis.ResponseError as exc:
            tried.append(f"{host}:{port} (refused: {exc})")
            continue
        if spec.sentinel_master in masters:
            return
        known.update(masters)
    if known or len(tried) < len(spec.sentinels):
        raise ConfigError(
            f"{spell('sentinelMaster', spec.style)} = {spec.sentinel_master!r}: no sentinel of "
            f"{format_sentinels(spec.sentinels)} monitors a master by that name (they monitor: "
            f"{', '.join(sorted(known)) or 'none'}). Use the name of their "
            "'sentinel monitor <name> ...' line.")
    raise EventBusConnectionError(
        f"none of the sentinels in {spell('sentinels', spec.style)} answered: "
        f"{'; '.join(tried)}. Check the addresses, that the sentinels run, and "
        f"{spell('sentinelUsername', spec.style)}/{spell('sentinelPassword', spec.style)} if "
        "they require auth.")


def new_client(spec: ConnectionSpec) -> Redis:
    """A fresh client (bytes replies, hiredis when installed, retries with backoff within
    ``failoverTimeoutMs``): the Sentinel master's when ``spec.sentinels`` are given; a
    :class:`redis.cluster.RedisCluster` when ``spec.url`` names any node of a cluster (it then
    discovers the others and follows MOVED/ASK), else a single-node :class:`redis.Redis`."""
    if spec.sentinels:
        return _sentinel_client(spec)
    if cluster_nodes(spec.url):  # known to be a cluster, maybe with its URL's node down
        return _cluster_client(spec)
    kwargs = _node_kwargs(spec)
    # Redis.from_url, but telling the client its credential provider too: a streaming one is
    # then subscribed to, and its new credentials re-authenticate the pool's connections
    # (redis-py does so only for a provider the client itself is given)
    node = redis.Redis(connection_pool=_Pool.from_url(
        _url(spec), retry=_retry(spec), retry_on_error=list(RETRY_ON), **kwargs),
        credential_provider=kwargs.get("credential_provider"))
    try:
        cluster = not spec.url.startswith("unix://") and is_cluster_node(node)
        if not cluster and spec.read_from_replicas:
            _check_replica(node, spec)
    except (redis.RedisError, ConfigError) as exc:
        node.close()
        node.connection_pool.disconnect()
        if isinstance(exc, ConfigError):
            raise
        raise translate(exc, f"connecting to {spec.display}", spec.secrets, spec.style) from exc
    if not cluster:
        return node
    node.close()
    node.connection_pool.disconnect()  # the pool is the client's own, but not auto-closed
    return _cluster_client(spec)


def is_cluster(r: Redis) -> bool:
    return isinstance(r, RedisCluster)


_clients: dict[ConnectionSpec, Redis] = {}
_lock = threading.Lock()


def client(spec: ConnectionSpec) -> Redis:
    """The cached client of this process for ``spec``."""
    with _lock:
        c = _clients.get(spec)
        if c is None:
            c = _clients[spec] = new_client(spec)
        return c
