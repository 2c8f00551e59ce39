"""Batch reads, auto-registration, and clear driver-side errors (issue 2, items 11-13)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from tests.harness.redis_server import free_port
from tests.integration.helpers import checkpoint, produce, run_available_now, stream_df

pytestmark = pytest.mark.integration


@pytest.mark.server
def test_batch_read_between_start_and_end_ids(spark, redis_server, names):
    r = redis_server.client()
    for i in range(1, 101):
        r.xadd(names["stream"], {"n": str(i)}, id=f"{1000 + i}-{i % 3}")
    df = (spark.read.format("eventbus").option("url", redis_server.url)
          .option("stream", names["stream"]).option("startId", "1010-0")
          .option("endId", "1020-2").option("numPartitions", "3").load())
    rows = df.collect()
    assert sorted(int(row["fields"]["n"]) for row in rows) == list(range(10, 21))
    assert all(row["delivery_count"] is None for row in rows)
    assert df.rdd.getNumPartitions() == 3
    whole = spark.read.format("eventbus").option("url", redis_server.url) \
        .option("stream", names["stream"]).load()
    assert whole.count() == 100
    # nothing to read (a stream that does not exist): no range planned, no rows, no error
    missing = spark.read.format("eventbus").option("url", redis_server.url) \
        .option("stream", f"{names['stream']}:none").load()
    assert missing.collect() == []
    # What the batch reader plans from, as each server answers it (and in this process, whose
    # coverage a server lane keeps: Spark's reused Python workers die by SIGKILL or SIGHUP,
    # which saves none): the first and last IDs in each range, None for none or no stream
    from spark_eventbus.core.connection import connection_spec
    from spark_eventbus.redisio import stream_spans
    from spark_eventbus.redisio.streams import text

    spans = stream_spans(connection_spec(redis_server.url), [
        (names["stream"], "1010-0", "1020-2"), (names["stream"], "5000-0", "+"),
        (f"{names['stream']}:none", "-", "+")], "planning a test read", "no fix")
    assert spans[0] is not None and [text(x) for x in spans[0]] == ["1010-1", "1020-2"]
    assert spans[1:] == [None, None]


def test_batch_bounds_per_stream_by_id_and_by_time(spark, redis_server, names):
    """startId/endId as JSON by stream (an ID, a time, earliest for the rest), and Kafka's
    startingTimestamp/endingTimestamp (from a time, up to and not at another): XRANGE reads
    exactly those ranges, stream by stream."""
    r = redis_server.client()
    a, b, c = (f"{names['stream']}:{x}" for x in "abc")
    for stream in (a, b, c):
        for i in range(1, 101):
            r.xadd(stream, {"n": str(i)}, id=f"{1000 + i}-{i % 3}")

    def read(**options: str) -> dict[str, list[int]]:
        df = spark.read.format("eventbus").options(url=redis_server.url, stream=f"{a},{b},{c}",
                                                   **options).load()
        got: dict[str, list[int]] = {}
        for row in df.collect():
            got.setdefault(row["stream"], []).append(int(row["fields"]["n"]))
        return {k: sorted(v) for k, v in got.items()}

    assert read(startId=json.dumps({a: "1010-0", b: "1970-01-01T00:00:01.050Z"}),
                endId=json.dumps({a: "1020-2", "*": "1095"})) == {
        a: list(range(10, 21)), b: list(range(50, 96)), c: list(range(1, 96))}
    assert read(startingTimestamp="1090",
                endingTimestamp=json.dumps({c: "1970-01-01T00:00:01.095Z"})) == {
        a: list(range(90, 101)), b: list(range(90, 101)), c: list(range(90, 95))}


def test_starting_positions_per_stream_create_each_group_where_asked(redis_server, names):
    """startingPosition as JSON by stream: a stream ID (the group starts after it), a time
    (at the first entry at or after it), earliest; the streams not named at '*'."""
    from spark_eventbus.group.subscription import Subscription
    from spark_eventbus.options.reader import parse_reader_options

    r = redis_server.client()
    a, b, c, d = (f"{names['stream']}:{x}" for x in "abcd")
    for stream in (a, b, c, d):
        for i in range(1, 101):
            r.xadd(stream, {"n": str(i)}, id=f"{1000 + i}-{i % 3}")
        r.xtrim(stream, minid="1006", approximate=False)  # 5 gone: earliest is the sixth
    at = {a: "1010-1", b: "1970-01-01T00:00:01.050Z", c: "earliest", "*": "latest"}
    Subscription(parse_reader_options({"url": redis_server.url, "stream": f"{a},{b},{c},{d}",
                                       "group": names["group"],
                                       "startingPosition": json.dumps(at)}, streaming=True))
    first = {}
    for stream in (a, b, c, d):
        got = r.xreadgroup(names["group"], "w", {stream: ">"}, count=1)
        first[stream] = int(got[0][1][0][1][b"n"]) if got else None
    assert first == {a: 11, b: 50, c: 6, d: None}


# A new session resolving format("eventbus") with no register() call (pyspark_eventbus.py, the
# auto-registration hook) had its own test here, a Python and a JVM started for one count. Issue
# 59 folded it into the tests that start fresh Spark processes anyway and never call register():
# test_spark_connect.py::test_reads_sink_and_acking_writer_through_spark_connect (a batch read,
# spark.read.format("eventbus"), in a session of a fresh Connect server), test_faults.py's
# driver-kill test (readStream and the sink in fresh local drivers, jobs/_session.py) and
# test_notebooks.py::test_the_quickstart_notebook_runs (a fresh kernel's first session).


def _start_error(spark, tmp_path: Path, **options: str) -> str:
    reader = spark.readStream.format("eventbus")
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    q = (df.writeStream.format("memory").queryName(f"err_{uuid.uuid4().hex[:6]}")
         .trigger(availableNow=True).option("checkpointLocation", checkpoint(tmp_path)).start())
    with pytest.raises(Exception) as err:
        q.awaitTermination(120)
    assert not q.recentProgress or all(p["numInputRows"] == 0 for p in q.recentProgress)
    return str(err.value)


@pytest.mark.server
def test_missing_stream_fails_at_load(spark, redis_server):
    with pytest.raises(Exception, match="option 'stream' is required"):
        spark.readStream.format("eventbus").option("url", redis_server.url) \
            .option("group", "g").load()


@pytest.mark.parametrize(("option", "value", "expect"), [
    ("maxEntriesPerTrigger", "0", "option 'maxEntriesPerTrigger' = '0' is invalid"),
    ("numPartitions", "many", "option 'numPartitions' = 'many' is invalid"),
    ("claimMinIdleMs", "-5", "option 'claimMinIdleMs' = '-5' is invalid"),
    ("ackMode", "sometimes", "use one of commit, manual, none"),
    ("valueSchema", "n INTEGR", "option 'valueSchema'"),
    ("startId", "abc", "option 'startId' = 'abc' is invalid: use 'earliest', 'latest', a stream"),
])
def test_invalid_option_fails_at_load_naming_option_and_value(spark, redis_server, names,
                                                              option, value, expect):
    with pytest.raises(Exception) as err:
        spark.readStream.format("eventbus").option("url", redis_server.url) \
            .option("stream", names["stream"]).option("group", "g").option(option, value).load()
    assert expect in str(err.value)


@pytest.mark.server
def test_a_blank_group_fails_before_any_batch(spark, redis_server, names, tmp_path):
    text = _start_error(spark, tmp_path, url=redis_server.url, stream=names["stream"],
                        group=" ")
    assert "option 'group' is blank" in text
    assert "UnboundLocalError" not in text  # Spark's runner, had streamReader() raised


def test_a_misspelt_option_fails_at_load_naming_the_option_it_meant(spark, redis_server, names):
    with pytest.raises(Exception) as err:
        spark.readStream.format("eventbus").option("url", redis_server.url) \
            .option("stream", names["stream"]).option("group", "g") \
            .option("startPosition", "earliest").load()
    # Spark passes option keys lower-cased
    assert "unknown option 'startposition' (did you mean 'startingPosition'?)" in str(err.value)


def test_unreachable_redis_fails_before_any_batch(spark, names, tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    text = _start_error(spark, tmp_path, url=url, stream=names["stream"], group="g")
    assert "Redis did not answer" in text and "option 'url'" in text


@pytest.mark.server
def test_key_that_is_not_a_stream_is_refused_and_kept(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    r.set(names["stream"], "precious")
    text = _start_error(spark, tmp_path, url=redis_server.url, stream=names["stream"], group="g")
    assert "holds a string, not a stream" in text
    assert r.get(names["stream"]) == b"precious"


def test_password_never_appears_in_errors_offsets_or_progress(spark, own_redis, names, tmp_path):
    secret = "s3cret-" + uuid.uuid4().hex[:8]
    own_redis.password = secret
    own_redis.start()
    produce(own_redis.client(), names["stream"], 50)
    # wrong password: a clear error without the password it was given
    wrong = _start_error(spark, tmp_path, url=own_redis.url, password=secret + "-wrong",
                         stream=names["stream"], group="g")
    assert "password" in wrong.lower() and secret not in wrong
    # password inside the URL, server unreachable: redacted
    url = f"redis://user:{secret}@127.0.0.1:{free_port()}/0"
    text = _start_error(spark, tmp_path, url=url, stream=names["stream"], group="g")
    assert secret not in text and "user:***@" in text
    # a working query: nothing in the checkpoint or the progress reports
    df = stream_df(spark, own_redis.url, names["stream"], names["group"], password=secret)
    rows, q = run_available_now(df, tmp_path)
    assert len(rows) == 50
    assert secret not in json.dumps(q.recentProgress, default=str)
    checked = 0
    for path in tmp_path.rglob("*"):  # every checkpoint file (offsets, commits, metadata)
        if path.is_file() and "redis" not in path.parts:
            assert secret.encode() not in path.read_bytes(), path
            checked += 1
    assert checked > 0


def test_starting_position_for_a_group_that_exists_is_said_to_be_ignored(redis_server, names,
                                                                          caplog):
    """startingPosition applies only when the query creates the group: given for a group that
    exists (a first start with a typo'd or missing option, then fixed), it changes nothing, and
    the driver says so with the command that moves the group."""
    import logging

    from spark_eventbus.group.subscription import Subscription
    from spark_eventbus.options.reader import parse_reader_options

    r = redis_server.client()
    stream, group = names["stream"], names["group"]
    r.xadd(stream, {"n": "1"})
    r.xgroup_create(stream, group, "$")

    def join(**extra: str) -> str:
        caplog.clear()
        opts = parse_reader_options({"url": redis_server.url, "stream": stream, "group": group,
                                     **extra}, streaming=True)
        with caplog.at_level(logging.WARNING, "spark_eventbus"):
            Subscription(opts)
        return caplog.text

    text = join(startingPosition="earliest")
    assert "option 'startingPosition' = 'earliest' is ignored" in text and repr(stream) in text
    assert f"eventbus group seek --stream <stream> --group {group} --to earliest" in text
    assert "startingPosition" not in join()  # not given: nothing to say
    assert r.xinfo_groups(stream)[0]["last-delivered-id"] != b"0-0"  # the group did not move


@pytest.mark.parametrize("given", ["wrong", "none"])
@pytest.mark.server
def test_refused_credentials_fail_at_once_without_retrying(own_redis, given):
    """A refused password (or none, where one is required) is not a network error: retrying
    it only delays the error (a wrong password took 6.4 s, none at all ~36 s). One connection
    attempt, then the clear error. (Credentials that rotate are retried with fresh ones: the
    credentials options.)"""
    from spark_eventbus.core.connection import connection_spec
    from spark_eventbus.errors import ConfigError
    from spark_eventbus.redisio.client import new_client

    own_redis.password = "s3cret-" + uuid.uuid4().hex[:8]
    own_redis.start()
    r = own_redis.client()
    before = int(r.info("stats")["total_connections_received"])
    spec = connection_spec(own_redis.url, own_redis.password + "-x" if given == "wrong" else None,
                           failover_timeout_ms=30_000)
    with pytest.raises(ConfigError, match="refused the credentials"):
        new_client(spec)
    assert int(r.info("stats")["total_connections_received"]) - before == 1


def test_filter_pushdown_reads_only_the_range_and_returns_the_same_rows(spark, redis_server,
                                                                        names):
    """filterPushdown: a WHERE on timestamp, id and stream narrows what Redis returns (bytes it
    sent, INFO stats) to the newest 1%, with the same rows as without pushdown; without the
    option, a read works whatever the conf; with it and the conf off, Spark's own error names
    the conf."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    r = redis_server.client()
    a, b = f"{names['stream']}:a", f"{names['stream']}:b"
    base = 1_700_000_000_000
    for stream in (a, b):
        pipe = r.pipeline(transaction=False)
        for i in range(2_000):
            pipe.xadd(stream, {"n": str(i), "pad": "x" * 100}, id=f"{base + i}-{i % 2}")
        pipe.execute()
    since = dt.datetime.fromtimestamp((base + 1_980) / 1000, dt.timezone.utc)
    where = (F.col("timestamp") >= F.lit(since)) & F.col("stream").isin(a, "elsewhere") \
        & (F.col("id") != f"{base + 1_999}-1")
    conf = "spark.sql.python.filterPushdown.enabled"

    def read(pushdown: bool, where: Column = where) -> tuple[list[int], int]:
        sent = r.info("stats")["total_net_output_bytes"]
        df = (spark.read.format("eventbus").option("url", redis_server.url)
              .option("stream", f"{a},{b}").option("filterPushdown", str(pushdown).lower())
              .load().where(where))
        rows = sorted(int(row["fields"]["n"]) for row in df.collect())
        return rows, r.info("stats")["total_net_output_bytes"] - sent

    spark.conf.set(conf, "true")
    try:
        narrowed, narrowed_bytes = read(True)
        whole, whole_bytes = read(False)
        # filters that keep nothing: no range planned, an empty result either way
        nothing = F.col("timestamp") > F.lit(dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc))
        assert read(True, nothing)[0] == read(False, nothing)[0] == []
    finally:
        spark.conf.unset(conf)
    assert narrowed == whole == list(range(1_980, 1_999))
    assert narrowed_bytes * 20 < whole_bytes, (narrowed_bytes, whole_bytes)  # 1% of one of two
    assert read(False)[0] == whole  # the conf off: as ever
    with pytest.raises(Exception, match=conf.replace(".", r"\.")):
        read(True)
