"""The one boundary where redis-py errors become :mod:`spark_eventbus.errors`.

Use ``with redis_errors("claiming new entries of 'orders'", spec): ...``; every message names
what was being done and passes through :func:`~spark_eventbus.errors.redact`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import redis

from ..core.connection import ConnectionSpec, spell
from ..errors import (
    ConfigError,
    EventBusConnectionError,
    EventBusError,
    NotAStreamError,
    RedisCommandError,
    redact,
)
from .credentials import CredentialsUnavailable
from .retry import CLUSTER_UNAVAILABLE
from .scripts import command_at

_NOPERM_COMMAND = re.compile(r"run the '([^']+)' command")
_IN_SCRIPT = re.compile(r"script: ([0-9a-f]{40}), on @user_script:(\d+)")


def _is_permission_error(exc: BaseException) -> bool:
    text = str(exc)
    return (isinstance(exc, redis.exceptions.NoPermissionError) or "NOPERM" in text
            or "The user executing the script can't" in text  # Redis 7, inside a script
            or "ACL failure in script" in text)  # Valkey, inside a script


def _permission_message(text: str, what: str, detail: str) -> str:
    """A missing ACL permission: name it and the rule to add."""
    command = None
    if found := _NOPERM_COMMAND.search(text):
        command = found.group(1)
    elif found := _IN_SCRIPT.search(text):  # Redis names only the script and its line
        command = command_at(found.group(1), int(found.group(2)))
    if command and "access" not in text:
        missing = f"run the command '{command}' (add +{command} to the user's rule)"
    elif "key" in text.lower():
        missing = ("use a key this role reads or writes (add its key pattern to the user's "
                   "rule: ~<stream> and ~{<stream>}:eventbus:*)")
    else:
        missing = "run a command of this role"
    return (f"the Redis ACL user may not {missing} while {what} ({detail}). Give the user "
            "the rule of its role: `eventbus acl-rule --role <role> --stream <stream>` prints "
            "it (docs/security.md: ACL rules).")


def _is_tls_failure(exc: BaseException) -> bool:
    text = str(exc)
    return (isinstance(exc.__cause__ or exc.__context__, ssl.SSLError)
            or "CERTIFICATE_VERIFY_FAILED" in text or ("SSL" in text and "certificate" in text)
            or "TLSV1_ALERT" in text or "tlsv1 alert" in text.lower())


def translate(exc: BaseException, what: str, secrets: Iterable[str | None] = (),
              style: str = "option") -> EventBusError:
    """Map a redis-py error raised while doing ``what`` to an :class:`EventBusError`; settings
    are named as ``style`` names them (:func:`spark_eventbus.core.connection.spell`: Spark options,
    keyword arguments, the CLI's flags).

    Use as ``raise translate(exc, "claiming entries of 'orders'", secrets) from exc``.
    """
    secrets = list(secrets)

    def name(setting: str) -> str:
        return spell(setting, style)
    where = "from this machine" if style == "flag" else "from the driver and every executor"

    detail = redact(f"{type(exc).__name__}: {exc}", secrets)
    what = redact(what, secrets)
    if isinstance(exc, EventBusError):
        return exc
    if _is_permission_error(exc):
        return ConfigError(_permission_message(str(exc), what, detail))
    if isinstance(exc, CredentialsUnavailable):
        return ConfigError(f"no credentials for a new connection while {what}, retried for "
                           f"{name('failoverTimeoutMs')}: {exc}")
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError):
        return ConfigError(
            f"Redis refused the credentials while {what} ({detail}); check the user of "
            f"{name('url')} and {name('password')} (or what {name('passwordFile')}, "
            f"{name('usernameFile')} or {name('credentialProvider')} give: those are retried "
            f"with fresh credentials for {name('failoverTimeoutMs')} first)."
        )
    if isinstance(exc, CLUSTER_UNAVAILABLE):
        return EventBusConnectionError(
            f"the Redis Cluster could not serve a request while {what} ({detail}): a failover "
            "or resharding is in progress, or a master is down; retry when the cluster is "
            "healthy (redis-cli --cluster check).")
    if isinstance(exc, redis.ConnectionError) and _is_tls_failure(exc):
        return ConfigError(
            f"the TLS handshake with Redis failed while {what} ({detail}): the server's "
            f"certificate is not trusted, or does not name the host in {name('url')}. Give the "
            f"CA that signed it with {name('tlsCaCert')} (or ssl_ca_certs=… in a rediss:// "
            "URL); for a server that asks for client certificates, add "
            f"{name('tlsCertFile')} and {name('tlsSecretKeyFile')}.")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return EventBusConnectionError(
            f"Redis did not answer while {what} ({detail}), retried for "
            f"{name('failoverTimeoutMs')}; check that the server at {name('url')} (or the "
            f"primary the {name('sentinels')} name) is running and reachable {where}."
        )
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return EventBusConnectionError(
            f"the Redis node answered as a read-only replica while {what} ({detail}): a "
            f"failover demoted it, or {name('url')} names a replica. Nothing was written. "
            f"Point {name('url')} at the primary (a managed service's primary endpoint follows "
            "failovers); a restart from the checkpoint carries on where the query stopped.")
    if isinstance(exc, redis.ResponseError):
        text = str(exc)
        if text.startswith("NOREPLICAS"):
            return EventBusConnectionError(
                f"the Redis primary refused a write while {what} ({detail}): its "
                "min-replicas-to-write setting wants more replicas in sync than it has now. "
                "Nothing was written; retry once the replicas are back (INFO replication).")
        if text.startswith("WRONGTYPE"):
            return NotAStreamError(f"{what}: the key holds a non-stream value ({detail}).")
        if text.startswith("NOGROUP"):
            return RedisCommandError(
                f"{what}: the consumer group or stream no longer exists ({detail}); it was "
                f"destroyed or deleted while the query ran. {GROUP_GONE_FIX}"
            )
        return RedisCommandError(f"Redis refused a command while {what} ({detail}).")
    return EventBusError(f"unexpected error while {what} ({detail}).")


GROUP_GONE_FIX = (
    "Restarting the query recreates the group at option 'startingPosition' ('latest' skips "
    "the entries added meanwhile, 'earliest' delivers the whole stream again); to resume "
    "exactly, first recreate it at the last ID your output has: XGROUP CREATE <stream> "
    "<group> <id>.")


@contextmanager
def redis_errors(what: str, spec: ConnectionSpec) -> Iterator[None]:
    """Translate redis-py errors raised inside the block; ``what`` says what was being done
    (``at <url>``, password removed, is appended)."""
    try:
        yield
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        # RedisClusterException: the cluster client's own errors (SlotNotCoveredError, no
        # node for a command), which do not derive from RedisError
        raise translate(exc, f"{what} at {spec.display}", spec.secrets, spec.style) from exc
