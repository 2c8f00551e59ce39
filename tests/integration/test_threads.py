"""Writes and streaming queries started from other Python threads (issue 29).

Spark looks ``format("eventbus")`` up, for ``df.write`` and ``writeStream…start()``, through the
calling JVM thread's active session (DataSource.scala:702 in Spark 4.3.0); a new Python thread has
a new JVM thread without one. ``spark_eventbus.register(spark)`` sets it for the calling thread.
docs/troubleshooting.md has the whole story.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter, register
from tests.integration.helpers import checkpoint, pending, produce, stream_df

pytestmark = pytest.mark.integration


def _numbers(spark: SparkSession, n: int, target: str) -> DataFrame:
    """``n`` rows ``{"n": i, "target": target}``. Built on the calling thread: PySpark's
    ``createDataFrame`` sets the active session of the thread it runs in, which would hide the
    failure these tests are about when a worker thread built its own DataFrame."""
    return spark.range(n).select(F.col("id").cast("string").alias("n"),
                                 F.lit(target).alias("target"))


def _save(df: DataFrame, url: str, stream: str) -> None:
    df.write.format("eventbus").option("url", url).option("stream", stream) \
        .mode("append").save()


def test_a_new_thread_without_register_fails_as_spark_does(spark, redis_server, names,
                                                           tmp_path):
    """The cause, pinned: when a Spark release looks Python data sources up through the
    DataFrame's own session, this fails — then say from which version in
    docs/troubleshooting.md and keep register()'s thread step for older ones."""
    r = redis_server.client()
    df = _numbers(spark, 10, names["stream"])

    def write() -> None:
        _save(df, redis_server.url, names["stream"])

    def start_stream() -> None:
        events = stream_df(spark, redis_server.url, names["stream"] + ":in", names["group"])
        events.writeStream.format("eventbus").option("url", redis_server.url) \
            .option("stream", names["stream"]).option("checkpointLocation", checkpoint(tmp_path)) \
            .trigger(availableNow=True).start()

    for work in (write, start_stream):
        # one new Python thread, so one new JVM thread
        with ThreadPoolExecutor(1) as pool, \
                pytest.raises(Exception, match=r"DATA_SOURCE_NOT_FOUND.*eventbus"):
            pool.submit(work).result()
    _save(df, redis_server.url, names["stream"])  # the thread that built the session: works
    assert r.xlen(names["stream"]) == 10


def test_parallel_writes_from_a_thread_pool_land_exactly_once(spark, redis_server, names):
    r = redis_server.client()
    targets = [f"{names['stream']}:{i}" for i in range(4)]
    frames = {t: _numbers(spark, 500, t) for t in targets}

    def write(target: str) -> str:
        _save(frames[target], redis_server.url, target)
        return target

    # each of the 4 threads runs register() once, before its first task
    with ThreadPoolExecutor(4, initializer=register, initargs=(spark,)) as pool:
        assert sorted(pool.map(write, targets)) == targets
    for t in targets:
        entries = [f for _, f in r.xrange(t)]
        assert Counter(int(f[b"n"]) for f in entries) == Counter(range(500)), t
        assert {f[b"target"].decode() for f in entries} == {t}


def test_streaming_queries_started_from_threads(spark, redis_server, names, tmp_path: Path):
    """Two queries, each started from its own thread after register(): the eventbus sink
    (``writeStream.format``), and ``foreachBatch(AckingBatchWriter)`` whose handler writes with
    ``df.write.format("eventbus")`` (it runs on the query's own thread, which has the session)."""
    r = redis_server.client()
    url = redis_server.url
    sources = {k: f"{names['stream']}:{k}" for k in ("sink", "acking")}
    ids = {k: produce(r, s, 600) for k, s in sources.items()}
    copies = {k: s + ":copy" for k, s in sources.items()}

    def handler(df: DataFrame, batch_id: int) -> None:
        df.select(F.map_concat("fields", F.create_map(F.lit("src"), "id")).alias("fields")) \
            .write.format("eventbus").option("url", url).option("stream", copies["acking"]) \
            .option("writeId", "acking-copy").mode("append").save()

    def run(kind: str) -> str | None:
        register(spark)
        events = stream_df(spark, url, sources[kind], names["group"],
                           maxEntriesPerTrigger=300,
                           **({"ackMode": "manual"} if kind == "acking" else {}))
        if kind == "sink":
            writer = events.select(F.map_concat("fields", F.create_map(F.lit("src"), "id"))
                                   .alias("fields")).writeStream.format("eventbus") \
                .option("url", url).option("stream", copies["sink"])
        else:
            writer = events.writeStream.foreachBatch(
                AckingBatchWriter(handler, url=url, group=names["group"]))
        q = writer.option("checkpointLocation", checkpoint(tmp_path)) \
            .trigger(availableNow=True).start()
        assert q.awaitTermination(300), f"{kind}: the AvailableNow query did not finish"
        return None if q.exception() is None else str(q.exception())

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(run, ["sink", "acking"])) == [None, None]
    for kind in ("sink", "acking"):
        copied = Counter(f[b"src"].decode() for _, f in r.xrange(copies[kind]))
        assert copied == Counter(ids[kind]), kind  # every entry, exactly once
        assert pending(r, sources[kind], names["group"]) == 0, kind
