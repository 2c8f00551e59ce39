"""Credential providers for the rotation tests (``credentialProvider`` =
``tests.integration.rotating_credentials:provider``): they stand in for a token signer (IAM) or
an identity library (Entra ID). Importable on Spark's Python workers, which run from the
repository root like the tests."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis.auth.token import SimpleToken
from redis.credentials import CredentialProvider, StreamingCredentialProvider

# The user and the current password, one per line: the tests' rotator writes it (atomically).
# One file per pytest-xdist worker (Spark's Python workers inherit the variable from the driver).
STATE = Path(tempfile.gettempdir()) / (
    f"spark-eventbus-test-credentials-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")


class FromState(CredentialProvider):
    """Asks for the current credentials at every new connection, as a token signer would."""

    def get_credentials(self) -> tuple[str, str]:
        user, password = STATE.read_text().split("\n")[:2]
        return user, password


def provider() -> CredentialProvider:
    return FromState()


def broken() -> CredentialProvider:
    raise RuntimeError("the token service is down (secret-token-123 must never be shown)")


def not_a_provider() -> str:
    return "user:password"


class Failing(CredentialProvider):
    def get_credentials(self) -> tuple[str, str]:
        raise RuntimeError("expired: secret-token-456")


def failing() -> CredentialProvider:
    return Failing()


class Streaming(StreamingCredentialProvider):
    """A streaming provider (as ``redis-entraid``'s): it announces new credentials to whoever
    subscribed (redis-py re-authenticates the pool's connections with them). One per process;
    the tests drive it from the driver."""

    user = ""
    password = ""
    listeners: list[Callable[[Any], None]] = []

    @classmethod
    def reset(cls, user: str, password: str) -> None:
        cls.user, cls.password = user, password
        cls.listeners = []

    @classmethod
    def announce(cls, password: str) -> None:
        cls.password = password
        token = SimpleToken(password, -1, time.time() * 1000, {"oid": cls.user})
        for callback in list(cls.listeners):
            callback(token)

    def get_credentials(self) -> tuple[str, str]:
        return self.user, self.password

    def on_next(self, callback: Callable[[Any], None]) -> None:
        self.listeners.append(callback)

    def on_error(self, callback: Callable[[Exception], None]) -> None:
        pass

    def is_streaming(self) -> bool:
        return True


def streaming() -> CredentialProvider:
    return Streaming()
