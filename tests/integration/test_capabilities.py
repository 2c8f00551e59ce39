"""The capability preflight on real servers: what this machine's servers report, and a server
without scripting refused at query start with the option-free part named."""

from __future__ import annotations

import pytest

from spark_eventbus import ConfigError
from spark_eventbus.redisio import ConnectionSpec
from spark_eventbus.redisio.capabilities import server_capabilities
from spark_eventbus.redisio.client import client
from tests.harness.redis_server import RedisServer
from tests.integration.helpers import driver_reader, produce

pytestmark = pytest.mark.integration


class _NoScripting(RedisServer):
    """A server whose scripting commands are renamed away: as a Valkey without its Lua engine
    looks to a client."""

    def extra_args(self) -> list[str]:
        return [a for c in ("SCRIPT", "EVAL", "EVALSHA") for a in ("--rename-command", c, "")]


def test_this_machines_servers_have_lua_and_no_xackdel(redis_server):
    caps = server_capabilities(client(ConnectionSpec(redis_server.url)))
    assert caps.family in ("redis", "valkey") and caps.has_lua is True
    assert caps.version < ((8, 2, 0) if caps.family == "redis" else (9, 2, 0))
    assert caps.has_xackdel is False  # Redis 7.0 / Valkey 9.1: the fallback path runs here
    assert caps.has_waitaof == (caps.family == "valkey" or caps.version >= (7, 2, 0))


def test_a_server_without_scripting_is_refused_at_start_naming_its_version(tmp_path, names):
    server = _NoScripting(tmp_path).start()
    try:
        produce(server.client(), names["stream"], 3)
        caps = server_capabilities(client(ConnectionSpec(server.url)))
        assert caps.has_lua is False
        reader = driver_reader(server.url, names["stream"], names["group"])
        with pytest.raises(ConfigError, match=r"spark.readStream.*needs Lua scripting.*"
                                              + caps.display.replace(".", r"\.")):
            reader.initialOffset()
        assert server.client().xinfo_groups(names["stream"]) == []  # checked before anything
    finally:
        server.stop()
