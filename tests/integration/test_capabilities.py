"""The capability preflight on real servers: what this machine's servers report; a server
without scripting refused at start by every part that runs scripts (the streaming reader,
AckingBatchWriter with a dead-letter stream, the CLI's script commands), before it writes
anything, naming the part; the parts that run none (batch reads, plain acks, the sink) still
work there;
``waitAof`` refused from the same capabilities; one probe per spec per process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from spark_eventbus import AckingBatchWriter, ConfigError
from spark_eventbus.core.connection import connection_spec
from spark_eventbus.redisio import ConnectionSpec, preflight
from spark_eventbus.redisio.capabilities import (
    capabilities_of,
    check_scripting,
    server_capabilities,
)
from spark_eventbus.redisio.client import client
from tests.harness.redis_server import RedisServer
from tests.integration.helpers import driver_reader, pending, produce, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.server]


class _NoScripting(RedisServer):
    """A server whose scripting commands are renamed away: as a Valkey without its Lua engine
    looks to a client."""

    def extra_args(self) -> list[str]:
        return [a for c in ("SCRIPT", "EVAL", "EVALSHA") for a in ("--rename-command", c, "")]


@pytest.fixture(scope="module")
def no_lua(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = _NoScripting(tmp_path_factory.mktemp("nolua")).start()
    yield server
    server.stop()


def _version(server: RedisServer) -> str:
    return server_capabilities(client(ConnectionSpec(server.url))).display.replace(".", r"\.")


def test_the_capabilities_match_the_commands_the_server_has(redis_server):
    """Whatever the lane's server (Redis 7.0, Redis 8.2, Valkey 9.1): Lua, and each optional
    command (WAITAOF, XACKDEL, XDELEX, XNACK) exactly where the server's COMMAND INFO knows
    it."""
    caps = server_capabilities(client(ConnectionSpec(redis_server.url)))
    assert caps.family in ("redis", "valkey") and caps.has_lua is True
    r = redis_server.client()

    def knows(command: str) -> bool:  # the raw reply: redis-py's parser fails on [nil]
        conn = r.connection_pool.get_connection()
        try:
            conn.send_command("COMMAND", "INFO", command)
            return conn.read_response()[0] is not None
        finally:
            r.connection_pool.release(conn)
    assert caps.has_waitaof == knows("waitaof")
    assert caps.has_xackdel == knows("xackdel")  # Redis 8.2 (the redis8 lane), not 7.0, 9.1
    assert caps.has_xdelex == knows("xdelex") == caps.has_xackdel
    assert caps.not_used == (["XNACK"] if knows("xnack") else [])  # no lane has it yet


def test_a_server_without_scripting_is_refused_at_start_naming_its_version(no_lua, names):
    produce(no_lua.client(), names["stream"], 3)
    caps = server_capabilities(client(ConnectionSpec(no_lua.url)))
    assert caps.has_lua is False
    reader = driver_reader(no_lua.url, names["stream"], names["group"])
    with pytest.raises(ConfigError, match=r"spark.readStream.*needs Lua scripting.*"
                                          + _version(no_lua)):
        reader.initialOffset()
    assert no_lua.client().xinfo_groups(names["stream"]) == []  # checked before anything


def test_the_sink_runs_no_script_so_it_writes_to_a_server_without_scripting(spark, no_lua,
                                                                           names):
    """The sink's chunks are transactions: a server without Lua takes them, each row once, dead
    letters included."""
    df = spark.createDataFrame([("a",), ("b",), ("c",)], "payload string")
    df.write.format("eventbus").option("url", no_lua.url).option("stream", names["stream"]) \
        .option("deadLetterStream", names["dlq"]).mode("append").save()
    r = no_lua.client()
    assert sorted(f[b"payload"] for _, f in r.xrange(names["stream"])) == [b"a", b"b", b"c"]


def test_acking_writer_needs_scripting_only_to_dead_letter(spark, no_lua, names):
    r = no_lua.client()
    ids = produce(r, names["stream"], 3)
    r.xgroup_create(names["stream"], names["group"], "0")
    r.xreadgroup(names["group"], "c", {names["stream"]: ">"})
    # A batch read runs no script: it works on this server.
    batch = spark.read.format("eventbus").option("url", no_lua.url) \
        .option("stream", names["stream"]).load()
    handled: list[int] = []
    writer = AckingBatchWriter(lambda d, b: handled.append(d.count()), url=no_lua.url,
                               group=names["group"], dead_letter_stream=names["dlq"])
    with pytest.raises(ConfigError, match=r"AckingBatchWriter with deadLetterStream needs Lua "
                                          r"scripting.*" + _version(no_lua)):
        writer(batch, 0)
    assert handled == [] and not r.exists(names["dlq"])  # checked before the handler ran
    assert pending(r, names["stream"], names["group"]) == 3  # nothing acked
    # Without a dead-letter stream it only XACKs: no script, so no refusal.
    AckingBatchWriter(lambda d, b: handled.append(d.count()), url=no_lua.url,
                      group=names["group"])(batch, 1)
    assert handled == [len(ids)] and pending(r, names["stream"], names["group"]) == 0


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("--url", url, *args)


def test_cli_commands_that_run_scripts_refuse_before_changing_anything(no_lua, names):
    r = no_lua.client()
    stream, group, dlq = names["stream"], names["group"], names["dlq"]
    produce(r, stream, 5)
    r.xgroup_create(stream, group, "0")
    got = r.xreadgroup(group, "c", {stream: ">"})
    r.xack(stream, group, *[i for i, _ in got[0][1]])  # all acked: a trim would remove all
    r.xadd(dlq, {"payload": "x", "dlq.reason": "r", "dlq.source.stream": stream})
    dry = _cli(no_lua.url, "stream", "trim", "--stream", stream, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr  # a dry run only reads
    for command, args in (("stream trim", ["stream", "trim", "--stream", stream]),
                          ("dlq replay", ["dlq", "replay", "--from", dlq, "--to", stream]),
                          ("group accept-loss", ["group", "accept-loss", "--stream", stream,
                                                 "--group", group])):
        out = _cli(no_lua.url, *args)
        assert out.returncode == 1, out.stdout
        assert f"`eventbus {command}` needs Lua scripting" in out.stderr, out.stderr
        assert server_capabilities(client(ConnectionSpec(no_lua.url))).display in out.stderr
    assert r.xlen(stream) == 5 and r.xlen(dlq) == 1  # nothing trimmed, nothing moved


def test_wait_aof_is_checked_from_the_same_capabilities(redis_server):
    spec = connection_spec(redis_server.url, wait_aof=True)
    caps = capabilities_of(spec)
    if caps.has_waitaof:  # Valkey, Redis >= 7.2 (the harness runs with appendonly yes)
        preflight(spec)
        return
    with pytest.raises(ConfigError) as err:
        preflight(spec)
    message = str(err.value)
    assert "option 'waitAof' = true needs WAITAOF" in message
    assert f"({caps.display})" in message and "upgrade the server" in message
    assert "set it to false" in message
    # the CLI spells it as its flag
    flag_spec = connection_spec(redis_server.url, wait_aof=True, wait_timeout_ms=4000)
    with pytest.raises(ConfigError, match=r"--wait-aof = true needs WAITAOF"):
        preflight(flag_spec, "flag")


def test_capabilities_are_probed_once_per_spec_per_process(redis_server):
    r = redis_server.client()
    spec = connection_spec(redis_server.url, failover_timeout_ms=12_345)  # a spec of its own

    def loads() -> int:
        return int(r.info("commandstats").get("cmdstat_script|load", {}).get("calls", 0))
    before = loads()
    first = capabilities_of(spec)
    for _ in range(3):
        assert capabilities_of(spec) == first == check_scripting(spec, "x", "y", "cli")
    assert capabilities_of(spec, scripts=False) == first
    assert loads() == before + 1
