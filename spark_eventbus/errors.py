"""Errors raised by spark-eventbus.

The whole tree::

    EventBusError                 base; ``retriable`` says whether trying again may succeed
    ├── ConfigError               an option or argument is invalid (also a ``ValueError``)
    ├── EventBusConnectionError   Redis did not answer (retriable)
    │   └── ReplicationError      fewer replicas (or no AOF fsync) confirmed a write within
    │       │                     waitTimeoutMs (waitReplicas, waitAof; retriable)
    │       └── ReplicasShort     the writes are on the primary, fewer replicas have them
    │           └── ReplicasMissing  fewer replicas are online than waitReplicas asks
    ├── NotAStreamError           a key exists but is not a stream; it is never overwritten
    ├── DataLossError             entries were trimmed, deleted or lost in a failover before
    │                             they were read
    ├── EntryDecodeError          an entry could not become a row (names stream and entry ID)
    ├── RedisCommandError         Redis refused a command (translated ``redis.ResponseError``)
    └── UnwritableRowError        the sink got a row it cannot write and has no deadLetterStream

A credential file or provider that cannot give credentials is retried within
``failoverTimeoutMs`` and then reported as a :class:`ConfigError`. redis-py errors are
translated at one boundary, :mod:`spark_eventbus.redisio.boundary`, with
``raise ... from exc``; every message passes through :func:`redact` so a password never reaches a
message or a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "DataLossError",
    "EntryDecodeError",
    "EventBusConnectionError",
    "EventBusError",
    "NotAStreamError",
    "RedisCommandError",
    "ReplicasMissing",
    "ReplicasShort",
    "ReplicationError",
    "UnwritableRowError",
    "printable",
    "redact",
]


class EventBusError(Exception):
    """Base of every spark-eventbus error. ``retriable`` is True when a retry may succeed."""

    retriable: bool = False


class ConfigError(EventBusError, ValueError):
    """An option has an invalid value; the message names the option, the value and the fix."""


class EventBusConnectionError(EventBusError):
    """Redis could not be reached (after redis-py's own retries)."""

    retriable = True


class ReplicationError(EventBusConnectionError):
    """Fewer replicas (or no AOF fsync) confirmed a write within ``waitTimeoutMs``. Retriable:
    the writes it guards are idempotent, so the task may run again."""


class ReplicasShort(ReplicationError):
    """Fewer replicas than ``waitReplicas`` acknowledged the barrier in ``waitTimeoutMs``
    (the writes are on the primary). Not to be confused with the writes missing from the
    primary, a plain :class:`ReplicationError` that is never waited out."""

    def __init__(self, message: str, online: int | None = None) -> None:
        super().__init__(message)
        self.online = online


class ReplicasMissing(ReplicasShort):
    """:class:`ReplicasShort` where the primary has fewer replicas *online* than
    ``waitReplicas`` asks (a failover's aftermath: the promoted replica has none until its old
    master rejoins; a replica gone), not replicas that are online but slow. Waited out within
    ``failoverTimeoutMs`` by :func:`.redisio.durability.wait_for_writes` before it is raised —
    and once one was, the same call waits out a plain shortfall too: a replica that just came
    back counts as online once its snapshot is sent, before it has loaded it and acknowledged
    anything."""


class NotAStreamError(EventBusError):
    """A key exists but holds another type; spark-eventbus refuses to touch it."""


class DataLossError(EventBusError):
    """Entries were trimmed, deleted, or lost with a failed-over primary before this query read
    them (see ``failOnDataLoss``, ``eventbus group accept-loss`` and docs/data-loss.md)."""


class EntryDecodeError(EventBusError):
    """An entry could not be turned into a row for a reason that is not its payload's (a
    payload that does not parse is delivered with its ``error``). The message names the stream
    and the entry ID and says how to move past it."""


class RedisCommandError(EventBusError):
    """Redis answered a command with an error."""


class UnwritableRowError(EventBusError):
    """A row cannot become a stream entry (null/empty fields, too large, a value JSON cannot
    hold) and the sink has no ``deadLetterStream``; the message names the row, column and rule."""


_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^:@/\s]*):([^@/\s]+)@")


# URL query options of redis-py that hold secrets (a TLS key path or its password).
_URL_SECRET_QUERY = re.compile(r"((?:ssl_keyfile|ssl_password|password)=)[^&\s'\"]+")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Remove secrets: the ``user:password@`` part of URLs, secret URL query options
    (``password=``, ``ssl_keyfile=``, ``ssl_password=``) and every literal secret given."""
    text = _URL_PASSWORD.sub(r"\1://\2:***@", text)
    text = _URL_SECRET_QUERY.sub(r"\1***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def printable(text: str) -> str:
    """``text`` with lone surrogates as ``\\udXXX`` escapes: safe to put in an Arrow string, a
    Redis field or a log line. Messages that quote input (a reason, a JSON path) pass through
    here, so no message can fail to encode."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")
