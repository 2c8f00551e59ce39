"""A Spark standalone cluster for tests: a master and workers, each its own JVM started with the
pip ``pyspark``'s ``spark-class`` (the wheel ships no ``start-master.sh``), on free loopback
ports. Each worker's executors are child JVMs of that worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from tests.harness.redis_server import free_port

SPARK_CLASS = Path(sys.executable).parent / "spark-class"
SPARK_HOME = str(Path(pyspark.__file__).parent)  # spark-class's own search runs `python3`


class StandaloneCluster:
    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1,
                 memory: str = "1g") -> None:
        self.workdir = workdir
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port, self.ui_port = free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
               "SPARK_LOG_DIR": str(self.workdir)}
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - the process's
        self.procs.append(subprocess.Popen([str(SPARK_CLASS), *args], stdout=log, stderr=log,
                                           env=env, start_new_session=True))

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications, their executors)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return dict(json.load(r))

    def start(self) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.master,
                        "--host", "127.0.0.1", "--port", str(free_port()),
                        "--webui-port", str(free_port()), "--cores", str(self.cores),
                        "--memory", self.memory, "--work-dir", str(self.workdir / f"work{i}"))
        deadline = time.monotonic() + 180
        alive = 0
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            try:
                alive = sum(w["state"] == "ALIVE" for w in self.state()["workers"])
            except OSError:
                alive = 0
            if alive == self.workers:
                return self
            time.sleep(0.5)
        logs = "\n".join(f.read_text(errors="replace")[-1500:]
                         for f in sorted(self.workdir.glob("*.log")))
        self.stop()
        raise RuntimeError(f"the standalone cluster did not start ({alive} of {self.workers} "
                           f"workers registered):\n{logs}")

    def executor_pids(self) -> list[int]:
        """PIDs of this cluster's executor JVMs now running (they run in the workers' work
        directories)."""
        out = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"],
                             capture_output=True, text=True).stdout
        pids = []
        for pid in map(int, out.split()):
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(self.workdir)):
                pids.append(pid)
        return pids

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first: they stop their executors
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs = []
