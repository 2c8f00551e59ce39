"""A Spark standalone cluster (issue 11): the pipe job submitted with ``spark-submit --master
spark://…`` to a master and two workers, each its own JVM. The package reaches the driver and the
executors only through ``--py-files`` (``eventbus pyfiles``): their Python has PySpark but neither
spark-eventbus nor redis-py nor hiredis. One executor JVM is killed with ``kill -9`` mid-run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.jvm import jvm_options
from tests.harness.lean_env import WITHOUT_EVENTBUS, WITHOUT_REDIS, lean_python
from tests.harness.spark_standalone import SPARK_HOME
from tests.integration.helpers import pending, produce, wait_for
from tests.integration.test_pipe_job import _copy_pipe_config

pytestmark = [pytest.mark.integration, pytest.mark.deploy]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Each row hashes 5,000 copies of its ID in the JVM: a batch's tasks take a while, so that the
# executor dies mid-task rather than between batches.
SLOW_SELECT = ("map_concat(fields, map('src', id, 'h', substr(sha2(repeat(id, 5000), 256), 1, 8)))"
               " AS fields")


def test_pipe_job_on_a_standalone_cluster_survives_an_executor_kill(standalone, redis_server,
                                                                     names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 12_000)
    target = names["stream"] + ":out"
    zipped = tmp_path / "eventbus-pyfiles.zip"
    made = subprocess.run([str(BIN / "eventbus"), "pyfiles", str(zipped)], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    python = lean_python(tmp_path / "lean", WITHOUT_EVENTBUS + WITHOUT_REDIS)
    no_package = subprocess.run([str(python), "-c", "import redis"], capture_output=True,
                                cwd=tmp_path)
    assert no_package.returncode != 0  # the cluster's Python alone could not run the job
    job = shutil.copy(ROOT / "spark_eventbus" / "jobs" / "pipe.py", tmp_path / "pipe.py")
    config = _copy_pipe_config(tmp_path / "pipe.toml", redis_server.url, names,
                               "maxEntriesPerTrigger = 4000", target, tmp_path / "chk")
    text = config.read_text().replace("map_concat(fields, map('src', id)) AS fields", SLOW_SELECT)
    config.write_text(text)
    cmd = [str(BIN / "spark-submit"), "--master", standalone.master,
           "--conf", f"spark.pyspark.python={python}",
           "--conf", f"spark.pyspark.driver.python={python}",
           "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m",
           "--conf", "spark.driver.memory=1g", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", f"spark.executor.extraJavaOptions={jvm_options()}",
           "--py-files", str(zipped), str(job), "--config", str(config),
           "--verbose"]  # keep Spark's log: the test looks for the lost executor in it
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    # The driver JVM's Python processes for streaming sources resolve --py-files under a
    # per-query directory where Spark 4 does not put them: the zip must also be on the PYTHONPATH
    # that spark-submit (the driver JVM) runs with. Executors need only --py-files.
    # PYSPARK_PYTHON: the driver's lookup of format("eventbus") runs it, not spark.pyspark.python.
    env.update(SPARK_HOME=SPARK_HOME, PYTHONPATH=str(zipped), PYSPARK_PYTHON=str(python))
    out_log, err_log = tmp_path / "driver.out", tmp_path / "driver.err"
    with open(out_log, "wb") as out, open(err_log, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=out, stderr=err, env=env)
        try:
            wait_for(lambda: (len(standalone.executor_pids()) == 2 and r.xlen(target) >= 3_000)
                     or proc.poll() is not None, 400, "both executors and the first batches")
            assert proc.poll() is None, out_log.read_text() + err_log.read_text()[-3000:]
            victim = standalone.executor_pids()[0]
            os.kill(victim, signal.SIGKILL)
            written_at_kill = r.xlen(target)
            proc.wait(600)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = err_log.read_text(errors="replace")
    assert proc.returncode == 0, out_log.read_text() + stderr[-3000:]
    assert written_at_kill < len(ids)  # the kill came mid-run
    assert "Lost executor" in stderr, stderr[-3000:]
    assert "Failed to lookup Python data source" not in stderr
    # Spark counts the rows it read, re-reads of the lost executor's cached blocks included
    assert json.loads(out_log.read_text().splitlines()[-1])["rows_read"] >= len(ids)
    # every entry exactly once in the eventbus sink, nothing pending in the source group
    copied = Counter(f[b"src"].decode() for _, f in r.xrange(target))
    assert copied == Counter(ids)
    assert pending(r, names["stream"], names["group"]) == 0
