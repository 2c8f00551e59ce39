"""Text that is not valid Unicode, from real producers (issue 27): a JavaScript producer's
``JSON.stringify`` of a string cut inside an emoji (a lone surrogate escape), CESU-8 surrogate
bytes, and Spark strings holding bytes that are not UTF-8. Each entry is delivered with its
``error`` or dead-lettered with its reason; the query never stops, nothing stays pending."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter
from tests.integration.helpers import checkpoint, pending, produce, stream_df

pytestmark = pytest.mark.integration

SCHEMA = "order_id BIGINT, customer STRING, tags ARRAY<STRING>, attrs MAP<STRING, STRING>"
# What a Node.js producer writes for {customer: '🚀🚀'.slice(0, 3)}: valid JSON, lone \ud83d.
JS_CUT_EMOJI = '{"order_id":2,"customer":"\U0001F680\\ud83d","amount":12.5}'
HOSTILE = {
    "js-cut-emoji": (JS_CUT_EMOJI.encode(), 'customer: text holds a lone surrogate \\ud83d'),
    "cesu8-bytes": (b'{"order_id":3,"customer":"\xed\xa0\xbd"}', "not valid UTF-8 text"),
    "in-array": (b'{"order_id":4,"tags":["ok","\\udc00"]}', "tags[1]: text holds a lone"),
    "map-key": (b'{"order_id":5,"attrs":{"\\ud800":"v"}}', 'attrs["\\ud800"]: text holds'),
}


def _add_hostile(r, stream: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {r.xadd(stream, {"payload": body}).decode(): expected
            for body, expected in HOSTILE.values()}


def test_lone_surrogate_entries_are_delivered_with_their_error_and_the_rest_flows(
        spark, redis_server, tmp_path, names):
    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    before = produce(r, stream, 30)
    bad = _add_hostile(r, stream)
    after = produce(r, stream, 30, start=30)
    df = stream_df(spark, redis_server.url, stream, group, valueSchema=SCHEMA,
                   maxEntriesPerTrigger=7, numPartitions=2)
    chk = checkpoint(tmp_path)
    rows, _ = _run(df, chk)
    assert Counter(row["id"] for row in rows) == Counter(before + list(bad) + after)
    for row in rows:
        if row["id"] in bad:
            assert row["value"] is None
            assert bad[row["id"]] in row["error"], row["error"]
        else:
            assert row["error"] is None and row["value"] is not None
    assert pending(r, stream, group) == 0
    # The next entries, and another hostile one, flow through the same checkpoint.
    more = produce(r, stream, 5, start=60) + list(_add_hostile(r, stream))
    rows, _ = _run(df, chk)
    assert Counter(row["id"] for row in rows) == Counter(more)
    assert pending(r, stream, group) == 0


def _run(df, chk: str):  # type: ignore[no-untyped-def]
    """AvailableNow through foreachBatch (a memory sink cannot restart from a checkpoint)."""
    rows: list = []  # type: ignore[type-arg]
    q = (df.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
         .trigger(availableNow=True).option("checkpointLocation", chk).start())
    assert q.awaitTermination(300), "AvailableNow query did not finish"
    assert q.exception() is None, q.exception()
    return rows, q


def test_the_acking_writer_dead_letters_lone_surrogate_entries_with_their_reason(
        spark, redis_server, tmp_path, names):
    r = redis_server.client()
    stream, group, dlq = names["stream"], names["group"], names["dlq"]
    good = produce(r, stream, 20)
    bad = _add_hostile(r, stream)
    handled: list[str] = []

    def handle(df, batch_id):  # type: ignore[no-untyped-def]
        handled.extend(row["id"] for row in df.select("id").collect())

    df = stream_df(spark, redis_server.url, stream, group, valueSchema=SCHEMA, ackMode="manual")
    q = (df.writeStream.foreachBatch(
        AckingBatchWriter(handle, url=redis_server.url, group=group, dead_letter_stream=dlq))
        .trigger(availableNow=True).option("checkpointLocation", checkpoint(tmp_path)).start())
    assert q.awaitTermination(300) and q.exception() is None, q.exception()
    assert sorted(handled) == sorted(good)
    letters = {f[b"dlq.source.id"].decode(): f[b"dlq.reason"].decode()
               for _, f in r.xrange(dlq)}
    assert set(letters) == set(bad)
    for entry_id, expected in bad.items():
        assert expected in letters[entry_id], letters[entry_id]
    # The dead letter keeps the original payload byte for byte.
    originals = {f[b"dlq.source.id"].decode(): f[b"payload"] for _, f in r.xrange(dlq)}
    assert sorted(originals.values()) == sorted(body for body, _ in HOSTILE.values())
    assert pending(r, stream, group) == 0


def test_the_sink_writes_non_utf8_strings_byte_for_byte_and_dead_letters_them_inside_json(
        spark, redis_server, names):
    r = redis_server.client()
    out, dlq = names["stream"], names["dlq"]
    raw = F.unhex(F.lit("61EDA0BD62")).cast("string")  # 'a', CESU-8 surrogate, 'b'
    df = spark.range(3).select(
        F.col("id").cast("string").alias("n"),
        F.when(F.col("id") == 0, raw).otherwise(F.lit("plain")).alias("text"),
        F.struct(F.when(F.col("id") == 1, raw).otherwise(F.lit("ok")).alias("s")).alias("doc"))
    (df.write.format("eventbus").option("url", redis_server.url).option("stream", out)
     .option("deadLetterStream", dlq).mode("append").save())
    written = {f[b"n"]: f for _, f in r.xrange(out)}
    assert set(written) == {b"0", b"2"}
    assert written[b"0"][b"text"] == b"a\xed\xa0\xbdb"
    assert json.loads(written[b"2"][b"doc"]) == {"s": "ok"}
    [(_, letter)] = r.xrange(dlq)
    assert letter[b"n"] == b"1" and letter[b"dlq.column"] == b"doc"
    assert b"not valid UTF-8" in letter[b"dlq.reason"], letter
