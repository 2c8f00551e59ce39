"""Real Redis servers for tests: a ``redis-server`` process on a free loopback port (killable
and restartable), or a testcontainers container when no binary exists but a Docker engine
answers. Never a shared server, never a fake."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis


def worker_index() -> int:
    """0, or the number of this pytest-xdist worker (``gw3`` -> 3)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


# free_port's band: 270 ports per pytest-xdist worker from 30600 (8 workers fit below 32768),
# under the ephemeral range (32768 up) that bind(0) and outgoing connections draw from, and
# above the cluster harness's ports and bus ports (redis_cluster.free_cluster_ports).
_BAND = 270
_next = [0]
# the OS's first ephemeral port (Linux's default 32768): the bands must stay below it
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_EPHEMERAL_LOW = int(_RANGE.read_text().split()[0]) if _RANGE.exists() else 32768
_lock = threading.Lock()


def free_port() -> int:
    """A loopback port nobody is bound to, not handed out recently by this process. Ports come
    round-robin from this worker's own band, so two workers never pick the same port, and a
    port picked for a server that has not bound it yet (a JVM starting) is not picked again
    before the band has gone round — which bind(0) does not promise."""
    start = 30600 + _BAND * worker_index()
    if start + _BAND > _EPHEMERAL_LOW:
        raise RuntimeError(
            f"free_port's band {start}-{start + _BAND - 1} reaches the ephemeral ports (from "
            f"{_EPHEMERAL_LOW}): run fewer pytest-xdist workers")
    with _lock:
        for _ in range(_BAND):
            port = start + _next[0] % _BAND
            _next[0] += 1
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError(f"no free loopback port in {start}-{start + _BAND - 1}")


def redis_binary() -> str | None:
    return shutil.which(os.environ.get("EVENTBUS_REDIS_SERVER", "redis-server"))


def docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0


def record_scripts(server: RedisServer) -> None:
    """With ``EVENTBUS_SCRIPT_LOG`` set (a lane run with COVERAGE=1): append to that file the
    names of the package's Lua scripts this server has loaded (``SCRIPT EXISTS``: the
    connector ran them here), for ``make check-lanes``. A server that does not answer (killed,
    or refusing this client) records nothing."""
    log = os.environ.get("EVENTBUS_SCRIPT_LOG")
    if not log:
        return
    from spark_eventbus.redisio.scripts import BATCHED, script_text

    lua = Path(__file__).resolve().parents[2] / "spark_eventbus" / "redisio" / "lua"
    names = sorted(p.stem for p in lua.glob("*.lua") if not p.stem.startswith("_"))
    # a script ran as itself or in its batched form (several calls on one node)
    shas = [hashlib.sha1(script_text(n + form).encode()).hexdigest() for n in names
            for form in ("", BATCHED)]
    try:
        c = server.client(socket_timeout=2)
        found = c.script_exists(*shas)
        c.close()
    except (redis.RedisError, OSError):
        return
    with open(log, "a") as f:  # one short write per server: lines from workers do not mix
        f.write("".join(f"{n}\n" for n, plain, batched in zip(names, found[0::2], found[1::2],
                                                              strict=True) if plain or batched))


class RedisServer:
    """One redis-server process with AOF on, in its own directory."""

    def __init__(self, workdir: Path, password: str | None = None, aof: bool = True,
                 fsync: str = "always") -> None:
        self.aof = aof  # AOF on (WAITAOF works) or off (benchmarks)
        # "always" where a test kills the server and counts on what it acknowledged; the shared
        # servers, which no test kills, take "everysec" (an fsync per write costs every test)
        self.fsync = fsync
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.password = password
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._container = None

    @property
    def url(self) -> str:
        host = "127.0.0.1"
        return f"redis://{host}:{self.port}/0"

    def client(self, **kw: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kw)

    def start(self) -> RedisServer:
        binary = redis_binary()
        if binary is None:
            if docker_answers():
                return self._start_container()
            raise RuntimeError(
                "no redis-server binary on PATH and no Docker engine: run `make install` "
                "(it installs Debian's redis-server) or set EVENTBUS_REDIS_SERVER.")
        persistence = (["--appendonly", "yes", "--appendfsync", self.fsync] if self.aof
                       else ["--appendonly", "no"])
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                str(self.workdir), *persistence, "--save", "",
                "--logfile", str(self.workdir / "redis.log"), "--daemonize", "no",
                "--latency-monitor-threshold", "1"]
        if self.password:
            args += ["--requirepass", self.password]
        args += self.extra_args()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def extra_args(self) -> list[str]:
        """More ``redis-server`` arguments (subclasses: cluster nodes, TLS)."""
        return []

    def _start_container(self) -> RedisServer:  # pragma: no cover - needs a Docker engine
        from testcontainers.redis import RedisContainer

        container = RedisContainer("redis:7.2", password=self.password)
        container.start()
        self._container = container
        self.port = int(container.get_exposed_port(6379))
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            try:
                c = self.client(socket_timeout=1)
                c.ping()
                while c.info("persistence").get("loading"):
                    time.sleep(0.05)
                c.close()
                return
            except redis.RedisError as exc:
                last = exc
                time.sleep(0.05)
        log = self.workdir / "redis.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(f"redis-server on port {self.port} did not start: {last}\n{tail}")

    def kill(self) -> None:
        """SIGKILL: no shutdown save; AOF (appendfsync always) keeps what was acknowledged."""
        if self._container is not None:  # pragma: no cover
            self._container.get_wrapped_container().kill()
            return
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        self.kill()
        if self._container is not None:  # pragma: no cover
            self._container.get_wrapped_container().start()
            self._wait_ready()
        else:
            self.start()

    def stop(self) -> None:
        if self._container is not None:  # pragma: no cover
            self._container.stop()
            self._container = None
        if self.proc is not None:
            record_scripts(self)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # a shutdown waiting for a replica, a save
                self.proc.kill()
                self.proc.wait(10)  # reaped, not left to the garbage collector
            self.proc = None
