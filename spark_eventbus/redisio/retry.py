"""Retries bounded by time (``failoverTimeoutMs``), not by count: the one rule every client of
the package follows — a single node, a Sentinel primary, a Redis Cluster — and what counts as
"the server is changing hands, try again" on each. Imports nothing of the package: the clients
(:mod:`.client`) and the wire (:mod:`.wire`) both use it.

On a cluster, a master failover shows as connection errors on the dead master (until the
cluster promotes its replica and the slot map says so), ``CLUSTERDOWN`` (the cluster marked the
master failed and has not promoted yet), ``MOVED`` to the promoted replica, ``TRYAGAIN`` (a slot
split between two masters mid-reshard), and ``READONLY`` (a write that reached a demoted
master): :func:`cluster_in_flux` says which errors those are.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.retry import Retry

T = TypeVar("T")

# Tries at least, however short failoverTimeoutMs is (0: none).
MIN_TRIES = 2
# The retry window before a client's server has ever answered (a wrong address fails fast).
FIRST_CONTACT_S = 5.0

# The one table of what a Redis error means for trying again; the rest of the package reads
# it from here (and cluster_in_flux, ttl_exhausted, tls_refused below).
#
# Retried after a reconnect: the connection broke, or the node was demoted to a replica
# (READONLY: the command did not run, so running it again is safe; a managed primary
# endpoint's address reaches the new primary on the reconnect).
RETRY_ON: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError,
                                         ReadOnlyError)
# Replies that say the commands sent at once did not run: they are all sent again, as after a
# broken connection (READONLY: a primary demoted by a failover; with Sentinel the reconnect
# asks for the new primary).
NOT_RUN: tuple[type[Exception], ...] = (redis.ConnectionError, ReadOnlyError)
# Replies a cluster node gives for a key whose slot it does not serve now: it moved (MOVED,
# which redis-py derives from ASK), is moving (ASK, TRYAGAIN), or no master serves it yet
# (CLUSTERDOWN). Work sent on one node's connection (the per-node pipeline, the sink's
# transaction) is then sent again where the slot map, read again, says (.wire).
CLUSTER_REDIRECTS: tuple[type[Exception], ...] = (MovedError, AskError, TryAgainError,
                                                  ClusterDownError)
# Replies the cluster's per-node pipeline sends again itself: those, and READONLY (a master
# demoted by a failover).
CLUSTER_SEND_AGAIN: tuple[type[Exception], ...] = (*CLUSTER_REDIRECTS, ReadOnlyError)
# A cluster that cannot serve a slot for now, as the error a call ends with: a redirection
# not followed, redis-py's ClusterError family (its "TTL exhausted" when redirections did not
# settle), a slot no node serves. Reported as retriable (EventBusConnectionError).
CLUSTER_UNAVAILABLE: tuple[type[Exception], ...] = (*CLUSTER_REDIRECTS, ClusterError,
                                                    SlotNotCoveredError)


# A TLS handshake refused over certificates: the server's is not trusted here, or the server
# asked for a client certificate it did not get or does not trust. Before the server has ever
# answered this client, that is configuration, which waiting does not change: not retried
# (fails at once, naming the options). Once it has answered, it is retried like a failover: a
# certificate or CA rotating on one side before the other is over in moments.
_TLS_REFUSALS = frozenset({
    "CERTIFICATE_VERIFY_FAILED", "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_ACCESS_DENIED", "SSLV3_ALERT_HANDSHAKE_FAILURE"})


def tls_refused(error: BaseException) -> bool:
    """Whether ``error`` is a TLS handshake refused over certificates (:data:`_TLS_REFUSALS`),
    or a TLS session the server closed without a word (``SSLEOFError``): under TLS 1.3 a
    server that wants a client certificate refuses a missing one after the client thinks the
    handshake done, and the client's first write may meet the closed session before it can
    read the server's alert (both seen here: ``certificate required`` or ``EOF occurred in
    violation of protocol``). Either way only before the server ever answered (see
    :meth:`WindowRetry.retries`); a server going away later is a failover."""
    cause = error.__cause__ or error.__context__
    return isinstance(error, redis.ConnectionError) and isinstance(cause, ssl.SSLError) \
        and (getattr(cause, "reason", None) in _TLS_REFUSALS
             or isinstance(cause, ssl.SSLEOFError))


def cluster_in_flux(error: BaseException) -> bool:
    """Whether ``error``, from a cluster client, means the cluster is changing hands (a failover,
    a reshard) rather than that the command is wrong: connection errors (refused credentials
    excepted), ``READONLY``, ``CLUSTERDOWN``, ``TRYAGAIN``, redirections left over when redis-py's
    request TTL ran out, and a slot no node serves yet."""
    if isinstance(error, redis.AuthenticationError):
        return False
    if isinstance(error, (*RETRY_ON, ClusterDownError, TryAgainError, AskError,
                          SlotNotCoveredError)):
        return True
    if isinstance(error, ClusterError):
        return ttl_exhausted(error)
    text = str(error)
    # the slot map could not be read: every known node refused, or some slot had no master
    return isinstance(error, RedisClusterException) and (
        "cannot be connected" in text or "slots are not covered" in text)


def ttl_exhausted(error: BaseException) -> bool:
    """redis-py's cluster client gave up following redirections (``TTL exhausted.`` after its
    request TTL of hops): a slot on the move that has not settled, which only needs time."""
    return isinstance(error, ClusterError) and "TTL exhausted" in str(error)


class WindowRetry(Retry):
    """redis-py's ``Retry`` bounded by time, not by count: errors of ``retry_on`` (but refused
    credentials, and TLS handshakes refused over certificates at first contact, which fail at
    once), and that ``is_retryable`` accepts, are retried with capped exponential backoff and
    jitter until ``window_s`` has passed since the first failure of the call
    (``failoverTimeoutMs``: a promotion, a restart), then the last error is raised (and
    translated to a retriable ``EventBusConnectionError``).

    Until the server has answered once, the window is at most :data:`FIRST_CONTACT_S`: a wrong
    address or a server that is down at start fails in seconds, while one that answered before
    is waited for through a failover. One instance per client, shared by its connections
    (redis-py deep-copies the retry into each connection; the copy is the instance itself).

    A call made inside another of the same thread's calls (redis-py retries a connect and,
    inside it, the handshake's health check; a command and, inside it, the connect) is tried
    once: the outermost call alone retries, so that one window bounds it. Nested windows
    multiplied: a plain client at a TLS port failed after 35 s, not 5."""

    def __init__(self, window_s: float,
                 retry_on: tuple[type[BaseException], ...] = RETRY_ON,
                 is_retryable: Callable[[BaseException], bool] | None = None, *,
                 retry_auth: bool = False) -> None:
        backoff = ExponentialWithJitterBackoff(cap=2.0, base=0.05)
        super().__init__(backoff, -1, retry_on)  # type: ignore[arg-type]
        # Kept here, not read back from redis-py's Retry (whose fields are private).
        self.backoff = backoff
        self.retry_on: tuple[type[BaseException], ...] = retry_on
        self.window_s = window_s
        self.answered = False
        self.is_retryable = is_retryable
        self.retry_auth = retry_auth
        self._calls = threading.local()  # this thread's calls in progress (nesting depth)

    def update_supported_errors(self, specified_errors: Iterable[type[Exception]]) -> None:
        """redis-py adds a connection's ``retry_on_error`` here (public API)."""
        super().update_supported_errors(specified_errors)
        self.retry_on = tuple(dict.fromkeys((*self.retry_on, *specified_errors)))

    def __deepcopy__(self, memo: dict[int, Any]) -> WindowRetry:
        return self

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, WindowRetry) and other.window_s == self.window_s \
            and other.retry_auth == self.retry_auth

    def __hash__(self) -> int:
        return hash(("WindowRetry", self.window_s, self.retry_auth))

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> T:
        depth = getattr(self._calls, "depth", 0)
        if depth:  # inside an outer call of this thread: it retries the whole
            result = do()
            self.answered = True
            return result
        self._calls.depth = 1
        try:
            return self.run_retried(do, fail, is_retryable, with_failure_count)
        finally:
            self._calls.depth = 0

    def run_retried(self, do: Callable[[], T], fail: Callable[..., Any],
                    is_retryable: Callable[[Exception], bool] | None,
                    with_failure_count: bool) -> T:
        """The outermost call's loop: ``do`` until it succeeds or the window has passed."""
        self.backoff.reset()
        clock = Window(self)
        while True:
            try:
                result = do()
                self.answered = True
                return result
            except self.retry_on as error:
                if is_retryable and not is_retryable(error):  # type: ignore[arg-type]
                    raise
                if not self.retries(error):
                    raise
                if with_failure_count:
                    fail(error, clock.failures + 1)
                else:
                    fail(error)
                if not clock.wait():
                    raise error

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is one this retry waits out."""
        if isinstance(error, redis.AuthenticationError):
            # refused credentials (a ConnectionError to redis-py): not retried, unless they
            # rotate (a file, a provider): the next connection asks for them again
            return self.retry_auth
        if not isinstance(error, self.retry_on) or (tls_refused(error) and not self.answered):
            return False
        return self.is_retryable is None or self.is_retryable(error)


class Window:
    """One call's failures against a :class:`WindowRetry`'s window: :meth:`wait` after each
    failure sleeps the backoff and says whether to try again (for loops that are not a single
    ``do()``, such as the cluster's per-node pipeline)."""

    def __init__(self, retry: WindowRetry) -> None:
        self.retry = retry
        self.failures = 0
        self.deadline: float | None = None

    def wait(self) -> bool:
        retry = self.retry
        self.failures += 1
        now = time.monotonic()
        window = retry.window_s if retry.answered else min(retry.window_s, FIRST_CONTACT_S)
        if self.deadline is None:
            self.deadline = now + window
        if window <= 0 or (now >= self.deadline and self.failures >= MIN_TRIES):
            return False
        time.sleep(min(retry.backoff.compute(self.failures), max(self.deadline - now, 0.05)))
        return True
