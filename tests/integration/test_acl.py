"""Least-privilege ACL users (issue 12): each role runs end to end with exactly the rule
``eventbus acl-rule`` prints; a user lacking a permission fails at query start, naming it."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_eventbus import AckingBatchWriter, ConfigError
from spark_eventbus.core.losses import RangeLoss
from spark_eventbus.ops.acl import rule
from spark_eventbus.ops.cli import main as cli
from spark_eventbus.redisio import record_losses
from tests.integration.helpers import checkpoint, pending, produce, run_available_now, stream_df

pytestmark = [pytest.mark.integration, pytest.mark.server]


def _user(r, redis_server, role: str, streams: list[str], dlq: str | None = None,  # type: ignore[no-untyped-def]
          drop: str = "") -> str:
    """A user with exactly ``role``'s rule (minus the token ``drop``); returns its URL."""
    name = f"u{uuid.uuid4().hex[:8]}"
    tokens = [t for t in rule(role, streams, dlq).split() if t != drop]
    assert drop == "" or len(tokens) < len(rule(role, streams, dlq).split())
    r.execute_command("ACL", "SETUSER", name, "on", ">pw", *tokens)
    return f"redis://{name}:pw@127.0.0.1:{redis_server.port}/0"


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    return f"acl{tag}:orders", f"acl{tag}:orders:dlq"


def test_streaming_reader_role_with_dead_lettering(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream, dlq = _names()
    ids = produce(r, stream, 3_000)
    r.xgroup_create(stream, "g", "0")
    r.xreadgroup("g", "dead-1", {stream: ">"}, count=20)
    r.xclaim(stream, "g", "dead-2", 0, ids[:20])
    time.sleep(0.3)
    url = _user(r, redis_server, "streaming-reader", [stream], dlq)
    df = stream_df(spark, url, stream, "g", maxEntriesPerTrigger=1000, claimMinIdleMs=200,
                   maxDeliveries=2, deadLetterStream=dlq, trimAcked="true", trimIntervalMs=0)
    rows, _ = run_available_now(df, tmp_path)
    assert Counter(row["id"] for row in rows) == Counter(ids[20:])
    assert r.xlen(dlq) == 20 and pending(r, stream, "g") == 0
    assert r.xlen(stream) < 3_000  # trimAcked ran (XTRIM in trim.lua) under the rule


def test_batch_reader_role(spark, redis_server):
    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 500)
    url = _user(r, redis_server, "batch-reader", [stream])
    df = spark.read.format("eventbus").option("url", url).option("stream", stream).load()
    assert df.count() == 500


def test_reader_without_group_role(spark, redis_server, tmp_path):
    """A streaming read without a group: batches cut before the stream's end (XRANGE on the
    driver) and to its end (XINFO STREAM), under exactly the role's rule."""
    r = redis_server.client()
    stream, _ = _names()
    ids = produce(r, stream, 500)
    url = _user(r, redis_server, "reader-without-group", [stream])
    df = (spark.readStream.format("eventbus").option("url", url).option("stream", stream)
          .option("startingPosition", "earliest").option("maxEntriesPerTrigger", "200").load())
    rows, q = run_available_now(df, tmp_path)
    assert sorted(row["id"] for row in rows) == sorted(ids)
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [200, 200, 100]


def test_sink_role_routing_trimming_and_dead_letters(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream, dlq = _names()
    other = stream + ":2"
    url = _user(r, redis_server, "sink", [stream, other], dlq)
    df = spark.range(1000).select(
        F.when(F.col("id") % 2 == 0, F.lit(stream)).otherwise(F.lit(other)).alias("stream"),
        F.when(F.col("id") == 7, F.lit(None)).otherwise(F.col("id").cast("string")).alias("n"))
    df.write.format("eventbus").option("url", url).option("deadLetterStream", dlq) \
        .option("minId", "1h").mode("append").save()
    assert r.xlen(stream) == 500 and r.xlen(other) == 499 and r.xlen(dlq) == 1
    src = tmp_path / "src"
    spark.range(300).select(F.col("id").cast("string").alias("n")).write.parquet(str(src))
    q = (spark.readStream.schema("n STRING").parquet(str(src)).writeStream.format("eventbus")
         .option("url", url).option("stream", stream).option("maxLen", "10000")
         .option("checkpointLocation", checkpoint(tmp_path)).trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert q.exception() is None
    assert r.xlen(stream) == 800


def test_acking_writer_role_behind_a_manual_reader(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream, dlq = _names()
    ids = produce(r, stream, 1_000, payload=lambda i: "{bad" if i % 10 == 0
                  else json.dumps({"n": i, "name": "x"}))
    reader_url = _user(r, redis_server, "streaming-reader", [stream])
    writer_url = _user(r, redis_server, "acking-writer", [stream], dlq)
    handled: list[str] = []
    writer = AckingBatchWriter(lambda df, _: handled.extend(
        row["id"] for row in df.select("id").collect()), url=writer_url, group="g",
        dead_letter_stream=dlq)
    df = stream_df(spark, reader_url, stream, "g", ackMode="manual",
                   valueSchema="n INT, name STRING")
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", checkpoint(tmp_path))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert q.exception() is None
    bad = {ids[i] for i in range(0, 1_000, 10)}
    assert set(handled) == set(ids) - bad and r.xlen(dlq) == len(bad)
    assert pending(r, stream, "g") == 0


def test_cli_role(redis_server, capsys):
    r = redis_server.client()
    stream, dlq = _names()
    produce(r, stream, 3)
    r.xgroup_create(stream, "g", "0")
    r.xadd(dlq, {"n": "1", "dlq.reason": "bad"})
    url = _user(r, redis_server, "cli", [stream], dlq)
    assert cli(["--url", url, "status", "--stream", stream, "--dlq", dlq]) == 0
    assert cli(["--url", url, "dlq", "list", "--dlq", dlq]) == 0
    dead = r.xrange(dlq)[0][0].decode()
    assert cli(["--url", url, "dlq", "show", dead, "--dlq", dlq]) == 0
    assert cli(["--url", url, "dlq", "replay", "--from", dlq, "--to", stream]) == 0
    assert r.xlen(stream) == 4 and r.xlen(dlq) == 0
    assert "Moved 1 entries" in capsys.readouterr().out
    r.xreadgroup("g", "old", {stream: ">"}, count=2)
    assert cli(["--url", url, "consumer", "forget", "old", "--to", "new", "--stream", stream,
                "--group", "g"]) == 0
    assert cli(["--url", url, "group", "seek", "--stream", stream, "--group", "g", "--to",
                "earliest"]) == 0
    assert cli(["--url", url, "group", "create", "--stream", stream, "--group", "g2"]) == 0
    assert "Moved 2 pending entries" in capsys.readouterr().out
    # a replay stopped on lost entries (as an executor records it): status, accept-loss
    assert not record_losses(r, stream, "g", "spark-g", "run", 3, 0, True,
                             [RangeLoss("1-0", "9-0", 5, 2)])
    assert cli(["--url", url, "status", "--stream", stream, "--group", "g"]) == 0
    assert "STOPPED on lost entries" in capsys.readouterr().out
    assert cli(["--url", url, "group", "accept-loss", "--stream", stream, "--group", "g"]) == 0
    assert "Accepted the loss of 2 entries" in capsys.readouterr().out
    assert cli(["--url", url, "stream", "trim", "--stream", stream]) == 0
    assert "entries" in capsys.readouterr().out


@pytest.mark.parametrize("drop", ["+xautoclaim", "+xreadgroup", "+evalsha"])
def test_a_missing_command_fails_at_query_start_naming_it(spark, redis_server, tmp_path, drop):
    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 100)
    url = _user(r, redis_server, "streaming-reader", [stream], drop=drop)
    q = (stream_df(spark, url, stream, "g").writeStream.format("noop")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    with pytest.raises(StreamingQueryException) as err:
        q.awaitTermination(120)
    text = str(err.value)
    assert f"'{drop[1:]}'" in text and f"add {drop}" in text and "acl-rule" in text, text
    assert q.lastProgress is None  # no batch ran, no task
    assert "pw@" not in text


@pytest.mark.parametrize("drop", ["+xread", "~{eventbus:*}:eventbus:alive"])
def test_a_reader_rule_without_xread_or_the_heartbeat_key_is_refused_naming_it(
        redis_server, drop):
    """A streaming-reader rule without ``+xread`` (news of every stream in one command) or the
    heartbeat key (whether the query is alive) is refused, naming what to add."""
    from tests.integration.helpers import driver_reader

    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 2)
    tokens = [t for t in rule("streaming-reader", [stream]).split() if t != drop]
    assert len(tokens) == len(rule("streaming-reader", [stream]).split()) - 1
    name = f"u{uuid.uuid4().hex[:8]}"
    r.execute_command("ACL", "SETUSER", name, "on", ">pw", *tokens)
    url = f"redis://{name}:pw@127.0.0.1:{redis_server.port}/0"
    reader = driver_reader(url, stream, "g", claimMinIdleMs="600000")
    with pytest.raises(ConfigError) as err:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())  # the first probe asks in full
        reader.commit(end)  # its acks mark the stream: the next probe asks it in full too
        for _ in range(2):  # then a stream this query did not change is asked with XREAD
            reader.latestOffset(end, ReadAllAvailable())
    assert drop in str(err.value) and "acl-rule" in str(err.value), err.value
    reader.stop()


@pytest.mark.parametrize("drop", ["+xinfo|stream", "+xrange"])
def test_a_reader_without_group_names_the_command_its_rule_lacks(redis_server, drop):
    """Without a group: the driver's first look (XINFO STREAM), the XRANGE that finds where a
    batch ends, and the tasks' XRANGE each name the command to add and the role's rule."""
    from spark_eventbus.errors import EventBusError
    from tests.integration.test_without_group import _read, _reader

    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 20)
    reader = _reader(_user(r, redis_server, "reader-without-group", [stream], drop=drop),
                     stream)
    with pytest.raises(EventBusError) as err:
        start = reader.initialOffset()
        _read(reader, start, reader.latestOffset(start, ReadMaxRows(10)))
    text = str(err.value)
    assert f"'{drop[1:]}'" in text and f"add {drop}" in text and "acl-rule" in text, text


def test_a_missing_key_pattern_fails_at_query_start_naming_it(spark, redis_server, tmp_path):
    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 100)
    url = _user(r, redis_server, "streaming-reader", [stream], drop=f"~{{{stream}}}:eventbus:*")
    q = (stream_df(spark, url, stream, "g").writeStream.format("noop")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    with pytest.raises(StreamingQueryException) as err:
        q.awaitTermination(120)
    assert "key pattern" in str(err.value) and "acl-rule" in str(err.value)
    assert q.lastProgress is None


@pytest.mark.parametrize("drop", ["+watch", "+multi", "+exec", "+get", "+set"])
def test_a_sink_rule_without_transactions_is_refused_at_start_naming_the_commands(
        spark, redis_server, drop):
    """A sink user whose rule lacks a transaction command (WATCH, MULTI, EXEC) or one of the
    seal's (GET in the chunk, SET on the driver): the write is refused on the driver before
    any task, naming what to add and the command that prints the rule; nothing is written.
    The chunk itself says the same on an executor."""
    import numpy as np

    from spark_eventbus.core.keys import sink_marker_key, sink_seal_key
    from spark_eventbus.redisio import ConnectionSpec, add_chunk, new_client
    from spark_eventbus.writes.chunking import WriteChunk, xadd_commands
    from spark_eventbus.writes.encoding import Run

    r = redis_server.client()
    stream, _ = _names()
    url = _user(r, redis_server, "sink", [stream], drop=drop)
    fix = r"\+watch \+multi \+exec \+discard \+srem \+get \+set.*eventbus acl-rule --role sink"
    with pytest.raises(Exception, match=r"transaction.*ACL user may not run.*" + fix):
        spark.range(10).select(F.col("id").cast("string").alias("n")) \
            .write.format("eventbus").option("url", url).option("stream", stream) \
            .mode("append").save()
    limited = new_client(ConnectionSpec(url))
    marker = sink_marker_key(stream, "q", "0", 0)
    run = Run(("n",), [["a", "b", "c"]], 3, np.zeros(3, dtype=np.int64))
    if drop != "+set":  # SET is the driver's alone
        with pytest.raises(ConfigError, match=fix):
            add_chunk(limited, stream, xadd_commands(WriteChunk(stream, 0, [run], 3)), 3,
                      marker, "0:0", 60_000, seal=(sink_seal_key(stream, "q"), 0))
    limited.close()
    assert r.exists(stream) == 0 and r.exists(marker) == 0  # nothing ran outside a MULTI




def test_delete_at_ack_deletes_at_ack_time_only_where_the_user_may_run_xackdel(redis_server,
                                                                               caplog):
    """deleteAtAck on a server with XACKDEL (Redis 8.2): a streaming-reader rule without
    ``+xackdel`` keeps plain XACKs (trimAcked's pass does the job) and says which rule to add; with
    ``eventbus acl-rule --xackdel`` acks delete. A server without XACKDEL (Redis 7.0, Valkey
    9.1) refuses that name in ACL SETUSER, and the query acks with XACK."""
    from spark_eventbus.redisio import capabilities_of
    from tests.integration.helpers import driver_reader

    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 2)
    plain = _user(r, redis_server, "streaming-reader", [stream])
    reader = driver_reader(plain, stream, "g", deleteAtAck="true")
    has = capabilities_of(reader.driver.opts.connection).has_xackdel
    assert reader.driver.subscription.delete_acked is False
    assert ("may not run it" in caplog.text and "--xackdel" in caplog.text) == has
    reader.stop()
    name = f"u{uuid.uuid4().hex[:8]}"
    tokens = rule("streaming-reader", [stream], xackdel=True).split()
    if not has:
        with pytest.raises(Exception, match=r"(?i)unknown command|xackdel"):
            r.execute_command("ACL", "SETUSER", name, "on", ">pw", *tokens)
        return
    r.execute_command("ACL", "SETUSER", name, "on", ">pw", *tokens)
    allowed = driver_reader(f"redis://{name}:pw@127.0.0.1:{redis_server.port}/0", stream, "g",
                            deleteAtAck="true")
    assert allowed.driver.subscription.delete_acked is True
    allowed.stop()


def test_dlq_replay_leaves_no_pending_reference_where_the_server_and_the_user_may(
        redis_server, capsys):
    """Redis 8.2 (XDELEX): a cli rule with ``--xdelex`` replays dead letters with ``XDELEX …
    DELREF``, so a group reading the dead-letter stream keeps no pending entry whose payload is
    gone; a rule without it deletes with XDEL, and the report says the references stayed and
    which rule to add. Redis 7.0 and Valkey 9.1 (no XDELEX): XDEL, the report says why, and the
    name is refused in ACL SETUSER."""
    from spark_eventbus.redisio import capabilities_of
    from spark_eventbus.redisio.client import ConnectionSpec

    r = redis_server.client()
    stream, dlq = _names()
    r.xadd(stream, {"n": "0"})

    def replay(url: str) -> tuple[str, int]:
        """Three dead letters a triage group has read (pending), replayed: the output and the
        group's pending count after."""
        for i in range(3):
            r.xadd(dlq, {"n": str(i), "dlq.reason": "bad"})
        r.xreadgroup("triage", "alice", {dlq: ">"})
        assert cli(["--url", url, "dlq", "replay", "--from", dlq, "--to", stream]) == 0
        assert r.xlen(dlq) == 0
        return capsys.readouterr().out, int(r.xpending(dlq, "triage")["pending"])

    r.xgroup_create(dlq, "triage", "$", mkstream=True)
    has = capabilities_of(ConnectionSpec(redis_server.url), scripts=False).has_xdelex
    out, left = replay(_user(r, redis_server, "cli", [stream], dlq))
    assert "Moved 3 entries" in out and left == 3  # XDEL: the references stay
    assert ("may not run XDELEX" in out and "--xdelex" in out) == has
    assert ("the server has no XDELEX" in out) == (not has)
    name = f"u{uuid.uuid4().hex[:8]}"
    tokens = rule("cli", [stream], dlq, xdelex=True).split()
    if not has:
        with pytest.raises(Exception, match=r"(?i)unknown command|xdelex"):
            r.execute_command("ACL", "SETUSER", name, "on", ">pw", *tokens)
        return
    r.execute_command("ACL", "SETUSER", name, "on", ">pw", *tokens)
    r.xautoclaim(dlq, "triage", "alice", 0)  # drop the three dangling references first
    assert int(r.xpending(dlq, "triage")["pending"]) == 0
    out, left = replay(f"redis://{name}:pw@127.0.0.1:{redis_server.port}/0")
    assert left == 0 and "left the pending lists of the 1 group(s)" in out
    assert r.xlen(stream) == 7


def test_a_user_who_may_not_load_scripts_is_told_the_rule_not_that_lua_is_missing(
        redis_server):
    """A read-only analytics user (``+@read +@connection``) reading with a group: the server
    has Lua, the user may not load scripts; the refusal says so and prints the way to the
    role's rule, before anything is created."""
    from tests.integration.helpers import driver_reader

    r = redis_server.client()
    stream, _ = _names()
    produce(r, stream, 3)
    name = f"u{uuid.uuid4().hex[:8]}"
    r.execute_command("ACL", "SETUSER", name, "on", ">pw", f"~{stream}", "+@read",
                      "+@connection")
    reader = driver_reader(f"redis://{name}:pw@127.0.0.1:{redis_server.port}/0", stream, "g")
    with pytest.raises(ConfigError) as err:
        reader.initialOffset()
    text = str(err.value)
    assert "may not load" in text and "eventbus acl-rule --role streaming-reader" in text, text
    assert "no Lua engine" not in text and "pw@" not in text
    assert r.xinfo_groups(stream) == []
