"""Spark's worker daemon runs a full gc.collect() after every task; the connector freezes the
objects a worker has imported once, so that collection stays cheap (core/worker_gc.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from spark_eventbus.core.worker_gc import in_spark_worker, settle

pytestmark = pytest.mark.integration


def _probe(_: Iterator[int]) -> Iterator[tuple[bool, int, str]]:
    import gc
    import os

    from spark_eventbus.core.worker_gc import in_spark_worker, settle

    settle()
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:  # the daemon this worker forked from
        parent = f.read().replace(b"\0", b" ").decode()
    yield in_spark_worker(), gc.get_freeze_count(), parent


def test_spark_python_workers_are_settled_and_other_processes_left_alone(spark):
    """The tests' sessions fork their Python workers from the connector's daemon
    (``spark.python.daemon.module=spark_eventbus.daemon``: redis-py and the Redis layer loaded
    before the fork), and those workers are Spark's workers to the connector as much as
    ``pyspark.daemon``'s are (the jobs, notebooks, Spark Connect and standalone tests run
    Spark's own daemon)."""
    assert not in_spark_worker()  # pytest's process, as a user's driver or notebook
    before = gc.get_freeze_count()
    settle()
    assert gc.get_freeze_count() == before

    got = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_probe).collect()
    assert len(got) == 2
    for is_worker, frozen, parent in got:
        assert is_worker
        assert frozen > 10_000  # pyspark alone is ~30,000 container objects
        assert "-m spark_eventbus.daemon pyspark.worker" in parent, parent
