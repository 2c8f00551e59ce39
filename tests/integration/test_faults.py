"""Faults: driver SIGKILL and restart, task retry, Redis restart, entries trimmed after claim."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_eventbus import DataLossError, StreamId
from spark_eventbus.core.offsets import NAMED, BatchOffset, StreamBatch
from spark_eventbus.group.stream_reader import EventBusStreamReader
from tests.integration.helpers import (
    checkpoint,
    driver_reader,
    ids_of,
    kill_and_restart,
    pending,
    produce,
    run_available_now,
    stream_df,
    wait_for,
)
from tests.integration.test_sink import _batch_of, _sink_keys

pytestmark = pytest.mark.integration
JOB = Path(__file__).parent / "jobs" / "kill_target.py"


def test_driver_sigkill_and_restart_replays_exactly_and_the_sink_writes_exactly_once(
        spark, redis_server, names, tmp_path):
    """Three driver processes, one query each, killed with SIGKILL together twice at random
    moments inside batches and restarted from their checkpoints each time, then run to the
    end (AvailableNow): 40 streams read in packed partitions into parquet (at-least-once:
    nothing lost, a replayed batch is the same batch under the same batch ID, duplicates
    bounded by the batches in flight), one stream of 6,000 copied through the eventbus sink
    (exactly once), and the 40 streams read without a group into Spark's parquet file sink
    (exactly once). Nothing stays pending in either group. One query per driver: two in one
    driver hit a Spark race under load (jobs/kill_target.py)."""
    r = redis_server.client()
    streams, produced = [f"{names['stream']}-{i:03d}" for i in range(40)], set()
    for i, name in enumerate(streams):
        produced |= {f"{name}/{x}" for x in produce(r, name, 150, i * 150)}
    source, target = names["stream"] + ":src", names["stream"] + ":copy"
    copied_ids = produce(r, source, 6_000)
    chk, out = tmp_path / "chk", tmp_path / "out"
    max_entries = 500
    base = [sys.executable, str(JOB), "--url", redis_server.url, "--streams", ",".join(streams),
            "--group", names["group"], "--out", str(out), "--source", source, "--target",
            target, "--checkpoint", str(chk), "--max-entries", str(max_entries)]
    drivers = [[*base, "--query", q] for q in ("consume", "copy", "positions")]
    kills = 2  # each a new Spark driver (~15 s); `make soak` runs 27 faults
    kill_and_restart(drivers, [chk / q for q in ("consume", "copy", "positions")], tmp_path,
                     kills, seed=7,
                     batches=[len(produced) // max_entries, len(copied_ids) // max_entries,
                              len(produced) // max_entries])
    _run_to_the_end(drivers)
    _read_at_least_once_replayed_exactly(out, produced, kills * max_entries)
    assert all(pending(r, s, names["group"]) == 0 for s in streams)
    _read_exactly_once(spark, Path(f"{out}-positions"), produced)
    # the reader and the sink, into a stream: each entry exactly once
    copied = Counter(f[b"src"].decode() for _, f in r.xrange(target))
    assert set(copied) == set(copied_ids), "a row is missing"
    assert max(copied.values()) == 1, [k for k, c in copied.items() if c > 1][:10]
    assert pending(r, source, names["group"] + "-copy") == 0
    # the last batch's marker sets (one per write task) and the registry, nothing older
    keys = _sink_keys(r, target)
    markers = [k for k in keys if ":eventbus:sink:" in k]
    assert len({_batch_of(k) for k in markers}) <= 1, markers
    assert len(keys) - len(markers) <= 1, keys


def _run_to_the_end(drivers: list[list[str]]) -> None:
    """Each driver once more with ``Trigger.AvailableNow``, together; each must succeed."""
    finals = [subprocess.Popen([*d, "--available-now"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE) for d in drivers]
    for final in finals:
        _, err = final.communicate(timeout=600)
        said = [line for line in err.decode(errors="replace").splitlines()
                if not line.startswith("\t") and ("rror" in line or "xception" in line)]
        assert final.returncode == 0, "\n".join(said[-30:])


def _keys(table: pa.Table) -> list[str]:
    return [f"{s}/{i}" for s, i in zip(table.column("stream").to_pylist(),
                                      table.column("id").to_pylist(), strict=True)]


def _read_at_least_once_replayed_exactly(out: Path, produced: set[str], bound: int) -> None:
    """The group reader's foreachBatch output (stream, id, batch): every entry, each under one
    batch ID only (a replayed batch is the same batch), at most ``bound`` duplicates."""
    table = pq.read_table(out)
    got = _keys(table)
    assert set(got) == produced, f"{len(produced - set(got))} entries are missing"
    batch_of: dict[str, set[int]] = {}
    for key, b in zip(got, table.column("batch").to_pylist(), strict=True):
        batch_of.setdefault(key, set()).add(b)
    assert all(len(b) == 1 for b in batch_of.values()), "an entry moved to another batch"
    duplicates = sum(n - 1 for n in Counter(got).values())
    assert duplicates <= bound, duplicates


def _read_exactly_once(spark: Any, out: Path, produced: set[str]) -> None:
    """The read without a group, into Spark's parquet file sink: each entry exactly once.
    Read through Spark, which reads the files the sink's log (``_spark_metadata``) lists: a
    driver killed while its tasks wrote leaves their files beside them, never committed."""
    rows = spark.read.parquet(str(out)).select("stream", "id").collect()
    read = Counter(f"{row.stream}/{row.id}" for row in rows)
    assert set(read) == produced, f"{len(produced - set(read))} entries are missing"
    assert max(read.values()) == 1, [k for k, c in read.items() if c > 1][:10]


def test_driver_sigkill_over_10000_streams_replays_exactly(spark, redis_server, names,
                                                           tmp_path):
    """The kill test at 10,000 streams found by pattern (issue 58): a group read (claims
    over thousands of streams per batch, packed offsets, packed partitions) and a read
    without a group (a packed position per stream in the checkpoint), each a driver of its
    own, both killed with SIGKILL at one random moment after each committed two batches (of
    three), restarted from their checkpoints and run to the end: every entry read, a replayed
    batch the same batch, nothing pending; without a group, exactly once."""
    r = redis_server.client()
    streams = [f"{names['stream']}:{i:05d}" for i in range(10_000)]
    pipe = r.pipeline(transaction=False)
    for i, name in enumerate(streams):
        for k in range(4):
            pipe.xadd(name, {"n": str(i + k)})
    ids = [x.decode() for x in pipe.execute()]
    produced = {f"{name}/{entry}" for name, entry in zip(
        [s for s in streams for _ in range(4)], ids, strict=True)}
    chk, out = tmp_path / "chk", tmp_path / "out"
    # streams take turns (MIN_SHARE): 4,000 whole streams in each of the first two batches,
    # whose offsets name their contents (from ~3,400 streams of these names)
    max_entries = 16_000
    base = [sys.executable, str(JOB), "--url", redis_server.url, "--streams",
            f"{names['stream']}:*", "--group", names["group"], "--out", str(out),
            "--source", "-", "--target", "-", "--checkpoint", str(chk),
            "--max-entries", str(max_entries)]
    drivers = [[*base, "--query", q] for q in ("consume", "positions")]
    kill_and_restart(drivers, [chk / q for q in ("consume", "positions")], tmp_path, 1,
                     seed=11, batches=[len(produced) // max_entries] * 2)
    _run_to_the_end(drivers)
    _read_at_least_once_replayed_exactly(out, produced, max_entries)
    pipe = r.pipeline(transaction=False)
    for name in streams:
        pipe.xpending(name, names["group"])
    assert sum(p["pending"] for p in pipe.execute()) == 0
    _read_exactly_once(spark, Path(f"{out}-positions"), produced)
    # the group read's batches name their contents (issue 58): the restart read them back
    logged = [json.loads(f.read_text().splitlines()[-1])
              for f in (chk / "consume" / "offsets").iterdir() if f.name.isdigit()]
    assert sum(o["v"] == NAMED for o in logged) >= 2, sorted(o["v"] for o in logged)


def test_failed_task_is_retried_with_the_same_rows(spark, redis_server, names, tmp_path):
    r = redis_server.client()
    produced = produce(r, names["stream"], 3_000)

    def attempt_number(_):  # type: ignore[no-untyped-def]  # hints would make it an Arrow UDF
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 0:
            raise RuntimeError("injected task failure")
        return ctx.attemptNumber()

    attempt = F.udf(attempt_number, "int")
    df = stream_df(spark, redis_server.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=1000)
    rows, _ = run_available_now(df.withColumn("attempt", attempt("id")), tmp_path)
    got = ids_of(rows)
    assert sorted(got) == sorted(produced)  # no loss and no extra row
    assert any(row["attempt"] == 1 for row in rows), "no task was retried"
    assert pending(r, names["stream"], names["group"]) == 0


@pytest.mark.server
def test_redis_restart_mid_stream_loses_nothing(spark, own_redis, names, tmp_path):
    own_redis.start()
    r = own_redis.client()
    produced = produce(r, names["stream"], 4_000)
    df = stream_df(spark, own_redis.url, names["stream"], names["group"],
                   maxEntriesPerTrigger=500)
    name = f"restart_{names['tag']}"
    q = (df.writeStream.format("memory").queryName(name).trigger(processingTime="200 milliseconds")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    try:
        wait_for(lambda: spark.table(name).count() >= 1000, 120, "first batches")
        own_redis.kill()
        threading.Timer(0.5, own_redis.start).start()
        wait_for(lambda: spark.table(name).count() >= 4_000 or q.exception() is not None, 240,
                 "the query to finish after the restart")
        produced += produce(own_redis.client(), names["stream"], 500, 4_000)
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    got = ids_of(spark.table(name).collect())
    assert set(got) == set(produced)
    assert pending(own_redis.client(), names["stream"], names["group"]) == 0


def _reader(url: str, names: dict[str, str], **extra: str) -> EventBusStreamReader:
    return driver_reader(url, names["stream"], names["group"], **extra)


@pytest.mark.parametrize("fail", [True, False])
@pytest.mark.server
def test_entries_trimmed_after_claim_before_read(redis_server, names, fail):
    """Driver and executor halves of the reader called directly, with Redis trimming between."""
    r = redis_server.client()
    ids = produce(r, names["stream"], 100)
    reader = _reader(redis_server.url, names, failOnDataLoss=str(fail).lower())
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(1000))
    r.xtrim(names["stream"], maxlen=10, approximate=False)
    parts = reader.partitions(start, end)
    if fail:
        with pytest.raises(DataLossError) as err:
            for p in parts:
                list(reader.read(p))
        assert names["stream"] in str(err.value) and ids[0] in str(err.value)
        assert "failOnDataLoss" in str(err.value)
        return
    batches = [b for p in parts for b in reader.read(p)]
    assert sorted(i for b in batches for i in b.column("id").to_pylist()) == sorted(ids[90:])
    reader.commit(end)
    assert pending(r, names["stream"], names["group"]) == 0


def _rows(reader: EventBusStreamReader, start: dict, end: dict) -> list[str]:
    return [i for p in reader.partitions(start, end) for b in reader.read(p)
            for i in b.column("id").to_pylist()]


@pytest.mark.server
def test_claims_spark_never_logged_are_recovered_by_the_next_driver(redis_server, names):
    """A driver dies after claiming (and pre-claiming) but before Spark logs the batch: a new
    driver starting from the same logged offset gets exactly those entries, at once."""
    r = redis_server.client()
    ids = produce(r, names["stream"], 5_000)
    first = _reader(redis_server.url, names, maxEntriesPerTrigger="1000", numPartitions="3")
    start = first.initialOffset()
    end1 = first.latestOffset(start, ReadMaxRows(1000))  # batch 1, "logged"
    # Batch 2's pre-claim runs to its end (a busy machine could cut it short: batch 2 would ship
    # what it had, and a new driver would top the never-logged batch up; the kill -9 test covers
    # cuts at random points)
    first.driver.prefetch.join()
    end2 = first.latestOffset(end1, ReadMaxRows(1000))  # batch 2: claimed, never logged
    first.stop()  # interrupts the pre-claim of batch 3; the driver then "dies"
    assert BatchOffset.from_json(end2).count == 1_000
    # batch 1 acked in the background; batch 2 and what was pre-claimed for batch 3 pending
    assert 1_000 <= pending(r, names["stream"], names["group"]) <= 2_000

    second = _reader(redis_server.url, names, maxEntriesPerTrigger="1000", numPartitions="3")
    again = second.latestOffset(end1, ReadMaxRows(1000))
    assert again == end2  # the very batch the dead driver planned
    assert sorted(_rows(second, end1, again)) == sorted(ids[1000:2000])
    end3 = second.latestOffset(again, ReadMaxRows(1000))  # batch 3: what was pre-claimed
    third = sorted(_rows(second, again, end3))
    assert 0 < len(third) <= 1000 and third == sorted(ids[2000:2000 + len(third)])
    seen = [*_rows(second, end1, again), *_rows(second, again, end3)]
    while True:
        nxt = second.latestOffset(end3, ReadMaxRows(1000))
        if nxt == end3:
            break
        seen += _rows(second, end3, nxt)
        end3 = nxt
    second.commit(end3)
    second.stop()
    assert sorted(seen) == sorted(ids[1000:])  # nothing twice, nothing missing
    assert pending(r, names["stream"], names["group"]) == 0


@pytest.mark.server
def test_latest_offset_returns_start_itself_when_nothing_is_new(redis_server, names):
    r = redis_server.client()
    produce(r, names["stream"], 10)
    reader = _reader(redis_server.url, names)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert reader.latestOffset(end, ReadMaxRows(100)) is end
    assert reader.partitions(end, end) == []
    reader.stop()


def test_a_query_starting_with_nothing_to_read_runs_one_empty_warm_up_batch(redis_server,
                                                                           names):
    """Its tasks read nothing (they start the Python workers before the first entries come);
    later calls with nothing new return their start; AvailableNow never gets a warm-up."""
    r = redis_server.client()
    r.xgroup_create(names["stream"], names["group"], "$", mkstream=True)
    reader = _reader(redis_server.url, names, numPartitions="3")
    start = reader.initialOffset()
    warm = reader.latestOffset(start, ReadMaxRows(100))
    assert warm != start and warm["seq"] == 1 and warm["streams"] == {}
    parts = reader.partitions(start, warm)
    assert len(parts) == 3 and all(list(reader.read(p)) == [] for p in parts)
    reader.commit(warm)
    assert reader.latestOffset(warm, ReadMaxRows(100)) is warm
    ids = produce(r, names["stream"], 5)
    end = reader.latestOffset(warm, ReadMaxRows(100))
    assert sorted(_rows(reader, warm, end)) == sorted(ids)
    reader.stop()

    once = _reader(redis_server.url, names, consumer="another")
    first = once.initialOffset()
    once.prepareForTriggerAvailableNow()
    assert once.latestOffset(first, ReadMaxRows(100)) is first
    once.stop()


@pytest.mark.server
def test_committed_batch_whose_ack_was_lost_is_acked_by_the_next_driver(redis_server, names):
    """The driver dies after Spark committed batches 1 and 2 but before batch 1 was acked:
    the next driver acks batch 1 from its plan instead of letting it come back as duplicates."""
    from spark_eventbus.core.keys import plan_key

    r = redis_server.client()
    produce(r, names["stream"], 3_000)
    first = _reader(redis_server.url, names, maxEntriesPerTrigger="1000")
    start = first.initialOffset()
    end1 = first.latestOffset(start, ReadMaxRows(1000))
    first.stop()  # batch 1 claimed and (say) committed by Spark, never acked
    key = plan_key(names["stream"], names["group"], f"spark-{names['group']}")
    plan2 = json.loads(r.hget(key, "2") or b'{"chunks": [], "reclaimed": []}')
    end2 = BatchOffset(end1["run"], 2, {names["stream"]: StreamBatch.from_json(plan2)}
                       if plan2["chunks"] else {}).to_json()
    assert pending(r, names["stream"], names["group"]) >= 1_000

    second = _reader(redis_server.url, names, maxEntriesPerTrigger="1000")
    second.latestOffset(end2, ReadMaxRows(1000))  # Spark resumes after committed batch 2
    second.stop()
    batch1 = BatchOffset.from_json(end1).streams[names["stream"]]
    pel = {e["message_id"].decode() for e in r.xpending_range(
        names["stream"], names["group"], "-", "+", 10_000)}
    lo, hi = StreamId.parse(batch1.chunks[0].first), StreamId.parse(batch1.chunks[-1].last)
    assert not any(lo <= StreamId.parse(i) <= hi for i in pel)
    assert r.hget(key, "1") is None


@pytest.mark.server
def test_committed_chunks_are_acked_by_their_claimed_ids_with_fallbacks(own_redis, names,
                                                                        monkeypatch):
    """Chunks whose IDs the claim returned are acked with plain XACKs (no XPENDING); chunks
    beyond the ID cache budget read their IDs from the PEL first (XPENDING); a cached chunk
    whose XACK hits a dead connection is acked through the client's retries. Either way
    nothing stays pending."""
    from spark_eventbus.redisio import ConnectionSpec, ConsumerOps, acks, claims
    from spark_eventbus.redisio import group as commands

    own_redis.start()
    r = own_redis.client()
    produce(r, names["stream"], 4_000)
    r.xgroup_create(names["stream"], names["group"], "0")
    ops = ConsumerOps(ConnectionSpec(own_redis.url), names["stream"], names["group"], "c",
                    cache_ack_ids=True)
    monkeypatch.setattr(commands, "ACK_ID_CACHE_BYTES", 1)  # only the first claim is cached
    chunks = [claims.claim([claims.ClaimAsk(ops, 1_000, None)], "run", 1, True)[0].chunk
              for _ in range(3)]
    assert all(c is not None and c.count == 1_000 for c in chunks)

    def xpending_calls() -> int:
        return int(r.info("commandstats").get("cmdstat_xpending", {}).get("calls", 0))

    before = xpending_calls()
    assert acks.ack([(ops, StreamBatch((chunks[0],)))]) == {names["stream"]: 1_000}
    assert xpending_calls() == before  # plain XACK of the claimed IDs
    assert acks.ack([(ops, StreamBatch(tuple(chunks[1:])))]) == {names["stream"]: 2_000}
    assert xpending_calls() == before + 2  # not cached: one XPENDING per chunk
    assert pending(r, names["stream"], names["group"]) == 0

    monkeypatch.setattr(commands, "ACK_ID_CACHE_BYTES", 64 * 1024 * 1024)
    last = claims.claim([claims.ClaimAsk(ops, 1_000, None)], "run", 2, True)[0].chunk
    assert last is not None and last.count == 1_000
    own_redis.restart()  # the pooled connection is dead now; the data survives (AOF)
    assert acks.ack([(ops, StreamBatch((last,)))]) == {names["stream"]: 1_000}
    assert pending(r, names["stream"], names["group"]) == 0


@pytest.mark.parametrize("shape", ["plain", "tagged"])
@pytest.mark.server
def test_a_claim_cut_short_before_its_record_is_recovered(redis_server, names, shape):
    """A claim is three steps (intent, the driver's own XREADGROUP, record). A driver killed
    after the XREADGROUP leaves its entries in the consumer's PEL only: the next driver's
    first batch delivers exactly those, at once (no claimMinIdleMs wait). Also for a stream
    name with a hash tag, braces and colons."""
    from spark_eventbus.redisio.scripts import run_script

    stream = names["stream"] if shape == "plain" else "{" + names["stream"] + "}:b{x}:c"
    group = names["group"]
    r = redis_server.client()
    ids = produce(r, stream, 3_000)
    first = driver_reader(redis_server.url, stream, group, maxEntriesPerTrigger="1000")
    start = first.initialOffset()
    ops = first.ops[stream]
    status = run_script(ops.redis, "claim", [ops.stream, ops.plan_key, ops.lease_key],
                        [ops.group, ops.consumer, start["run"], "1", "", "fail",
                         ops.lease_token])
    assert status[0] == b"read"
    r.xreadgroup(ops.group, ops.consumer, {ops.stream: ">"}, count=1000)  # ... then killed
    first.stop()
    assert pending(r, stream, group) == 1000

    second = driver_reader(redis_server.url, stream, group, maxEntriesPerTrigger="1000")
    end1 = second.latestOffset(start, ReadMaxRows(1000))
    batch = BatchOffset.from_json(end1).streams[stream]
    assert batch.count == 1000 and {d for _, d in batch.reclaimed} == {1}
    rows = [b for p in second.partitions(start, end1) for b in second.read(p)]
    assert sorted(i for b in rows for i in b.column("id").to_pylist()) == sorted(ids[:1000])
    assert {c for b in rows for c in b.column("delivery_count").to_pylist()} == {1}
    second.commit(end1)
    second.stop()


@pytest.mark.server
def test_a_claim_whose_reply_was_lost_and_retried_records_both_reads(redis_server, names):
    """redis-py retries an XREADGROUP whose reply a dropped connection lost: the first read's
    entries are pending too, and the record step puts them into the plan with the second
    read's chunk, so none waits for reclaim."""
    from spark_eventbus.redisio import ConnectionSpec, ConsumerOps, claims, plans
    from spark_eventbus.redisio.scripts import run_script

    r = redis_server.client()
    ids = produce(r, names["stream"], 1_000)
    r.xgroup_create(names["stream"], names["group"], "0")
    ops = ConsumerOps(ConnectionSpec(redis_server.url), names["stream"], names["group"], "c")
    assert run_script(ops.redis, "claim", [ops.stream, ops.plan_key, ops.lease_key],
                      [ops.group, ops.consumer, "run", "1", "", "fail", ""])[0] == b"read"
    r.xreadgroup(ops.group, ops.consumer, {ops.stream: ">"}, count=300)  # reply lost
    got = r.xreadgroup(ops.group, ops.consumer, {ops.stream: ">"}, count=300)[0][1]
    first, last = got[0][0].decode(), got[-1][0].decode()
    extra = run_script(ops.redis, "claim_record", [ops.stream, ops.plan_key],
                       [ops.group, ops.consumer, "run", "1", first, last, len(got)])
    assert extra == 300
    plan = plans.plans([ops], "run", 1)[0]
    assert [c.first for c in plan.chunks] == [ids[300]] and plan.chunks[0].count == 300
    assert [i for i, _ in plan.reclaimed] == ids[:300]
    # A later claim for the same batch continues after both reads.
    nxt = claims.claim([claims.ClaimAsk(ops, 100, None)], "run", 1, True)[0]
    assert nxt.chunk is not None and nxt.chunk.first == ids[600]
    assert plans.plans([ops], "run", 1)[0].count == 700
