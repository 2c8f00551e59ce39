"""Redis clients: the one place they are made. Built from a picklable :class:`ConnectionSpec`,
cached per process, retried with capped exponential backoff and jitter (redis-py ``Retry``).

A redis client does not pickle, so Spark-side objects carry a :class:`ConnectionSpec` (plain
strings) and call :func:`client` where they run; each Python process keeps one client per spec.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from ..errors import redact

Redis = redis.Redis  # the client type other modules annotate with

# With 50 ms .. 2 s backoff, six tries ride over a Redis restart of a few seconds.
_RETRIES = 6


@dataclass(frozen=True)
class ConnectionSpec:
    """Where Redis is. Picklable; ``password`` never appears in ``repr`` or messages."""

    url: str
    password: str | None = field(default=None, repr=False)

    @property
    def secrets(self) -> tuple[str | None, ...]:
        return (self.password,)

    @property
    def display(self) -> str:
        """The URL with any password removed, for messages."""
        return redact(self.url, self.secrets)


def new_client(spec: ConnectionSpec) -> redis.Redis:
    """A fresh client (bytes replies, hiredis when installed, retries on connection errors)."""
    kwargs: dict[str, object] = {
        "socket_connect_timeout": 5,
        "socket_timeout": 60,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": Retry(ExponentialWithJitterBackoff(cap=2.0, base=0.05), _RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "client_name": "spark-eventbus",
        # Pinned: reply shapes (XRANGE parsed raw on executors) must not change with the
        # redis-py version's default protocol. RESP3 needs Redis >= 6.0.
        "protocol": 3,
    }
    if spec.password:
        kwargs["password"] = spec.password
    return redis.Redis.from_url(spec.url, **kwargs)


def _raw_replies(r: redis.Redis) -> redis.Redis:
    # XRANGE replies as hiredis gives them (lists of [id, [field, value, ...]]), not dicts:
    # the executors build Arrow columns from them directly.
    r.set_response_callback("XRANGE", lambda reply, **kw: reply)
    return r


_clients: dict[tuple[ConnectionSpec, bool], redis.Redis] = {}
_lock = threading.Lock()


def client(spec: ConnectionSpec, *, raw_xrange: bool = False) -> redis.Redis:
    """The cached client of this process for ``spec``. ``raw_xrange=True`` gives a separate
    client whose XRANGE replies stay raw (never the shared one: its callbacks stay default)."""
    key = (spec, raw_xrange)
    with _lock:
        c = _clients.get(key)
        if c is None:
            c = new_client(spec)
            _clients[key] = _raw_replies(c) if raw_xrange else c
        return c
