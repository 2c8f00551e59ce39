"""Credentials that rotate (docs/security.md): ``passwordFile``/``usernameFile``, read at every
new connection, and ``credentialProvider``, a ``package.module:callable`` returning a redis-py
``CredentialProvider`` (a ``StreamingCredentialProvider`` re-authenticates live connections
itself through redis-py). Both become the clients' ``credential_provider``.

What a file or a provider returns is never logged or put in a message. While a client runs, a
file that is missing or empty for a moment (rewritten in place) or a provider that fails is a
:class:`CredentialsUnavailable` — a connection error, retried within ``failoverTimeoutMs`` like
a refused credential; :func:`check_credentials` (the driver, at start) makes the same failures
clear :class:`~spark_eventbus.errors.ConfigError`s naming the option.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.credentials import CredentialProvider, StreamingCredentialProvider

from ..core.connection import ConnectionSpec, spell
from ..core.factories import call_factory
from ..errors import ConfigError


class CredentialsUnavailable(redis.AuthenticationError):
    """The credentials could not be had for a new connection (the file is missing or empty,
    the provider failed); retried like a refused credential (only with credentials that
    rotate, the only ones that raise it). Never carries a secret."""


def _read(path: str, setting: str, style: str) -> str:
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise CredentialsUnavailable(
            f"{spell(setting, style)} = {path!r} cannot be read ({type(exc).__name__}: "
            f"{exc.strerror or exc}): check the path, and that this process may read it on the "
            "driver and every executor.") from None
    if not text:
        raise CredentialsUnavailable(f"{spell(setting, style)} = {path!r} is empty: it must hold "
                                     "the secret itself (one line).")
    return text


class FileCredentials(CredentialProvider):
    """The password (and the user name) read from files at every new connection: a Secret
    rotated in place (Kubernetes, a secret manager's agent) is used from the next connection
    on, without a restart."""

    def __init__(self, password_file: str, username_file: str | None,
                 username: str | None, style: str) -> None:
        self.password_file = password_file
        self.username_file = username_file
        self.username = username
        self.style = style

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        password = _read(self.password_file, "passwordFile", self.style)
        user = (_read(self.username_file, "usernameFile", self.style)
                if self.username_file else self.username)
        return (user, password) if user else (password,)


class _Guarded(CredentialProvider):
    """A user's provider, its failures made retriable connection errors that name the option
    (not the provider's message, which could hold a secret)."""

    def __init__(self, inner: CredentialProvider, path: str, style: str) -> None:
        self.inner = inner
        self.path = path
        self.style = style

    def get_credentials(self) -> Any:
        try:
            return self.inner.get_credentials()
        except Exception as exc:
            raise CredentialsUnavailable(
                f"{spell('credentialProvider', self.style)} = {self.path!r}: its "
                f"get_credentials() raised {type(exc).__name__}") from None


class _GuardedStreaming(_Guarded, StreamingCredentialProvider):
    """:class:`_Guarded` for a streaming provider: redis-py subscribes to its new credentials
    (``on_next``) and re-authenticates the pool's connections with them."""

    inner: StreamingCredentialProvider

    def __init__(self, inner: CredentialProvider, path: str, style: str) -> None:
        super().__init__(inner, path, style)
        # Every pool of this process subscribes (the clients of a spec, a cluster's nodes);
        # a provider may keep only one listener (redis-entraid does): one fan-out for all.
        self.listeners: list[Callable[[Any], None]] = []
        self.listening = False
        self.lock = threading.Lock()

    def on_next(self, callback: Callable[[Any], None]) -> None:
        with self.lock:
            self.listeners.append(callback)
            if not self.listening:
                self.listening = True
                self.inner.on_next(self.announce)

    def announce(self, token: Any) -> None:
        with self.lock:
            listeners = list(self.listeners)
        for callback in listeners:
            callback(token)

    def on_error(self, callback: Callable[[Exception], None]) -> None:
        self.inner.on_error(callback)

    def is_streaming(self) -> bool:
        return self.inner.is_streaming()


_providers: dict[tuple[str, str], CredentialProvider] = {}
_lock = threading.Lock()


def load_provider(path: str, style: str = "option") -> CredentialProvider:
    """The provider ``package.module:callable`` returns, made once per process."""
    with _lock:
        got = _providers.get((path, style))
        if got is None:
            got = _providers[(path, style)] = _make(path, style)
        return got


def _make(path: str, style: str) -> CredentialProvider:
    name = spell("credentialProvider", style)
    provider = call_factory(path, name, "a redis-py CredentialProvider")
    if not isinstance(provider, CredentialProvider):
        raise ConfigError(f"{name} = {path!r} returned a {type(provider).__name__}, not a "
                          "redis-py CredentialProvider (redis.credentials): return one, e.g. a "
                          "subclass whose get_credentials() returns (user, token).")
    if isinstance(provider, StreamingCredentialProvider):
        return _GuardedStreaming(provider, path, style)
    return _Guarded(provider, path, style)


def url_user(url: str) -> tuple[str, str | None]:
    """``url`` without its user name (redis-py refuses a user with a credential provider),
    and that user name."""
    parts = urlsplit(url)
    if not parts.username:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    return url.replace(parts.netloc, host, 1), unquote(parts.username)


def provider_for(spec: ConnectionSpec) -> CredentialProvider | None:
    """The ``credential_provider`` of ``spec``'s clients, or ``None`` for a static password."""
    if spec.credential_provider:
        return load_provider(spec.credential_provider, spec.style)
    if spec.password_file:
        return FileCredentials(spec.password_file, spec.username_file, url_user(spec.url)[1],
                               spec.style)
    return None


def check_credentials(spec: ConnectionSpec) -> None:
    """At start (driver): the files can be read and hold something; the provider imports,
    is made, and gives credentials — each failure a :class:`ConfigError` naming the option."""
    provider = provider_for(spec)
    if provider is None:
        return
    try:
        provider.get_credentials()
    except CredentialsUnavailable as exc:
        raise ConfigError(str(exc)) from None
