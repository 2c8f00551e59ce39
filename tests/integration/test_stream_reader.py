"""The streaming reader against a real Redis and a real local[2] Spark (issue 2, items 1-10)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.integration.helpers import (
    checkpoint,
    driver_reader,
    ids_of,
    input_rows,
    lag,
    latest_offsets,
    pending,
    produce,
    run_available_now,
    stream_df,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.mark.server
def test_available_now_reads_every_id_once_and_leaves_nothing_pending(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    produced = produce(r, names["stream"], 50_000)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"])
    out = tmp_path / "out"
    q = (df.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", checkpoint(tmp_path)).trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert q.exception() is None
    got = ids_of(spark.read.parquet(str(out)).select("id").collect())
    assert len(got) == 50_000
    assert sorted(got) == sorted(produced)
    assert pending(r, names["stream"], names["group"]) == 0
    assert lag(r, names["stream"], names["group"]) == 0


def test_processing_time_query_with_live_producer_misses_nothing(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    produced: list[str] = []
    stop = threading.Event()

    def producer() -> None:
        i = 0
        while not stop.is_set() and i < 12_000:
            produced.extend(produce(r, names["stream"], 300, i))
            i += 300
            time.sleep(0.05)

    # create the group first so that nothing the producer adds can precede it
    r.xgroup_create(names["stream"], names["group"], "$", mkstream=True)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=2000)
    name = f"live_{names['tag']}"
    q = (df.writeStream.format("memory").queryName(name).trigger(processingTime="300 milliseconds")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    t = threading.Thread(target=producer)
    t.start()
    try:
        t.join(120)
        stop.set()
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    got = ids_of(spark.table(name).collect())
    assert len(produced) == 12_000
    assert sorted(got) == sorted(produced)  # nothing missing, nothing twice
    assert pending(r, names["stream"], names["group"]) == 0


@pytest.mark.server
def test_dead_consumer_entries_are_reclaimed_and_acked(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    produce(r, names["stream"], 3_000)
    r.xgroup_create(names["stream"], names["group"], "0")
    dead = r.xreadgroup(names["group"], "worker-that-died", {names["stream"]: ">"}, count=1000)
    dead_ids = {i.decode() for i, _ in dead[0][1]}
    assert len(dead_ids) == 1000
    time.sleep(1.2)  # older than claimMinIdleMs
    df = stream_df(spark, redis_server.url, names["stream"], names["group"], claimMinIdleMs=1000)
    rows, _ = run_available_now(df, tmp_path)
    by_id = {row["id"]: row for row in rows}
    assert len(rows) == len(by_id) == 3_000
    assert dead_ids <= set(by_id)
    assert all(by_id[i]["delivery_count"] >= 2 for i in dead_ids)
    assert all(row["delivery_count"] == 1 for i, row in by_id.items() if i not in dead_ids)
    assert pending(r, names["stream"], names["group"]) == 0


@pytest.mark.server
def test_entries_delivered_too_often_go_to_the_dead_letter_stream(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 200)
    r.xgroup_create(names["stream"], names["group"], "0")
    # Two failed deliveries of the first 50 entries by workers that died.
    r.xreadgroup(names["group"], "dead-1", {names["stream"]: ">"}, count=50)
    r.xclaim(names["stream"], names["group"], "dead-2", 0, ids[:50])
    time.sleep(0.3)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"], claimMinIdleMs=200,
                   maxDeliveries=2, deadLetterStream=names["dlq"])
    rows, _ = run_available_now(df, tmp_path)
    assert sorted(ids_of(rows)) == sorted(ids[50:])  # poison entries are not delivered
    dlq = r.xrange(names["dlq"])
    assert len(dlq) == 50
    by_source = {f[b"dlq.source.id"].decode(): f for _, f in dlq}
    assert set(by_source) == set(ids[:50])
    first = by_source[ids[0]]
    assert first[b"n"] == b"0" and json.loads(first[b"payload"])["n"] == 0  # original fields
    assert first[b"dlq.source.stream"].decode() == names["stream"]
    assert first[b"dlq.group"].decode() == names["group"]
    assert int(first[b"dlq.delivery_count"]) == 3
    assert b"maxDeliveries=2" in first[b"dlq.reason"]
    assert pending(r, names["stream"], names["group"]) == 0


def _trimmed_before_read(r, names: dict[str, str]) -> list[str]:
    """A group at 0, 100 entries, then all but the last 10 trimmed before anyone read them."""
    r.xgroup_create(names["stream"], names["group"], "0", mkstream=True)
    ids = produce(r, names["stream"], 100)
    r.xtrim(names["stream"], maxlen=10, approximate=False)
    return ids


@pytest.mark.server
def test_trimmed_before_read_fails_by_default_naming_stream_ids_and_option(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = _trimmed_before_read(r, names)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"])
    q = (df.writeStream.format("memory").queryName(f"loss_{names['tag']}")
         .trigger(availableNow=True).option("checkpointLocation", checkpoint(tmp_path)).start())
    with pytest.raises(Exception) as err:
        q.awaitTermination(120)
    text = str(err.value)
    assert names["stream"] in text
    expected = f"90 entries of stream '{names['stream']}' with IDs after 0-0 and before {ids[90]}"
    assert expected in text
    assert "failOnDataLoss" in text


@pytest.mark.server
def test_trimmed_before_read_skipped_with_failondataloss_false(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = _trimmed_before_read(r, names)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   failOnDataLoss="false")
    rows, q = run_available_now(df, tmp_path)
    assert sorted(ids_of(rows)) == sorted(ids[90:])
    assert pending(r, names["stream"], names["group"]) == 0
    counted = [o["_eventbus"] for o in latest_offsets(q)]
    assert max(c["lostRanges"] for c in counted) == 1
    assert max(c["lostEntries"] for c in counted) == 90


@pytest.mark.parametrize("read_before", [True, False], ids=["after-a-read", "before-any-read"])
@pytest.mark.server
def test_a_stream_trimmed_empty_before_the_group_read_it_is_a_loss(
        redis_server, names, read_before):
    """Entries added and trimmed away before the group read them, the stream left empty:
    Redis 8.2's XINFO GROUPS says lag 0 there (7.0 and Valkey 9.1 count the 4), so the probe
    looks at XINFO STREAM; the stream got nothing new, so the loss is reported at its next full
    probe (within claimMinIdleMs), and after that it is not reported again."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_eventbus.errors import DataLossError

    r = redis_server.client()
    stream = names["stream"]
    if read_before:
        produce(r, stream, 1)
    else:  # the group's last delivered ID is 0-0
        r.xgroup_create(stream, names["group"], "0", mkstream=True)
    reader = driver_reader(redis_server.url, stream, names["group"],
                           startingPosition="earliest", claimMinIdleMs="1000")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    if read_before:
        reader.commit(end)
        assert reader.latestOffset(end, ReadAllAvailable()) is end
    last = produce(r, stream, 4, start=100)[-1]
    r.xtrim(stream, minid=f"{int(last.split('-')[0]) + 1}-0", approximate=False)
    assert r.xlen(stream) == 0

    def lost() -> bool:
        try:
            assert reader.latestOffset(end, ReadAllAvailable()) is end
        except DataLossError as exc:
            assert f"4 entries of stream '{stream}'" in str(exc), exc
            return True
        return False
    wait_for(lost, 30, "the loss on the quiet stream to be reported")
    reader.stop()
    skip = driver_reader(redis_server.url, stream, names["group"], failOnDataLoss="false")
    start = skip.initialOffset()
    for _ in range(2):  # counted once
        assert skip.latestOffset(start, ReadAllAvailable()) is start
        assert skip.reportLatestOffset()["_eventbus"]["lostEntries"] == 4
    skip.stop()


@pytest.mark.parametrize("trigger", ["processingTime", "availableNow"])
def test_max_entries_per_trigger_bounds_every_batch(spark, redis_server, names, tmp_path, trigger):
    r = redis_server.client()
    produced = produce(r, names["stream"], 5_000)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=700)
    if trigger == "availableNow":
        rows, q = run_available_now(df, tmp_path)
    else:
        name = f"rate_{names['tag']}"
        q = (df.writeStream.format("memory").queryName(name)
             .trigger(processingTime="100 milliseconds")
             .option("checkpointLocation", checkpoint(tmp_path)).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        rows = spark.table(name).collect()
    sizes = input_rows(q)
    assert sorted(ids_of(rows)) == sorted(produced)
    assert sum(sizes) == 5_000
    assert len(sizes) >= 8 and max(sizes) <= 700


def test_value_schema_parses_json_and_reports_malformed_rows(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    good = produce(r, names["stream"], 20)
    bad_json = r.xadd(names["stream"], {"payload": "{not json"}).decode()
    bad_type = r.xadd(names["stream"], {"payload": '{"n": "seven"}'}).decode()
    no_field = r.xadd(names["stream"], {"other": "x"}).decode()
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   valueSchema="n INT, name STRING")
    rows, _ = run_available_now(df, tmp_path)
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == 23
    for i, entry_id in enumerate(good):
        assert by_id[entry_id]["value"]["n"] == i
        assert by_id[entry_id]["value"]["name"] == f"item-{i}"
        assert by_id[entry_id]["error"] is None
    assert by_id[bad_json]["value"] is None and "malformed JSON" in by_id[bad_json]["error"]
    assert by_id[bad_type]["value"] is None and "expected int" in by_id[bad_type]["error"]
    assert by_id[no_field]["value"] is None and "missing" in by_id[no_field]["error"]


@pytest.mark.server
def test_two_queries_with_different_consumers_split_the_stream(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    produced = produce(r, names["stream"], 10_000)
    queries, tables = [], []
    for consumer in ("a", "b"):
        df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                       consumer=f"query-{consumer}", maxEntriesPerTrigger=500)
        name = f"split_{consumer}_{names['tag']}"
        tables.append(name)
        queries.append(df.writeStream.format("memory").queryName(name)
                       .trigger(processingTime="100 milliseconds")
                       .option("checkpointLocation", checkpoint(tmp_path)).start())
    try:
        wait_for(lambda: sum(spark.table(t).count() for t in tables) >= 10_000, 240,
                 "both queries to read the stream")
        for q in queries:
            q.processAllAvailable()
    finally:
        for q in queries:
            q.stop()
    a, b = (set(ids_of(spark.table(t).collect())) for t in tables)
    assert a and b, "each query should have taken a share"
    assert not a & b
    assert a | b == set(produced)
    assert pending(r, names["stream"], names["group"]) == 0


@pytest.mark.parametrize("mode", ["manual", "none"])
@pytest.mark.server
def test_manual_and_none_ack_modes_never_ack_and_keep_no_stale_plans(
        spark, redis_server, names, tmp_path, mode):
    from spark_eventbus.core.keys import plan_key

    r = redis_server.client()
    produced = produce(r, names["stream"], 3_000)
    df = stream_df(spark, redis_server.url, names["stream"], names["group"], ackMode=mode,
                   maxEntriesPerTrigger=500)
    rows, q = run_available_now(df, tmp_path)
    assert sorted(ids_of(rows)) == sorted(produced)
    assert len(input_rows(q)) >= 6
    assert pending(r, names["stream"], names["group"]) == 3_000  # the source acked nothing
    # claim plans of committed batches are dropped whatever the ack mode
    assert r.hlen(plan_key(names["stream"], names["group"], f"spark-{names['group']}")) == 0


def test_several_streams_in_one_query_share_the_batch_budget(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    other = names["stream"] + ":b"
    a = produce(r, names["stream"], 3_000)
    b = produce(r, other, 300)
    df = stream_df(spark, redis_server.url, f"{names['stream']},{other}", names["group"],
                   maxEntriesPerTrigger=1000)
    rows, q = run_available_now(df, tmp_path)
    got = {(row["stream"], row["id"]) for row in rows}
    assert len(rows) == len(got) == 3_300
    assert got == {(names["stream"], i) for i in a} | {(other, i) for i in b}
    assert max(input_rows(q)) <= 1000
    assert pending(r, names["stream"], names["group"]) == 0
    assert pending(r, other, names["group"]) == 0


@pytest.mark.parametrize("form", ["epoch ms", "ISO-8601"])
@pytest.mark.server
def test_starting_position_timestamp_starts_at_the_first_entry_at_or_after_it(
        spark, redis_server, names, tmp_path, form):
    import datetime as dt

    r = redis_server.client()
    t = 1_700_000_000_000
    ids = [r.xadd(names["stream"], {"n": str(i)}, id=f"{ms}-{seq}").decode()
           for i, (ms, seq) in enumerate([(t - 1, 0), (t - 1, 7), (t, 0), (t, 1), (t + 5, 0)])]
    when = (str(t) if form == "epoch ms" else
            dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).isoformat())
    df = (spark.readStream.format("eventbus").option("url", redis_server.url)
          .option("stream", names["stream"]).option("group", names["group"])
          .option("startingPosition", when).load())
    rows, _ = run_available_now(df, tmp_path)
    assert sorted(row["id"] for row in rows) == ids[2:]


class _EventBusAlerts:
    """The example listener of docs/operations.md, reduced to recording what it would alert on."""

    def __init__(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        outer = self
        self.batches: list[tuple[int, dict]] = []  # type: ignore[type-arg]

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):  # type: ignore[no-untyped-def]
                pass

            def onQueryProgress(self, event):  # type: ignore[no-untyped-def]
                for source in event.progress.sources:
                    latest = json.loads(source.latestOffset or "null")
                    if latest and "_eventbus" in latest:
                        outer.batches.append((event.progress.numInputRows, latest))

            def onQueryIdle(self, event):  # type: ignore[no-untyped-def]
                pass

            def onQueryTerminated(self, event):  # type: ignore[no-untyped-def]
                pass

        self.listener = Listener()


def test_progress_reports_each_batch_claimed_and_reclaimed_counts_to_a_listener(
        spark, redis_server, names, tmp_path):
    r = redis_server.client()
    ids = produce(r, names["stream"], 1_000)
    r.xgroup_create(names["stream"], names["group"], "0")
    r.xreadgroup(names["group"], "dead-worker", {names["stream"]: ">"}, count=100)
    alerts = _EventBusAlerts()
    spark.streams.addListener(alerts.listener)
    try:
        df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                       maxEntriesPerTrigger=300, claimMinIdleMs=0)
        rows, _ = run_available_now(df, tmp_path)
        wait_for(lambda: sum(n for n, _ in alerts.batches) >= 1_000, 30, "the last progress")
    finally:
        spark.streams.removeListener(alerts.listener)
    assert sorted(ids_of(rows)) == sorted(ids)
    busy = [(n, latest) for n, latest in alerts.batches if n]
    for n, latest in busy:  # each batch's counts add up to the rows it read
        totals = latest["_eventbus"]
        assert totals["claimed"] + totals["reclaimed"] == n, latest
        per_stream = latest[names["stream"]]
        assert (per_stream["claimed"], per_stream["reclaimed"]) == (totals["claimed"],
                                                                    totals["reclaimed"])
        # entriesBehind: the group's lag (alias `lag`); one stream, so the total is its own
        assert per_stream["entriesBehind"] == per_stream["lag"] == totals["entriesBehind"]
    behind = [latest["_eventbus"]["entriesBehind"] for _, latest in busy]
    assert behind == sorted(behind, reverse=True) and behind[-1] == 0, behind
    assert sum(latest["_eventbus"]["reclaimed"] for _, latest in busy) == 100
    assert sum(latest["_eventbus"]["claimed"] for _, latest in busy) == 900
