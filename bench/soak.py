"""``make soak``: a long run with injected faults. Not part of CI.

A producer writes at a fixed rate into several streams; a pipeline (``bench/soak_job.py``:
reader → AckingBatchWriter → the eventbus sink) copies them into one output stream, run as a
driver process the soak restarts whenever it ends (as a job supervisor would). On a random
schedule with a fixed seed the soak injects: driver ``kill -9`` (restart from the checkpoint),
Redis ``kill -9`` and restart (AOF, ``appendfsync always``), Redis paused with ``SIGSTOP`` for
longer than the client's 60 s socket timeout then ``SIGCONT``, ``CLIENT KILL`` of every
connection, and ``kill -9`` of a Python worker mid-task. At the end it drains, then prints and
checks: produced, delivered, lost (must be 0), duplicates at the handler and in the sink
(must be 0), pending left, RSS, Redis memory and entries held, and connector keys.

``SOAK_TOPOLOGY=sentinel`` runs the same against a primary, two replicas and three Sentinels:
everything connects through the Sentinels with ``waitReplicas=1`` (the producer too, so that
"produced" means replicated), and the Redis faults become failovers: ``kill -9`` of the primary
(a replica is promoted; the old primary comes back as a replica) and ``SENTINEL FAILOVER``.

    SOAK_MINUTES=20 SOAK_SEED=7 make soak
    SOAK_TOPOLOGY=sentinel SOAK_MINUTES=10 make soak
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.harness.redis_sentinel import MASTER, SentinelTopology  # noqa: E402
from tests.harness.redis_server import RedisServer  # noqa: E402

STREAMS = ["soak:{a}", "soak:{b}", "soak:{c}"]
OUT = "soak:out"
RATE = int(os.environ.get("SOAK_RATE", "600"))  # entries per second, over all streams
FAULTS = ("driver kill -9", "redis kill -9", "redis SIGSTOP 65 s", "CLIENT KILL",
          "python worker kill -9")
SENTINEL = os.environ.get("SOAK_TOPOLOGY", "single") == "sentinel"
SENTINEL_FAULTS = ("driver kill -9", "primary kill -9 (failover)", "SENTINEL FAILOVER",
                   "CLIENT KILL", "python worker kill -9")


class Producer(threading.Thread):
    """XADD at a fixed rate, round robin over the streams; rides out Redis being down."""

    def __init__(self, url: str, sentinels: list[tuple[str, int]] | None = None) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.sentinels = sentinels
        self.stop = threading.Event()
        self.sent = 0
        self.errors = 0

    def client(self) -> redis.Redis:
        if self.sentinels:
            import redis.sentinel

            return redis.sentinel.Sentinel(self.sentinels, socket_timeout=5).master_for(
                MASTER, socket_timeout=5, socket_connect_timeout=2)
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)

    def run(self) -> None:
        r = self.client()
        start, n = time.monotonic(), 0
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * RATE)
            if n >= due:
                time.sleep(0.01)
                continue
            batch = min(due - n, 200)
            pipe = r.pipeline(transaction=False)
            for i in range(n, n + batch):
                pipe.xadd(STREAMS[i % len(STREAMS)], {"n": str(i), "payload": "x" * 150})
            if self.sentinels:
                pipe.execute_command("WAIT", 1, 2000)
            try:
                pipe.execute()
                self.sent += batch
            except redis.RedisError:
                self.errors += 1
                time.sleep(0.5)
            n += batch  # an entry whose XADD failed is simply not in the stream


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def session_pids(sid: int) -> dict[str, list[int]]:
    """Processes of one driver session: the JVM, the Python driver and Python workers."""
    out: dict[str, list[int]] = {"driver": [], "workers": []}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getsid(int(d.name)) != sid:
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ProcessLookupError):
            continue
        kind = "workers" if ("pyspark.daemon" in cmd or "pyspark.worker" in cmd) else "driver"
        out[kind].append(int(d.name))
    return out


class Soak:
    def __init__(self, work: Path, minutes: float, seed: int) -> None:
        self.work = work
        self.minutes = minutes
        self.rng = random.Random(seed)
        self.topology = SentinelTopology(work / "ha") if SENTINEL else None
        self.redis = self.topology.primary if self.topology else RedisServer(work / "redis",
                                                                                aof=True)
        self.driver: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.faults: Counter[str] = Counter()
        self.chk = work / "chk"
        self.handler_log = work / "handler.log"

    def r(self) -> redis.Redis:
        if self.topology is not None:
            return self.topology.current_primary().client(socket_timeout=30)
        return redis.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=30)

    def start_driver(self) -> None:
        log = open(self.work / "driver.log", "ab")  # noqa: SIM115 - the driver's
        where = (f"sentinel:{self.topology.sentinel_addresses}" if self.topology is not None
                 else self.redis.url)
        self.driver = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "soak_job.py"), where,
             ",".join(STREAMS), OUT, str(self.chk), str(self.handler_log)],
            stdout=log, stderr=log, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})

    def supervise(self) -> None:
        """Restart the driver when it ended (a fault or a query failure)."""
        if self.driver is not None and self.driver.poll() is not None:
            self.restarts += 1
            self.start_driver()

    def kill_driver(self) -> None:
        assert self.driver is not None
        os.killpg(self.driver.pid, signal.SIGKILL)
        self.driver.wait()

    def inject(self, fault: str) -> None:
        self.faults[fault] += 1
        print(f"  {time.strftime('%H:%M:%S')} {fault}", flush=True)
        if fault == "driver kill -9":
            self.kill_driver()
        elif fault == "redis kill -9":
            assert self.redis.proc is not None
            self.redis.proc.kill()
            self.redis.proc.wait()
            time.sleep(self.rng.uniform(1, 5))
            self.redis.start()
        elif fault == "redis SIGSTOP 65 s":
            assert self.redis.proc is not None
            self.redis.proc.send_signal(signal.SIGSTOP)
            time.sleep(65)
            self.redis.proc.send_signal(signal.SIGCONT)
        elif fault in ("primary kill -9 (failover)", "SENTINEL FAILOVER"):
            assert self.topology is not None
            old = self.topology.current_primary()
            self.topology.fail_over(kill=fault.startswith("primary"), timeout=60)
            if old.proc is None or old.proc.poll() is not None:
                time.sleep(self.rng.uniform(1, 5))
                old.start()  # comes back as a primary; the Sentinels make it a replica
        elif fault == "CLIENT KILL":
            self.r().execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        elif fault == "python worker kill -9" and self.driver is not None:
            workers = session_pids(os.getsid(self.driver.pid))["workers"]
            if workers:
                os.kill(self.rng.choice(workers), signal.SIGKILL)

    def connector_keys(self) -> int:
        return sum(1 for _ in self.r().scan_iter(match="*:eventbus:*", count=1000))

    def memory(self) -> dict[str, int]:
        """Redis memory and the stream entries it holds (the data grows with the run; the
        connector's own keys must not)."""
        r = self.r()
        entries = sum(int(r.xlen(k)) for k in [*STREAMS, OUT])
        return {"used_memory": int(r.info("memory")["used_memory"]), "stream_entries": entries}

    def figures(self) -> dict[str, Any]:
        pids = session_pids(os.getsid(self.driver.pid)) if self.driver else {}
        return {"driver_rss_mb": rss_mb(pids.get("driver", [])),
                "workers_rss_mb": rss_mb(pids.get("workers", [])),
                **self.memory(), "connector_keys": self.connector_keys()}

    def run(self) -> dict[str, Any]:
        self.handler_log.touch()
        if self.topology is not None:
            self.topology.start()
        else:
            self.redis.start()
        producer = Producer(self.redis.url, [("127.0.0.1", s.port) for s in
                                             self.topology.sentinels] if self.topology else None)
        producer.start()
        self.start_driver()
        time.sleep(60)  # warm up: the first batches, Python workers started
        start = self.figures()
        print(f"soak: {self.minutes} min, {RATE} entries/s, start {start}", flush=True)
        end_at = time.monotonic() + self.minutes * 60
        next_fault = time.monotonic() + self.rng.uniform(20, 60)
        while time.monotonic() < end_at:
            time.sleep(1)
            self.supervise()
            if time.monotonic() >= next_fault:
                self.inject(self.rng.choice(SENTINEL_FAULTS if SENTINEL else FAULTS))
                next_fault = time.monotonic() + self.rng.uniform(20, 60)
        producer.stop.set()
        producer.join()
        r = self.r()
        produced = {f"{s}/{i.decode()}" for s in STREAMS for i, _ in r.xrange(s)}
        deadline = time.monotonic() + 600
        delivered: Counter[str] = Counter()
        while time.monotonic() < deadline:
            self.supervise()
            if r.xlen(OUT) >= len(produced):
                delivered = Counter(f[b"src"].decode() for _, f in r.xrange(OUT))
                if set(delivered) >= produced:
                    break
            time.sleep(5)
        else:
            delivered = Counter(f[b"src"].decode() for _, f in r.xrange(OUT))
        time.sleep(5)  # the last batch's acks
        end = self.figures()
        assert self.driver is not None
        os.killpg(self.driver.pid, signal.SIGTERM)
        self.driver.wait(60)
        handler = Counter(self.handler_log.read_text().split())
        pending = sum(int(r.xpending(s, "soak")["pending"]) for s in STREAMS)
        result = {
            "minutes": self.minutes, "rate_per_s": RATE, "faults": dict(self.faults),
            "driver_restarts": self.restarts, "producer_errors": producer.errors,
            "produced": len(produced), "delivered": len(set(delivered) & produced),
            "lost": len(produced - set(delivered)),
            "sink_duplicates": sum(n - 1 for n in delivered.values() if n > 1),
            "handler_duplicates": sum(n - 1 for n in handler.values() if n > 1),
            "pending_left": pending, "start": start, "end": end,
            "topology": "sentinel" if SENTINEL else "single",
        }
        self.stop()
        return result

    def stop(self) -> None:
        if self.topology is not None:
            self.topology.stop()
        else:
            self.redis.stop()


def main() -> int:
    minutes = float(os.environ.get("SOAK_MINUTES", "20"))
    seed = int(os.environ.get("SOAK_SEED", "7"))
    work = Path(tempfile.mkdtemp(prefix="eventbus-soak-"))
    soak = Soak(work, minutes, seed)
    try:
        result = soak.run()
    finally:
        if soak.driver is not None and soak.driver.poll() is None:
            os.killpg(soak.driver.pid, signal.SIGKILL)
        soak.stop()
    out = ROOT / ".bench" / ("soak-sentinel.json" if SENTINEL else "soak.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    ok = result["lost"] == 0 and result["sink_duplicates"] == 0
    print(f"soak: {'OK' if ok else 'FAILED'} — lost {result['lost']}, sink duplicates "
          f"{result['sink_duplicates']} (work directory {work})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
