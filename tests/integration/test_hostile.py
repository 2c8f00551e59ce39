"""Hostile and odd input (issue 13): each case ends handled, dead-lettered with its reason, or
with a clear error naming the stream and the fix — never silent loss, never a wedged query."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from tests.integration.helpers import (
    checkpoint,
    pending,
    produce,
    run_available_now,
    stream_df,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.server]
MAX = 2**64 - 1


def _name() -> str:
    return f"h{uuid.uuid4().hex[:8]}:s"


def _ids(rows) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(row["id"] for row in rows)


@pytest.mark.parametrize("fields_type", ["string", "binary"])
def test_arbitrary_bytes_in_field_names_and_values(spark, redis_server, tmp_path, fields_type):
    r = redis_server.client()
    stream = _name()
    odd = [
        {b"\xff\xfe": b"\x00\x80\xff", b"ok": "café".encode()},
        {b"\xff": b"a", b"\xfe": b"b"},            # two names that decode to the same text
        {b"payload": b"\xc3\x28 not utf-8", b"\x00": b"\x00"},
        {"ключ".encode(): "значение".encode(), "🔑".encode(): b""},
    ]
    ids = [r.xadd(stream, f).decode() for f in odd] + produce(r, stream, 20)
    rows, _ = run_available_now(stream_df(spark, redis_server.url, stream, "g",
                                          fieldsType=fields_type), tmp_path)
    assert _ids(rows) == Counter(ids)
    assert pending(r, stream, "g") == 0
    by_id = {row["id"]: row["fields"] for row in rows}
    first = by_id[ids[0]]
    # names are text: invalid UTF-8 bytes become \xNN escapes
    if fields_type == "binary":  # values are the exact bytes
        assert bytes(first["ok"]) == "café".encode()
        assert bytes(first["\\xff\\xfe"]) == b"\x00\x80\xff"
    else:  # values are text too
        assert first["ok"] == "café" and first["\\xff\\xfe"] == "\x00\\x80\\xff"
    assert set(by_id[ids[1]]) == {"\\xff", "\\xfe"}  # distinct names stay distinct
    assert by_id[ids[3]]["ключ"] in ("значение", bytearray("значение".encode()))


def test_duplicate_and_empty_field_names(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream = _name()
    dup = r.execute_command("XADD", stream, "*", "a", "1", "a", "2", "b", "3").decode()
    empty = r.execute_command("XADD", stream, "*", "", "x", "payload", "{}").decode()
    ids = [dup, empty, *produce(r, stream, 10)]
    rows, _ = run_available_now(stream_df(spark, redis_server.url, stream, "g"), tmp_path)
    assert _ids(rows) == Counter(ids)
    by_id = {row["id"]: row["fields"] for row in rows}
    assert by_id[dup]["a"] == "2" and by_id[dup]["b"] == "3"  # the last value of a name wins
    assert by_id[empty][""] == "x"
    assert pending(r, stream, "g") == 0


def test_an_entry_of_64_mib_and_one_of_10000_fields(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream = _name()
    before = produce(r, stream, 5)
    big = r.xadd(stream, {"payload": b"x" * (64 << 20)}).decode()
    wide = r.xadd(stream, {f"f{i}": str(i) for i in range(10_000)}).decode()
    after = produce(r, stream, 5, start=5)
    df = stream_df(spark, redis_server.url, stream, "g").select(
        "id", F.length(F.col("fields")["payload"]).alias("size"), F.size("fields").alias("n"))
    rows, _ = run_available_now(df, tmp_path, timeout=600)
    assert _ids(rows) == Counter([*before, big, wide, *after])
    by_id = {row["id"]: row for row in rows}
    assert by_id[big]["size"] == 64 << 20 and by_id[wide]["n"] == 10_000
    assert pending(r, stream, "g") == 0


def test_ids_with_the_largest_millisecond_and_sequence_values(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream = _name()
    ids = produce(r, stream, 3)
    for explicit in (f"{MAX - 1}-{MAX}", f"{MAX}-0", f"{MAX}-{MAX - 1}", f"{MAX}-{MAX}"):
        ids.append(r.xadd(stream, {"n": "big"}, id=explicit).decode())
    df = stream_df(spark, redis_server.url, stream, "g", maxEntriesPerTrigger=2)
    rows, _ = run_available_now(df, tmp_path)
    assert _ids(rows) == Counter(ids)
    assert pending(r, stream, "g") == 0
    batch = spark.read.format("eventbus").option("url", redis_server.url) \
        .option("stream", stream).option("startId", f"{MAX}-1").load()
    assert sorted(row["id"] for row in batch.collect()) == [f"{MAX}-{MAX - 1}", f"{MAX}-{MAX}"]


def test_ids_ahead_of_the_server_clock(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream = _name()
    ahead = int(time.time() * 1000) + 86_400_000  # a producer whose clock is a day ahead
    ids = [r.xadd(stream, {"n": str(i)}, id=f"{ahead}-{i}").decode() for i in range(5)]
    ids += produce(r, stream, 5)  # '*' after them: Redis keeps IDs increasing
    df = stream_df(spark, redis_server.url, stream, "g", claimMinIdleMs=1000)
    rows, _ = run_available_now(df, tmp_path)
    assert _ids(rows) == Counter(ids)
    assert pending(r, stream, "g") == 0


def _running(spark, url, stream, tmp_path, **options):  # type: ignore[no-untyped-def]
    """A query with a short trigger into a memory table, and that table's name."""
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = (stream_df(spark, url, stream, "g", **options).writeStream.format("memory")
         .queryName(name).option("checkpointLocation", checkpoint(tmp_path))
         .trigger(processingTime="200 milliseconds").start())
    return q, name


def _seen(spark, name):  # type: ignore[no-untyped-def]
    return Counter(row["id"] for row in spark.table(name).collect())


def test_the_query_consumer_deleted_mid_query_loses_nothing(spark, redis_server, tmp_path):
    """XGROUP DELCONSUMER drops the consumer's pending entries; the claim plan still replays
    them, so the batch in flight is delivered and nothing is skipped."""
    r = redis_server.client()
    stream = _name()
    ids = produce(r, stream, 500)
    q, name = _running(spark, redis_server.url, stream, tmp_path, maxEntriesPerTrigger=100)
    try:
        wait_for(lambda: sum(_seen(spark, name).values()) >= 100, 120, "the first batch")
        r.execute_command("XGROUP", "DELCONSUMER", stream, "g", "spark-g")
        ids += produce(r, stream, 300, start=500)
        wait_for(lambda: set(_seen(spark, name)) >= set(ids) or q.exception() is not None,
                 180, "every entry")
        assert q.exception() is None
    finally:
        q.stop()
    seen = _seen(spark, name)
    assert set(seen) == set(ids) and max(seen.values()) <= 2  # at most the batch in flight twice


@pytest.mark.parametrize("change", ["group destroyed", "stream deleted", "replaced by a string"])
def test_the_stream_or_group_removed_mid_query_stops_with_a_clear_error(
        spark, redis_server, tmp_path, change):
    r = redis_server.client()
    stream = _name()
    produce(r, stream, 300)
    q, name = _running(spark, redis_server.url, stream, tmp_path, maxEntriesPerTrigger=100)
    try:
        wait_for(lambda: sum(_seen(spark, name).values()) >= 300, 120, "the entries")
        if change == "group destroyed":
            r.execute_command("XGROUP", "DESTROY", stream, "g")
        elif change == "stream deleted":
            r.delete(stream)
        else:  # one command: the query never sees the key missing in between
            r.set(stream, "not a stream")
        if change == "group destroyed":  # new entries the query must not skip silently
            produce(r, stream, 10, start=300)
        with pytest.raises(StreamingQueryException) as err:
            q.awaitTermination(120)
    finally:
        q.stop()
    text = str(err.value)
    assert stream in text, text[-2000:]
    expected = {"group destroyed": "group 'g'", "stream deleted": "no longer exists",
                "replaced by a string": "non-stream value"}[change]
    assert expected in text, text[-2000:]
    if change != "replaced by a string":  # how to resume without loss or a silent skip
        assert "XGROUP CREATE <stream> <group> <id>" in text


@pytest.mark.parametrize("change", ["stream deleted", "replaced by a string"])
def test_progress_of_a_stream_removed_since_the_last_claim_is_unknown_not_an_error(
        redis_server, change):
    # Spark asks for progress (reportLatestOffset) right after latestOffset, which may have
    # claimed in the background before the stream went away: progress must not end the query
    # with a bare "no such key"; the next claim ends it with the error that names the change.
    from spark_eventbus.redisio import ConnectionSpec, ConsumerOps, ensure_groups, probes

    r = redis_server.client()
    stream = _name()
    produce(r, stream, 3)
    ops = ConsumerOps(ConnectionSpec(redis_server.url), stream, "g", "c")
    ensure_groups([ops], ["earliest"])
    assert probes.stats([ops])[0].pending == 0
    r.delete(stream)
    if change == "replaced by a string":
        r.set(stream, "not a stream")
    stats = probes.stats([ops])[0]
    assert (stats.pending, stats.lag, stats.last_delivered) == (None, None, None)
