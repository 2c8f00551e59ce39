"""The connector's Python daemon (spark_eventbus/daemon.py) loads only what starts no thread
before Spark's daemon forks its workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import spark_eventbus.daemon as daemon
from spark_eventbus.core import worker_gc

_PROBE = """
import json, os, sys
from spark_eventbus.daemon import preload
before = len(os.listdir("/proc/self/task"))
preload()
print(json.dumps({"threads": [before, len(os.listdir("/proc/self/task"))],
                  "loaded": sorted(m for m in ("pyspark.worker", "redis", "hiredis",
                                               "spark_eventbus.redisio.wire", "pyarrow",
                                               "numpy", "pandas") if m in sys.modules)}))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads counted in /proc")
def test_the_preload_starts_no_thread_and_leaves_pyarrow_to_the_workers():
    run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=120, check=True)
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["threads"] == [1, 1], run.stderr  # a forked child has only the forking thread
    loaded = set(got["loaded"])
    assert {"pyspark.worker", "redis", "spark_eventbus.redisio.wire"} <= loaded, loaded
    assert not loaded & {"pyarrow", "numpy", "pandas"}, loaded  # they start threads


def test_workers_forked_from_it_count_as_spark_s_workers():
    assert daemon.__name__ == worker_gc.DAEMON_MODULE
