"""A real Redis Cluster for tests: three masters (``redis-server --cluster-enabled yes``, AOF on)
on free loopback ports, joined with ``redis-cli --cluster create``. Nodes can be killed and
restarted, and slots moved between masters while queries run."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from tests.harness.redis_server import RedisServer, redis_binary, worker_index
from tests.harness.redis_tls import TlsFiles


def _port_pair_free(port: int) -> bool:
    """``port`` and its cluster bus port (``port + 10000``) can both be bound."""
    for p in (port, port + 10000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_cluster_ports(n: int, tls: bool = False) -> list[int]:
    """``n`` ports whose bus ports (``+ 10000``) are free too. Below the ephemeral range (32768
    up), so no port the OS hands out can take them; each pytest-xdist worker picks in its own
    band of 1,000 (TLS ports in its upper half), so two workers never choose the same."""
    start = 12000 + 1000 * worker_index() + (500 if tls else 0)
    ports: list[int] = []
    port = start
    while len(ports) < n:
        if port >= start + 500 or port + 10000 >= 32768:
            raise RuntimeError(f"no free port pairs for a test cluster from {start}")
        if _port_pair_free(port):
            ports.append(port)
        port += 7
    return ports


class ClusterNode(RedisServer):
    """A cluster node; with ``tls``, also a TLS port and TLS between nodes (``tls-cluster``):
    clients that connect with TLS are told the nodes' TLS ports."""

    def __init__(self, workdir: Path, port: int, aof: bool = True, password: str | None = None,
                 tls: TlsFiles | None = None, tls_port: int | None = None,
                 node_timeout_ms: int = 3000, fsync: str = "always") -> None:
        super().__init__(workdir, password=password, aof=aof, fsync=fsync)
        self.port = port
        self.tls = tls
        self.tls_port = tls_port  # with tls-cluster, the bus port is tls_port + 10000
        self.node_timeout_ms = node_timeout_ms

    def extra_args(self) -> list[str]:
        args = ["--cluster-enabled", "yes", "--cluster-config-file",
                str(self.workdir / "nodes.conf"), "--cluster-node-timeout",
                str(self.node_timeout_ms),
                "--slowlog-log-slower-than", "1000"]
        if self.tls is not None:
            args += ["--tls-port", str(self.tls_port), "--tls-cluster", "yes",
                     "--tls-cert-file", str(self.tls.server_cert), "--tls-key-file",
                     str(self.tls.server_key), "--tls-ca-cert-file", str(self.tls.ca),
                     "--tls-auth-clients", "no"]
        return args


class RedisClusterServer:
    """Three masters, ``replicas`` replicas each (none by default); every slot covered. With
    replicas, a master killed (:meth:`kill_master_of`) is failed over by the cluster itself."""

    def __init__(self, workdir: Path, masters: int = 3, aof: bool = True,
                 password: str | None = None, tls: TlsFiles | None = None,
                 replicas: int = 0, node_timeout_ms: int = 3000, fsync: str = "always") -> None:
        self.password = password
        self.tls = tls
        self.replicas = replicas
        if redis_binary() is None or shutil.which("redis-cli") is None:
            raise RuntimeError("the cluster tests need redis-server and redis-cli on PATH: run "
                               "`make install` (Debian's redis-server brings both).")
        n = masters * (1 + replicas)
        ports = free_cluster_ports(n)
        tls_ports = free_cluster_ports(n, tls=True) if tls else [None] * n
        self.nodes = [ClusterNode(workdir / f"node{p}", p, aof, password, tls, t,
                                  node_timeout_ms, fsync)
                      for p, t in zip(ports, tls_ports, strict=True)]

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.nodes[0].tls_port}/0"
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> RedisClusterServer:
        for node in self.nodes:
            node.start()
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        out = subprocess.run(["redis-cli", *auth, "--cluster", "create", *addrs,
                              "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")
        self.wait_ok()
        self.wait_replicated()
        self.wait_agreed()
        return self

    def wait_agreed(self, timeout: float = 60) -> None:
        """Every live node's ``CLUSTER SLOTS`` lists each master's ``replicas`` replicas: a node
        learns by gossip that another shard's replica has synced, and lists it only then, so a
        client's slot map read from it before would know no replica there."""
        deadline = time.monotonic() + timeout
        views: list[Any] = []
        clients = [n.client(socket_timeout=2) for n in self.nodes if n.proc is not None]
        try:
            while time.monotonic() < deadline:
                try:
                    views = [[len(r) - 3 for r in c.execute_command("CLUSTER", "SLOTS")]
                             for c in clients]
                    if all(v and min(v) >= self.replicas for v in views):
                        return
                except redis.RedisError:
                    pass
                time.sleep(0.1)
        finally:
            for c in clients:
                c.close()
        raise RuntimeError(f"the test cluster's nodes do not all list every replica "
                           f"(replicas per slot range, node by node: {views})")

    def wait_replicated(self, timeout: float = 60) -> None:
        """Every master has its ``replicas`` replicas online (synced)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(sum(1 for k, v in m.client(socket_timeout=2).info("replication").items()
                           if k.startswith("slave") and isinstance(v, dict)
                           and v.get("state") == "online") >= self.replicas
                       for m in self.masters()):
                    return
            except (redis.RedisError, AssertionError):
                pass
            time.sleep(0.2)
        raise RuntimeError("the test cluster's replicas did not come online")

    def wait_ok(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                states = [n.client(socket_timeout=2).cluster("info")["cluster_state"]
                          for n in self.nodes]
                if all(s == "ok" for s in states):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the test cluster did not reach cluster_state:ok")

    def masters(self) -> list[ClusterNode]:
        """The nodes that serve slots now (after failovers: the promoted replicas)."""
        ports = {int(m[1]) for _, _, m, *_ in self._slots()}
        return [n for n in self.nodes if n.port in ports]

    def _slots(self) -> list[Any]:
        for node in self.nodes:
            if node.proc is None:
                continue
            try:
                return list(node.client(socket_timeout=2).execute_command("CLUSTER", "SLOTS"))
            except redis.RedisError:
                continue
        raise AssertionError("no live node answers CLUSTER SLOTS")

    def kill_master_of(self, key: str, *, restart: bool = True,
                       timeout: float = 60) -> tuple[ClusterNode, ClusterNode]:
        """SIGKILL the master serving ``key``; wait until the cluster has promoted one of its
        replicas (every live node says so and ``cluster_state:ok``); with ``restart``, start
        the killed node again (it rejoins as a replica of the promoted one) and wait until the
        new master has it online. Returns (killed, promoted)."""
        killed = self.node_of(key)
        promoted = self.kill(killed, timeout=timeout)
        assert promoted is not None
        if restart:
            self.restart(killed, promoted, timeout=timeout)
        return killed, promoted

    def kill(self, node: ClusterNode, timeout: float = 60) -> ClusterNode | None:
        """SIGKILL ``node``; when it was a master, wait until the cluster has promoted one of
        its replicas (every live node says so and ``cluster_state:ok``) and return that one."""
        slot = next((start for start, _, m, *_ in self._slots() if int(m[1]) == node.port), None)
        node.kill()
        if slot is None:
            return None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                owner = self.node_of_slot(slot)
                if owner is not node and all(
                        n.client(socket_timeout=2).cluster("info")["cluster_state"] == "ok"
                        for n in self.nodes if n.proc is not None):
                    return owner
            except (redis.RedisError, AssertionError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"no replica of {node.port} was promoted in {timeout} s")

    def restart(self, node: ClusterNode, master: ClusterNode, timeout: float = 60) -> None:
        """Start ``node`` again (killed); wait until ``master`` has it online as a replica
        and every node lists it."""
        deadline = time.monotonic() + timeout
        node.start()
        while time.monotonic() < deadline:
            info = master.client(socket_timeout=2).info("replication")
            if any(isinstance(v, dict) and v.get("state") == "online"
                   and int(v.get("port", 0)) == node.port for v in info.values()):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"{node.port} did not rejoin as a replica")
        self.wait_agreed(max(1.0, deadline - time.monotonic()))

    def client(self) -> RedisCluster:
        """A redis-py cluster client, started from a node that runs."""
        live = next(n for n in self.nodes if n.proc is not None)
        return RedisCluster(host="127.0.0.1", port=live.port, password=self.password)

    def node_of(self, key: str) -> ClusterNode:
        slot = key_slot(key.encode())
        return self.node_of_slot(slot)

    def node_of_slot(self, slot: int) -> ClusterNode:
        for start, end, master, *_ in self._slots():
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise AssertionError(f"no node serves slot {slot}")

    def move_slot(self, slot: int, target: ClusterNode) -> None:
        """Migrate ``slot`` (with its keys) to ``target`` the way redis-cli reshard does:
        IMPORTING/MIGRATING, MIGRATE key batches, then SETSLOT NODE on every master. Clients
        meet ASK during the move and MOVED after it."""
        if self.node_of_slot(slot) is not target:
            self.begin_move(slot, target)
            self.finish_move(slot, target)

    def begin_move(self, slot: int, target: ClusterNode, *, keys: bool = True) -> None:
        """The first half of :meth:`move_slot`: the slot is MIGRATING and (``keys``) all its
        keys are on ``target``, which clients reach only through ASK until :meth:`finish_move`;
        without ``keys``, none has moved yet (:meth:`migrate_keys` moves them)."""
        source = self.node_of_slot(slot)
        src, dst = source.client(), target.client()
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", _node_id(src))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", _node_id(dst))
        if keys:
            self.migrate_keys(source, target, slot)

    def migrate_keys(self, source: ClusterNode, target: ClusterNode, slot: int,
                     keys: list[str] | None = None) -> None:
        """``MIGRATE`` ``keys`` (default: every key of ``slot`` left on ``source``) to
        ``target``, whose slot :meth:`begin_move` set migrating. Moving some keys only leaves
        the slot split between the two masters, as between two key batches of a reshard:
        a command on keys of both halves gets ``TRYAGAIN``."""
        src = source.client()

        def migrate(batch: list[Any]) -> None:
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 10_000, "KEYS",
                                *batch)

        if keys is not None:
            migrate(list(keys))
            return
        while batch := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            migrate(batch)

    def finish_move(self, slot: int, target: ClusterNode) -> None:
        """``SETSLOT NODE`` on every master: ``target`` owns ``slot`` (clients meet MOVED)."""
        target_id = _node_id(target.client())
        for n in self.nodes:
            n.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _node_id(node: redis.Redis) -> str:
    got = node.cluster("myid")
    return got.decode() if isinstance(got, bytes) else str(got)
