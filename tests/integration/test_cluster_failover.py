"""Redis Cluster failing over by itself (issue 38): three masters with a replica each; a master
is SIGKILLed under a running query, the cluster promotes its replica, the dead node restarts and
rejoins as a replica. The reader, the ``AckingBatchWriter`` and the sink ride through it within
``failoverTimeoutMs``: no batch fails, every entry exactly once, nothing pending."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from pyspark.sql import functions as F

from spark_eventbus import AckingBatchWriter
from spark_eventbus.core.connection import connection_spec
from spark_eventbus.redisio.client import client
from tests.harness.redis_cluster import RedisClusterServer
from tests.integration.helpers import checkpoint, pending, stream_df, wait_for
from tests.integration.test_cluster import _spread

# one worker for the module: its 6-node cluster (ha_cluster) starts once, not once per worker
pytestmark = [pytest.mark.integration, pytest.mark.server, pytest.mark.xdist_group("ha-cluster")]


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServer]:
    """3 masters, 3 replicas; a node is failed after 5 s unreachable (then its replica is
    promoted within a few seconds): longer than redis-py's own count of tries lasts."""
    cluster = RedisClusterServer(tmp_path_factory.mktemp("ha-cluster"), replicas=1,
                                 node_timeout_ms=5000).start()
    yield cluster
    cluster.stop()


def _producer(cluster: RedisClusterServer, streams: list[str], total: int,
              produced: list[str], stop: threading.Event) -> None:
    """XADD round robin over ``streams``, 10 at a time, each round confirmed by a replica
    (``WAIT 1``): what is in ``produced`` the query must deliver. Rounds the failover breaks
    are retried (their entries may or may not exist: delivered at most once either way)."""
    r: Any = None
    i = 0
    while not stop.is_set() and i < total:
        s = streams[(i // 10) % len(streams)]
        try:
            r = r or cluster.client()
            ids = [r.xadd(s, {"n": str(j)}) for j in range(i, i + 10)]
            if int(r.execute_command("WAIT", 1, 2000, target_nodes=r.get_node_from_key(s))):
                produced.extend(x.decode() for x in ids)
                i += 10
        except (redis.RedisError, redis.exceptions.RedisClusterException):
            time.sleep(0.2)
            r = None  # a fresh client (and slot map) after the failover
        time.sleep(0.005)


def test_read_from_replicas_on_a_cluster_runs_no_read_on_a_master(spark, ha_cluster, names,
                                                                 tmp_path):
    """A read without a group with ``readFrom=replica`` on a cluster, its streams found by
    pattern, streaming and then a batch read: every stream on every shard read in full, and the
    masters ran no read command (``INFO commandstats``: XRANGE, XREVRANGE, XINFO, SCAN, TYPE;
    whatever redis-py's own list of read commands holds: each client version's differs)."""
    from tests.integration.helpers import produce, run_available_now
    from tests.integration.test_without_group import _read_calls

    c = ha_cluster
    streams = _spread(c, f"rr{names['tag']}", per_node=2)
    r = c.client()
    produced = {f"{s}/{i}" for s in streams for i in produce(r, s, 200)}
    for s in streams:
        assert int(r.execute_command("WAIT", 1, 5000, target_nodes=r.get_node_from_key(s)))
    masters = c.masters()
    before = [_read_calls(m) for m in masters]
    df = (spark.readStream.format("eventbus").option("url", c.url)
          .option("streamPattern", f"rr{names['tag']}:*").option("readFrom", "replica")
          .option("startingPosition", "earliest").option("maxEntriesPerTrigger", "500").load())
    rows, _ = run_available_now(df, tmp_path)
    assert Counter(f"{row['stream']}/{row['id']}" for row in rows) == Counter(produced)
    assert [_read_calls(m) for m in masters] == before
    batch = (spark.read.format("eventbus").option("url", c.url).option("stream", ",".join(streams))
             .option("readFrom", "replica").load())
    assert Counter(f"{row['stream']}/{row['id']}" for row in batch.collect()) == Counter(produced)
    assert [_read_calls(m) for m in masters] == before


def test_a_query_rides_through_a_cluster_master_failover(spark, ha_cluster, names, tmp_path):
    """Streams on every shard, read with waitReplicas=1 into an AckingBatchWriter; the master
    of one of them (the URL's node when it is a master) is killed half-way. The query never
    fails; every entry is handled exactly
    once (no batch ran twice) and acked. Beside it, a read of the same streams without a group
    from the replicas (``readFrom=replica``): it never fails either and delivers every entry
    exactly once."""
    c = ha_cluster
    streams = _spread(c, f"fo{names['tag']}", per_node=4)
    group = names["group"]
    produced: list[str] = []
    stop = threading.Event()
    handled: dict[int, list[str]] = defaultdict(list)

    def handle(df: Any, batch_id: int) -> None:
        handled[batch_id] += [r["id"] for r in df.select("id").collect()]

    read: dict[int, list[str]] = {}  # without a group: a replayed batch replaces its rows

    def keep(df: Any, batch_id: int) -> None:
        read[batch_id] = [r["id"] for r in df.select("id").collect()]

    writer = AckingBatchWriter(handle, url=c.url, group=group, wait_replicas=1)
    q = (stream_df(spark, c.url, ",".join(streams), group, waitReplicas=1,
                   maxEntriesPerTrigger=300)
         .writeStream.foreachBatch(writer).trigger(processingTime="200 milliseconds")
         .option("checkpointLocation", checkpoint(tmp_path)).start())
    q2 = (spark.readStream.format("eventbus").option("url", c.url)
          .option("stream", ",".join(streams)).option("readFrom", "replica")
          .option("startingPosition", "earliest").option("maxEntriesPerTrigger", "300").load()
          .writeStream.foreachBatch(keep).trigger(processingTime="200 milliseconds")
          .option("checkpointLocation", checkpoint(tmp_path)).start())
    total = 2400
    thread = threading.Thread(target=_producer, args=(c, streams, total, produced, stop),
                              daemon=True)
    thread.start()
    try:
        # both queries have started (the group's start-up check wants a replica on every
        # master) and read: what rides through is a running query (a query that starts while
        # its URL's node is down fails at once, saying so)
        wait_for(lambda: len(produced) >= total // 3 and all(
            any(p["numInputRows"] for p in x.recentProgress) for x in (q, q2)),
            what="entries flowing")
        # the URL's own node when it is a master: processes that make their first client after
        # it died (executors' new Python workers) find the cluster through the nodes the
        # process that sent them the spec knew
        target = next((s for s in streams if c.node_of(s) is c.nodes[0]), streams[0])
        killed, promoted = c.kill_master_of(target)
        assert q.exception() is None, q.exception()
        thread.join(180)
        assert len(produced) == total

        def delivered() -> bool:
            assert q.exception() is None, q.exception()
            assert q2.exception() is None, q2.exception()
            return set(produced) <= {i for ids in list(handled.values()) for i in ids} \
                and set(produced) <= {i for ids in list(read.values()) for i in ids}
        wait_for(delivered, timeout=180, what="every entry delivered")
        q.processAllAvailable()  # the last batch's acks
        q.processAllAvailable()
    finally:
        stop.set()
        q.stop()
        q2.stop()
    assert q.exception() is None, q.exception()
    assert q2.exception() is None, q2.exception()
    read_counts = Counter(i for ids in read.values() for i in ids)
    assert set(read_counts.values()) == {1}, [i for i, n in read_counts.items() if n > 1][:10]
    counts = Counter(i for ids in handled.values() for i in ids)
    assert set(counts.values()) == {1}, [i for i, n in counts.items() if n > 1][:10]
    r = c.client()
    assert {s: pending(r, s, group) for s in streams} == dict.fromkeys(streams, 0)
    assert c.node_of(target) is promoted and killed.proc is not None


def test_the_sink_rides_through_a_cluster_master_failover(spark, ha_cluster, names, tmp_path):
    """A streaming sink (waitReplicas=1) over targets on every shard; the master of one target
    is killed mid-query. The query does not fail, and every source row is in its target exactly
    once: nothing reported done was lost, nothing written twice."""
    c = ha_cluster
    targets = _spread(c, f"fs{names['tag']}", per_node=2)
    src = tmp_path / "src"
    files, per_file = 30, 100
    spark.range(files * per_file).select(
        (F.col("id") % len(targets)).alias("k"), F.col("id").cast("string").alias("n"),
        (F.col("id") / per_file).cast("int").alias("f")) \
        .write.partitionBy("f").parquet(str(src))
    mapping = F.create_map(*[x for i, t in enumerate(targets) for x in (F.lit(i), F.lit(t))])
    df = (spark.readStream.schema("k BIGINT, n STRING, f INT").option("maxFilesPerTrigger", 1)
          .parquet(str(src)).select(mapping[F.col("k")].alias("stream"), "n"))
    q = (df.writeStream.format("eventbus").option("url", c.url).option("waitReplicas", "1")
         .option("checkpointLocation", checkpoint(tmp_path))
         .trigger(processingTime="200 milliseconds").start())
    r = c.client()
    try:
        wait_for(lambda: sum(r.xlen(t) for t in targets) >= files * per_file // 3,
                 what="rows flowing")
        c.kill_master_of(targets[0])
        q.processAllAvailable()
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    r = c.client()
    for k, t in enumerate(targets):
        got = Counter(f[b"n"].decode() for _, f in r.xrange(t))
        assert got == Counter(str(n) for n in range(k, files * per_file, len(targets))), t


_FIRST_CLIENT = """
import pickle, sys
from spark_eventbus.core.connection import connection_spec
from spark_eventbus.redisio.client import client
url = sys.argv[2] if len(sys.argv) > 2 else None
spec = connection_spec(url, failover_timeout_ms=1000) if url \\
    else pickle.loads(sys.stdin.buffer.read())
print(client(spec).xlen(sys.argv[1]))
"""


def test_a_spec_from_a_process_that_knew_the_cluster_reaches_it_without_its_url_node(
        ha_cluster, names):
    """A process that unpickles a spec (an executor's Python worker, a partition) and makes its
    first client while the URL's node is down (a master failed over and not back): the spec
    carries the nodes the sending process knew, and the client reaches the cluster through
    them. A process that knows only the URL fails at once, naming it."""
    c = ha_cluster
    stream = f"{names['stream']}:seed"
    c.client().xadd(stream, {"n": "1"})
    url_node = c.nodes[0]
    role = url_node.client(socket_timeout=2).info("replication")
    spec = connection_spec(c.url, failover_timeout_ms=1000)
    client(spec).xlen(stream)  # this process now knows the cluster's nodes
    knowing = pickle.dumps(spec)
    promoted = c.kill(url_node)
    master = promoted or next(n for n in c.nodes if n.port == int(role["master_port"]))
    try:
        def first_client(*args: str, blob: bytes = b"") -> subprocess.CompletedProcess[bytes]:
            return subprocess.run([sys.executable, "-c", _FIRST_CLIENT, stream, *args],
                                  input=blob, capture_output=True, timeout=60)
        ok = first_client(blob=knowing)
        assert ok.returncode == 0 and ok.stdout.decode().strip() == "1", ok.stderr.decode()
        refused = first_client(c.url)
        assert refused.returncode != 0
        assert f"127.0.0.1:{url_node.port}" in refused.stderr.decode(), refused.stderr.decode()
    finally:
        c.restart(url_node, master)
