"""The driver's lean pipeline (``redisio.wire.pipeline``) against a real server: the same
replies as redis-py's own pipeline without reply callbacks, error replies in place (never
raised, never shifting later replies), scripts loaded on NOSCRIPT, and a server that goes
away retried through the client's retries, then raised."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import redis

from spark_eventbus.core.connection import connection_spec
from spark_eventbus.errors import EventBusConnectionError
from spark_eventbus.redisio import client, wire
from spark_eventbus.redisio.boundary import redis_errors
from spark_eventbus.redisio.scripts import run_scripts
from spark_eventbus.redisio.streams import text
from spark_eventbus.redisio.wire import pipeline
from tests.harness.redis_server import record_scripts

pytestmark = [pytest.mark.integration, pytest.mark.server]
LEAN_PIPELINE_MIN = 64  # commands per pipeline here (the driver sends thousands)


def _commands(key: str, n: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for i in range(n):
        out += [("XADD", key, f"{i + 1}-0", "n", str(i)), ("XLEN", key),
                ("HINCRBY", key, "f", 1),  # WRONGTYPE: an error reply in place
                ("XINFO", "GROUPS", f"{key}:missing"),  # no such key
                ("XRANGE", key, f"{i + 1}-0", f"{i + 1}-0")]
    return out


def _assert_same_replies(got: list[Any], want: list[Any], n: int, errors: int) -> None:
    """``got`` is ``want`` reply for reply (``n`` of them; an error as the same error), with
    ``errors`` error replies in place."""
    assert len(got) == len(want) == n
    for g, w in zip(got, want, strict=True):
        if isinstance(w, Exception):
            assert type(g) is type(w) and str(g) == str(w)
        else:
            assert g == w
    assert sum(isinstance(g, redis.ResponseError) for g in got) == errors


def test_the_lean_pipeline_gives_redis_py_s_raw_replies_with_errors_in_place(redis_server,
                                                                             names):
    spec = connection_spec(redis_server.url)
    r = client(spec)
    cmds = _commands(names["stream"], LEAN_PIPELINE_MIN)
    got = pipeline(r, cmds)
    r.delete(names["stream"])
    raw = redis_server.client()
    raw.set_response_callback("XRANGE", lambda reply, **_: reply)  # XRANGE as sent
    plain = raw.pipeline(transaction=False)
    for c in cmds:
        plain.execute_command(*c)
    want = plain.execute(raise_on_error=False)
    _assert_same_replies(got, want, len(cmds), errors=2 * LEAN_PIPELINE_MIN)
    assert got[1] == 1 and got[-4] == LEAN_PIPELINE_MIN  # XLEN after the first / last XADD


def test_pipelined_scripts_load_on_noscript_and_raise_a_script_s_error(redis_server, names):
    spec = connection_spec(redis_server.url)
    r = client(spec)
    record_scripts(redis_server)  # for make check-lanes: what ran here before the flush
    r.script_flush()
    # the lease script: acquire on 100 keys in one go, though the server has no script yet
    keys = [f"{{{names['stream']}}}:lease:{i}" for i in range(100)]
    replies = run_scripts(r, "lease", [([k], ["acquire", "run1", "owner1", 15_000])
                                       for k in keys])
    assert [x[0] for x in replies] == [b"ok"] * 100
    assert all(r.pttl(k) > 0 for k in keys)
    with pytest.raises(redis.ResponseError):  # a script's own error is raised, not returned
        run_scripts(r, "lease", [([k + ":new"], ["acquire", "run1", "owner1", "soon"])
                                 for k in keys])


def _evalsha_calls(r: Any) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_single_node_runs_a_script_s_calls_in_batches_with_the_same_replies(redis_server,
                                                                           names):
    """On one node, :data:`scripts.SCRIPT_BATCH` calls go to one EVALSHA of the script's
    batched form: 450 lease calls are 3 EVALSHAs, each call's reply as the script gives it
    alone (the same calls made one at a time, on other keys, answer the same)."""
    from spark_eventbus.redisio.scripts import SCRIPT_BATCH, _run_each

    assert SCRIPT_BATCH == 200
    r = client(connection_spec(redis_server.url))
    base = f"{{{names['stream']}}}:lease"
    # taken, then renewed by its owner, then held by another owner: three kinds of replies
    r.set(f"{base}:b:held", "run0 other", px=60_000)
    r.set(f"{base}:e:held", "run0 other", px=60_000)
    calls = [([f"{base}:b:{i}"], ["acquire", "run1", "owner1", 15_000, ""]) for i in range(449)]
    calls.append(([f"{base}:b:held"], ["acquire", "run1", "owner1", 15_000, ""]))
    each = [([k.replace(":b:", ":e:")], a) for (k,), a in calls]
    run_scripts(r, "lease", [([f"{base}:w:{i}"], ["acquire", "run1", "owner1", 15_000, ""])
                             for i in range(2)])  # loaded: what follows is the calls alone
    before = _evalsha_calls(r)
    batched = run_scripts(r, "lease", calls)
    assert _evalsha_calls(r) - before == 3
    one_by_one = _run_each(r, "lease", each)
    assert len(batched) == len(one_by_one) == 450
    for got, want in zip(batched, one_by_one, strict=True):  # status, holder (not the ms left)
        assert [text(x) for x in got[:2]] == [text(x) for x in want[:2]]
        assert (got[2] > 0) == (want[2] > 0)
    assert text(batched[0][0]) == "ok" and text(batched[-1][0]) == "held"
    assert text(batched[-1][1]) == "run0 other" and batched[-1][2] > 0


def test_a_batch_stops_at_a_call_that_fails_and_raises_its_error(redis_server, names):
    """A call that raises inside a batched script stops its batch there: the calls before it
    took effect (each is its own atomic step, as when sent one by one), those after it did
    not, and the error is raised as a lone call's would be."""
    r = client(connection_spec(redis_server.url))
    keys = [f"{{{names['stream']}}}:lease:f:{i}" for i in range(10)]
    calls = [([k], ["acquire", "run1", "owner1", "soon" if i == 5 else 15_000, ""])
             for i, k in enumerate(keys)]
    with pytest.raises(redis.ResponseError):
        run_scripts(r, "lease", calls)
    assert [r.exists(k) for k in keys] == [1] * 5 + [0] * 5


def test_an_error_in_a_batched_script_names_the_command_of_its_line(redis_server, names):
    """An ACL refusal names a script's SHA and line only (boundary.py turns it into the
    command): the batched form's lines are mapped like the script's own."""
    from spark_eventbus.redisio.scripts import BATCHED, command_at, script_text

    r = client(connection_spec(redis_server.url))
    run_scripts(r, "lease", [([f"{{{names['stream']}}}:lease:m:{i}"],
                              ["acquire", "run1", "owner1", 15_000, ""]) for i in range(2)])
    text_ = script_text("lease" + BATCHED)
    sha = hashlib.sha1(text_.encode()).hexdigest()
    lines = text_.splitlines()
    for command in ("GET", "SET", "DEL"):
        at = next(i for i, line in enumerate(lines, 1) if f"redis.call('{command}'" in line)
        assert command_at(sha, at) == command.lower()


def test_a_server_that_went_away_is_retried_then_raised_as_a_connection_error(own_redis,
                                                                              names):
    own_redis.start()
    spec = connection_spec(own_redis.url, failover_timeout_ms=1000)
    r = client(spec)
    assert [text(x) for x in pipeline(r, [("PING",)] * LEAN_PIPELINE_MIN)] \
        == ["PONG"] * LEAN_PIPELINE_MIN
    own_redis.stop()
    with pytest.raises(EventBusConnectionError), redis_errors("pinging", spec):
        pipeline(r, [("PING",)] * LEAN_PIPELINE_MIN)


def test_a_claim_record_sent_twice_records_its_chunk_once(redis_server, names):
    """A pipeline retried after its connection broke while reading the replies sends every
    claim_record.lua again: the plan must not hold the chunk twice (its entries would ship
    twice in one batch)."""
    from spark_eventbus.redisio import ConsumerOps, ensure_groups, plans

    spec = connection_spec(redis_server.url)
    r = redis_server.client()
    for i in range(3):
        r.xadd(names["stream"], {"n": str(i)})
    op = ConsumerOps(spec, names["stream"], names["group"], "c")
    ensure_groups([op], ["earliest"])
    intent = run_scripts(op.redis, "claim", [op.claim_intent("run1", 1, None, True)])[0]
    assert text(intent[0]) == "read"
    entries = pipeline(op.redis, [op.xreadgroup(10)])[0]
    from spark_eventbus.redisio.streams import read_entries

    chunk = op.claimed([e[0] for e in read_entries(entries)])
    assert chunk is not None and chunk.count == 3
    for _ in range(2):  # the retry
        run_scripts(op.redis, "claim_record", [op.claim_record("run1", 1, chunk)])
    plan = plans.plans([op], "run1", 1)[0]
    assert plan.chunks == (chunk,) and plan.count == 3


def test_the_fast_path_is_the_one_taken_on_a_single_node(redis_server, names, monkeypatch):
    """A single node's pipeline is packed by hiredis and sent on one connection: never
    redis-py's Pipeline (whose per-command packing and reply callbacks cost several times the
    round trip at thousands of commands)."""
    from spark_eventbus.redisio import wire

    assert wire.PACKER == "hiredis"

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("redis-py's Pipeline was used on a single node")

    monkeypatch.setattr(redis.client.Pipeline, "execute", refuse)
    r = client(connection_spec(redis_server.url))
    before = r.info("stats")["total_connections_received"]
    got = pipeline(r, [("PING",)] * LEAN_PIPELINE_MIN)
    assert [text(x) for x in got] == ["PONG"] * LEAN_PIPELINE_MIN
    assert r.info("stats")["total_connections_received"] - before <= 1


def test_resp3_push_messages_are_not_taken_for_replies(redis_server, names):
    """A push among the replies (here a client-tracking invalidation: the connection reads a
    key, then writes it in the same round trip, and Redis tells it its tracked key changed) is
    redis-py's to handle; every reply after it stays in its place. The push comes from the
    round trip itself, so it is always among the replies: one sent by another client could
    land before the connection is taken from the pool, which drops a connection with unread
    data and, with it, the tracking. Where redis-py's parser hands pushes on as replies
    (redis-py 6.0 with hiredis) there is nothing to check: the connector turns on nothing that
    pushes (client tracking, pub/sub), and its documentation says so."""
    from spark_eventbus.redisio.client import new_client

    if not _handles_pushes("hiredis" if redis.utils.HIREDIS_AVAILABLE else "python"):
        pytest.skip(f"redis-py {redis.__version__}'s hiredis parser hands RESP3 pushes on as "
                    "replies")
    spec = connection_spec(redis_server.url)
    own = new_client(spec)  # not the process's shared client: tracking is left on
    key = f"{names['stream']}:tracked"
    echoes = [("ECHO", str(i)) for i in range(LEAN_PIPELINE_MIN)]
    try:
        assert text(pipeline(own, [("CLIENT", "TRACKING", "ON")])[0]) == "OK"
        for round_ in range(3):
            got = pipeline(own, [("GET", key), ("SET", key, str(round_)), *echoes,
                                 ("CLIENT", "TRACKINGINFO")])
            assert [text(x) for x in got[1:-1]] == ["OK"] + [str(i) for i in
                                                            range(LEAN_PIPELINE_MIN)]
            info = {text(k): v for k, v in wire.as_map(got[-1]).items()}
            assert [text(f) for f in info["flags"]] == ["on"]  # the same, tracking connection
    finally:
        own.close()
    assert _pushes_invalidation(redis_server.port, key)  # the round trip does make a push


def _pushes_invalidation(port: int, key: str) -> bool:
    """Whether a RESP3 connection that tracks ``key`` and then writes it is sent an
    invalidation push (read off a plain socket, no parser between)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"HELLO 3\r\nCLIENT TRACKING ON\r\n"
                  + f"GET {key}\r\nSET {key} x\r\nPING\r\n".encode())
        got = b""
        while b"+PONG\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return b">2\r\n$10\r\ninvalidate\r\n" in got


def _sent(r: redis.Redis, cmds: list[tuple[Any, ...]]) -> Any:
    """A pool connection of ``r`` with ``cmds`` sent, unread."""
    conn = r.connection_pool.get_connection()
    conn.send_packed_command(conn.pack_commands(cmds))
    return conn


def _handles_pushes(parser: str) -> bool:
    """Whether redis-py's ``parser`` ("hiredis" or "python") reads RESP3 push messages aside.
    redis-py 6.0's hiredis parser does not (it hands a push on as a reply, through
    ``Connection.read_response`` as much as through ``wire.read_many``); the connector never
    turns on what sends pushes (client tracking, pub/sub)."""
    from redis._parsers import _HiredisParser

    return parser == "python" or hasattr(_HiredisParser, "handle_push_response")


@pytest.mark.parametrize("parser", ["hiredis", "python"])
@pytest.mark.parametrize("protocol", [2, 3])
def test_many_replies_read_through_the_parser_are_read_response_s_with_errors_in_place(
        redis_server, names, monkeypatch, protocol, parser):
    """wire.read_many (the sink's +QUEUED replies; every pipelined round through read_replies)
    gives what reading reply by reply through redis-py's Connection.read_response gives,
    error replies in place, a RESP3 push before them handled aside (where redis-py's parser
    does), with hiredis and with redis-py's own parser (executors given the package by
    --py-files have no hiredis), and takes its fast path (never reply by reply) on redis-py's
    own connection class."""
    from redis._parsers import _RESP2Parser, _RESP3Parser

    kw: dict[str, Any] = {"host": "127.0.0.1", "port": redis_server.port,
                          "protocol": protocol}
    if parser == "python":
        kw["parser_class"] = _RESP3Parser if protocol == 3 else _RESP2Parser
    r = redis.Redis(connection_pool=redis.ConnectionPool(**kw))
    cmds = _commands(names["stream"], 500)
    tracked = f"{names['stream']}:tracked"
    conn = r.connection_pool.get_connection()
    try:
        if protocol == 3 and _handles_pushes(parser):  # an invalidation before the replies
            conn.send_command("CLIENT", "TRACKING", "ON")
            conn.read_response()
            conn.send_command("GET", tracked)
            conn.read_response()
            redis_server.client().set(tracked, "changed")
        conn.send_packed_command(conn.pack_commands(cmds))
        monkeypatch.setattr(wire, "_read_each", None)  # the fallback would fail: not taken
        got = wire.read_many(conn, len(cmds))
        monkeypatch.undo()
        r.delete(names["stream"])
        conn.send_packed_command(conn.pack_commands(cmds))
        want = wire._read_each(conn, len(cmds))  # through Connection.read_response
        conn.send_command("PING")
        assert text(conn.read_response()) == "PONG"  # nothing left unread
    finally:
        conn.disconnect()
        r.connection_pool.release(conn)
        r.delete(names["stream"], tracked)
        r.close()
    _assert_same_replies(got, want, len(cmds), errors=2 * 500)


def test_many_replies_from_a_connection_that_closes_or_stalls_raise_redis_py_s_errors(
        redis_server):
    """A server that closes the connection mid-reply raises redis-py's ConnectionError and a
    stalled one its TimeoutError (what the client's Retry knows), the connection dropped:
    its next command goes out on a new one."""
    r = redis_server.client(socket_timeout=0.3)
    conn = _sent(r, [("PING",)] * 3 + [("QUIT",)])
    try:
        with pytest.raises(redis.ConnectionError):
            wire.read_many(conn, 5)  # 3 PONG, +OK, then the server closed it
        conn.send_command("PING")
        assert text(conn.read_response()) == "PONG"
        conn.send_packed_command(conn.pack_commands([("PING",), ("BLPOP", "eventbus:none", 2)]))
        with pytest.raises(redis.TimeoutError):
            wire.read_many(conn, 2)
        conn.send_command("PING")
        assert text(conn.read_response()) == "PONG"
    finally:
        r.connection_pool.release(conn)
