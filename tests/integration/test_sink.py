"""The sink against real Redis + Spark (issue 4): mapping, routing, idempotency, trimming,
dead letters, round trip, batch writes."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_eventbus import ConfigError, NotAStreamError, UnwritableRowError
from spark_eventbus.core.keys import sink_registry_key
from tests.integration.helpers import checkpoint, stream_df

pytestmark = pytest.mark.integration


def _sink(df: DataFrame, url: str, chk: str, **options: Any):  # type: ignore[no-untyped-def]
    w = df.writeStream.format("eventbus").option("url", url).option("checkpointLocation", chk)
    for k, v in options.items():
        w = w.option(k, str(v))
    return w


def _run_sink(df: DataFrame, url: str, tmp_path: Path, timeout: float = 300, **options: Any
              ) -> None:
    # A named query, as most are (and every Declarative Pipelines flow): Spark passes the name
    # to the sink as option 'queryName' (options.SPARK_OPTIONS), which must not be refused.
    q = (_sink(df, url, checkpoint(tmp_path), **options).queryName(f"sink_{uuid.uuid4().hex[:8]}")
         .trigger(availableNow=True).start())
    assert q.awaitTermination(timeout), "AvailableNow query did not finish"
    assert q.exception() is None, q.exception()


def _entries(r: redis.Redis, stream: str) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in r.xrange(stream)]


def _batch_of(marker_key: str) -> str:
    return marker_key.split(":eventbus:sink:")[1].split(":")[2]


def _sink_keys(r: redis.Redis, stream: str) -> list[str]:
    """The sink's marker sets in ``stream*``'s hash slots and the registries of their queries."""
    markers = sorted(k.decode() for k in r.scan_iter(match=f"{{{stream}*}}:eventbus:sink:*",
                                                     count=10_000))
    # marker key: {<tag>}:eventbus:sink:<stream>:<query>:<batch>:<partition>, parts
    # percent-escaped
    queries = {unquote(k.split(":eventbus:sink:")[1].split(":")[1]) for k in markers}
    return markers + sorted(sink_registry_key(q) for q in queries
                            if r.exists(sink_registry_key(q)))


# -- 1. field mapping, 100,000 rows through a streaming query ----------------------------------


@pytest.mark.server
def test_streaming_query_writes_every_row_with_the_field_mapping(spark, redis_server, names,
                                                                  tmp_path):
    n = 20_000  # four files, so four batches of several chunks each (more rows: make bench)
    base_ts = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    table = pa.table({
        "key": [f"k{i}" for i in range(n)],
        "text": [f"héllo {i}" if i % 10 else "" for i in range(n)],
        "blob": [bytes([i % 256, 0, 255]) for i in range(n)],
        "num": pa.array(range(n), pa.int64()),
        "price": [i + 0.25 for i in range(n)],
        "flag": [i % 2 == 0 for i in range(n)],
        "at": pa.array([base_ts + dt.timedelta(seconds=i) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "tags": [[f"t{i % 3}", "x"] for i in range(n)],
        "info": [{"a": i, "b": None if i % 2 else "s"} for i in range(n)],
        "opt": [None if i % 3 == 0 else f"o{i}" for i in range(n)],
    })
    src = tmp_path / "src"
    src.mkdir()
    for part in range(4):
        pq.write_table(table.slice(part * n // 4, n // 4), src / f"part-{part}.parquet")
    df = spark.readStream.schema(spark.read.parquet(str(src)).schema).parquet(str(src))
    _run_sink(df, redis_server.url, tmp_path, stream=names["stream"])

    r = redis_server.client()
    got = {e[b"key"].decode(): e for e in _entries(r, names["stream"])}
    assert len(got) == n and r.xlen(names["stream"]) == n
    for i in (0, 1, 2, 3, 9, 10, 12_345, n - 1):
        e = got[f"k{i}"]
        assert e[b"text"] == (f"héllo {i}" if i % 10 else "").encode()  # "" is a value
        assert e[b"blob"] == bytes([i % 256, 0, 255])  # raw bytes
        assert e[b"num"] == str(i).encode()
        assert float(e[b"price"]) == i + 0.25
        assert e[b"flag"] == (b"true" if i % 2 == 0 else b"false")
        ts = (base_ts + dt.timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert e[b"at"] == ts.encode()
        assert json.loads(e[b"tags"]) == [f"t{i % 3}", "x"]
        assert json.loads(e[b"info"]) == {"a": i, "b": None if i % 2 else "s"}
        assert (b"opt" in e) == (i % 3 != 0)  # a null column is left out of that entry


def test_fields_map_column_wins_over_other_columns(spark, redis_server, names):
    df = spark.createDataFrame(
        [({"a": "1", "b": "x"}, "ignored", 7)], "fields map<string,string>, other string, n int")
    df.write.format("eventbus").option("url", redis_server.url) \
        .option("stream", names["stream"]).mode("append").save()
    assert _entries(redis_server.client(), names["stream"]) == [{b"a": b"1", b"b": b"x"}]


# -- 2. routing ----------------------------------------------------------------------------------


@pytest.mark.server
def test_stream_column_routes_rows(spark, redis_server, names):
    targets = [f"{names['stream']}:{c}" for c in "abc"]
    df = spark.range(0, 3000, 1, 1).select(
        F.element_at(F.array(*[F.lit(t) for t in targets]), (F.col("id") % 3 + 1).cast("int"))
        .alias("stream"), F.col("id").cast("string").alias("n"))
    df.write.format("eventbus").option("url", redis_server.url).mode("append").save()
    r = redis_server.client()
    for k, t in enumerate(targets):
        ns = [int(e[b"n"]) for e in _entries(r, t)]
        assert sorted(ns) == list(range(k, 3000, 3))
        assert all(b"stream" not in e for e in _entries(r, t))
    # Row order within one task is kept per stream.
    assert [int(e[b"n"]) for e in _entries(r, targets[0])][:5] == [0, 3, 6, 9, 12]


def test_target_stream_errors_come_before_any_task(spark, redis_server, names):
    url = redis_server.url
    plain = spark.range(3).select(F.col("id").cast("string").alias("n"))
    with pytest.raises(Exception, match="no target stream: set option 'stream'"):
        plain.write.format("eventbus").option("url", url).mode("append").save()
    with pytest.raises(Exception, match="column 'stream' has type int"):
        plain.withColumn("stream", F.lit(1)).write.format("eventbus").option("url", url) \
            .mode("append").save()
    with pytest.raises(Exception, match="column 'd' has type interval day, which"):
        plain.withColumn("d", F.expr("INTERVAL '1' DAY")).write.format("eventbus") \
            .option("url", url).option("stream", names["stream"]).mode("append").save()
    with pytest.raises(Exception, match="only appends"):
        plain.write.format("eventbus").option("url", url).option("stream", names["stream"]) \
            .mode("overwrite").save()
    # this lane's Redis 7.0 has no XTRIM … ACKED: refused on the driver, nothing written
    with pytest.raises(Exception, match=r"option 'trimPolicy' = 'acked' needs XTRIM … ACKED"):
        plain.write.format("eventbus").option("url", url).option("stream", names["stream"]) \
            .option("maxLen", "5").option("trimPolicy", "acked").mode("append").save()
    assert redis_server.client().exists(names["stream"]) == 0
    redis_server.client().set(names["dlq"], "a string")
    with pytest.raises(Exception, match="holds a string, not a stream"):
        plain.write.format("eventbus").option("url", url).option("stream", names["dlq"]) \
            .mode("append").save()
    with pytest.raises(Exception, match="option 'maxLen' = '-5' is invalid"):
        plain.write.format("eventbus").option("url", url).option("stream", names["stream"]) \
            .option("maxLen", "-5").mode("append").save()
    assert redis_server.client().exists(names["stream"]) == 0  # nothing was written
    assert issubclass(NotAStreamError, Exception) and issubclass(ConfigError, ValueError)


# -- 3. exactly once across driver crashes: test_faults.py (one driver process, two queries) ----


# -- 4. task retry -----------------------------------------------------------------------------


@pytest.mark.server
def test_failed_write_task_is_retried_without_duplicates(spark, own_redis, names):
    own_redis.start()
    url, r = own_redis.url, own_redis.client()
    target = names["stream"]

    def fail_once_after_partial_write(n):  # type: ignore[no-untyped-def]
        import time as _time

        import redis as _redis
        from pyspark import TaskContext

        if n == 25_000 and TaskContext.get().attemptNumber() == 0:
            c = _redis.Redis.from_url(url)
            deadline = _time.monotonic() + 60
            while c.xlen(target) < 10_000 and _time.monotonic() < deadline:
                _time.sleep(0.05)  # let the sink write part of this task's rows first
            raise RuntimeError("injected failure after a partial write")
        return str(n)

    udf = F.udf(fail_once_after_partial_write, "string")
    df = spark.range(0, 60_000, 1, 2).select(udf("id").alias("n"))
    r.config_resetstat()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
    try:
        df.write.format("eventbus").option("url", url).option("stream", target) \
            .mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    ns = [int(e[b"n"]) for e in _entries(r, target)]
    assert len(ns) == 60_000 and sorted(ns) == list(range(60_000))
    stats = r.info("commandstats")
    # No entry was added twice, not even after save() returned: the failed attempt's Python
    # worker may still be writing out the input it had received, and finds its chunks' markers
    # or, once the commit has deleted them, the write's seal (before seals, CI saw 76,000).
    assert stats["cmdstat_xadd"]["calls"] == 60_000
    # The retry looked for the markers of chunks the first attempt had written and skipped
    # them: 60 chunks of 1,000 rows, each added by one transaction. An EXEC more is a
    # transaction whose WATCH the failed attempt's last chunk won (it ran nothing: XADD calls
    # are exactly 60,000 above), seen once on Valkey under CI load (65).
    assert stats["cmdstat_sismember"]["calls"] > 60
    assert stats["cmdstat_exec"]["calls"] >= 60
    assert _sink_keys(r, target) == []  # a finished batch write removes its markers


def _writer_rows(first: int, count: int) -> Any:
    return iter([pa.record_batch([pa.array([str(i) for i in range(first, first + count)])],
                                 names=["n"])])


def _writer_parts(url: str, stream: str) -> tuple[Any, Any]:
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_eventbus.options.writer import parse_sink_options
    from spark_eventbus.writes.sink_schema import plan_encoding

    return (parse_sink_options({"url": url, "stream": stream, "chunkSize": "1000"}),
            plan_encoding(StructType([StructField("n", StringType())]), stream_option=stream))


def test_a_late_attempt_of_a_committed_or_aborted_write_adds_nothing(redis_server, names):
    """A task attempt Spark has given up on (its task failed, or a speculative copy lost) can
    still be writing: its Python worker writes out the input it had received before the task
    ended. CI once saw such a worker write 16 chunks after `df.write` had returned, when the
    commit had deleted the markers that would have told it they were written. Here the late
    attempt is the sink's own task function called after the commit, as such a worker calls
    it: it adds nothing, and neither does one after an aborted write."""
    from spark_eventbus.writes.sink import EventBusBatchWriter, write_partition

    r, target = redis_server.client(), names["stream"]
    opts, plan = _writer_parts(redis_server.url, target)
    writer = EventBusBatchWriter(opts, plan)
    query = writer.write_id
    msgs = [write_partition(opts, plan, query, "0", p, _writer_rows(p * 3000, 3000))
            for p in (0, 1)]
    writer.commit(list(msgs))
    assert r.xlen(target) == 6000 and _sink_keys(r, target) == []
    late = write_partition(opts, plan, query, "0", 0, _writer_rows(0, 3000))
    assert late.written == ((target, 0),) and late.replayed_chunks == 0
    assert late.sealed_chunks == 3 and late.markers == ()
    assert r.xlen(target) == 6000  # nothing added twice
    # An aborted write: partition 1 failed; its late attempt (and partition 0's) add nothing
    # once the abort has returned. Its dead-letter stream is sealed too (nothing went there).
    from spark_eventbus.core.keys import sink_seal_key
    from spark_eventbus.options.writer import parse_sink_options

    opts = parse_sink_options({"url": redis_server.url, "stream": target, "chunkSize": "1000",
                               "deadLetterStream": names["dlq"]})
    aborted = EventBusBatchWriter(opts, plan)
    done = write_partition(opts, plan, aborted.write_id, "0", 0, _writer_rows(0, 2000))
    aborted.abort([done, None])
    assert r.get(sink_seal_key(names["dlq"], aborted.write_id)) == b"0"
    assert r.xlen(target) == 8000
    for p in (0, 1):
        write_partition(opts, plan, aborted.write_id, "0", p, _writer_rows(0, 2000))
    assert r.xlen(target) == 8000


def test_a_late_attempt_of_a_pruned_streaming_batch_adds_nothing(redis_server, names):
    """Streaming: batch N's markers go when batch N+1 commits; a late attempt of batch N (or
    older) after that adds nothing. The batch being replayed after a crash (N+1 here) still
    finds its markers, and the next batch writes."""
    from spark_eventbus.writes.sink import EventBusStreamWriter, write_partition

    r, target = redis_server.client(), names["stream"]
    opts, plan = _writer_parts(redis_server.url, target)
    writer = EventBusStreamWriter(opts, plan)
    query = f"query-{names['tag']}"
    for batch in range(3):
        writer.commit([write_partition(opts, plan, query, str(batch), 0,
                                       _writer_rows(batch * 1000, 1000))], batch)
    assert r.xlen(target) == 3000
    assert {_batch_of(k) for k in _sink_keys(r, target) if ":eventbus:sink:" in k} == {"2"}
    for batch in range(3):  # late attempts of pruned batches; batch 2 replayed
        late = write_partition(opts, plan, query, str(batch), 0,
                               _writer_rows(batch * 1000, 1000))
        assert (late.sealed_chunks, late.replayed_chunks) == ((1, 0) if batch < 2 else (0, 1))
    assert r.xlen(target) == 3000
    nxt = write_partition(opts, plan, query, "3", 0, _writer_rows(3000, 1000))
    assert nxt.written == ((target, 1000),) and r.xlen(target) == 4000


def test_a_write_id_without_a_query_id_is_pruned_not_sealed(redis_server, names):
    """Under Spark Connect a foreachBatch write's tasks see no streaming query id: its writeId
    and the batchId option key its markers, and a new checkpoint may use the same writeId from
    batch 0 again. So those batches are pruned as before and never sealed: the new query's
    batch 0 is written."""
    from spark_eventbus.core.keys import sink_seal_key
    from spark_eventbus.options.writer import parse_sink_options
    from spark_eventbus.writes.sink import EventBusBatchWriter, write_partition

    r, target = redis_server.client(), names["stream"]
    _, plan = _writer_parts(redis_server.url, target)
    write_id = f"copy-{names['tag']}"
    for batch in range(3):
        opts = parse_sink_options({"url": redis_server.url, "stream": target,
                                   "writeId": write_id, "batchId": str(batch)})
        msg = write_partition(opts, plan, write_id, str(batch), 0,
                              _writer_rows(batch * 1000, 1000), fenced=False)
        EventBusBatchWriter(opts, plan).commit([msg])
    assert r.xlen(target) == 3000 and r.exists(sink_seal_key(target, write_id)) == 0
    again = write_partition(opts, plan, write_id, "0", 0, _writer_rows(0, 1000), fenced=False)
    assert again.written == ((target, 1000),) and r.xlen(target) == 4000


# -- 5. trimming and marker pruning ------------------------------------------------------------


def _file_batches(spark: SparkSession, tmp_path: Path, files: int, rows: int) -> DataFrame:
    src = tmp_path / "files"
    src.mkdir(parents=True)
    now = int(time.time())
    for k in range(files):
        path = src / f"f{k}.parquet"
        pq.write_table(pa.table({"n": [str(k * rows + i) for i in range(rows)]}), path)
        # The file source orders files by modification time; files written in the same
        # millisecond would come in any order, so space them a second apart.
        os.utime(path, (now - files + k, now - files + k))
    return (spark.readStream.schema("n string").option("maxFilesPerTrigger", 1)
            .parquet(str(src)))


@pytest.mark.server
def test_maxlen_trims_and_markers_do_not_grow(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    df = _file_batches(spark, tmp_path, files=6, rows=2000)
    _run_sink(df, redis_server.url, tmp_path, stream=names["stream"], maxLen=3000)
    # Approximate trimming (the default) keeps at least maxLen and drops whole nodes only.
    assert 3000 <= r.xlen(names["stream"]) < 3000 + 100 + 1000
    keys = _sink_keys(r, names["stream"])
    # 6 batches ran (one write task each); only the last one's marker set and the registry
    # remain.
    markers = [k for k in keys if ":eventbus:sink:" in k]
    assert len(markers) == 1 and _batch_of(markers[0]) == "5", keys
    registry = [k for k in keys if k.endswith(":eventbus:sink-registry")]
    assert len(registry) == 1 and list(r.hgetall(registry[0])) == [b"5"]

    exact = names["stream"] + ":exact"
    _run_sink(_file_batches(spark, tmp_path / "x", 2, 500), redis_server.url, tmp_path,
              stream=exact, maxLen=123, trimApproximate="false")
    assert r.xlen(exact) == 123
    assert int(_entries(r, exact)[-1][b"n"]) == 999  # the newest are kept


@pytest.mark.server
def test_min_id_trims_older_entries(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    old_ms = int(time.time() * 1000) - 2 * 3600 * 1000
    for i in range(50):
        r.xadd(names["stream"], {"old": str(i)}, id=f"{old_ms}-{i}")
        r.xadd(names["stream"] + ":fixed", {"old": str(i)}, id=f"{1000 + i}-0")
    df = spark.range(10).select(F.col("id").cast("string").alias("n"))
    df.write.format("eventbus").option("url", redis_server.url).option("stream", names["stream"]) \
        .option("minId", "1h").option("trimApproximate", "false").mode("append").save()
    assert [e for e in _entries(r, names["stream"]) if b"old" in e] == []
    assert r.xlen(names["stream"]) == 10
    df.write.format("eventbus").option("url", redis_server.url) \
        .option("stream", names["stream"] + ":fixed").option("minId", "1025-0") \
        .option("trimApproximate", "false").mode("append").save()
    assert r.xlen(names["stream"] + ":fixed") == 25 + 10


# -- 6. rows that cannot be written ------------------------------------------------------------


@pytest.mark.server
def test_unwritable_rows_go_to_the_dead_letter_stream(spark, redis_server, names):
    r = redis_server.client()
    df = spark.createDataFrame(
        [("ok", "a", None), ("big", "x" * 5000, None), (None, None, None),
         ("nan", "b", float("nan")), ("ok2", "c", 1.5)],
        "k string, v string, d double").select(
            "k", "v", F.when(F.col("d").isNotNull(), F.array("d")).alias("arr"))
    df.write.format("eventbus").option("url", redis_server.url).option("stream", names["stream"]) \
        .option("deadLetterStream", names["dlq"]).option("maxPayloadBytes", "1000") \
        .mode("append").save()
    assert sorted(e[b"k"] for e in _entries(r, names["stream"])) == [b"ok", b"ok2"]
    dead = {(e.get(b"k") or b"-").decode(): e for e in _entries(r, names["dlq"])}
    assert set(dead) == {"big", "-", "nan"}
    assert dead["big"][b"dlq.reason"].startswith(b"entry of 5,005 bytes is over maxPayloadBytes")
    assert dead["big"][b"dlq.column"] == b"v" and dead["big"][b"v"] == b"x" * 5000
    assert dead["-"][b"dlq.reason"].startswith(b"every column is null")
    assert dead["nan"][b"dlq.reason"].startswith(b"unsupported value")
    assert dead["nan"][b"dlq.column"] == b"arr"
    assert all(e[b"dlq.target.stream"] == names["stream"].encode() for e in dead.values())

    fields = spark.createDataFrame([({"a": "1"},), ({},), (None,), ({"a": None},)],
                                   "fields map<string,string>")
    fields.write.format("eventbus").option("url", redis_server.url) \
        .option("stream", names["stream"] + ":f").option("deadLetterStream", names["dlq"] + ":f") \
        .mode("append").save()
    assert _entries(r, names["stream"] + ":f") == [{b"a": b"1"}]
    reasons = sorted(e[b"dlq.reason"].decode() for e in _entries(r, names["dlq"] + ":f"))
    assert [x.split(":")[0] for x in reasons] == [
        "fields['a'] is null", "the 'fields' map is empty", "the 'fields' map is null"]


def test_unwritable_row_without_dead_letter_stream_fails_the_batch(spark, redis_server, names):
    df = spark.createDataFrame([("ok", "a"), ("big", "x" * 5000)], "k string, v string")
    with pytest.raises(Exception) as info:
        df.coalesce(1).write.format("eventbus").option("url", redis_server.url) \
            .option("stream", names["stream"]).option("maxPayloadBytes", "1000") \
            .mode("append").save()
    text = str(info.value)
    assert "UnwritableRowError" in text and "row 1 (column 'v')" in text
    assert "over maxPayloadBytes=1,000" in text and "deadLetterStream" in text
    assert UnwritableRowError.__name__ in text


# -- 7. round trip -----------------------------------------------------------------------------


@pytest.mark.server
def test_round_trip_preserves_every_field_byte_for_byte(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    rng = random.Random(3)
    sent = []
    for i in range(2000):
        fields = {b"n": str(i).encode(), b"blob": rng.randbytes(rng.randint(0, 64)),
                  b"utf8": "žluťoučký kůň 🐎".encode(), b"empty": b""}
        r.xadd(names["stream"], fields)
        sent.append(fields)
    src = stream_df(spark, redis_server.url, names["stream"], names["group"],
                    fieldsType="binary")
    target = names["stream"] + ":copy"
    out = src.select(F.map_concat("fields", F.create_map(
        F.lit("src.id"), F.encode("id", "UTF-8"))).alias("fields"))
    _run_sink(out, redis_server.url, tmp_path, stream=target)

    back = stream_df(spark, redis_server.url, target, names["group"] + "b", fieldsType="binary")
    name = "roundtrip"
    q = (back.writeStream.format("memory").queryName(name).trigger(availableNow=True)
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    q.awaitTermination(300)
    rows = spark.table(name).collect()
    got = sorted(({k.encode(): bytes(v) for k, v in row["fields"].items()} for row in rows),
                 key=lambda f: int(f[b"n"]))
    source_ids = [i.decode() for i, _ in r.xrange(names["stream"])]
    assert len(got) == 2000
    for i, (want, have) in enumerate(zip(sent, got, strict=True)):
        assert have.pop(b"src.id").decode() == source_ids[i]
        assert have == want


# -- 8. batch write ----------------------------------------------------------------------------


def test_batch_write_of_a_static_dataframe(spark, redis_server, names):
    df = spark.createDataFrame([(i, f"name-{i}", bytes([i % 256])) for i in range(500)],
                               "id long, name string, raw binary")
    df.write.format("eventbus").option("url", redis_server.url).option("stream", names["stream"]) \
        .mode("append").save()
    got = sorted(_entries(redis_server.client(), names["stream"]), key=lambda e: int(e[b"id"]))
    assert got[7] == {b"id": b"7", b"name": b"name-7", b"raw": bytes([7])}
    assert len(got) == 500
    assert _sink_keys(redis_server.client(), names["stream"]) == []  # markers are gone


def test_write_id_outside_foreach_batch_is_refused(spark, redis_server, names):
    df = spark.range(3).select(F.col("id").cast("string").alias("n"))
    with pytest.raises(Exception, match="option 'writeId' = 'w' works inside foreachBatch"):
        df.write.format("eventbus").option("url", redis_server.url) \
            .option("stream", names["stream"]).option("writeId", "w").mode("append").save()
    assert redis_server.client().exists(names["stream"]) == 0


def test_a_copy_goes_to_the_stream_option_whatever_the_source_stream_column_says(
        spark, redis_server, names):
    """eventbus → eventbus to one target: the reader's `stream` column names the source; the
    sink's `stream` option overrides it (Kafka's rule for `topic`), and the column is not
    written. The `fields` map makes the copy byte-exact."""
    from tests.integration.helpers import produce

    r = redis_server.client()
    src, dst = names["stream"], names["stream"] + ":copy"
    produce(r, src, 50)
    df = spark.read.format("eventbus").option("url", redis_server.url).option("stream", src) \
        .load()
    assert "stream" in df.columns and {row.stream for row in df.select("stream").collect()} \
        == {src}
    df.write.format("eventbus").option("url", redis_server.url).option("stream", dst) \
        .mode("append").save()
    copied = r.xrange(dst)
    # the same entries, byte for byte (order is kept within a task, not across the read's two)
    assert sorted(sorted(f.items()) for _, f in copied) == \
        sorted(sorted(f.items()) for _, f in r.xrange(src))
    assert len(copied) == 50 and all(b"stream" not in f for _, f in copied)
