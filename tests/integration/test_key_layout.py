"""Stream names as cluster users write them (issue 8): several streams sharing one ``{tag}``,
names with braces and colons, tagged and untagged streams in one query; and the consumer lease
that keeps two live queries off one consumer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_eventbus import AckingBatchWriter, ConfigError
from spark_eventbus.core.keys import alive_key, key_slot, lease_key, plan_key
from spark_eventbus.core.offsets import BatchOffset
from tests.integration.helpers import (
    checkpoint,
    driver_reader,
    pending,
    process_gone,
    produce,
    run_available_now,
    source_runners,
    stream_df,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.server]


def _tag() -> str:
    return uuid.uuid4().hex[:6]


def _connector_keys(r, tag: str) -> list[bytes]:  # type: ignore[no-untyped-def]
    return sorted(r.scan_iter(match=f"*{tag}*:eventbus:*", count=10_000))


def test_sink_routes_rows_to_streams_sharing_a_tag_exactly_once(spark, redis_server):
    """Issue 8, case 1: 3,000 rows routed evenly to three streams of one tag."""
    r = redis_server.client()
    t = _tag()
    routes = [f"{{acc{t}}}:route:{i}" for i in range(3)]
    df = (spark.range(3000).repartition(2)
          .select(F.concat(F.lit(f"{{acc{t}}}:route:"), (F.col("id") % 3).cast("string"))
                  .alias("stream"), F.col("id").cast("string").alias("n")))
    df.write.format("eventbus").option("url", redis_server.url).mode("append").save()
    for i, stream in enumerate(routes):
        got = Counter(f[b"n"].decode() for _, f in r.xrange(stream))
        assert got == Counter(str(n) for n in range(i, 3000, 3)), stream  # each once
    # markers and registry of a one-off write are pruned when it commits; what stays is its
    # seal on each target (batch 0), in that target's slot, for an hour
    left = _connector_keys(r, t)
    assert [k.decode().split(":eventbus:")[1].split(":")[0] for k in left] == ["sink-seal"] * 3
    assert {key_slot(k) for k in left} == {key_slot(routes[0])}
    assert all(r.get(k) == b"0" and 0 < r.pttl(k) <= 3_600_000 for k in left)


def test_streaming_sink_replay_with_tagged_routes_adds_nothing_twice(spark, redis_server,
                                                                      tmp_path):
    """A streaming copy into three tagged streams, run twice from one checkpoint whose commit
    log was deleted: the replayed batches find their per-stream markers and add nothing."""
    r = redis_server.client()
    t = _tag()
    src = tmp_path / "src"
    (spark.range(3000).select((F.col("id") % 3).alias("k"), F.col("id").cast("string")
                              .alias("n")).repartition(2).write.parquet(str(src)))
    df = (spark.readStream.schema("k BIGINT, n STRING").parquet(str(src))
          .select(F.concat(F.lit(f"{{r{t}}}:"), F.col("k").cast("string")).alias("stream"),
                  "n"))
    chk = checkpoint(tmp_path)
    for _ in range(2):
        q = (df.writeStream.format("eventbus").option("url", redis_server.url)
             .option("checkpointLocation", chk).trigger(availableNow=True).start())
        assert q.awaitTermination(300)
        assert q.exception() is None
        for f in Path(chk, "commits").iterdir():  # the next run replays every batch
            f.unlink()
    for k in range(3):
        got = Counter(f[b"n"].decode() for _, f in r.xrange(f"{{r{t}}}:{k}"))
        assert got == Counter(str(n) for n in range(k, 3000, 3))


def test_streaming_read_of_streams_sharing_a_tag(spark, redis_server, tmp_path):
    """Issue 8, case 2: one group over {t}:a and {t}:b, several batches; every entry once."""
    r = redis_server.client()
    t = _tag()
    a, b = f"{{t{t}}}:a", f"{{t{t}}}:b"
    ids = {a: produce(r, a, 5_000), b: produce(r, b, 4_000)}
    df = stream_df(spark, redis_server.url, f"{a},{b}", "g", maxEntriesPerTrigger=3000)
    rows, q = run_available_now(df, tmp_path)
    got = Counter((row["stream"], row["id"]) for row in rows)
    assert set(got.values()) == {1}
    assert set(got) == {(s, i) for s in (a, b) for i in ids[s]}
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 3
    assert pending(r, a, "g") == pending(r, b, "g") == 0
    assert r.hlen(plan_key(a, "g", "spark-g")) == r.hlen(plan_key(b, "g", "spark-g")) == 0


def test_one_query_mixes_tagged_untagged_and_odd_names(spark, redis_server, tmp_path):
    r = redis_server.client()
    t = _tag()
    streams = [f"{{m{t}}}:a", f"{{m{t}}}:a:b", f"plain{t}", f"plain{t}:x", f"a{{}}{t}",
               f"{{}}{t}", f"x}}{t}", f"ü{{m{t}}}"]
    ids = {s: produce(r, s, 400 + 100 * k) for k, s in enumerate(streams)}
    df = stream_df(spark, redis_server.url, ",".join(streams), "g", maxEntriesPerTrigger=1500,
                   numPartitions=3)
    rows, _ = run_available_now(df, tmp_path)
    got = Counter((row["stream"], row["id"]) for row in rows)
    assert set(got.values()) == {1}
    assert set(got) == {(s, i) for s, xs in ids.items() for i in xs}
    for s in streams:
        assert pending(r, s, "g") == 0
        # keys of this query: in the stream's slot, and gone once the query is done
        assert key_slot(plan_key(s, "g", "spark-g")) == key_slot(s)
        assert r.exists(plan_key(s, "g", "spark-g"), lease_key(s, "g", "spark-g")) == 0


def test_acking_writer_dead_letters_tagged_streams_once(spark, redis_server, tmp_path):
    r = redis_server.client()
    t = _tag()
    a, b, dlq = f"{{w{t}}}:a", f"{{w{t}}}:b", f"{{w{t}}}:dlq"

    def payload(i: int) -> str:
        return "{broken" if i % 10 == 0 else json.dumps({"n": i, "name": "x"})

    ids = {a: produce(r, a, 2_000, payload=payload), b: produce(r, b, 1_000, payload=payload)}
    bad = {(s, xs[i]) for s, xs in ids.items() for i in range(0, len(xs), 10)}
    handled: list[tuple[str, str]] = []

    def handle(df, batch_id):  # type: ignore[no-untyped-def]
        handled.extend((row["stream"], row["id"]) for row in df.select("stream", "id").collect())

    writer = AckingBatchWriter(handle, url=redis_server.url, group="g", dead_letter_stream=dlq)
    df = stream_df(spark, redis_server.url, f"{a},{b}", "g", ackMode="manual",
                   valueSchema="n INT, name STRING", maxEntriesPerTrigger=1000)
    chk = checkpoint(tmp_path)
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", chk)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert q.exception() is None
    assert Counter(handled) == Counter({(s, i) for s, xs in ids.items() for i in xs} - bad)
    moved = Counter((f[b"dlq.source.stream"].decode(), f[b"dlq.source.id"].decode())
                    for _, f in r.xrange(dlq))
    assert set(moved.values()) == {1} and set(moved) == bad
    assert pending(r, a, "g") == pending(r, b, "g") == 0


def test_reader_max_deliveries_dead_letters_tagged_streams(spark, redis_server, tmp_path):
    r = redis_server.client()
    t = _tag()
    a, b, dlq = f"{{d{t}}}:a", f"{{d{t}}}:b", f"{{d{t}}}:dlq"
    ids = {}
    for s in (a, b):
        ids[s] = produce(r, s, 300)
        r.xgroup_create(s, "g", "0")
        r.xreadgroup("g", "dead-1", {s: ">"}, count=40)  # two failed deliveries of 40 each
        r.xclaim(s, "g", "dead-2", 0, ids[s][:40])
    time.sleep(0.3)
    df = stream_df(spark, redis_server.url, f"{a},{b}", "g", claimMinIdleMs=200,
                   maxDeliveries=2, deadLetterStream=dlq)
    rows, _ = run_available_now(df, tmp_path)
    got = Counter((row["stream"], row["id"]) for row in rows)
    assert set(got.values()) == {1}
    assert set(got) == {(s, i) for s in (a, b) for i in ids[s][40:]}
    moved = Counter((f[b"dlq.source.stream"].decode(), f[b"dlq.source.id"].decode())
                    for _, f in r.xrange(dlq))
    assert set(moved.values()) == {1}
    assert set(moved) == {(s, i) for s in (a, b) for i in ids[s][:40]}
    assert pending(r, a, "g") == pending(r, b, "g") == 0


# -- the consumer lease ------------------------------------------------------------------------


def test_second_live_query_on_one_consumer_is_refused_naming_the_option(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    produce(r, names["stream"], 100)
    lease = lease_key(names["stream"], names["group"], f"spark-{names['group']}")
    others = source_runners(spark)
    first = (stream_df(spark, redis_server.url, names["stream"], names["group"])
             .writeStream.format("noop").option("checkpointLocation", checkpoint(tmp_path))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: r.exists(lease) == 1, 60, "the first query's lease")
        runner, = source_runners(spark) - others  # the first query's driver side
        second = (stream_df(spark, redis_server.url, names["stream"], names["group"])
                  .writeStream.format("noop").option("checkpointLocation", checkpoint(tmp_path))
                  .start())
        with pytest.raises(StreamingQueryException, match="option 'consumer'") as err:
            second.awaitTermination(120)
        assert f"spark-{names['group']}" in str(err.value)
        # a distinct consumer is the documented fix
        third = (stream_df(spark, redis_server.url, names["stream"], names["group"],
                           consumer="other").writeStream.format("noop")
                 .option("checkpointLocation", checkpoint(tmp_path)).start())
        try:
            wait_for(lambda: third.lastProgress is not None, 120, "the third query to run")
            assert third.exception() is None and first.exception() is None
        finally:
            third.stop()
    finally:
        first.stop()
    # A stopped query gives its lease back before its source runner exits: the same consumer
    # starts at once, without waiting for the heartbeat's TTL. The JVM stops the runner with
    # SIGTERM and does not wait for it, so the test waits for the runner's exit (how long that
    # takes is the machine's), then for nothing.
    wait_for(lambda: process_gone(runner), 120, "the stopped query's source runner to exit")
    assert r.exists(lease) == 0, "the source runner exited without giving its lease back"
    _, q = run_available_now(stream_df(spark, redis_server.url, names["stream"],
                                       names["group"]), tmp_path)
    assert q.exception() is None


HOLDER = textwrap.dedent("""
    import sys, time
    import spark_eventbus.group.lease as lease_mod
    from spark_eventbus.options.reader import parse_reader_options
    from spark_eventbus.group.stream_reader import EventBusStreamReader
    lease_mod.LEASE_TTL_MS, lease_mod.LEASE_RENEW_S = 4000, 1.0  # a short heartbeat, renewed
    opts = parse_reader_options({"url": sys.argv[1], "stream": sys.argv[2], "group": sys.argv[3],
                                 "startingPosition": "earliest"}, streaming=True)
    reader = EventBusStreamReader(opts, None)
    print(reader.initialOffset()["run"], flush=True)
    time.sleep(600)
""")


def _holder(url: str, stream: str, group: str) -> tuple[subprocess.Popen[bytes], str]:
    """A driver process holding the consumer lease of (stream, group), and its run id."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url, stream, group],
                            stdout=subprocess.PIPE, env=env, start_new_session=True)
    assert proc.stdout is not None
    run = proc.stdout.readline().decode().strip()
    assert run, "the holder did not start"
    return proc, run


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_live_holder_is_refused_and_a_killed_one_is_taken_over(redis_server, names):
    """While a driver holds the lease and renews it, another query is refused; once it is
    killed with SIGKILL, its restart from the same checkpoint (same run) takes over at once."""
    stream, group = names["stream"], names["group"]
    produce(redis_server.client(), stream, 10)
    proc, run = _holder(redis_server.url, stream, group)
    try:
        other = driver_reader(redis_server.url, stream, group)
        with pytest.raises(ConfigError, match="option 'consumer'") as err:
            other.initialOffset()  # waits until the holder renews: it is alive
        assert run in str(err.value)
        other.stop()
    finally:
        _kill(proc)
    same = driver_reader(redis_server.url, stream, group)  # the restart from its checkpoint
    end = same.latestOffset({"v": 2, "run": run, "seq": 0, "streams": {}}, ReadMaxRows(100))
    assert end["seq"] == 1 and end["run"] == run and end["streams"]
    same.stop()


def test_a_killed_holder_keeps_another_query_out_only_until_its_lease_expires(
        redis_server, names):
    stream, group = names["stream"], names["group"]
    r = redis_server.client()
    produce(r, stream, 10)
    proc, _ = _holder(redis_server.url, stream, group)
    _kill(proc)
    key = lease_key(stream, group, f"spark-{group}")
    holder = r.get(key).decode().split(" ")[1]  # the killed driver's lease is still there ...
    assert 0 < r.pttl(alive_key(holder)) <= 4000  # ... alive while its heartbeat is
    successor = driver_reader(redis_server.url, stream, group)
    successor.initialOffset()  # ... and the successor waits for that to expire, then starts
    assert r.get(key).decode().split(" ")[1] == successor.driver.lease.owner
    successor.stop()
    assert r.exists(key) == 0


def _stall_heartbeat(reader) -> None:  # type: ignore[no-untyped-def]
    """The driver stops renewing its lease (a stalled driver, cut off from Redis)."""
    lease = reader.driver.lease
    lease._stop.set()
    lease._thread.join()


def test_a_query_taken_over_while_it_could_not_renew_claims_nothing_more(redis_server, names):
    """The lease fences claims: once another query holds the lease of a stream, the stalled
    query's next claim there fails naming option 'consumer' — before its heartbeat would
    notice — and takes nothing of it. Two streams sharing a hash tag; one is taken over."""
    t = _tag()
    mine, taken = f"{{f{t}}}:a", f"{{f{t}}}:b{{x}}:c"
    group = names["group"]
    r = redis_server.client()
    for s in (mine, taken):
        produce(r, s, 50)
    stale = driver_reader(redis_server.url, f"{mine},{taken}", group)
    start = stale.initialOffset()
    _stall_heartbeat(stale)
    position = r.xinfo_groups(taken)[0]["last-delivered-id"]
    key = lease_key(taken, group, f"spark-{group}")
    r.set(key, "run-of-another-query owner-b", px=60_000)  # it expired; another query took it
    with pytest.raises(ConfigError, match="option 'consumer'") as err:
        stale.latestOffset(start, ReadMaxRows(200))
    assert "taken over" in str(err.value) and "run-of-another-query" in str(err.value)
    assert taken in str(err.value)
    assert r.xinfo_groups(taken)[0]["pending"] == 0  # nothing claimed ...
    assert r.xinfo_groups(taken)[0]["last-delivered-id"] == position
    assert not r.hlen(plan_key(taken, group, f"spark-{group}"))  # ... nor planned
    assert r.get(key) == b"run-of-another-query owner-b"
    assert r.get(lease_key(mine, group, f"spark-{group}")).decode().split(" ")[0] == start["run"]
    stale.stop()


def test_a_reclaim_is_fenced_by_the_lease_too(redis_server, names):
    stream, group = names["stream"], names["group"]
    r = redis_server.client()
    produce(r, stream, 20)
    r.xgroup_create(stream, group, "0")
    r.xreadgroup(group, "dead-worker", {stream: ">"}, count=20)
    reader = driver_reader(redis_server.url, stream, group, claimMinIdleMs="0")
    reader.initialOffset()
    _stall_heartbeat(reader)
    op = reader.ops[stream]
    r.set(op.lease_key, "run-of-another-query owner-b", px=60_000)
    from spark_eventbus.redisio import claims

    with pytest.raises(ConfigError, match="taken over"):
        claims.reclaim([claims.ReclaimAsk(op, "0-0", 100)], 0, reader.driver.lease.run, 1, 0, 1)
    pel = r.xpending(stream, group)
    assert pel["pending"] == 20 and pel["consumers"] == [
        {"name": b"dead-worker", "pending": 20}]  # still the dead worker's
    reader.stop()


def test_an_expired_lease_does_not_stop_its_holders_claims_nor_is_recreated_by_them(
        redis_server, names):
    """Nobody else took the lease while the driver could not renew it: its claims go on. They
    do not write the lease (a claim in flight while its query stops and deletes the lease must
    not leave it behind); the heartbeat takes it back."""
    stream, group = names["stream"], names["group"]
    r = redis_server.client()
    produce(r, stream, 50)
    reader = driver_reader(redis_server.url, stream, group)
    start = reader.initialOffset()
    _stall_heartbeat(reader)
    key = lease_key(stream, group, f"spark-{group}")
    r.delete(key)  # expired
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert BatchOffset.from_json(end).streams[stream].count == 50
    assert r.xinfo_groups(stream)[0]["pending"] == 50
    assert r.exists(key) == 0
    reader.stop()
