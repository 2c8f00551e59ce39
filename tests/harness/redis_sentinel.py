"""A replicated Redis with automatic failover for tests: a primary, replicas and Sentinels, each
a real process (``redis-server``; ``<binary> <conf> --sentinel`` for the Sentinels) on a free
loopback port, so tests can stall (SIGSTOP), kill (SIGKILL) and restart any of them."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import redis

from tests.harness.redis_server import RedisServer, free_port, redis_binary

MASTER = "eventbus"


class ReplicaServer(RedisServer):
    """A redis-server that starts as a replica of ``primary_port``."""

    def __init__(self, workdir: Path, primary_port: int, priority: int) -> None:
        super().__init__(workdir)
        self.primary_port = primary_port
        self.priority = priority

    def extra_args(self) -> list[str]:
        return ["--replicaof", "127.0.0.1", str(self.primary_port),
                "--replica-priority", str(self.priority)]


class Sentinel:
    """One Sentinel process watching the topology's primary as :data:`MASTER`."""

    def __init__(self, workdir: Path, primary_port: int, quorum: int) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.primary_port = primary_port
        self.quorum = quorum
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Sentinel:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("no redis-server binary on PATH: run `make install`")
        conf = self.workdir / "sentinel.conf"  # Sentinel rewrites it: a file of its own
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.workdir}\n"
            f"logfile {self.workdir / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} {self.quorum}\n"
            f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 10000\n"
            f"sentinel parallel-syncs {MASTER} 2\n")
        self.proc = subprocess.Popen([binary, str(conf), "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1).ping()
                return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"sentinel on port {self.port} did not start: "
                           f"{(self.workdir / 'sentinel.log').read_text()[-2000:]}")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


class SentinelTopology:
    """A primary, ``replicas`` replicas (the first has the best promotion priority) and three
    Sentinels with quorum 2."""

    def __init__(self, workdir: Path, replicas: int = 2, sentinels: int = 3) -> None:
        self.primary = RedisServer(workdir / "primary")
        self.replicas = [ReplicaServer(workdir / f"replica{i}", self.primary.port, 10 + i)
                         for i in range(replicas)]
        self.sentinels = [Sentinel(workdir / f"sentinel{i}", self.primary.port, 2)
                          for i in range(sentinels)]

    @property
    def sentinel_addresses(self) -> str:
        """The ``sentinels`` option: ``host:port,host:port,...``."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    @property
    def nodes(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    def start(self) -> SentinelTopology:
        self.primary.start()
        for replica in self.replicas:
            replica.start()
        self.wait_replicated(len(self.replicas))
        for s in self.sentinels:
            s.start()
        self.wait_sentinels_see(len(self.replicas))
        return self

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for node in self.nodes:
            if node.proc is not None:
                node.proc.send_signal(signal.SIGCONT)
            node.stop()

    def current_primary(self) -> RedisServer:
        """The node the Sentinels name as primary now."""
        _, port = self.sentinels[0].client().sentinel_get_master_addr_by_name(MASTER)
        return next(n for n in self.nodes if n.port == int(port))

    def wait_replicated(self, replicas: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.current_primary_client().info("replication")
            online = sum(1 for k, v in info.items() if k.startswith("slave")
                         and isinstance(v, dict) and v.get("state") == "online")
            if online >= replicas:
                return
            time.sleep(0.05)
        raise RuntimeError(f"fewer than {replicas} replicas online after {timeout} s")

    def current_primary_client(self) -> redis.Redis:
        if all(s.proc is None for s in self.sentinels):
            return self.primary.client()
        return self.current_primary().client()

    def wait_sentinels_see(self, replicas: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = [len(s.client().sentinel_slaves(MASTER)) for s in self.sentinels]
            known = [int(s.client().sentinel_master(MASTER)["num-other-sentinels"])
                     for s in self.sentinels]
            if min(seen) >= replicas and min(known) >= len(self.sentinels) - 1:
                return
            time.sleep(0.1)
        raise RuntimeError("the Sentinels did not discover the topology in time")

    def fail_over(self, kill: bool = True, timeout: float = 30) -> RedisServer:
        """SIGKILL the current primary (or let Sentinel fail over on request) and wait until
        the Sentinels name another node that answers as a primary; return it."""
        old = self.current_primary()
        if kill:
            old.kill()
        else:
            self.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", MASTER)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                new = self.current_primary()
                if new is not old and new.client(socket_timeout=1).info(
                        "replication")["role"] == "master":
                    return new
            except (redis.RedisError, StopIteration):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"no failover within {timeout} s")

