"""Streaming reads without a consumer group (no ``group`` option): positions in Spark's
checkpoint, nothing written to Redis, a read-only ACL user enough; losses reported."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_eventbus import ConfigError, DataLossError, EventBusConnectionError
from spark_eventbus.core.positions import PACK_FROM, PositionOffset
from spark_eventbus.nogroup.position_reader import PositionStreamReader
from spark_eventbus.options.reader import parse_reader_options
from tests.harness.redis_sentinel import ReplicaServer
from tests.harness.redis_server import RedisServer, free_port
from tests.integration.helpers import (
    checkpoint,
    input_rows,
    latest_offsets,
    produce,
    wait_for,
)

pytestmark = pytest.mark.integration


def _reader(url: str, stream: str, **extra: str) -> PositionStreamReader:
    opts = parse_reader_options({"url": url, "stream": stream, "startingPosition": "earliest",
                                 **extra}, streaming=True)
    return PositionStreamReader(opts, None)  # type: ignore[arg-type]


def _read(reader: PositionStreamReader, start: dict, end: dict) -> list[str]:
    """The IDs the batch ``start``..``end`` holds, read as Spark's tasks read it."""
    ids: list[str] = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            ids += pa.Table.from_batches([batch]).column("id").to_pylist()
    return ids


def _read_only_user(r: redis.Redis, port: int, keys: str) -> tuple[str, str]:
    """The issue's analytics user: ``+@read +@connection`` on ``keys``; (name, URL)."""
    name = f"ro{uuid.uuid4().hex[:8]}"
    r.execute_command("ACL", "SETUSER", name, "on", ">pw", f"~{keys}", "+@read",
                      "+@connection")
    return name, f"redis://{name}:pw@127.0.0.1:{port}/0"


def _denied(r: redis.Redis, user: str) -> list[Any]:
    return [e for e in r.acl_log(count=1000) if e.get("username") == user]


def test_batches_cover_each_entry_once_within_the_budget_and_replay_the_same(redis_server):
    """Planned on the driver, read as tasks read: batches of at most maxEntriesPerTrigger
    over a backlog (the driver finds each end with XRANGE, the next one while a batch runs)
    and then at the stream's end (its count from XINFO STREAM, nothing read); a batch read
    again gives the same entries."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    produced = produce(r, stream, 2_500)
    reader = _reader(redis_server.url, stream, numPartitions="3")
    start = reader.initialOffset()
    got: list[str] = []
    sizes = []
    while True:
        planner = reader.planner
        planner.join_ahead()  # what the look-ahead found while the batch "ran"
        found = planner.ahead.get(stream)
        end = reader.latestOffset(start, ReadMaxRows(1_000))
        if end == start:
            break
        batch = _read(reader, start, end)
        if sizes and len(batch) == 1_000:  # a whole batch after the first: found ahead
            assert found is not None, "the look-ahead found nothing"
            assert end["streams"][stream].startswith(found.ids[999] + " ")
        else:  # the first batch, or the last (the rest, fewer than a batch)
            assert found is None
        assert _read(reader, start, end) == batch  # a replay reads the very same entries
        sizes.append(len(batch))
        got += batch
        start = end
    assert sorted(got) == sorted(produced) and len(got) == len(set(got))
    assert sizes == [1_000, 1_000, 500]
    more = produce(r, stream, 7_000, 2_500)
    end = reader.latestOffset(start, ReadMaxRows(10_000))  # fits: to the stream's end
    assert sorted(_read(reader, start, end)) == sorted(more)
    assert len(reader.partitions(start, end)) == 3  # one stream's range split in time
    assert reader.latestOffset(end, ReadMaxRows(10_000)) is end  # nothing new: the same object
    assert r.xinfo_groups(stream) == []


def test_ids_after_many_streams_come_in_bounded_pages_and_rounds(redis_server, monkeypatch):
    """tails.ids_after_each: each stream's IDs after a position, at most its count, up to its
    last ID, in XRANGE pages of at most `page` and pipelined rounds of at most
    ENTRIES_PER_ROUND entries asked; a missing stream has none."""
    from spark_eventbus.core.connection import ConnectionSpec
    from spark_eventbus.redisio import tails

    r = redis_server.client()
    a, b = (f"ng:{uuid.uuid4().hex[:8]}" for _ in range(2))
    ia, ib = produce(r, a, 10), produce(r, b, 4)
    monkeypatch.setattr(tails, "ENTRIES_PER_ROUND", 5)
    calls = int(r.info("commandstats").get("cmdstat_xrange", {}).get("calls", 0))
    got = tails.ids_after_each(ConnectionSpec(redis_server.url), [
        (a, ia[0], "+", 7), (b, "0-0", "+", 20), (a, ia[1], ia[4], 9), ("ng:none", "0-0", "+", 3)],
        page=3)
    assert got == [ia[1:8], ib, ia[2:5], []]
    # XRANGEs: a 3+3+1, b 3+1 (a short page: its end), a up to ia[4] 3+0, the missing one 1
    assert int(r.info("commandstats")["cmdstat_xrange"]["calls"]) - calls == 8


def test_batches_keep_the_byte_bound_stream_by_stream(redis_server):
    """maxBytesPerTrigger without a group: the bytes are shared in order, stream by stream (the
    driver sizes each stream's entries), a batch never empty for want of room (one oversized
    entry goes alone), and every entry is read once."""
    r = redis_server.client()
    a, b = (f"ng:{uuid.uuid4().hex[:8]}" for _ in range(2))
    produced = [f"{a}/{i}" for i in produce(r, a, 5, payload=lambda i: "z" * 1000)] + [
        f"{b}/{i}" for i in produce(r, b, 2, payload=lambda i: "y" * 3000)]  # ~1 KB, ~3 KB
    reader = _reader(redis_server.url, f"{a},{b}", maxBytesPerTrigger="2500")
    start, got, sizes = reader.initialOffset(), [], []
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) is not start:
        batch = _read_keys(reader, start, end)
        got += batch
        sizes.append(len(batch))
        start = end
    assert sorted(got) == sorted(produced) and len(got) == len(set(got))
    assert [n for n in sizes if n] == [2, 2, 1, 1, 1]


def test_no_look_ahead_where_the_rest_fits_the_next_batch(redis_server):
    """A batch cut short whose stream holds less than a share more (its count known) starts no
    look-ahead: the next batch goes to the stream's end without a read. One that holds more
    does, and the next batch ends where it found."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    produced = produce(r, stream, 1_500)
    reader = _reader(redis_server.url, stream)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(1_000))
    assert reader.planner._ahead_thread is None  # 500 left: they fit
    last = reader.latestOffset(end, ReadMaxRows(1_000))
    assert _read(reader, start, end) + _read(reader, end, last) == produced
    produced = produce(r, stream, 2_500, 1_500)
    more = reader.latestOffset(last, ReadMaxRows(1_000))
    assert reader.planner._ahead_thread is not None  # 1,500 left: the next end is looked for
    reader.planner.join_ahead()
    assert len(reader.planner.ahead[stream].ids) == 1_000
    after = reader.latestOffset(more, ReadMaxRows(1_000))
    assert after["streams"][stream].startswith(produced[1_999] + " ")


def test_an_available_now_run_asks_each_streams_end_once(redis_server):
    """``Trigger.AvailableNow`` over many streams: one ``XINFO STREAM`` per stream for the
    whole run (the look for the trigger's ends serves its first plan; its last
    ``latestOffset``, every stream read up to them, asks nothing), and entries added after the
    trigger began are the next run's, read by it exactly once."""
    r = redis_server.client()
    prefix = f"ng:{uuid.uuid4().hex[:8]}"
    streams = [f"{prefix}:{i}" for i in range(40)]

    def add(stream: str, n: int) -> list[str]:
        return [f"{stream}/{i}" for i in produce(r, stream, n)]

    def xinfo_calls() -> int:
        return int(r.info("commandstats").get("cmdstat_xinfo|stream", {}).get("calls", 0))

    def run(start: dict, late: Callable[[], list[str]], expected: list[str]) -> dict:
        """One AvailableNow run from ``start``: ``late`` adds entries once it began."""
        reader = _reader(redis_server.url, ",".join(streams), numPartitions="2")
        before = xinfo_calls()
        reader.prepareForTriggerAvailableNow()
        added = late()
        got: list[str] = []
        while (end := reader.latestOffset(start, ReadMaxRows(1_000))) is not start:
            got += _read_keys(reader, start, end)
            start = end
        assert xinfo_calls() - before == len(streams)  # the ends once, for the whole run
        assert sorted(got) == sorted(expected) and len(got) == len(set(got))
        expected.clear()
        expected += added
        return start

    produced = [k for s in streams for k in add(s, 3)]
    initial = _reader(redis_server.url, ",".join(streams)).initialOffset()
    end = run(initial, lambda: add(streams[7], 2), produced)  # the 2 are not this run's
    end = run(end, lambda: add(streams[0], 4) + add(streams[39], 1), produced)  # the 2 only
    run(end, list, produced)  # the 5 added during the second run


def _read_keys(reader: PositionStreamReader, start: dict, end: dict) -> list[str]:
    """``stream/id`` of each entry the batch ``start``..``end`` holds, read as tasks read."""
    keys: list[str] = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            t = pa.Table.from_batches([batch])
            keys += [f"{s}/{i}" for s, i in zip(t.column("stream").to_pylist(),
                                                t.column("id").to_pylist(), strict=True)]
    return keys


def test_trimmed_and_deleted_entries_are_reported_as_lost(redis_server, caplog):
    """Entries trimmed or deleted before a read without a group read them are counted
    exactly: failOnDataLoss stops the task naming them; without it they are logged and the
    read moves past."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    produced = produce(r, stream, 1_000)
    reader = _reader(redis_server.url, stream)
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadMaxRows(100))
    r.xtrim(stream, maxlen=900, approximate=False)  # the first 100: all of the first batch
    with pytest.raises(DataLossError, match=r"100 entries of stream .* found 0 of 100"):
        _read(reader, start, first)
    second = reader.latestOffset(first, ReadMaxRows(300))
    r.xdel(stream, produced[150], produced[250])
    with pytest.raises(DataLossError, match=r"2 entries .* found 298 of 300"):
        _read(reader, first, second)  # planned before the 2 were deleted

    lenient = _reader(redis_server.url, stream, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="spark_eventbus"):
        assert _read(lenient, first, second) == [
            i for i in produced[100:400] if i not in (produced[150], produced[250])]
    assert "found 298 of 300" in caplog.text and "Moving past them" in caplog.text
    r.xdel(stream, produced[500])
    third = reader.latestOffset(second, ReadMaxRows(10_000))  # to the end: counted there
    with pytest.raises(DataLossError, match="found 599 of 600"):
        _read(reader, second, third)


def test_a_stream_behind_the_position_goes_on_after_it_and_a_deleted_one_is_reported(
        redis_server, caplog):
    """A stream with fewer entries added than the query's position saw (created again, as
    after a failover that lost entries the query had read): logged, and the query goes on after
    its position, reading what comes next and counting from there; a start past the stream's
    last entry is no such case. A stream deleted with entries the query had not read is
    reported, once."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    ids = produce(r, stream, 10)
    future = f"{int(ids[-1].split('-')[0]) + 60_000}-0"
    past_tail = _reader(redis_server.url, stream, startingPosition=future)
    first = past_tail.latestOffset(past_tail.initialOffset(), ReadMaxRows(10))
    assert past_tail.latestOffset(first, ReadMaxRows(10)) is first  # quiet, no complaint
    reader = _reader(redis_server.url, stream)
    start = reader.initialOffset()
    read = reader.latestOffset(start, ReadMaxRows(100))
    r.delete(stream)
    lower = [r.xadd(stream, {"n": str(i)}, id=f"1-{i}").decode() for i in range(1, 4)]
    with caplog.at_level(logging.WARNING, logger="spark_eventbus"):
        anchored = reader.latestOffset(read, ReadMaxRows(100))
    assert "fewer than the 10 at this query's position" in caplog.text
    assert anchored != read and _read(reader, read, anchored) == []  # recorded, nothing read
    assert reader.latestOffset(anchored, ReadMaxRows(100)) is anchored  # said once
    later = produce(r, stream, 5)  # IDs after the position: read, and counted from there
    after = reader.latestOffset(anchored, ReadMaxRows(100))
    assert _read(reader, anchored, after) == later and lower[0] not in later
    assert json.loads(json.dumps(after))["streams"][stream].endswith(" 8")  # 3 + 5 added
    r.delete(stream)  # created again, its entries already past the position: read at once,
    again = produce(r, stream, 2, 20)  # not held back until 8 entries were added again
    anchored = reader.latestOffset(after, ReadMaxRows(100))
    assert _read(reader, after, anchored) == again
    assert json.loads(json.dumps(anchored))["streams"][stream].endswith(" 2")  # counted again
    produce(r, stream, 4, 5)
    assert reader.latestOffset(anchored, ReadMaxRows(1)) != anchored  # it looks: 4 unread
    r.delete(stream)
    with pytest.raises(DataLossError, match=r"deleted .* never read: 'ng:\w+' \(4\)"):
        reader.latestOffset(anchored, ReadMaxRows(100))
    assert reader.latestOffset(anchored, ReadMaxRows(100)) is anchored  # said once: goes on


def test_entries_trimmed_from_a_range_split_over_tasks_are_counted_by_its_first_task(
        redis_server):
    """One stream's range of 12,000 entries, read by two tasks (split in time, no count per
    piece): the head trimmed before the tasks read it is counted by the first task."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    produced = produce(r, stream, 6_000)
    r.xadd(stream, {"n": "gap"}, id=f"{int(produced[-1].split('-')[0]) + 1000}-0")
    produce(r, stream, 6_000, 6_000)
    reader = _reader(redis_server.url, stream, numPartitions="2")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(100_000))
    assert len(reader.partitions(start, end)) == 2
    r.xtrim(stream, maxlen=12_001 - 2_500, approximate=False)
    with pytest.raises(DataLossError, match=r"2500 entries .* found 9501 of 12001"):
        _read(reader, start, end)


def test_options_that_need_a_group_are_refused_at_load(spark, redis_server):
    reader = (spark.readStream.format("eventbus").option("url", redis_server.url)
              .option("stream", "ng:x").option("ackMode", "none")
              .option("maxDeliveries", "3"))
    with pytest.raises(Exception, match="'ackMode', 'maxDeliveries' need a consumer group"):
        reader.load()
    with pytest.raises(ConfigError, match="'trimAcked' needs a consumer group"):
        parse_reader_options({"stream": "s", "trimAcked": "true"}, streaming=True)


def _pattern_to_parquet(spark: Any, url: str, pattern: str, max_entries: int, out: Path,
                        chk: str) -> Any:
    """The streams matching ``pattern`` read without a group (from ``earliest``) into parquet
    files of (stream, id) at ``out``, ``Trigger.AvailableNow`` from the checkpoint ``chk``."""
    df = (spark.readStream.format("eventbus").option("url", url)
          .option("streamPattern", pattern).option("startingPosition", "earliest")
          .option("maxEntriesPerTrigger", str(max_entries)).load())
    q = (df.select("stream", "id").writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", chk)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300) and q.exception() is None, q.exception()
    return q


def _parquet_entries(out: Path) -> Counter[str]:
    """How often each entry (``stream/id``) is in the parquet files at ``out``."""
    table = pq.read_table(out)
    return Counter(f"{s}/{i}" for s, i in zip(table.column("stream").to_pylist(),
                                              table.column("id").to_pylist(), strict=True))


def test_a_read_only_user_streams_a_pattern_exactly_once_across_a_restart(
        spark, redis_server, tmp_path):
    """The issue's analytics user (``+@read +@connection``) streams 50 streams by pattern
    into parquet files with no group, stops, more arrives, and a restart from the checkpoint
    reads exactly the rest. The server refused it nothing (ACL LOG), and nothing was written:
    the same keys, no group."""
    r = redis_server.client()
    prefix = f"ro{uuid.uuid4().hex[:6]}"
    streams = [f"{prefix}:s{i:02d}" for i in range(50)]
    produced: list[str] = []
    for i, s in enumerate(streams):
        produced += [f"{s}/{x}" for x in produce(r, s, 40 + i, i * 100)]
    user, url = _read_only_user(r, redis_server.port, f"{prefix}:*")
    # the keys the user may touch (its ACL: ~prefix:*); the server's other keys belong to
    # other tests on this worker, and some of theirs expire meanwhile
    keys_before = sorted(r.scan_iter(f"{prefix}:*"))
    out, chk = tmp_path / "out", checkpoint(tmp_path)

    def run() -> Any:
        return _pattern_to_parquet(spark, url, f"{prefix}:*", 700, out, chk)

    q = run()
    assert max(input_rows(q)) <= 700 and sum(input_rows(q)) == len(produced)
    first = latest_offsets(q)[0]["_eventbus"]  # behind after the first batch was planned
    assert first["streams"] == 50
    assert first["entriesBehind"] == len(produced) - input_rows(q)[0]
    assert latest_offsets(q)[-1]["_eventbus"]["entriesBehind"] == 0
    for i, s in enumerate(streams[::7]):
        produced += [f"{s}/{x}" for x in produce(r, s, 30, 10_000 + i * 100)]
    q = run()
    assert sum(input_rows(q)) == 30 * len(streams[::7])
    got = _parquet_entries(out)
    assert set(got) == set(produced) and max(got.values()) == 1
    assert _denied(r, user) == []
    assert sorted(r.scan_iter(f"{prefix}:*")) == keys_before
    assert all(r.xinfo_groups(s) == [] for s in streams)


def test_a_restart_from_a_packed_checkpoint_reads_exactly_the_rest(spark, redis_server,
                                                                    tmp_path):
    """From PACK_FROM streams on, the offsets in Spark's checkpoint are packed: a query over
    that many streams (one entry each, batches of 400) stops, more arrives in every ninth
    stream, and a restart from that checkpoint reads exactly the rest, each entry once. (The
    readable form's restart: the read-only user's test above, 50 streams.)"""
    r = redis_server.client()
    prefix = f"pk{uuid.uuid4().hex[:6]}"
    streams = [f"{prefix}:device:{i:05d}" for i in range(PACK_FROM)]

    def add(names: list[str]) -> list[str]:
        pipe = r.pipeline(transaction=False)
        for s in names:
            pipe.xadd(s, {"n": "1"})
        return [f"{s}/{i.decode()}" for s, i in zip(names, pipe.execute(), strict=True)]

    produced = add(streams)
    out, chk = tmp_path / "out", checkpoint(tmp_path)

    def run() -> Any:
        return _pattern_to_parquet(spark, redis_server.url, f"{prefix}:*", 400, out, chk)

    q = run()
    assert sum(input_rows(q)) == len(produced) and max(input_rows(q)) <= 400
    logged = sorted((Path(chk) / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    source = json.loads(logged[-1].read_text().splitlines()[-1])
    assert source["v"] == 2 and source["count"] == PACK_FROM  # packed
    assert len(json.dumps(source)) < 20 * PACK_FROM  # written out: ~40 bytes per stream
    produced += add(streams[::9])
    q = run()
    assert sum(input_rows(q)) == len(streams[::9])
    got = _parquet_entries(out)
    assert set(got) == set(produced) and max(got.values()) == 1


def test_a_new_driver_replays_the_batch_its_streams_joined_from_its_packed_offset(
        redis_server):
    """The batch in which PACK_FROM streams join is packed with their starts as a bitmap over
    the offset's names (packed body version 2; version 1's restart: the test above): a new
    driver given that batch's offsets through JSON, as Spark's log keeps them, reads exactly
    its entries, then plans and reads exactly the rest."""
    r = redis_server.client()
    streams = [f"bm{uuid.uuid4().hex[:6]}:{i:05d}" for i in range(PACK_FROM)]
    pipe = r.pipeline(transaction=False)
    for name in streams:
        pipe.xadd(name, {"n": "1"})
        pipe.xadd(name, {"n": "2"})
    ids = [i.decode() for i in pipe.execute()]
    reader = _reader(redis_server.url, ",".join(streams), maxEntriesPerTrigger=str(PACK_FROM))
    start = reader.initialOffset()
    end = json.loads(json.dumps(reader.latestOffset(start, ReadMaxRows(PACK_FROM))))
    assert end["v"] == 2 and zlib.decompress(base64.b64decode(end["packed"]))[0] == 2
    again = _reader(redis_server.url, ",".join(streams), maxEntriesPerTrigger=str(PACK_FROM))
    # the streams take turns (planning.MIN_SHARE): the first half whole, then the rest
    assert sorted(_read(again, start, end)) == sorted(ids[:PACK_FROM])
    rest = again.latestOffset(end, ReadMaxRows(PACK_FROM))
    assert sorted(_read(again, end, rest)) == sorted(ids[PACK_FROM:])
    assert again.latestOffset(rest, ReadMaxRows(PACK_FROM)) == rest


def test_latest_is_kept_from_a_run_that_read_nothing(spark, redis_server, tmp_path):
    """Trigger.AvailableNow at ``latest`` with nothing new: the run ends, having recorded the
    position; what arrives before the next run is read by it (Kafka keeps its initial offsets
    in the checkpoint too)."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    produce(r, stream, 5)
    out, chk = tmp_path / "out", checkpoint(tmp_path)

    def run() -> list[int]:
        df = (spark.readStream.format("eventbus").option("url", redis_server.url)
              .option("stream", stream).load())
        q = (df.select("id").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", chk).trigger(availableNow=True).start())
        assert q.awaitTermination(120) and q.exception() is None, q.exception()
        return input_rows(q)

    assert sum(run()) == 0
    later = produce(r, stream, 7, 5)
    assert sum(run()) == 7
    assert sorted(pq.read_table(out).column("id").to_pylist()) == sorted(later)


def test_a_restart_before_the_first_batch_commits_replays_it_from_its_offset(redis_server):
    """``startingPosition=latest`` is resolved once and recorded in the first batch's offset:
    a driver that dies before the batch commits replays it from there (Spark asks
    ``initialOffset`` again), not from a later 'latest'."""
    r = redis_server.client()
    stream = f"ng:{uuid.uuid4().hex[:8]}"
    produce(r, stream, 10)
    reader = _reader(redis_server.url, stream, startingPosition="latest")
    start = reader.initialOffset()
    warm = reader.latestOffset(start, ReadMaxRows(100))  # nothing yet: an empty first batch
    assert warm != start and _read(reader, start, warm) == []
    later = produce(r, stream, 5, 10)
    end = reader.latestOffset(warm, ReadMaxRows(100))
    again = _reader(redis_server.url, stream, startingPosition="latest")  # a new driver
    assert again.initialOffset() == start
    assert _read(again, warm, end) == later
    assert again.latestOffset(end, ReadMaxRows(100)) == end


READS = ("xrange", "xrevrange", "xinfo|stream", "xinfo", "scan", "type")


def _read_calls(node: Any) -> int:
    """The read commands a read without a group sends (:data:`READS`: ``XRANGE``,
    ``XREVRANGE``, ``XINFO``, ``SCAN``, ``TYPE``) that the server ``node`` has run
    (``INFO commandstats``)."""
    stats = node.client().info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in READS)


def _cut(replica: Any) -> None:
    """The replica's link to its primary cut: it keeps its data, stays a read-only replica and
    receives nothing more."""
    replica.client().replicaof("127.0.0.1", str(free_port()))


def _wait_in_sync(primary: Any, replica: Any) -> None:
    wait_for(lambda: replica.client().info("replication")["master_link_status"] == "up"
             and primary.client().wait(1, 5000) >= 1, what="the replica in sync")


@pytest.mark.server
def test_read_from_a_replica_by_url_waits_for_a_late_replica_and_never_reads_short(
        spark, tmp_path, caplog):
    """``readFrom=replica`` with the URL of a replica: the query's reads, and a batch read's,
    go there only (the primary runs none); a batch planned past what the replica has (the
    driver saw a node ahead) is not read short: the task waits for the replica within
    failoverTimeoutMs, and fails retriably, naming the replica, when it does not catch up."""
    primary = RedisServer(tmp_path / "p").start()
    replica = ReplicaServer(tmp_path / "r", primary.port, priority=10).start()
    try:
        p = primary.client()
        stream = "orders"
        produced = produce(p, stream, 300)
        _wait_in_sync(primary, replica)
        with pytest.raises(ConfigError, match=r"'readFrom' = 'replica', but .* is a master"):
            _reader(primary.url, stream, readFrom="replica").latestOffset(
                PositionOffset().to_json(), ReadMaxRows(10))
        on_replica = _reader(replica.url, stream, readFrom="replica", failoverTimeoutMs="800")
        start = on_replica.initialOffset()
        before = _read_calls(primary)
        end = on_replica.latestOffset(start, ReadMaxRows(200))
        got = _read(on_replica, start, end)
        end2 = on_replica.latestOffset(end, ReadMaxRows(200))
        got += _read(on_replica, end, end2)
        assert got == produced and _read_calls(primary) == before
        batch = (spark.read.format("eventbus").option("url", replica.url)
                 .option("stream", stream).option("readFrom", "replica").load())
        assert batch.count() == 300 and _read_calls(primary) == before

        _cut(replica)
        later = produce(p, stream, 50, 300)
        ahead = _reader(primary.url, stream).latestOffset(end2, ReadMaxRows(1_000))
        with pytest.raises(EventBusConnectionError, match="had not received stream") as err:
            _read(on_replica, end2, ahead)
        assert err.value.retriable
        # planned on the replica from there: paused (nothing read), said once past the timeout
        with caplog.at_level(logging.WARNING, logger="spark_eventbus"):
            assert on_replica.latestOffset(ahead, ReadMaxRows(1_000)) is ahead
            time.sleep(0.9)  # past its failoverTimeoutMs (800 ms)
            for _ in range(2):
                assert on_replica.latestOffset(ahead, ReadMaxRows(1_000)) is ahead
        assert len([m for m in caplog.messages if "has been behind this query's position"
                    in m]) == 1
        patient = _reader(replica.url, stream, readFrom="replica", failoverTimeoutMs="20000")
        threading.Timer(0.5, lambda: replica.client().replicaof(
            "127.0.0.1", str(primary.port))).start()
        before = _read_calls(primary)
        assert _read(patient, end2, ahead) == later
        assert _read_calls(primary) == before

        # Created again with fewer entries than the query saw (as after a failover that lost
        # entries it had read): a replica that holds an entry past the position is not late,
        # so the query goes on and reads it (no wait until as many entries were added again).
        _wait_in_sync(primary, replica)
        p.delete(stream)
        again = produce(p, stream, 3, 400)
        _wait_in_sync(primary, replica)
        anchored = patient.latestOffset(ahead, ReadMaxRows(1_000))
        assert _read(patient, ahead, anchored) == again
    finally:
        replica.stop()
        primary.stop()
