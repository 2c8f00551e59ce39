"""Spark Declarative Pipelines (``spark-pipelines run``) over Redis streams, with the project of
``examples/pipelines/`` as a user runs it: a streaming table read through a consumer group,
malformed orders to a dead-letter stream and clean ones to another stream through
``dp.create_sink(format="eventbus")`` + ``append_flow``, a per-minute materialized view.

Exactly once across repeated runs (each run reads what arrived since the last one) and across a
run killed with kill -9 while its sink was writing: every order reaches the table, the clean
stream and the dead-letter stream once, nothing stays pending. Each run is a fresh
``spark-pipelines`` JVM (its own Spark Connect server; three runs, ~3-7 min here), so this runs
in its own lane, ``make test-pipelines`` (marker ``sdp``), which CI runs; ``make test`` leaves
it out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.integration.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.sdp, pytest.mark.xdist_group("sdp")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pipelines"
CLI = Path(sys.executable).parent / "spark-pipelines"


def produce(r: redis.Redis, stream: str, start: int, count: int) -> tuple[set[int], set[int]]:
    """``count`` orders numbered from ``start``; every 20th is malformed. (good, bad) numbers."""
    good, bad = set(), set()
    pipe = r.pipeline(transaction=False)
    for n in range(start, start + count):
        if n % 20 == 7:
            pipe.xadd(stream, {"payload": "{not json", "n": str(n)})
            bad.add(n)
        else:
            pipe.xadd(stream, {"payload": json.dumps(
                {"order_id": n, "customer": f"c{n % 7}", "amount": n / 4})})
            good.add(n)
    pipe.execute()
    return good, bad


@pytest.fixture
def project(tmp_path: Path, redis_server, names) -> dict:  # type: ignore[no-untyped-def]
    """The example project copied under tmp_path, its storage there (an absolute URI, as
    Spark requires), and the environment its transformations read."""
    if not CLI.exists():
        pytest.fail(f"{CLI} is missing: install the test extras (pyspark[pipelines])")
    home = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, home, ignore=shutil.ignore_patterns(
        "storage", "spark-warehouse", "metastore_db", "derby.log"))
    spec = home / "spark-pipeline.yml"
    spec.write_text(re.sub(r"(?m)^storage: .*$", f"storage: file://{home / 'storage'}",
                           spec.read_text()))
    env = {**os.environ, "EVENTBUS_URL": redis_server.url, "EVENTBUS_STREAM": names["stream"],
           "PYSPARK_PYTHON": sys.executable, "PATH": f"{CLI.parent}:{os.environ['PATH']}"}
    return {"home": home, "env": env, "stream": names["stream"]}


def start(project: dict) -> subprocess.Popen[str]:
    log = open(project["home"] / f"run-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    # the command examples/pipelines/spark-pipeline.yml documents
    return subprocess.Popen([str(CLI), "run", "--conf", "spark.sql.catalogImplementation=hive"],
                            cwd=project["home"], env=project["env"],
                            stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def run(project: dict) -> None:
    proc = start(project)
    code = proc.wait(timeout=900)
    if code != 0:
        logs = sorted(project["home"].glob("run-*.log"))[-1].read_text()
        pytest.fail(f"spark-pipelines run exited {code}:\n{logs[-4000:]}")


def table_ids(project: dict, table: str, column: str = "order_id") -> list:
    """``column`` of the rows a streaming table has committed (its files in the sink's
    ``_spark_metadata`` log: files of a batch cut short by a kill are on disk but not there)."""
    import pyarrow.parquet as pq

    folder = project["home"] / "spark-warehouse" / table
    files: set[str] = set()
    for log in sorted((folder / "_spark_metadata").glob("[0-9]*"),  # N and N.compact
                      key=lambda f: int(f.name.split(".")[0])):
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            (files.add if entry["action"] == "add" else files.discard)(entry["path"])
    return [n for f in sorted(files)
            for n in pq.read_table(f.removeprefix("file:"), columns=[column])
            .column(column).to_pylist()]


def check_exactly_once(r: redis.Redis, project: dict, good: set[int], bad: set[int]) -> None:
    stream = project["stream"]
    clean = [json.loads(f[b"payload"])["order_id"] for _, f in r.xrange(f"{stream}:clean")]
    assert sorted(clean) == sorted(good), "each clean order once in the copy stream"
    dead = [int(f[b"n"]) for _, f in r.xrange(f"{stream}:dlq")]
    assert sorted(dead) == sorted(bad), "each malformed order once in the dead-letter stream"
    assert all(f[b"dlq.reason"] for _, f in r.xrange(f"{stream}:dlq"))
    assert sorted(table_ids(project, "orders")) == sorted(good), "each order once in the table"
    entries = [i.decode() for i, _ in r.xrange(stream)]
    assert sorted(table_ids(project, "orders_audit", "id")) == sorted(entries), \
        "each entry once in the table read without a group"
    assert r.xpending(stream, "pipeline")["pending"] == 0


def test_repeated_runs_and_a_run_killed_while_its_sink_writes_stay_exactly_once(
        redis_server, project):
    r = redis_server.client()
    good, bad = produce(r, project["stream"], 0, 400)
    run(project)
    check_exactly_once(r, project, good, bad)
    minutes = project["home"] / "spark-warehouse" / "orders_per_minute"
    assert any(minutes.glob("*.parquet")), "the materialized view was written"

    # The next run reads only what is new; it is killed with kill -9 once the copy flow (the
    # last to run) has a chunk in Redis, before Spark commits that batch. The run after it
    # finishes the work: the replayed batch's chunks are found by their markers.
    copied = r.xlen(f"{project['stream']}:clean")
    more_good, more_bad = produce(r, project["stream"], 400, 3_000)
    proc = start(project)
    try:
        wait_for(lambda: r.xlen(f"{project['stream']}:clean") > copied
                 or proc.poll() is not None, 600, "the copy flow to write its first chunk")
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    run(project)
    check_exactly_once(r, project, good | more_good, bad | more_bad)
