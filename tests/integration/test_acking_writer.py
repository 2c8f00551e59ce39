"""AckingBatchWriter against real Redis + Spark (issue 3, items 1-6)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import DataFrame

from spark_eventbus import AckingBatchWriter, ConfigError
from tests.integration.helpers import checkpoint, pending, produce, stream_df

pytestmark = pytest.mark.integration
SCHEMA = "n INT, name STRING"


def _payload_with_bad(every: int):  # type: ignore[no-untyped-def]
    def payload(i: int) -> str:
        return "{broken" if i % every == 0 else json.dumps({"n": i, "name": f"item-{i}"})
    return payload


def _run(df: DataFrame, writer: AckingBatchWriter, chk: str, timeout: float = 300):  # type: ignore[no-untyped-def]
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", chk)
         .trigger(availableNow=True).start())
    q.awaitTermination(timeout)
    return q


def _parquet_handler(out: str):  # type: ignore[no-untyped-def]
    def handle(batch: DataFrame, batch_id: int) -> None:
        batch.select("id", "value.*").write.mode("append").parquet(out)
    return handle


def _parquet_pipe(spark, url: str, names: dict[str, str], tmp_path, **options: object) -> str:  # type: ignore[no-untyped-def]
    """Reader in ackMode=manual + AckingBatchWriter appending good rows to parquet; run it
    with AvailableNow and return the parquet path."""
    out = str(tmp_path / "out")
    writer = AckingBatchWriter(_parquet_handler(out), url=url, group=names["group"],
                               dead_letter_stream=names["dlq"])
    df = stream_df(spark, url, names["stream"], names["group"], ackMode="manual",
                   valueSchema=SCHEMA, **options)
    q = _run(df, writer, checkpoint(tmp_path))
    assert q.exception() is None
    return out


@pytest.mark.server
def test_good_rows_arrive_and_nothing_stays_pending(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 5_000)
    out = _parquet_pipe(spark, redis_server.url, names, tmp_path, maxEntriesPerTrigger=2000)
    got = [row["id"] for row in spark.read.parquet(out).collect()]
    assert sorted(got) == sorted(ids)
    assert pending(r, names["stream"], names["group"]) == 0
    assert r.exists(names["dlq"]) == 0


@pytest.mark.server
def test_malformed_rows_are_dead_lettered_once_and_never_reach_the_handler(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 20_000, payload=_payload_with_bad(20))
    bad = {ids[i] for i in range(0, 20_000, 20)}
    out = _parquet_pipe(spark, redis_server.url, names, tmp_path, maxEntriesPerTrigger=5000)
    handled = {row["id"] for row in spark.read.parquet(out).collect()}
    assert handled == set(ids) - bad  # the handler never saw a malformed row
    dlq = r.xrange(names["dlq"])
    assert len(dlq) == len(bad) == 1_000
    by_source = {f[b"dlq.source.id"].decode(): f for _, f in dlq}
    assert set(by_source) == bad
    one = by_source[ids[0]]
    assert one[b"payload"] == b"{broken" and one[b"n"] == b"0"  # original fields, as stored
    assert b"malformed JSON" in one[b"dlq.reason"]
    assert one[b"dlq.source.stream"].decode() == names["stream"]
    assert one[b"dlq.group"].decode() == names["group"]
    assert one[b"dlq.delivery_count"] == b"1"
    assert pending(r, names["stream"], names["group"]) == 0
    # Replaying the same rows moves nothing twice.
    again = (spark.read.format("eventbus").option("url", redis_server.url)
             .option("stream", names["stream"]).option("valueSchema", SCHEMA).load())
    AckingBatchWriter(lambda d, b: None, url=redis_server.url, group=names["group"],
                      dead_letter_stream=names["dlq"])(again, 99)
    assert r.xlen(names["dlq"]) == 1_000


@pytest.mark.server
def test_handler_failure_acks_nothing_and_the_batch_replays_after_restart(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 2_000, payload=_payload_with_bad(50))
    bad = {ids[i] for i in range(0, 2_000, 50)}
    out = str(tmp_path / "out")
    chk = checkpoint(tmp_path)
    fail = {"on": True}
    seen: list[int] = []

    def handle(batch: DataFrame, batch_id: int) -> None:
        if batch_id == 1 and fail["on"]:
            raise RuntimeError("handler exploded on batch 1")
        seen.append(batch_id)
        batch.select("id").write.mode("append").parquet(out)

    def query():  # type: ignore[no-untyped-def]
        writer = AckingBatchWriter(handle, url=redis_server.url, group=names["group"],
                                   dead_letter_stream=names["dlq"])
        df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                       ackMode="manual", valueSchema=SCHEMA, maxEntriesPerTrigger=500)
        return df, writer

    df, writer = query()
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", chk)
         .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="handler exploded on batch 1"):
        q.awaitTermination(300)
    done_first = {row["id"] for row in spark.read.parquet(out).collect()}
    # batch 1 (500 entries, maxEntriesPerTrigger) acked nothing: all of it is still pending
    assert pending(r, names["stream"], names["group"]) >= 500
    assert 0 < len(done_first) < 1_000
    fail["on"] = False
    df, writer = query()
    q = _run(df, writer, chk)
    assert q.exception() is None
    assert 1 in seen  # batch 1 replayed
    got = [row["id"] for row in spark.read.parquet(out).collect()]
    assert sorted(got) == sorted(set(ids) - bad)  # every good row, once
    assert r.xlen(names["dlq"]) == len(bad)  # no dead-letter duplicates
    assert pending(r, names["stream"], names["group"]) == 0


def test_is_valid_rule_routes_failing_rows_to_the_dead_letter_stream(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 300)
    out = str(tmp_path / "out")
    writer = AckingBatchWriter(_parquet_handler(out), url=redis_server.url, group=names["group"],
                               dead_letter_stream=names["dlq"], is_valid="value.n % 3 <> 0")
    df = stream_df(spark, redis_server.url, names["stream"], names["group"], ackMode="manual",
                   valueSchema=SCHEMA)
    q = _run(df, writer, checkpoint(tmp_path))
    assert q.exception() is None
    assert sorted(row["n"] for row in spark.read.parquet(out).collect()) == [
        i for i in range(300) if i % 3]
    dlq = r.xrange(names["dlq"])
    assert {f[b"dlq.source.id"].decode() for _, f in dlq} == {ids[i] for i in range(0, 300, 3)}
    assert all(b"is_valid rule failed" in f[b"dlq.reason"] for _, f in dlq)
    assert pending(r, names["stream"], names["group"]) == 0
    assert writer.last_report is not None and writer.last_report.dead_lettered > 0


def test_malformed_rows_without_dead_letter_stream_fail_the_batch_and_drop_nothing(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 100, payload=_payload_with_bad(10))
    handled: list[int] = []
    writer = AckingBatchWriter(lambda d, b: handled.append(d.count()), url=redis_server.url,
                               group=names["group"])
    df = stream_df(spark, redis_server.url, names["stream"], names["group"], ackMode="manual",
                   valueSchema=SCHEMA)
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", checkpoint(tmp_path))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception) as err:
        q.awaitTermination(300)
    text = str(err.value)
    assert "10 malformed rows" in text and "dead_letter_stream" in text and ids[0] in text
    assert handled == []  # the handler did not run
    assert pending(r, names["stream"], names["group"]) == 100  # nothing acked, nothing dropped


@pytest.mark.server
def test_acks_run_on_executors_one_xack_per_chunk(spark, own_redis, names, tmp_path):
    own_redis.start()
    r = own_redis.client()
    produce(r, names["stream"], 1_000)
    writer = AckingBatchWriter(lambda d, b: None, url=own_redis.url, group=names["group"],
                               ack_batch_size=100)
    df = stream_df(spark, own_redis.url, names["stream"], names["group"], ackMode="manual",
                   numPartitions=2)
    r.config_resetstat()
    q = _run(df, writer, checkpoint(tmp_path))
    assert q.exception() is None
    calls = int(r.info("commandstats").get("cmdstat_xack", {}).get("calls", 0))
    batches = sum(1 for p in q.recentProgress if p["numInputRows"])
    assert 10 <= calls <= 10 + 2 * batches  # 1,000 IDs in chunks of 100, per partition
    assert pending(r, names["stream"], names["group"]) == 0


def test_invalid_arguments_are_refused_with_the_rule():
    with pytest.raises(ConfigError, match="option 'ackBatchSize' = '0' is invalid"):
        AckingBatchWriter(lambda d, b: None, group="g", ack_batch_size=0)
    with pytest.raises(ConfigError, match="option 'group' is required"):
        AckingBatchWriter(lambda d, b: None, group="")
    with pytest.raises(ConfigError, match=r"'dead_leter_stream' \(did you mean 'deadLetterStream'"):
        AckingBatchWriter(lambda d, b: None, group="g", dead_leter_stream="x")
    with pytest.raises(ConfigError, match="'stream' does not apply to AckingBatchWriter"):
        AckingBatchWriter(lambda d, b: None, group="g", stream="s")
    with pytest.raises(ConfigError, match="is not callable"):
        AckingBatchWriter("nope", group="g")  # type: ignore[arg-type]
    assert "secret" not in repr(AckingBatchWriter(lambda d, b: None, group="g",
                                                  url="redis://:secret@h:1/0"))

