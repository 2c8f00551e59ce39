"""Where Redis is: :class:`ConnectionSpec` (picklable) and the one function that builds it from
options or arguments, with the URL and TLS checks. Pure: no redis-py import, so parsing options
stays light; :mod:`.redisio.client` turns a spec into a client where it runs.

Used by the reader and sink options, :class:`~spark_eventbus.acking.AckingBatchWriter`, the CLI
and the pipe job (through the options)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, redact

DEFAULT_URL = "redis://localhost:6379/0"
URL_SCHEMES = ("redis://", "rediss://", "unix://")


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

    @property
    def secrets(self) -> tuple[str | None, ...]:
        return (self.password, self.tls_key_file)

    @property
    def display(self) -> str:
        """The URL with any password removed, for messages."""
        return redact(self.url, self.secrets)


def check_url(url: str, password: str | None = None, *, name: str = "option 'url'") -> str:
    """The one URL check (options, AckingBatchWriter, CLI): a redis-py URL scheme."""
    url = url.strip()
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


def connection_spec(url: str, password: str | None = None, tls_ca_cert: str | None = None,
                    tls_cert_file: str | None = None, tls_key_file: str | None = None, *,
                    url_name: str = "option 'url'") -> ConnectionSpec:
    """The :class:`ConnectionSpec` of these settings, checked first (:func:`check_url`,
    :func:`check_tls`; ``url_name`` is how messages name the URL). Idempotent: options parsed
    and checked before build the same spec again at no risk."""
    check_url(url, password, name=url_name)
    check_tls({"url": url, "tls_ca_cert": tls_ca_cert, "tls_cert_file": tls_cert_file,
               "tls_key_file": tls_key_file})
    return ConnectionSpec(url, password, tls_ca_cert, tls_cert_file, tls_key_file)
