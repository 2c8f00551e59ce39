"""The sink's chunk transaction (``redisio.add_chunk``: WATCH the marker set, then MULTI, the
XADDs, the marker, EXEC) against a real Redis: at most once per marker, also when another
attempt of the same task writes the chunk between the check and the EXEC; a key that is no
stream is refused with nothing marked; on a cluster, a slot that moved is followed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import redis

from spark_eventbus.core.keys import key_slot, sink_marker_key, sink_seal_key
from spark_eventbus.redisio import (
    ADDED,
    SEALED,
    WRITTEN,
    ConnectionSpec,
    Trim,
    add_chunk,
    new_client,
)
from spark_eventbus.redisio.produce import _once
from spark_eventbus.writes.chunking import WriteChunk, xadd_commands
from spark_eventbus.writes.encoding import Run
from tests.integration.helpers import rejected_calls

pytestmark = [pytest.mark.integration, pytest.mark.server]


def _chunk(stream: str, first: int, rows: int, index: int = 0) -> WriteChunk:
    run = Run(("n", "payload"), [[str(first + i) for i in range(rows)],
                                 [b"x%d" % i for i in range(rows)]], rows,
              np.zeros(rows, dtype=np.int64))
    return WriteChunk(stream, index, [run], rows)


def _numbers(r: redis.Redis, stream: str) -> Counter[str]:
    return Counter(f[b"n"].decode() for _, f in r.xrange(stream))


def test_a_chunk_is_added_once_per_marker(redis_server, names):
    r = redis_server.client()
    stream = names["stream"]
    marker = sink_marker_key(stream, "q", "0", 0)
    chunk = _chunk(stream, 0, 500)
    assert add_chunk(r, stream, xadd_commands(chunk), 500, marker, "0:0", 60_000) == (500, ADDED)
    assert add_chunk(r, stream, xadd_commands(chunk), 500, marker, "0:0", 60_000) == (0, WRITTEN)
    assert _numbers(r, stream) == Counter(str(i) for i in range(500))
    assert r.smembers(marker) == {b"0:0"} and 0 < r.pttl(marker) <= 60_000
    # Without a marker (idempotent=false) every call adds.
    assert add_chunk(r, stream, xadd_commands(chunk), 500, None, "0:0", 60_000) == (500, ADDED)
    assert r.xlen(stream) == 1000
    assert r.execute_command("CLIENT", "LIST").count(b"flags=x") == 0  # no MULTI left open


def test_an_attempt_that_writes_the_chunk_between_the_check_and_the_exec_wins(redis_server,
                                                                              names):
    """A speculative copy of the task writes the same chunk after this attempt saw no marker
    and before its EXEC: the WATCH makes Redis drop this EXEC, and the next round sees the
    marker. Nothing is added twice."""
    r = redis_server.client()
    other = redis_server.client()
    stream = names["stream"]
    marker = sink_marker_key(stream, "q", "0", 1)
    packed = xadd_commands(_chunk(stream, 0, 300))
    conn = r.connection_pool.get_connection()
    raced = []

    class Interleaved:  # the real connection; the other attempt runs just before our XADDs
        def __getattr__(self, name: str) -> Any:
            return getattr(conn, name)

        def send_packed_command(self, commands: list[bytes]) -> None:
            if commands[-1] == b"*1\r\n$4\r\nEXEC\r\n" and not raced:  # after the check
                raced.append(add_chunk(other, stream, packed, 300, marker, "1:0", 60_000))
            conn.send_packed_command(commands)

    try:
        attempt = Interleaved()
        assert _once(attempt, stream, packed, 300, marker, "1:0", 60_000, Trim()) is None
        assert _once(attempt, stream, packed, 300, marker, "1:0", 60_000, Trim()) == (0, WRITTEN)
    finally:
        r.connection_pool.release(conn)
    assert raced == [(300, ADDED)]
    assert _numbers(r, stream) == Counter(str(i) for i in range(300))  # each once


def test_a_seal_raised_between_the_check_and_the_exec_stops_the_chunk(redis_server, names):
    """The driver seals a batch (it is over: its markers are about to go) after a late
    attempt looked for its chunk's marker and before its EXEC: the WATCH on the seal makes
    Redis drop the EXEC, and the next round sees the seal and adds nothing. A seal below the
    chunk's batch (an older batch's) lets it write."""
    r = redis_server.client()
    stream = names["stream"]
    marker = sink_marker_key(stream, "q", "4", 0)
    seal_key = sink_seal_key(stream, "q")
    packed = xadd_commands(_chunk(stream, 0, 200))
    r.set(seal_key, "3")
    assert add_chunk(r, stream, packed, 200, marker, "0:0", 60_000, seal=(seal_key, 4)) == \
        (200, ADDED)
    conn = r.connection_pool.get_connection()
    late = sink_marker_key(stream, "q", "5", 0)

    class Interleaved:  # the real connection; the driver seals just before our XADDs
        def __getattr__(self, name: str) -> Any:
            return getattr(conn, name)

        def send_packed_command(self, commands: list[bytes]) -> None:
            if commands[-1] == b"*1\r\n$4\r\nEXEC\r\n":
                redis_server.client().set(seal_key, "5")
            conn.send_packed_command(commands)

    try:
        attempt = Interleaved()
        seal = (seal_key, 5)
        assert _once(attempt, stream, packed, 200, late, "0:0", 60_000, Trim(), seal) is None
        assert _once(attempt, stream, packed, 200, late, "0:0", 60_000, Trim(), seal) == \
            (0, SEALED)
    finally:
        r.connection_pool.release(conn)
    assert r.xlen(stream) == 200 and r.exists(late) == 0
    assert r.execute_command("CLIENT", "LIST").count(b"flags=x") == 0  # no MULTI left open


def test_a_key_that_is_no_stream_is_refused_and_nothing_is_marked(redis_server, names):
    r = redis_server.client()
    stream = names["stream"]
    r.set(stream, "not a stream")
    marker = sink_marker_key(stream, "q", "0", 0)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        add_chunk(r, stream, xadd_commands(_chunk(stream, 0, 10)), 10, marker, "0:0", 60_000)
    assert r.exists(marker) == 0 and r.get(stream) == b"not a stream"
    # The connection went back to the pool clean: the next chunk elsewhere works.
    ok = names["stream"] + ":ok"
    assert add_chunk(r, ok, xadd_commands(_chunk(ok, 0, 10)), 10, marker, "0:0",
                     60_000) == (10, ADDED)


def test_trimming_in_the_transaction(redis_server, names):
    r = redis_server.client()
    stream = names["stream"]
    for k in range(4):
        chunk = _chunk(stream, 100 * k, 100, k)
        add_chunk(r, stream, xadd_commands(chunk), 100, None, "", 0,
                  Trim(max_len=150, approximate=False))
    assert r.xlen(stream) == 150
    assert int(r.xrange(stream)[0][1][b"n"]) == 250  # the newest kept
    # Trimming by age: entries older than 1 hour (by the server's clock) go.
    old = names["stream"] + ":old"
    r.xadd(old, {"n": "ancient"}, id="1-0")
    add_chunk(r, old, xadd_commands(_chunk(old, 0, 5)), 5, None, "", 0,
              Trim(min_age_ms=3_600_000, approximate=False))
    assert r.xlen(old) == 5 and b"ancient" not in {f[b"n"] for _, f in r.xrange(old)}


def test_on_a_cluster_a_moved_slot_is_followed_and_the_chunk_written_once(redis_cluster, names):
    """A client whose slot map is stale gets MOVED inside the transaction: it reads the map
    again and writes the chunk on the new owner, once; the same chunk again finds its marker
    there."""
    stream = f"tx{names['tag']}:orders"
    spec = ConnectionSpec(redis_cluster.url)
    stale = new_client(spec)
    stale.ping(target_nodes=stale.get_primaries())
    stale.get_node_from_key(stream)  # topology known before the move
    owner = redis_cluster.node_of(stream)
    target = next(n for n in redis_cluster.nodes if n is not owner)
    redis_cluster.move_slot(key_slot(stream), target)
    marker = sink_marker_key(stream, "q", "0", 0)
    chunk = _chunk(stream, 0, 50)
    moved_before = rejected_calls(owner, "watch")
    assert add_chunk(stale, stream, xadd_commands(chunk), 50, marker, "0:0", 60_000) == (
        50, ADDED)
    assert rejected_calls(owner, "watch") > moved_before  # the old owner did answer MOVED
    assert add_chunk(stale, stream, xadd_commands(chunk), 50, marker, "0:0", 60_000) == (
        0, WRITTEN)
    r = redis_cluster.client()
    assert _numbers(r, stream) == Counter(str(i) for i in range(50))
    stale.close()


def _takes_acked_trim(r: redis.Redis) -> bool:
    """What the server answers, asked directly: XTRIM … ACKED (Redis >= 8.2) or a syntax
    error (Redis 7.0, Valkey 9.1)."""
    try:
        r.execute_command("XTRIM", "no-such-stream", "MAXLEN", "=", 1, "ACKED")
        return True
    except redis.ResponseError as exc:
        assert "syntax" in str(exc).lower(), exc
        return False


def test_acked_trimming_never_removes_what_a_group_has_not_acked(redis_server, names):
    """trimPolicy=acked: the chunk's trim (XTRIM … ACKED, exact) removes only entries every
    group has acked, whatever maxLen says. A server without it (Redis 7.0, Valkey 9.1) is
    refused by the sink's start check, naming the option and the server, and so is an
    executor's first chunk to a stream (a column-routed write has no stream to check at
    start): nothing added, nothing marked."""
    from spark_eventbus import ConfigError
    from spark_eventbus.redisio import check_acked_trim, write_chunk

    r = redis_server.client()
    stream = names["stream"]
    spec = ConnectionSpec(redis_server.url)
    marker = sink_marker_key(stream, "q", "0", 0)
    trim = Trim(max_len=100, acked_only=True)  # approximate by default: sent exact
    for group in ("g1", "g2"):
        r.xgroup_create(stream, group, "0", mkstream=True)
    if not _takes_acked_trim(r):
        with pytest.raises(ConfigError, match=r"'trimPolicy' = 'acked'.*Redis >= 8\.2") as err:
            check_acked_trim(spec, stream)
        assert f"127.0.0.1:{redis_server.port}" in str(err.value), err.value
        with pytest.raises(ConfigError, match="nothing was written to it"):
            write_chunk(spec, stream, xadd_commands(_chunk(stream, 0, 10)), 10, marker, "0:0",
                        60_000, trim)
        assert r.xlen(stream) == 0 and r.exists(marker) == 0
        return
    check_acked_trim(spec, stream)
    for k in range(3):
        add_chunk(r, stream, xadd_commands(_chunk(stream, 100 * k, 100, k)), 100, marker,
                  f"0:{k}", 60_000, trim)
    assert r.xlen(stream) == 300  # no group has acked anything: nothing trimmed
    ids = [e[0] for e in r.xrange(stream)]
    r.xreadgroup("g1", "c", {stream: ">"}, count=300)
    r.xack(stream, "g1", *ids)
    r.xreadgroup("g2", "c", {stream: ">"}, count=300)
    r.xack(stream, "g2", *ids[:150])  # g2 lags: 150 acked, 150 pending
    add_chunk(r, stream, xadd_commands(_chunk(stream, 300, 100, 3)), 100, marker, "0:3",
              60_000, trim)
    assert r.xlen(stream) == 250  # 400 less the 150 both groups acked, not down to 100
    assert r.xrange(stream, count=1)[0][0] == ids[150]


def test_a_chunk_whose_trim_fails_keeps_its_marker_so_a_retry_adds_nothing(redis_server, names):
    """EXEC ran the chunk's XADDs and then a trim that Redis refused (here a MINID that is no
    ID): the chunk is written, so its marker stays and the task's retry adds nothing twice."""
    r = redis_server.client()
    stream = names["stream"]
    marker = sink_marker_key(stream, "q", "0", 0)
    bad = Trim(min_id="not-an-id", approximate=False)
    with pytest.raises(redis.ResponseError, match=r"(?i)invalid stream id"):
        add_chunk(r, stream, xadd_commands(_chunk(stream, 0, 10)), 10, marker, "0:0", 60_000,
                  bad)
    assert r.xlen(stream) == 10 and r.sismember(marker, "0:0")
    assert add_chunk(r, stream, xadd_commands(_chunk(stream, 0, 10)), 10, marker, "0:0",
                     60_000, bad) == (0, WRITTEN)
    assert r.xlen(stream) == 10
