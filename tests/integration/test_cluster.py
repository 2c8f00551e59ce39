"""Redis Cluster (issue 10): a real 3-master cluster started by the tests. Streams spread over
every shard; dead-letter streams in other slots than their sources; slots moved and a master
killed while queries run."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter, EventBusConnectionError, register
from spark_eventbus.core.keys import dead_letter_marker_key, key_slot, plan_key
from spark_eventbus.core.offsets import StreamBatch
from spark_eventbus.redisio import (
    ConnectionSpec,
    ConsumerOps,
    acks,
    claims,
    client,
    dead_letter,
    is_cluster,
    run_script,
)
from tests.harness.redis_cluster import RedisClusterServer
from tests.integration.helpers import (
    checkpoint,
    pending,
    produce,
    rejected_calls,
    run_available_now,
    stream_df,
    wait_for,
)
from tests.integration.test_pipe_job import _copy_pipe_config

pytestmark = [pytest.mark.integration, pytest.mark.server]


def _spread(cluster: RedisClusterServer, prefix: str, per_node: int = 2) -> list[str]:
    """Stream names of ``prefix`` whose slots lie on every master, ``per_node`` each."""
    by_node: dict[int, list[str]] = {n.port: [] for n in cluster.masters()}
    i = 0
    while any(len(v) < per_node for v in by_node.values()):
        name = f"{prefix}:{i}"
        owner = cluster.node_of_slot(key_slot(name)).port
        if len(by_node[owner]) < per_node:
            by_node[owner].append(name)
        i += 1
    return [s for names in by_node.values() for s in names]


def _other_node_stream(cluster: RedisClusterServer, prefix: str, avoid: list[str]) -> str:
    """A stream name on another master than the first of ``avoid``."""
    node = cluster.node_of_slot(key_slot(avoid[0])).port
    i = 0
    while cluster.node_of_slot(key_slot(f"{prefix}:{i}")).port == node:
        i += 1
    return f"{prefix}:{i}"


def test_the_client_discovers_the_cluster_from_any_node(redis_cluster):
    for node in redis_cluster.nodes:
        r = client(ConnectionSpec(f"redis://127.0.0.1:{node.port}/0"))
        assert is_cluster(r)
        assert len(r.get_primaries()) == 3


def test_a_password_protected_cluster_with_the_password_option(spark, tmp_path_factory):
    cluster = RedisClusterServer(tmp_path_factory.mktemp("pw-cluster"), password="s3cret")
    cluster.start()
    try:
        r = cluster.client()
        streams = _spread(cluster, "pw", per_node=1)
        ids = {s: produce(r, s, 50) for s in streams}
        df = (spark.read.format("eventbus").option("url", cluster.url)
              .option("password", "s3cret").option("stream", ",".join(streams)).load())
        assert sorted((row["stream"], row["id"]) for row in df.collect()) == sorted(
            (s, i) for s in streams for i in ids[s])
        df.select("stream", "fields").withColumn("stream", F.concat("stream", F.lit(":copy"))) \
            .write.format("eventbus").option("url", cluster.url).option("password", "s3cret") \
            .mode("append").save()
        assert all(r.xlen(f"{s}:copy") == 50 for s in streams)
    finally:
        cluster.stop()


def test_one_query_reads_streams_on_every_shard(spark, redis_cluster, tmp_path, names):
    r = redis_cluster.client()
    streams = _spread(redis_cluster, f"rd{names['tag']}")
    ids = {s: produce(r, s, 700) for s in streams}
    df = stream_df(spark, redis_cluster.url, ",".join(streams), "g", maxEntriesPerTrigger=1500)
    rows, q = run_available_now(df, tmp_path)
    got = Counter((row["stream"], row["id"]) for row in rows)
    assert set(got.values()) == {1}
    assert set(got) == {(s, i) for s in streams for i in ids[s]}
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 3
    for s in streams:
        assert pending(r, s, "g") == 0
        assert r.exists(plan_key(s, "g", "spark-g")) == 0
    report = json.loads(q.recentProgress[-1]["sources"][0]["latestOffset"])
    assert {s: report[s]["lag"] for s in streams} == dict.fromkeys(streams, 0)
    assert {s: report[s]["entriesBehind"] for s in streams} == dict.fromkeys(streams, 0)
    assert report["_eventbus"]["entriesBehind"] == 0


def test_sink_routes_rows_over_every_shard_exactly_once_across_a_replay(
        spark, redis_cluster, tmp_path, names):
    r = redis_cluster.client()
    targets = _spread(redis_cluster, f"sk{names['tag']}")
    src = tmp_path / "src"
    spark.range(6000).select((F.col("id") % len(targets)).alias("k"),
                             F.col("id").cast("string").alias("n")) \
        .repartition(2).write.parquet(str(src))
    mapping = F.create_map(*[x for i, t in enumerate(targets) for x in (F.lit(i), F.lit(t))])
    df = (spark.readStream.schema("k BIGINT, n STRING").parquet(str(src))
          .select(mapping[F.col("k")].alias("stream"), "n"))
    chk = checkpoint(tmp_path)
    for _ in range(2):
        q = (df.writeStream.format("eventbus").option("url", redis_cluster.url)
             .option("maxLen", "100000").option("checkpointLocation", chk)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(300)
        assert q.exception() is None
        for f in Path(chk, "commits").iterdir():  # the next run replays the batch
            f.unlink()
    for k, t in enumerate(targets):
        got = Counter(f[b"n"].decode() for _, f in r.xrange(t))
        assert got == Counter(str(n) for n in range(k, 6000, len(targets))), t


def test_acking_writer_dead_letters_into_another_slot_exactly_once(spark, redis_cluster,
                                                                    tmp_path, names):
    r = redis_cluster.client()
    tag = names["tag"]
    sources = _spread(redis_cluster, f"aw{tag}", per_node=1)
    dlq = _other_node_stream(redis_cluster, f"aw{tag}:dlq", sources[:1])

    def payload(i: int) -> str:
        return "{broken" if i % 10 == 0 else json.dumps({"n": i, "name": "x"})

    ids = {s: produce(r, s, 1_000, payload=payload) for s in sources}
    bad = {(s, xs[i]) for s, xs in ids.items() for i in range(0, len(xs), 10)}
    writer = AckingBatchWriter(lambda df, _: df.count(), url=redis_cluster.url, group="g",
                               dead_letter_stream=dlq)
    df = stream_df(spark, redis_cluster.url, ",".join(sources), "g", ackMode="manual",
                   valueSchema="n INT, name STRING", maxEntriesPerTrigger=1000)
    q = (df.writeStream.foreachBatch(writer).option("checkpointLocation", checkpoint(tmp_path))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert q.exception() is None
    moved = Counter((f[b"dlq.source.stream"].decode(), f[b"dlq.source.id"].decode())
                    for _, f in r.xrange(dlq))
    assert set(moved.values()) == {1} and set(moved) == bad
    for s in sources:
        assert pending(r, s, "g") == 0
        assert r.exists(dead_letter_marker_key(dlq, s, "g")) == 0


def test_a_move_interrupted_after_the_add_is_finished_without_a_second_copy(redis_cluster, names):
    """The cross-slot move died after adding entries to the dead-letter stream (step 2) and
    before acking them: the retry finds their markers, adds nothing, and acks them."""
    r = redis_cluster.client()
    tag = names["tag"]
    src = f"mv{tag}:src"
    dlq = _other_node_stream(redis_cluster, f"mv{tag}:dlq", [src])
    ids = produce(r, src, 20)
    r.xgroup_create(src, "g", "0")
    r.xreadgroup("g", "c", {src: ">"}, count=20)
    spec = ConnectionSpec(redis_cluster.url)
    marker = dead_letter_marker_key(dlq, src, "g")
    first = []  # step 2 alone for the first 5 entries, as the crashed attempt did it
    for entry_id in ids[:5]:
        first += [entry_id, "bad", "1", 2, "n", "x"]
    run_script(client(spec), "dead_letter_add", [dlq, marker], [src, "g", 60_000, *first])
    assert r.xlen(dlq) == 5 and pending(r, src, "g") == 20
    moved, skipped = dead_letter(spec, src, dlq, "g", [(i, "bad", "") for i in ids[:10]])
    assert (moved, skipped) == (10, 0)
    got = Counter(f[b"dlq.source.id"].decode() for _, f in r.xrange(dlq))
    assert got == Counter(ids[:10])  # 5 from the crashed attempt + 5 new, none twice
    assert pending(r, src, "g") == 10 and r.exists(marker) == 0
    assert dead_letter(spec, src, dlq, "g", [(i, "bad", "") for i in ids[:10]]) == (0, 10)


def test_reader_max_deliveries_dead_letters_into_another_slot(
        spark, redis_cluster, tmp_path, names):
    r = redis_cluster.client()
    tag = names["tag"]
    sources = _spread(redis_cluster, f"md{tag}", per_node=1)
    dlq = _other_node_stream(redis_cluster, f"md{tag}:dlq", sources[:1])
    ids = {}
    for s in sources:
        ids[s] = produce(r, s, 200)
        r.xgroup_create(s, "g", "0")
        r.xreadgroup("g", "dead-1", {s: ">"}, count=30)
        r.xclaim(s, "g", "dead-2", 0, ids[s][:30])
    time.sleep(0.3)
    df = stream_df(spark, redis_cluster.url, ",".join(sources), "g", claimMinIdleMs=200,
                   maxDeliveries=2, deadLetterStream=dlq)
    rows, _ = run_available_now(df, tmp_path)
    got = Counter((row["stream"], row["id"]) for row in rows)
    assert set(got.values()) == {1}
    assert set(got) == {(s, i) for s in sources for i in ids[s][30:]}
    moved = Counter((f[b"dlq.source.stream"].decode(), f[b"dlq.source.id"].decode())
                    for _, f in r.xrange(dlq))
    assert set(moved.values()) == {1}
    assert set(moved) == {(s, i) for s in sources for i in ids[s][:30]}
    first = next(f for _, f in r.xrange(dlq))
    assert b"maxDeliveries=2" in first[b"dlq.reason"] and first[b"payload"]
    for s in sources:
        assert pending(r, s, "g") == 0


def test_cli_status_and_dlq_replay_across_slots(redis_cluster, names):
    from spark_eventbus.ops.cli import main

    r = redis_cluster.client()
    tag = names["tag"]
    target = f"cli{tag}:orders"
    dlq = _other_node_stream(redis_cluster, f"cli{tag}:dlq", [target])
    produce(r, target, 5)
    r.xgroup_create(target, "g", "0")
    for i in range(30):
        r.xadd(dlq, {"n": str(i), "dlq.reason": "bad", "dlq.source.id": f"{i}-0"})
    r.xadd(dlq, {"dlq.reason": "no original field"})
    assert main(["--url", redis_cluster.url, "status", "--stream", target, "--dlq", dlq,
                 "--json"]) == 0
    assert main(["--url", redis_cluster.url, "dlq", "replay", "--from", dlq, "--to", target,
                 "--limit", "10"]) == 0
    assert main(["--url", redis_cluster.url, "dlq", "replay", "--from", dlq, "--to", target]) == 0
    back = [f for _, f in r.xrange(target) if b"n" in f and not f.get(b"payload")]
    assert sorted(int(f[b"n"]) for f in back) == list(range(30))
    assert all(not any(k.startswith(b"dlq.") for k in f) for f in back)
    assert r.xlen(dlq) == 1  # the entry with no original field stays


def test_a_cross_slot_dlq_replay_deletes_nothing_before_the_replicas_have_the_copies(
        redis_cluster, names, capsys):
    """Across cluster slots a replay copies a page (with its marks) to the target's shard, then
    deletes the originals on the other: with --wait-replicas it waits for the copies first, so
    a failover of the target's shard cannot lose both. This cluster has no replicas: the wait
    fails, and nothing is deleted; a replay without it then moves each entry exactly once."""
    from spark_eventbus.ops.cli import main

    r = redis_cluster.client()
    tag = names["tag"]
    target = f"w{tag}:orders"
    dlq = _other_node_stream(redis_cluster, f"w{tag}:dlq", [target])
    for i in range(5):
        r.xadd(dlq, {"n": str(i), "dlq.reason": "bad"})
    assert main(["--url", redis_cluster.url, "--wait-replicas", "1", "--wait-timeout-ms", "100",
                 "dlq", "replay", "--from", dlq, "--to", target]) == 1
    assert "0 of 1 replica(s) acknowledged" in capsys.readouterr().err
    assert r.xlen(dlq) == 5  # the originals stay until the copies are safe
    assert main(["--url", redis_cluster.url, "dlq", "replay", "--from", dlq, "--to", target]) == 0
    assert sorted(int(f[b"n"]) for _, f in r.xrange(target)) == list(range(5))
    assert r.xlen(dlq) == 0


def test_pipe_job_into_an_eventbus_stream_on_a_cluster(spark, redis_cluster, tmp_path, names):
    from spark_eventbus.jobs.pipe import build_query, load_config

    r = redis_cluster.client()
    tag = names["tag"]
    source, target = f"pj{tag}:in", f"pj{tag}:out"
    ids = produce(r, source, 2_000)
    config = _copy_pipe_config(tmp_path / "pipe.toml", redis_cluster.url,
                               {"stream": source, "group": "g"}, "maxEntriesPerTrigger = 700",
                               target, tmp_path / "chk")
    q = build_query(spark, load_config(config))
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert sorted(f[b"src"].decode() for _, f in r.xrange(target)) == sorted(ids)
    assert pending(r, source, "g") == 0


# -- the topology changes while queries run -----------------------------------------------------


def _cause_chain(exc: BaseException) -> str:
    """The text of a Spark exception and of every JVM cause behind it (a failed write task's
    Python error is only in a cause: the top message says "Writing job failed")."""
    parts = [str(exc)]
    origin = getattr(exc, "_origin", None)
    while origin is not None:
        parts.append(str(origin.toString()))
        origin = origin.getCause()
    return "\n".join(parts)


def _copy_query(spark, url: str, source: str, target: str, chk: str):  # type: ignore[no-untyped-def]
    df = stream_df(spark, url, source, "g", maxEntriesPerTrigger=500)
    out = df.select(F.map_concat("fields", F.create_map(F.lit("src"), "id")).alias("fields"))
    return (out.writeStream.format("eventbus").option("url", url).option("stream", target)
            .option("chunkSize", "100").option("checkpointLocation", chk)
            .trigger(processingTime="200 milliseconds").start())


def _copied(r, target: str) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(f[b"src"].decode() for _, f in r.xrange(target))


def test_slots_move_to_another_master_while_a_copy_query_runs(
        spark, redis_cluster, tmp_path, names):
    """Source and target slots are migrated (ASK during, MOVED after) while entries flow and a
    batch is in flight: every entry arrives once, those of the batches in flight included."""
    r = redis_cluster.client()
    tag = names["tag"]
    source, target = f"{{mvs{tag}}}:in", f"{{mvt{tag}}}:out"
    produced: list[str] = []
    stop = threading.Event()

    def producer() -> None:
        i = 0
        while not stop.is_set():
            produced.extend(produce(r, source, 100, i))
            i += 100
            time.sleep(0.05)

    r.xgroup_create(source, "g", "$", mkstream=True)
    q = _copy_query(spark, redis_cluster.url, source, target, checkpoint(tmp_path))
    t = threading.Thread(target=producer)
    t.start()

    def copied() -> int:
        return len(_copied(r, target))

    moved_mid_batch: list[tuple[str, list[str]]] = []

    try:
        wait_for(lambda: copied() > 0, what="the copy query to write its first entries")
        for key in (source, target):
            slot = key_slot(key)
            here = redis_cluster.node_of_slot(slot)
            other = next(n for n in redis_cluster.nodes if n is not here)
            # The move happens mid-batch: between its two halves (the slot MIGRATING, its keys
            # on `other`) entries claimed by the query are still pending, i.e. a batch is in
            # flight, and it completes after the move.
            before = copied()
            redis_cluster.begin_move(slot, other)
            in_flight = [e["message_id"].decode()
                         for e in r.xpending_range(source, "g", "-", "+", 10_000)]
            redis_cluster.finish_move(slot, other)
            assert redis_cluster.node_of_slot(slot) is other
            assert in_flight, f"no batch was in flight while the slot of {key!r} moved"
            wait_for(lambda before=before: copied() > before,
                     what=f"entries copied after the slot of {key!r} moved")
            moved_mid_batch.append((key, in_flight))
        stop.set()
        t.join()
        deadline = time.monotonic() + 120
        while len(_copied(r, target)) < len(produced) and time.monotonic() < deadline:
            assert q.exception() is None, q.exception()
            time.sleep(0.5)
    finally:
        stop.set()
        q.stop()
    got = _copied(r, target)
    assert set(got.values()) == {1}, [k for k, v in got.items() if v > 1][:5]
    assert set(got) == set(produced)
    for key, ids in moved_mid_batch:  # the batches in flight during each move completed
        assert set(ids) <= set(got), key
    assert len(produced) > 1000


@pytest.mark.parametrize("phase", ["moving", "moved"])
def test_acks_of_claimed_ids_follow_a_slot_that_is_moving_or_moved(redis_cluster, phase, names):
    """The ack of a claimed chunk (its IDs kept from the claim, XACK sent on the node's own
    connection) while the stream's slot is being migrated (the node answers ASK) or after it
    moved (MOVED; the client's slot map is stale): it goes through the cluster client, acks
    every entry, and does not fail the query."""
    r = redis_cluster.client()
    stream = f"{{ack{names['tag']}}}:in"
    produce(r, stream, 300)
    r.xgroup_create(stream, "g", "0")
    ops = ConsumerOps(ConnectionSpec(redis_cluster.url), stream, "g", "c", cache_ack_ids=True)
    claimed = claims.claim([claims.ClaimAsk(ops, 300, None)], "run", 1, True)[0].chunk
    assert claimed is not None and claimed.count == 300
    slot = key_slot(stream)
    other = next(n for n in redis_cluster.nodes if n is not redis_cluster.node_of_slot(slot))
    redis_cluster.begin_move(slot, other)
    try:
        if phase == "moved":
            redis_cluster.finish_move(slot, other)
        assert acks.ack([(ops, StreamBatch(chunks=(claimed,)))]) == {stream: 300}
        assert pending(r, stream, "g") == 0
    finally:
        redis_cluster.finish_move(slot, other)


def _tryagain_count(node) -> int:  # type: ignore[no-untyped-def]
    stats = node.client().info("errorstats")
    return int(stats.get("errorstat_TRYAGAIN", {}).get("count", 0))


def _split_slot(redis_cluster, prefix: str,  # type: ignore[no-untyped-def]
                window_ms: int = 30_000):
    """A stream with 100 entries, 40 of them claimed (so its plan key exists), whose slot is
    then split mid-reshard: the stream on another master, the plan and lease left behind.
    ``window_ms``: the consumer's failoverTimeoutMs."""
    r = redis_cluster.client()
    stream = f"{{{prefix}{uuid.uuid4().hex[:6]}}}:in"
    produce(r, stream, 100)
    r.xgroup_create(stream, "g", "0")
    ops = ConsumerOps(ConnectionSpec(redis_cluster.url, failover_timeout_ms=window_ms), stream,
                      "g", "c")
    assert claims.claim([claims.ClaimAsk(ops, 40, None)], "run", 1, True)[0].chunk.count == 40
    slot = key_slot(stream)
    source = redis_cluster.node_of_slot(slot)
    other = next(n for n in redis_cluster.nodes if n is not source)
    redis_cluster.begin_move(slot, other, keys=False)
    redis_cluster.migrate_keys(source, other, slot, [stream])
    return r, stream, ops, slot, source, other


def _heal(redis_cluster, source, other, slot: int) -> None:  # type: ignore[no-untyped-def]
    """The rest of the reshard: the keys left behind, then SETSLOT NODE. (Until SETSLOT, the
    importing master answers TRYAGAIN to a script whose keys are not all there — the claim's
    lease key does not exist without a running query.)"""
    redis_cluster.migrate_keys(source, other, slot)
    redis_cluster.finish_move(slot, other)


def test_a_claim_while_a_slots_keys_stay_split_fails_retriable_and_claims_nothing(
        redis_cluster):
    """Mid-reshard a slot's keys can sit on two masters (redis-cli moves 10 keys per
    MIGRATE): the claim script, which touches the stream, its plan and its lease, gets
    TRYAGAIN. While the split outlasts failoverTimeoutMs (1 s here), the claim fails with a
    retriable error and claims nothing; once the keys are together again it claims what is
    there."""
    r, stream, ops, slot, source, other = _split_slot(redis_cluster, "split", window_ms=1000)
    try:
        with pytest.raises(EventBusConnectionError, match="resharding") as err:
            claims.claim([claims.ClaimAsk(ops, 40, None)], "run", 2, True)[0]
        assert err.value.retriable
        assert pending(r, stream, "g") == 40  # nothing more was claimed
    finally:
        _heal(redis_cluster, source, other, slot)
    assert claims.claim([claims.ClaimAsk(ops, 40, None)], "run", 2, True)[0].chunk.count == 40
    assert claims.claim([claims.ClaimAsk(ops, 40, None)], "run", 3, True)[0].chunk.count == 20
    assert pending(r, stream, "g") == 100


def test_a_claim_rides_over_a_short_split_of_its_slots_keys(redis_cluster):
    """The split heals (the rest of the reshard) while the claim is retrying TRYAGAIN —
    healed as soon as the source master has answered TRYAGAIN, not after a fixed sleep: the
    claim goes through, with nothing lost or claimed twice."""
    r, stream, ops, slot, source, other = _split_slot(redis_cluster, "heal")
    before = _tryagain_count(source)

    def heal() -> None:
        deadline = time.monotonic() + 30
        while _tryagain_count(source) == before and time.monotonic() < deadline:
            time.sleep(0.005)
        _heal(redis_cluster, source, other, slot)

    healer = threading.Thread(target=heal)
    healer.start()
    try:
        got = claims.claim([claims.ClaimAsk(ops, 100, None)], "run", 2, True)[0]
    finally:
        healer.join()
        redis_cluster.finish_move(slot, other)
    assert _tryagain_count(source) > before  # the claim did meet the split
    assert got.chunk is not None and got.chunk.count == 60
    assert pending(r, stream, "g") == 100


def test_a_master_killed_mid_query_loses_nothing_after_a_restart_from_the_checkpoint(
        spark, tmp_path_factory, tmp_path):
    """kill -9 of the master holding the streams while a copy query runs; the master comes
    back (AOF). The query rides over it or fails with a retriable error; restarted from its
    checkpoint it delivers every entry once into the target."""
    cluster = RedisClusterServer(tmp_path_factory.mktemp("kill-cluster")).start()
    try:
        r = cluster.client()
        source, target = "{kill}:in", "{kill}:out"
        ids = produce(r, source, 6_000)
        r.xgroup_create(source, "g", "0")
        chk = checkpoint(tmp_path)
        q = _copy_query(spark, cluster.url, source, target, chk)
        deadline = time.monotonic() + 120
        while r.xlen(target) < 1_000 and time.monotonic() < deadline:
            time.sleep(0.1)
        node = cluster.node_of_slot(key_slot(source))
        node.kill()
        time.sleep(1)
        node.start()
        cluster.wait_ok()
        try:
            q.processAllAvailable()
        except Exception as exc:  # a query that does not ride over it fails retriable
            assert "EventBusConnectionError" in _cause_chain(exc), _cause_chain(exc)[-3000:]
        q.stop()
        q = _copy_query(spark, cluster.url, source, target, chk)
        r = cluster.client()
        deadline = time.monotonic() + 180
        while len(_copied(r, target)) < len(ids) and time.monotonic() < deadline:
            assert q.exception() is None, q.exception()
            time.sleep(0.5)
        q.stop()
        got = _copied(r, target)
        assert set(got) == set(ids)
        assert set(got.values()) == {1}
    finally:
        cluster.stop()


def test_a_stream_pattern_finds_streams_on_every_master(spark, redis_cluster, tmp_path, names):
    r = redis_cluster.client()
    streams = _spread(redis_cluster, f"pat{names['tag']}", per_node=1)
    ids = {s: produce(r, s, 30) for s in streams}
    df = (spark.readStream.format("eventbus").option("url", redis_cluster.url)
          .option("streamPattern", f"pat{names['tag']}:*").option("group", "g")
          .option("startingPosition", "earliest").load())
    rows, q = run_available_now(df, tmp_path)
    got = Counter((row["stream"], row["id"]) for row in rows)
    assert set(got.values()) == {1}
    assert set(got) == {(s, i) for s in streams for i in ids[s]}
    report = json.loads(q.recentProgress[-1]["sources"][0]["latestOffset"])
    assert report["_eventbus"]["streams"] == len(streams) == len(redis_cluster.nodes)
    assert all(pending(r, s, "g") == 0 for s in streams)


def test_a_sink_write_rides_over_its_slot_split_for_seconds(spark, redis_cluster, names):
    """The target's slot stays split mid-reshard for ~5 s (the stream on one master, its
    markers' side on the other): the chunk's transaction is redirected (ASK) all that time and
    is sent again within failoverTimeoutMs; once the reshard finishes the write goes through,
    each row once."""
    r = redis_cluster.client()
    target = f"{{sp{names['tag']}}}:out"
    r.xadd(target, {"n": "seed"})
    slot = key_slot(target)
    source = redis_cluster.node_of_slot(slot)
    other = next(n for n in redis_cluster.masters() if n is not source)
    redis_cluster.begin_move(slot, other, keys=False)
    redis_cluster.migrate_keys(source, other, slot, [target])
    before = rejected_calls(source, "watch")
    errors: list[BaseException] = []

    def write() -> None:
        register(spark)  # a write from a new thread (docs/troubleshooting.md)
        try:
            (spark.range(500).select(F.col("id").cast("string").alias("n")).coalesce(1)
             .write.format("eventbus").option("url", redis_cluster.url)
             .option("stream", target).mode("append").save())
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_for(lambda: rejected_calls(source, "watch") > before,
                 timeout=60, what="the write meeting the split")
        time.sleep(5)
        assert writer.is_alive()  # still retrying, not failed
    finally:
        _heal(redis_cluster, source, other, slot)
        writer.join(120)
    assert not errors, errors
    got = Counter(f[b"n"].decode() for _, f in r.xrange(target))
    assert got == Counter(["seed", *(str(i) for i in range(500))])


def test_with_no_window_a_cluster_pipeline_still_follows_moved(redis_cluster, names):
    """failoverTimeoutMs=0 (no waiting) still follows MOVED at once and reads the slot map
    again, as redis-py's cluster pipeline did: only waiting is off."""
    from spark_eventbus.redisio.wire import pipeline
    r = client(ConnectionSpec(redis_cluster.url, failover_timeout_ms=0))
    stream = f"{{mv{names['tag']}}}:s"
    redis_cluster.client().xadd(stream, {"n": "1"})
    assert pipeline(r, [("XLEN", stream)]) == [1]  # the client's slot map knows the slot now
    slot = key_slot(stream)
    other = next(n for n in redis_cluster.masters() if n is not redis_cluster.node_of_slot(slot))
    redis_cluster.move_slot(slot, other)
    assert pipeline(r, [("XLEN", stream), ("XLEN", f"{{mv{names['tag']}}}:none")]) == [1, 0]
    assert pipeline(r, [("XLEN", stream)]) == [1]  # the map was read again: no MOVED now


def test_read_from_replicas_on_a_cluster_without_replicas_reads_each_master_and_says_so(
        redis_cluster, names, caplog):
    """``readFrom=replica`` where the slot map names no replica (this cluster has none; a
    fresh one lists its replicas only once its nodes have gossiped that they synced): each
    stream is read from its master, which a warning names once per master, however many
    reads; and later reads read the slot map again first (after a wait of 1 s, doubling, not
    only every 5 s), once, not for every slot."""
    import logging

    from spark_eventbus.redisio.discovery import discover
    from spark_eventbus.redisio.tails import tails

    def map_reads() -> int:
        return sum(int(n.client().info("commandstats").get("cmdstat_cluster|slots", {})
                       .get("calls", 0)) for n in redis_cluster.nodes)

    r = redis_cluster.client()
    streams = _spread(redis_cluster, f"nr{names['tag']}", per_node=1)
    for s in streams:
        produce(r, s, 3)
    # a client of its own (a name of its own): the warning is said once per client
    spec = ConnectionSpec(url=redis_cluster.url, read_from_replicas=True,
                          client_settings=(("client_name", f"nr{names['tag']}"),))
    with caplog.at_level(logging.WARNING, logger="spark_eventbus"):
        assert discover(spec, f"nr{names['tag']}:*") == sorted(streams)
        for _ in range(2):
            assert [t.length for t in tails(spec, streams) if t is not None] == [3, 3, 3]
    said = [m for m in caplog.messages if "names no replica of master" in m]
    assert sorted(said) == sorted(
        f"spark-eventbus: readFrom=replica: the cluster names no replica of master "
        f"127.0.0.1:{n.port} (none, or one it does not know to have synced yet); the streams "
        f"it serves are read from it until it does." for n in redis_cluster.masters())
    before = map_reads()
    time.sleep(2.1)  # longer than the wait for a map without a replica (1 s, then 2 s)
    tails(spec, streams)  # reads the map again once (then waits longer), not per slot
    tails(spec, streams)
    assert map_reads() == before + 1
