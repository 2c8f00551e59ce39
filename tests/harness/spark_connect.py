"""A Spark Connect server for tests: its own JVM process (``SparkConnectServer`` through the pip
``pyspark``'s ``spark-submit``) on a free loopback port, running the data source and the
foreachBatch functions in this virtual environment's Python."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.harness.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]  # the repository


class ConnectServer:
    def __init__(self, workdir: Path, python: str = sys.executable) -> None:
        self.workdir = workdir
        self.python = python
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> ConnectServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYSPARK_PYTHON": self.python, "PYSPARK_DRIVER_PYTHON": self.python}
        env.pop("SPARK_REMOTE", None)
        # Not under coverage (make test COVERAGE=1): the lanes' check reads what the tests' own
        # sessions execute of redisio/, and the Connect server's processes run at full speed.
        env.pop("EVENTBUS_COVERAGE_START", None)
        log = open(self.workdir / "connect-server.log", "wb")  # noqa: SIM115 - the server's
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "spark-submit"), "--class",
             "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={self.port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
             "--conf", f"spark.pyspark.python={self.python}",
             "--driver-java-options",
             f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}",
             "spark-internal"], stdout=log, stderr=log, env=env, start_new_session=True,
            cwd=self.workdir)  # not the checkout: its Python workers would import from it
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.3)
        text = (self.workdir / "connect-server.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the Spark Connect server did not start on port {self.port}:\n{text}")

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc = None
