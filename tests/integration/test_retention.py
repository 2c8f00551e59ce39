"""Retention of acked entries on real servers: ``eventbus stream trim`` (single node and Redis
Cluster) and the reader's ``trimAcked``."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from tests.integration.helpers import driver_reader, produce, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.server]


_cli = run_cli


def _read(r, stream, group, n, ack_except=()):  # type: ignore[no-untyped-def]
    got = [i.decode() for i, _ in r.xreadgroup(group, "w", {stream: ">"}, count=n)[0][1]]
    acked = [i for i in got if i not in ack_except]
    if acked:
        r.xack(stream, group, *acked)
    return got


@pytest.mark.parametrize("server", ["redis_server", "redis_cluster"])
def test_trim_removes_exactly_what_three_groups_acked(request, names, server):
    srv = request.getfixturevalue(server)
    r = srv.client()
    stream = "{" + names["tag"] + "}:orders"  # a stream lives in one slot: trimmed alone
    ids = produce(r, stream, 100)
    sizes = {i.decode(): sum(len(k) + len(v) for k, v in f.items()) for i, f in r.xrange(stream)}
    for g in ("slow", "pending", "fast"):
        r.xgroup_create(stream, g, "0")
    _read(r, stream, "slow", 30)                               # needs ids[30] on
    _read(r, stream, "pending", 60, ack_except=set(ids[10:15]))  # needs ids[10] (pending)
    _read(r, stream, "fast", 80)                               # needs ids[80] on

    dry = json.loads(_cli("--url", srv.url, "stream", "trim", "--stream", stream, "--dry-run",
                          "--json").stdout)
    assert (dry["entries"], dry["held_by"], dry["keep_from"]) == (10, "pending", ids[10])
    assert dry["bytes"] == sum(sizes[i] for i in ids[:10]) and r.xlen(stream) == 100

    out = _cli("--url", srv.url, "stream", "trim", "--stream", stream)
    assert out.returncode == 0, out.stderr
    assert "removed 10 entries" in out.stdout and "Group 'pending' holds the rest back" \
        in out.stdout
    assert [i.decode() for i, _ in r.xrange(stream)] == ids[10:]  # nothing pending removed

    r.xack(stream, "pending", *ids[10:15])
    again = json.loads(_cli("--url", srv.url, "stream", "trim", "--stream", stream,
                            "--json").stdout)
    assert (again["entries"], again["held_by"]) == (20, "slow")
    # Redis 8.2 (XTRIM … ACKED, which came with XACKDEL): the server checks every group too;
    # Redis 7.0, Valkey 9.1: the script's check alone
    assert again["acked_policy"] == _knows(r, "xackdel") and not dry["acked_policy"]
    assert [i.decode() for i, _ in r.xrange(stream)] == ids[30:]  # never past the lagging one
    for g, last in (("slow", 29), ("pending", 59), ("fast", 79)):
        assert _read(r, stream, g, 100) == ids[last + 1:]  # every group still reads the rest


def _knows(r, command: str) -> bool:  # type: ignore[no-untyped-def]
    """The server's COMMAND INFO knows ``command`` (every node of a cluster answers alike)."""
    node = r.get_primaries()[0] if hasattr(r, "get_primaries") else None
    pool = (r.get_redis_connection(node) if node else r).connection_pool
    conn = pool.get_connection()
    try:  # the raw reply: redis-py's parser fails on [nil]
        conn.send_command("COMMAND", "INFO", command)
        return conn.read_response()[0] is not None
    finally:
        pool.release(conn)


def test_a_stream_without_groups_is_not_trimmed(redis_server, names):
    produce(redis_server.client(), names["stream"], 5)
    out = _cli("--url", redis_server.url, "stream", "trim", "--stream", names["stream"])
    assert out.returncode == 0 and "no consumer group reads it" in out.stdout
    assert redis_server.client().xlen(names["stream"]) == 5


def test_trim_acked_keeps_the_stream_bounded_while_a_slow_group_gets_everything(redis_server,
                                                                                  names):
    r = redis_server.client()
    stream = names["stream"]
    r.xgroup_create(stream, "slow", "0", mkstream=True)
    reader = driver_reader(redis_server.url, stream, names["group"], trimAcked="true",
                           trimIntervalMs="0", maxEntriesPerTrigger="500")
    slow: list[str] = []
    produced: list[str] = []
    lengths = []
    try:
        start = reader.initialOffset()
        for round_ in range(10):
            produced += produce(r, stream, 500, start=round_ * 500)
            slow += _read(r, stream, "slow", 300)  # falls behind: 200 more each round
            end = reader.latestOffset(start, ReadMaxRows(500))
            reader.commit(end)
            start = end
            reader.driver.prefetch.join()  # its ack and trim of the batch before
            lengths.append((r.xlen(stream), len(produced) - len(slow)))
        while len(slow) < len(produced):
            slow += _read(r, stream, "slow", 1000)
        assert reader.latestOffset(start, ReadMaxRows(500)) is start  # acks and trims now
    finally:
        reader.stop()
    assert slow == produced  # the slow group received every entry, in order, once
    # the stream holds what the slow group has not read (plus the reader's batch in flight),
    # and at most one partly acked stream node (100 entries) more
    assert all(length <= behind + 500 + 100 for length, behind in lengths), lengths
    assert r.xlen(stream) <= 100  # all acked: trimmed to its last node


def test_trim_acked_trims_the_acked_streams_and_every_stream_every_tenth_time(
        redis_server, names):
    """trimAcked: each trim asks only the streams the query acked since
    the last one (a quiet stream costs nothing), and every stream every TRIM_ALL_EVERY-th
    time (another group's acks can free entries too)."""
    from spark_eventbus.group.claimer import Claimer
    from spark_eventbus.group.closing import TRIM_ALL_EVERY, Closer
    from spark_eventbus.group.ledger import ClaimState
    from spark_eventbus.group.loss_reports import SourceMetrics
    from spark_eventbus.options.reader import parse_reader_options
    from spark_eventbus.redisio import ConsumerOps

    r = redis_server.client()
    streams = [f"{names['stream']}:{i}" for i in range(12)]
    for s in streams:  # 250 entries, every one read and acked: two whole nodes to trim
        produce(r, s, 250)
        r.xgroup_create(s, names["group"], "0")
        _read(r, s, names["group"], 250)
    opts = parse_reader_options({"url": redis_server.url, "stream": ",".join(streams),
                                 "group": names["group"], "trimAcked": "true",
                                 "trimIntervalMs": "0"}, streaming=True)
    ops = {s: ConsumerOps(opts.connection, s, names["group"], "c") for s in streams}
    claims = ClaimState()
    metrics = SourceMetrics()
    claimer = Claimer(opts, ops, metrics)
    closer = Closer(opts, ops, claims, claimer, metrics)

    def trimmed() -> set[str]:
        return {s for s in streams if r.xlen(s) < 250}

    def trim(acked: set[str]) -> None:
        claims.acked_since_trim = set(acked)
        closer._trim_acked()

    claims.trims = 1  # not the every-stream turn
    trim({streams[3], streams[7]})
    assert trimmed() == {streams[3], streams[7]}
    assert claimer.probes.dirty == {streams[3], streams[7]}  # probed again: they moved
    for _ in range(TRIM_ALL_EVERY - 2):  # the turns before the next every-stream one
        trim(set())
    assert trimmed() == {streams[3], streams[7]}
    trim(set())  # the TRIM_ALL_EVERY-th: every stream
    assert trimmed() == set(streams)


def test_with_xackdel_acks_delete_what_every_group_acked_and_never_before(redis_server, names,
                                                                         caplog):
    """deleteAtAck on a server with XACKDEL (Redis 8.2): three queries read one stream, each in
    its own group; an entry leaves the stream exactly when the last group acks it (its ack is
    XACKDEL … ACKED), with no trim pass (trimIntervalMs: an hour). On Redis 7.0 and Valkey 9.1
    (no XACKDEL) the acks are XACK, the start says so, and nothing leaves until the trim pass:
    the fallback. Without the option acks are XACK everywhere (trimAcked alone: the pass)."""
    from spark_eventbus.redisio import capabilities_of

    r = redis_server.client()
    stream = names["stream"]
    ids = produce(r, stream, 300)
    plain = driver_reader(redis_server.url, stream, f"{names['group']}-plain", trimAcked="true")
    assert plain.driver.subscription.delete_acked is False
    plain.stop()
    readers = [driver_reader(redis_server.url, stream, f"{names['group']}-{k}",
                             trimAcked="true", deleteAtAck="true", trimIntervalMs="1h",
                             maxEntriesPerTrigger="100")
               for k in range(3)]
    r.xgroup_destroy(stream, f"{names['group']}-plain")
    deletes = capabilities_of(readers[0].driver.opts.connection).has_xackdel
    assert all(rd.driver.subscription.delete_acked == deletes for rd in readers)
    assert ("'deleteAtAck' has no effect" in caplog.text) == (not deletes)
    starts = [rd.initialOffset() for rd in readers]

    def commit_one_batch(k: int) -> None:
        end = readers[k].latestOffset(starts[k], ReadMaxRows(100))
        readers[k].commit(end)
        starts[k] = end
    for k in (0, 1):  # two groups read and ack everything: every entry is still needed
        for _ in range(3):
            commit_one_batch(k)
        assert r.xlen(stream) == 300
    commit_one_batch(2)  # the last group acks the first 100
    left = [e[0].decode() for e in r.xrange(stream)]
    if deletes:
        assert left == ids[100:]  # exactly the 100 every group has acked, at their ack
    else:
        assert left == ids  # XACK: the trim pass (not due for an hour) will remove them
    for rd in readers:
        rd.stop()
