"""A real TLS Redis for tests: ``redis-server`` with a TLS loopback port and certificates of
a private CA made by ``trustme``; optionally requiring client certificates (mutual TLS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
import trustme

from tests.harness.redis_server import RedisServer, free_port


class TlsFiles:
    """A private CA, a server certificate for 127.0.0.1/localhost and a client certificate."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("spark-eventbus-client")
        self.ca = workdir / "ca.pem"
        self.server_cert, self.server_key = workdir / "server.pem", workdir / "server.key"
        self.client_cert, self.client_key = workdir / "client.pem", workdir / "client.key"
        ca.cert_pem.write_to_path(str(self.ca))
        server.cert_chain_pems[0].write_to_path(str(self.server_cert))
        server.private_key_pem.write_to_path(str(self.server_key))
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))


class TlsRedisServer(RedisServer):
    """TLS on its own free port (the tests use only that one); ``mutual``: clients must present
    a certificate signed by the CA."""

    def __init__(self, workdir: Path, files: TlsFiles, mutual: bool = False) -> None:
        super().__init__(workdir)
        self.files = files
        self.mutual = mutual
        self.tls_port = free_port()

    def extra_args(self) -> list[str]:
        return ["--tls-port", str(self.tls_port), "--tls-cert-file", str(self.files.server_cert),
                "--tls-key-file", str(self.files.server_key), "--tls-ca-cert-file",
                str(self.files.ca), "--tls-auth-clients", "yes" if self.mutual else "no"]

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}/0"

    def client(self, **kw: Any) -> redis.Redis:
        tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(self.files.ca)}
        if self.mutual:
            tls.update(ssl_certfile=str(self.files.client_cert),
                       ssl_keyfile=str(self.files.client_key))
        return redis.Redis(host="127.0.0.1", port=self.tls_port, **tls, **kw)
