"""Spark's worker daemon runs a full gc.collect() after every task; the connector freezes the
objects a worker has imported once, so that collection stays cheap (core/worker_gc.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from spark_eventbus.core.worker_gc import in_spark_worker, settle

pytestmark = pytest.mark.integration


def _probe(_: Iterator[int]) -> Iterator[tuple[bool, int]]:
    import gc

    from spark_eventbus.core.worker_gc import in_spark_worker, settle

    settle()
    yield in_spark_worker(), gc.get_freeze_count()


def test_spark_python_workers_are_settled_and_other_processes_left_alone(spark):
    assert not in_spark_worker()  # pytest's process, as a user's driver or notebook
    before = gc.get_freeze_count()
    settle()
    assert gc.get_freeze_count() == before

    got = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_probe).collect()
    assert len(got) == 2
    for is_worker, frozen in got:
        assert is_worker
        assert frozen > 10_000  # pyspark alone is ~30,000 container objects
